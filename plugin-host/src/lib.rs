//! # plugin-host: load third-party tools from plugin packages
//!
//! A plugin directory holds *packages*: folders (or `.tar.gz` archives made by
//! `cargo xtask plugin package`) with a [`Manifest`] (`plugin.toml`), a `cdylib` built
//! against `tool-api`, and optionally a signature (`plugin.sig`, see [`trust`]).
//! [`PluginHost::load_into`] scans the directories and registers every good package's tools
//! in a [`Dispatcher`](dispatcher_core::Dispatcher), through the same factory trait as built-ins, and returns a
//! [`LoadReport`]: for each package, loaded (with its tools, where it runs and who signed
//! it) or refused with a [`Refusal`] its author can act on. One bad package never stops the
//! others.
//!
//! Opening a library runs its code, so everything that can be checked first is checked
//! first, in this order:
//!
//! 1. `plugin.toml` parses (unknown keys and bad values are named);
//! 2. the target triple is this host's;
//! 3. tool-api: same major version as the host's, and the plugin's `requires_tool_api` is
//!    not newer than the host's (a plugin built against a newer minor loads if it needs
//!    nothing new; one built against an older minor always loads);
//! 4. the library file is in the package and matches its SHA-256;
//! 5. the signature: with [`PluginHost::require_signatures`], a package not signed by a
//!    trusted key is refused here; a signature that does not match is always refused;
//! 6. where it runs ([`Isolation`]): `auto` (the default) loads a package signed by a
//!    trusted key in process and runs any other in a worker process; a per-plugin setting
//!    wins;
//! 7. in process only: the plugin unwinds (`panic = "abort"` builds are refused: a panic
//!    would kill the host; isolated, it kills only the worker).
//!
//! Then the library is opened by its own path (in the host, or by its worker process, see
//! [`isolated`], [`worker`] and [`protocol`]), abi_stable checks the layout of its root
//! module (a mismatch is reported in one line; the full report is logged at debug; a pass
//! is remembered for these exact library bytes and this exact host file, see [`layouts`]),
//! its metadata and tool list are compared with the manifest, and its tools are registered
//! under the source `plugin:NAME` (a clash names both owners).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use dispatcher_core::Dispatcher;
//! use plugin_host::{PluginHost, WorkerSettings};
//!
//! let dispatcher = Dispatcher::new();
//! // Isolated plugins run in `my-host plugin-worker …`, a subcommand that calls
//! // `plugin_host::worker::run`.
//! let worker = WorkerSettings::new(std::env::current_exe()?, ["plugin-worker"]);
//! let report = PluginHost::new(["./plugins"]).worker(worker).load_into(&dispatcher);
//! for line in report.lines() {
//!     eprintln!("{line}");
//! }
//! # Ok(()) }
//! ```
//!
//! A package whose manifest says `kind = "component"` holds a WebAssembly component
//! instead: with the `wasm` cargo feature it is checked the same way (its target is
//! `wasm32-wasip2` and its version is the `toolhost:plugin` WIT package's), then compiled,
//! or taken from the compiled-code cache, and described by the `plugin-wasm` crate, and always runs
//! as [`Isolation::Wasm`]. Without the feature such packages are refused, saying so.
//!
//! DESIGN.md's plugin-host loads "in process or in a worker process"; the worker side is in
//! this crate (not a separate binary) so that any host binary can offer it as a subcommand
//! built from the same code, which keeps host and worker on one protocol version.
mod adapter;
mod checks;
pub mod digest;
pub mod error;
mod host;
pub mod isolated;
pub mod layouts;
pub mod library;
pub mod manifest;
pub mod package;
pub mod protocol;
mod register;
mod report;
pub mod sandboxing;
pub mod trust;
pub mod worker;

pub use checks::{check_interface, check_versions, compare, preflight, verify_package};
pub use error::Refusal;
pub use host::{COMPILED_DIR, PluginHost, cache_dir_in, default_cache_dir};
pub use isolated::{PluginWorker, WorkerSettings, WorkerStatus};
pub use library::{Inspection, Library};
pub use manifest::{
    COMPONENT_TARGET, Instances, MANIFEST_FILE, Manifest, ManifestError, ManifestTool, PackageKind,
};
#[cfg(feature = "wasm")]
pub use plugin_wasm;
#[cfg(feature = "wasm")]
pub use register::load_component;
pub use register::{load_package, register_library};
pub use report::{LoadReport, Outcome, PackageReport};
pub use sandboxing::{PluginSandbox, WorkerGrant, WorkerPlan, WorkerSandbox};
pub use trust::{PublicKey, Verdict};

/// The target triple this host was built for; packages must match it.
pub const HOST_TARGET: &str = env!("TOOLHOST_TARGET");

/// Where a package's library runs.
///
/// `in_process` is fastest, and a crash in the plugin is a crash of the host. `process`
/// loads it in a worker process (see [`isolated`]): a crash, a hang or a memory bomb ends
/// only that worker's calls, for about one socket round trip per call. `auto` decides per
/// package: in process when it is signed by a trusted key, isolated otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Loaded into the host process.
    InProcess,
    /// Loaded by a worker process.
    Process,
    /// In process when signed by a trusted key, else `process`.
    Auto,
    /// A WebAssembly component: run by wasmtime inside the host process, reaching only what
    /// its `toolhost:plugin` imports give it. Every component runs so, whatever the default;
    /// a native library cannot.
    Wasm,
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Isolation::InProcess => "in_process",
            Isolation::Process => "process",
            Isolation::Auto => "auto",
            Isolation::Wasm => "wasm",
        })
    }
}

/// Where packages run unless told otherwise: `auto` (in process only when signed by a
/// trusted key).
pub const DEFAULT_ISOLATION: Isolation = Isolation::Auto;

/// The file in the cache directory that remembers digests ([`digest`]).
pub const DIGESTS_FILE: &str = "digests.json";
