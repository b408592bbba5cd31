//! Where a stdio MCP server runs: the OS sandbox of its mode, started with it.
//!
//! A server runs as a command under `workspace-write` by default (the host's `[sandbox]`
//! mode): it reads the system directories, the workspace, the host's and its own readable
//! roots, its program and the files named by absolute path among its arguments (a
//! script); it writes the workspace, a private temporary directory (`TMPDIR`) and the
//! writable roots; it has no network unless granted. `read-only` writes only the
//! temporary directory; `host` runs it with the user's rights. Where the sandbox cannot be
//! enforced the server is not started ([`UpstreamError::Sandbox`]) unless `allow_unsandboxed`.

use std::path::{Path, PathBuf};

use sandbox::{CommandMode, CommandPolicy, Prepared, PrivateTmp, SandboxError};
use tool_api::SandboxMode;

use crate::{McpServerConfig, UpstreamError};

/// The host's sandbox settings for the servers it starts (its `[sandbox]` table and its
/// workspace); a server's own entry adds to them or overrides them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSandbox {
    /// The workspace a `workspace-write` server may write.
    pub workspace: PathBuf,
    /// The mode of servers whose entry sets none.
    pub mode: SandboxMode,
    /// Whether servers may open connections, unless their entry says.
    pub network: bool,
    /// Directories every server may read.
    pub readable_roots: Vec<PathBuf>,
    /// Directories every `workspace-write` server may write.
    pub writable_roots: Vec<PathBuf>,
    /// Start servers unconfined where their sandbox cannot be enforced, unless their entry
    /// says.
    pub allow_unsandboxed: bool,
}

impl ServerSandbox {
    /// `workspace-write` in `workspace`, no network, nothing more, never unconfined.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        ServerSandbox {
            workspace: workspace.into(),
            mode: SandboxMode::WorkspaceWrite,
            network: false,
            readable_roots: Vec::new(),
            writable_roots: Vec::new(),
            allow_unsandboxed: false,
        }
    }

    /// The settings of one server: its entry's over these.
    pub fn for_server(&self, config: &McpServerConfig) -> ServerSandbox {
        ServerSandbox {
            workspace: self.workspace.clone(),
            mode: config.sandbox.map_or(self.mode, |s| s.0),
            network: config.network.unwrap_or(self.network),
            readable_roots: self
                .readable_roots
                .iter()
                .chain(&config.readable_roots)
                .cloned()
                .collect(),
            writable_roots: self
                .writable_roots
                .iter()
                .chain(&config.writable_roots)
                .cloned()
                .collect(),
            allow_unsandboxed: config.allow_unsandboxed.unwrap_or(self.allow_unsandboxed),
        }
    }

    /// One line for reports: `workspace-write`, `workspace-write, network`, `host`.
    pub fn describe(&self) -> String {
        match (self.mode, self.network) {
            (SandboxMode::Host, _) => "host (unconfined)".into(),
            (mode, true) => format!("{mode}, network"),
            (mode, false) => mode.to_string(),
        }
    }
}

/// A server's sandbox, ready to attach to its command; the temporary directory lives as
/// long as the server.
pub(crate) struct Confined {
    /// What it runs in, for reports and messages.
    pub(crate) label: String,
    pub(crate) tmp: Option<PrivateTmp>,
    pub(crate) prepared: Option<Prepared>,
}

/// `program` as the command would find it: a path with a `/` as given (relative to the
/// working directory), else the first match on `PATH`.
fn resolve_program(program: &str, cwd: Option<&Path>, path_var: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = Path::new(program);
        return Some(match cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        });
    }
    let path = path_var
        .map(str::to_string)
        .or_else(|| std::env::var("PATH").ok())?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The sandbox of a stdio server under `settings` (its own, from
/// [`ServerSandbox::for_server`]).
pub(crate) fn confine(
    config: &McpServerConfig,
    settings: &ServerSandbox,
) -> Result<Confined, UpstreamError> {
    let mode = match settings.mode {
        SandboxMode::Host => {
            return Ok(Confined {
                label: "host (unconfined)".into(),
                tmp: None,
                prepared: None,
            });
        }
        SandboxMode::ReadOnly => CommandMode::ReadOnly,
        // Other modes are refused when the config is read.
        _ => CommandMode::WorkspaceWrite,
    };
    let sandbox_error = |detail: String| UpstreamError::Sandbox {
        id: config.id.clone(),
        mode: mode.to_string(),
        detail,
    };
    let cwd = config.cwd.as_deref();
    let mut readable = settings.readable_roots.clone();
    // The program, and the scripts the entry names: whoever configured it named them.
    let program = resolve_program(
        &config.command,
        cwd,
        config.env.get("PATH").map(String::as_str),
    );
    readable.extend(
        config
            .args
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_file()),
    );
    readable.extend(cwd.map(Path::to_path_buf));
    let policy = CommandPolicy {
        mode,
        workspace: settings.workspace.clone(),
        readable_roots: readable,
        writable_roots: settings.writable_roots.clone(),
        network: settings.network,
    };
    let tmp = PrivateTmp::new().map_err(|e| sandbox_error(e.to_string()))?;
    let confinement = policy.confinement(tmp.path(), program.as_deref());
    match Prepared::new(&confinement) {
        Ok(prepared) => Ok(Confined {
            label: settings.describe(),
            tmp: Some(tmp),
            prepared: Some(prepared),
        }),
        Err(SandboxError::Unenforceable(missing)) if settings.allow_unsandboxed => {
            tracing::warn!(server = %config.id, "MCP server runs UNSANDBOXED (allow_unsandboxed = true): {missing}");
            Ok(Confined {
                label: format!("unsandboxed ({missing})"),
                tmp: None,
                prepared: None,
            })
        }
        Err(e) => Err(sandbox_error(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dispatcher_core::config::SupportedSandbox;

    #[test]
    fn a_servers_entry_adds_roots_and_overrides_mode_network_and_allow() {
        let mut host = ServerSandbox::new("/w");
        host.readable_roots.push("/r1".into());
        let mut config = McpServerConfig::new("s", "s", "srv");
        config.sandbox = Some(SupportedSandbox(SandboxMode::ReadOnly));
        config.network = Some(true);
        config.readable_roots.push("/r2".into());
        let own = host.for_server(&config);
        assert_eq!(own.mode, SandboxMode::ReadOnly);
        assert!(own.network);
        assert_eq!(own.readable_roots, [PathBuf::from("/r1"), "/r2".into()]);
        assert_eq!(own.describe(), "read-only, network");
    }

    #[test]
    fn a_program_is_found_on_the_path_or_taken_as_written() {
        assert_eq!(
            resolve_program("sh", None, Some("/nonexistent:/bin")),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            resolve_program("./srv", Some(Path::new("/x")), None),
            Some(PathBuf::from("/x/./srv"))
        );
        assert_eq!(
            resolve_program("no-such-program-here", None, Some("/bin")),
            None
        );
    }
}
