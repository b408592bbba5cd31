//! Where a call runs, and how the programs it starts are confined (tool-api 1.5).
//!
//! The host grants each call a [`SandboxMode`]. A tool that starts programs (a shell, a
//! build runner) asks for the call's [`ProcessSandbox`] with
//! [`crate::ToolContext::process_sandbox`] and confines what it starts accordingly; the
//! `shell` built-in does. A tool's own file access goes through its context, which holds
//! the same grant (a `read-only` call may not write). A host reports where each tool runs
//! as its [`Placement`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a call runs: the spec's `SandboxMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// As the host's user, confined only by the workspace file API; programs it starts run
    /// unconfined.
    Host,
    /// Its programs read the system, the workspace and the configured readable roots, and
    /// write nothing but a private temporary directory; its context refuses writes.
    ReadOnly,
    /// Its programs read as under [`SandboxMode::ReadOnly`] and write the workspace, a
    /// private temporary directory and the configured writable roots.
    WorkspaceWrite,
    /// A container (not provided).
    Container,
    /// A micro virtual machine (not provided).
    #[serde(rename = "microvm")]
    MicroVm,
    /// A WebAssembly sandbox (not provided by this host).
    Wasm,
    /// Another host (not provided by this host).
    Remote,
}

impl SandboxMode {
    /// Every mode, by its config name.
    pub const ALL: [SandboxMode; 7] = [
        SandboxMode::Host,
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::Container,
        SandboxMode::MicroVm,
        SandboxMode::Wasm,
        SandboxMode::Remote,
    ];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Host => "host",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::Container => "container",
            SandboxMode::MicroVm => "microvm",
            SandboxMode::Wasm => "wasm",
            SandboxMode::Remote => "remote",
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
                let names: Vec<&str> = SandboxMode::ALL.iter().map(|m| m.as_str()).collect();
                format!(
                    "unknown sandbox mode '{s}': expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// The key of the host's whole settings record in the answer to
/// [`crate::abi::OP_PROCESS_SANDBOX`] (tool-api 1.6; a 1.5 plugin ignores it).
pub const SANDBOX_SETTINGS_KEY: &str = "settings";

/// How the programs a call starts are to be confined: the call's granted mode and a
/// summary of the host's settings (the record as tool-api 1.5 froze it; the whole settings
/// record comes with [`crate::ToolContext::sandbox_settings`]). The default (what a host older than 1.5 means) is the strictest
/// usable one: `workspace-write`, no network, nothing more, never unconfined.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessSandbox {
    /// The call's granted mode.
    pub mode: SandboxMode,
    /// Whether its programs may open connections.
    pub network: bool,
    /// Paths re-opened from the host's deny list (absolute; its programs read everything
    /// else but that list).
    pub readable_roots: Vec<String>,
    /// More directories its programs may write under `workspace-write` (absolute).
    pub writable_roots: Vec<String>,
    /// Where the mode cannot be enforced, run the programs unconfined (the host's user
    /// accepted that risk) instead of refusing.
    pub allow_unsandboxed: bool,
}

impl Default for ProcessSandbox {
    fn default() -> Self {
        ProcessSandbox {
            mode: SandboxMode::WorkspaceWrite,
            network: false,
            readable_roots: Vec::new(),
            writable_roots: Vec::new(),
            allow_unsandboxed: false,
        }
    }
}

/// Where a tool's calls run and what confines them, as its factory reports it
/// ([`crate::ToolFactory::placement`]): for listings, `toolhost sandbox` and MCP clients.
/// Host-side only: not part of the plugin ABI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "runs", rename_all = "snake_case")]
pub enum Placement {
    /// In the host's process (its own tools, trusted plugins): file access goes through
    /// the workspace API, programs it starts run in its call's [`SandboxMode`].
    #[default]
    InProcess,
    /// In a worker process of its own, in an OS sandbox.
    Worker {
        /// What the worker may do beyond its context (`context only`, `network`,
        /// `execute`).
        grant: String,
        /// `enforced`, `partial` (the detail names what does not hold) or `unsandboxed`.
        state: String,
        /// What holds it, or why nothing does.
        detail: String,
    },
    /// In a WebAssembly sandbox in the host's process: files only through the workspace
    /// API, no sockets, no environment; a `network` tool's HTTP requests only to
    /// `http_hosts`.
    Wasm {
        /// The hosts its HTTP requests may go to (none for a tool not declared `network`).
        http_hosts: Vec<String>,
    },
    /// In an MCP server's process.
    Server {
        /// What that process runs in (`workspace-write`, `host (unconfined)`, …).
        sandbox: String,
    },
    /// On another host, reached over the network: not confined by this one.
    Remote {
        /// Where.
        url: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_reads_back_from_its_name() {
        for mode in SandboxMode::ALL {
            assert_eq!(mode.as_str().parse::<SandboxMode>().unwrap(), mode);
            assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{mode}\""));
        }
        let e = "jail".parse::<SandboxMode>().unwrap_err();
        assert!(e.contains("host, read-only, workspace-write"), "{e}");
    }

    #[test]
    fn an_empty_answer_is_the_strictest_usable_sandbox() {
        let s: ProcessSandbox = serde_json::from_str("{}").unwrap();
        assert_eq!(s, ProcessSandbox::default());
        assert_eq!(s.mode, SandboxMode::WorkspaceWrite);
    }
}
