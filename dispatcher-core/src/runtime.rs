//! The runtime policy: for each call that may run, a [`Grant`] that says where it runs and
//! within which limits.
//!
//! The dispatcher computes a base grant from its config (the tool's timeout, its result
//! size cap, the configured sandbox) and hands it to the [`RuntimePolicy`], if the host set
//! one, which may tighten or loosen it, or refuse the call. The dispatch engine is the same
//! whatever the policy: it only reads the grant.
//!
//! Only [`SandboxMode::Host`] exists in this release. A grant (or a config) that asks for
//! another mode is refused with a clear error (`permission_denied`, the call does not run),
//! never silently run on the host.
//!
//! ```
//! use std::time::Duration;
//! use dispatcher_core::runtime::{Grant, GrantRequest, RuntimePolicy};
//!
//! /// Tools of a CI bot get at most 30 s and 20 000 characters.
//! struct Strict;
//! impl RuntimePolicy for Strict {
//!     fn grant(&self, _call: &GrantRequest<'_>, base: Grant) -> Result<Grant, String> {
//!         Ok(Grant {
//!             timeout: base.timeout.min(Duration::from_secs(30)),
//!             max_result_chars: base.max_result_chars.min(20_000),
//!             ..base
//!         })
//!     }
//! }
//! # let _ = dispatcher_core::Dispatcher::builder().runtime(std::sync::Arc::new(Strict)).build();
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::call::CallView;

/// Where a call runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Directly on the host, as the host's user, confined only by the workspace file API.
    /// The only mode this release provides.
    #[default]
    Host,
    /// An OS sandbox where the tool can read but not write (not provided yet).
    ReadOnly,
    /// An OS sandbox where the tool can write only inside the workspace (not provided yet).
    WorkspaceWrite,
    /// A container (not provided yet).
    Container,
}

impl SandboxMode {
    /// Every mode, by its config name.
    pub const ALL: [SandboxMode; 4] = [
        SandboxMode::Host,
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::Container,
    ];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Host => "host",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::Container => "container",
        }
    }

    /// Whether this host can run calls in this mode.
    pub fn is_supported(self) -> bool {
        self == SandboxMode::Host
    }

    /// Refuses a mode this host cannot provide, with the message users see.
    pub fn check_supported(self) -> Result<(), String> {
        if self.is_supported() {
            Ok(())
        } else {
            Err(format!(
                "sandbox mode '{}' is not supported by this host (supported: host); tools are never run outside the sandbox they were granted",
                self.as_str()
            ))
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown sandbox mode '{s}': expected one of host, read-only, workspace-write, container"
                )
            })
    }
}

/// What a call is granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Where it runs.
    pub sandbox: SandboxMode,
    /// How long it may run.
    pub timeout: Duration,
    /// How many characters of text the model gets before the rest is spooled to a file.
    pub max_result_chars: usize,
}

/// What the runtime policy sees of a call: the same view pre-use hooks get, with the input
/// the call will run with.
pub type GrantRequest<'a> = CallView<'a>;

/// Decides each call's [`Grant`]. Runs on the async worker after confirmation: keep it quick.
pub trait RuntimePolicy: Send + Sync {
    /// The grant for one call, from the config's `base` grant; `Err(reason)` refuses the
    /// call (`permission_denied`, with the reason shown to the model).
    fn grant(&self, call: &GrantRequest<'_>, base: Grant) -> Result<Grant, String>;
}
