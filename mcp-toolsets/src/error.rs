//! Why a server could not be used: [`UpstreamError`].

use dispatcher_core::Seconds;

/// Why a server could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UpstreamError {
    /// The command could not be started.
    #[error("MCP server '{id}': cannot start `{command}`: {detail}")]
    Spawn {
        /// The server's id.
        id: String,
        /// The command.
        command: String,
        /// The OS error.
        detail: String,
    },
    /// It did not initialize in time.
    #[error(
        "MCP server '{id}' did not finish initializing within {timeout} (startup_timeout_secs); it was stopped{detail}"
    )]
    StartupTimeout {
        /// The server's id.
        id: String,
        /// The timeout.
        timeout: Seconds,
        /// What it wrote to its error output, and what its sandbox refused it (the
        /// egress proxy's refusals), if anything.
        detail: String,
    },
    /// Its sandbox could not be made, or cannot be enforced here.
    #[error(
        "MCP server '{id}' was not started: its sandbox ({mode}) {detail}. It is never started unconfined unless allowed: set `allow_unsandboxed = true` on its [[mcp_servers]] entry (or in [sandbox]) to accept the risk, or `sandbox = \"host\"` to run it with your rights"
    )]
    Sandbox {
        /// The server's id.
        id: String,
        /// The mode it was to run in.
        mode: String,
        /// What is missing or failed.
        detail: String,
    },
    /// Initialization or listing failed.
    #[error("MCP server '{id}' failed to initialize: {detail}")]
    Initialize {
        /// The server's id.
        id: String,
        /// What failed.
        detail: String,
    },
}
