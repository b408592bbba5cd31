//! Plugin packages through OCI registries.
//!
//! - An author publishes a package (`cargo xtask plugin publish DIST.tar.gz REF`):
//!   [`Registry::publish`] pushes it as an OCI artifact ([`artifact`] says how it is laid
//!   out), one per target under one tag, or a WebAssembly component in the layout other
//!   component tools pull.
//! - A user installs it (`toolhost plugin install REF`, or `[[plugins.sources]] oci = "REF"`
//!   in the config): an [`Installer`] resolves the tag to a digest, pulls this host's
//!   artifact, checks it as a host checks a local package (checksum, signature, trust),
//!   keeps it in a content-addressed store and pins the digest in [`lock::Lock`]. A tag that
//!   moves is refused until the user updates; an update lists what changed and says when a
//!   tool's side-effect class widened, so that the caller asks first.
//!
//! Credentials come from Docker's config and credential helpers ([`credentials`]). A
//! registry on a loopback address is spoken to over plain HTTP, as Docker does; any other
//! over HTTPS.

pub mod artifact;
pub mod credentials;
mod install;
pub mod lock;
mod registry;
mod source;

use std::path::PathBuf;

pub use install::{Changes, Installer, Mode, Plan, Step, default_store};
pub use oci_client::Reference;
pub use oci_client::secrets::RegistryAuth;
pub use registry::{Fetched, Published, Registry, is_loopback, parse_reference};
pub use source::Source;

/// What went wrong between toolhost and a registry, or with what it pulled.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The text is not an OCI reference.
    #[error(
        "'{reference}' is not an OCI reference ({detail}); write registry/repository:tag, e.g. ghcr.io/acme/grep:0.3.1"
    )]
    Reference {
        /// The text.
        reference: String,
        /// Why.
        detail: String,
    },
    /// The registry could not be reached, or refused.
    #[error("{reference}: {detail}")]
    Registry {
        /// The reference.
        reference: String,
        /// What happened.
        detail: String,
    },
    /// Nothing is published under the reference.
    #[error("{reference}: no such manifest in the registry (check the repository and tag)")]
    NotFound {
        /// The reference.
        reference: String,
    },
    /// What the reference names is not a toolhost plugin package.
    #[error("{reference} is not a toolhost plugin package: {detail}")]
    NotAPlugin {
        /// The reference.
        reference: String,
        /// What it is instead.
        detail: String,
    },
    /// The reference has no artifact for this host's target.
    #[error("{reference} has no package for {target} (it has: {}); ask its author to publish one", if offered.is_empty() { "none".to_string() } else { offered.join(", ") })]
    NoTarget {
        /// The reference.
        reference: String,
        /// This host's target.
        target: String,
        /// The targets it has.
        offered: Vec<String>,
    },
    /// The pulled package failed the checks a host makes of a local package.
    #[error("{reference}: refused: {refusal}")]
    Refused {
        /// The reference.
        reference: String,
        /// The host's verdict.
        refusal: Box<plugin_host::Refusal>,
    },
    /// The tag now names other content than the lock pins.
    #[error(
        "{oci} now resolves to {now}, and toolhost.lock pins {locked}: the tag was moved after it was installed. Run `toolhost plugin update {name}` to review the change and move to it"
    )]
    LockMismatch {
        /// The source.
        oci: String,
        /// The plugin's name.
        name: String,
        /// The pinned digest.
        locked: String,
        /// The digest now.
        now: String,
    },
    /// No tag satisfies the source's version range.
    #[error("no tag of {repository} matches {range} (its version tags: {})", if tags.is_empty() { "none".to_string() } else { tags.join(", ") })]
    NoMatchingTag {
        /// The repository.
        repository: String,
        /// The range.
        range: String,
        /// The version tags it has.
        tags: Vec<String>,
    },
    /// Docker's config or a credential helper failed.
    #[error("credentials for {registry}: {detail}")]
    Credentials {
        /// The registry.
        registry: String,
        /// What failed.
        detail: String,
    },
    /// The package to publish could not be read.
    #[error("{detail}")]
    Package {
        /// What failed.
        detail: String,
    },
    /// The store of installed packages could not be written.
    #[error("cannot write {}: {detail}", path.display())]
    Store {
        /// Where.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// The lock file could not be read or written.
    #[error("{}: {detail}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}
