//! Where a stdio MCP server runs: the OS sandbox of its mode, started with it.
//!
//! A server runs as a command under the host's `[sandbox]` settings (`workspace-write` by
//! default), its entry's own keys over them: it reads and runs everything but the deny
//! list (hidden), writes the workspace, a private temporary directory (`TMPDIR`), the
//! writable roots and the build caches (npx's `~/.npm` among them); with network it goes
//! out only through the egress proxy, to the hosts its allow list names. Its environment
//! is the host's minus every secret; its entry's `env` gives it what it needs. `read-only`
//! writes only the temporary directory; `host` runs it with the user's rights. Where the
//! sandbox cannot be enforced the server is not started ([`UpstreamError::Sandbox`]) unless
//! `allow_unsandboxed`.

use std::path::PathBuf;

use sandbox::denials::Explainer;
use sandbox::egress::{Egress, Rules};
use sandbox::{CommandGrant, Mode, Prepared, PrivateTmp, SandboxError, Settings};

use crate::{McpServerConfig, UpstreamError};

/// The host's sandbox for the servers it starts: its settings record (`[sandbox]`) and
/// the workspace; a server's own entry adds to them or overrides them
/// ([`ServerSandbox::for_server`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSandbox {
    /// The workspace a `workspace-write` server may write.
    pub workspace: PathBuf,
    /// The settings.
    pub settings: Settings,
}

impl ServerSandbox {
    /// The default settings (`workspace-write` in `workspace`, no network, never unconfined).
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        ServerSandbox {
            workspace: workspace.into(),
            settings: Settings::default(),
        }
    }

    /// The settings of one server: its entry's keys over these.
    pub fn for_server(&self, config: &McpServerConfig) -> ServerSandbox {
        let mut settings = self.settings.clone();
        if let Some(mode) = config.sandbox {
            settings.mode = mode;
        }
        if let Some(network) = &config.network {
            settings.network = network.over(&settings.network);
        }
        settings
            .allow_read
            .extend(config.allow_read.iter().cloned());
        settings
            .writable_roots
            .extend(config.writable_roots.iter().cloned());
        if let Some(allow) = config.allow_unsandboxed {
            settings.allow_unsandboxed = allow;
        }
        ServerSandbox {
            workspace: self.workspace.clone(),
            settings,
        }
    }

    /// One line for reports: `workspace-write`, `workspace-write, network (…)`, `host`.
    pub fn describe(&self) -> String {
        match (self.settings.mode, self.settings.network.enabled) {
            (Mode::Host | Mode::Remote, _) => "host (unconfined)".into(),
            (mode, true) => format!(
                "{mode}, network through the egress proxy to {}",
                self.settings.network.allow
            ),
            (mode, false) => mode.to_string(),
        }
    }

    /// The egress rules of the server `id`.
    pub(crate) fn rules(&self, id: &str) -> Rules {
        Rules::new(
            self.settings.network.allow.clone(),
            self.settings.network.deny.clone(),
            format!("[sandbox.network] allow (or the `network` allow of [[mcp_servers]] '{id}')"),
        )
    }
}

/// A server's sandbox, ready to attach to its command; the temporary directory lives as
/// long as the server.
pub(crate) struct Confined {
    /// What it runs in, for reports and messages.
    pub(crate) label: String,
    pub(crate) tmp: Option<PrivateTmp>,
    pub(crate) prepared: Option<Prepared>,
    /// What it was granted, when it runs in an OS sandbox.
    pub(crate) grant: Option<CommandGrant>,
}

impl Confined {
    /// What the sandbox denied a server that failed, from its error output and its
    /// proxy's refusals.
    pub(crate) fn denials(
        &self,
        sandbox: &ServerSandbox,
        id: &str,
        output: &str,
        egress: Option<&Egress>,
    ) -> Vec<String> {
        let explainer = self.grant.zip(self.tmp.as_ref()).map(|(grant, tmp)| {
            Explainer::new(
                &sandbox.settings,
                grant,
                &sandbox.workspace,
                tmp.path(),
                &format!("[sandbox] (or [[mcp_servers]] '{id}')"),
            )
        });
        sandbox::denials::of_failure(egress, explainer.as_ref(), output)
    }
}

impl Confined {
    /// For a confined server that failed saying nothing of what it was denied: what
    /// confined it and the keys that widen it (nothing for an unconfined one).
    pub(crate) fn what_widens_it(&self, network: bool) -> String {
        if self.grant.is_none() {
            return String::new();
        }
        format!(
            "\nsandbox: it ran confined ({}): the deny list hidden, writes only to the workspace and a private temporary directory, {}. If it needs more: `allow_read` re-opens a hidden path, `[sandbox.network] allow` (or `network` on its [[mcp_servers]] entry) lets it reach a host, `sandbox = \"host\"` on its [[mcp_servers]] entry runs it unconfined",
            self.label,
            if network {
                "the network only through the egress proxy"
            } else {
                "no network"
            }
        )
    }
}

/// The sandbox of a stdio server under `sandbox` (its own, from
/// [`ServerSandbox::for_server`]).
pub(crate) fn confine(
    config: &McpServerConfig,
    sandbox: &ServerSandbox,
) -> Result<Confined, UpstreamError> {
    let settings = &sandbox.settings;
    let Some(mode) = settings.mode.command() else {
        return Ok(Confined {
            label: "host (unconfined)".into(),
            tmp: None,
            prepared: None,
            grant: None,
        });
    };
    let sandbox_error = |detail: String| UpstreamError::Sandbox {
        id: config.id.clone(),
        mode: mode.to_string(),
        detail,
    };
    let grant = CommandGrant {
        mode,
        network: settings.network.enabled,
    };
    let tmp = PrivateTmp::new().map_err(|e| sandbox_error(e.to_string()))?;
    if mode == sandbox::CommandMode::WorkspaceWrite {
        settings.create_caches();
    }
    let confinement = settings
        .confinement(grant, &sandbox.workspace, tmp.path())
        .map_err(|e| sandbox_error(e.to_string()))?;
    match Prepared::new(&confinement) {
        Ok(prepared) => Ok(Confined {
            label: sandbox.describe(),
            tmp: Some(tmp),
            prepared: Some(prepared),
            grant: Some(grant),
        }),
        Err(SandboxError::Unenforceable(missing)) if settings.allow_unsandboxed => {
            tracing::warn!(server = %config.id, "MCP server runs UNSANDBOXED (allow_unsandboxed = true): {missing}");
            Ok(Confined {
                label: format!("unsandboxed ({missing})"),
                tmp: None,
                prepared: None,
                grant: None,
            })
        }
        Err(e) => Err(sandbox_error(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_entry_adds_roots_and_overrides_mode_network_and_allow() {
        let mut host = ServerSandbox::new("/w");
        host.settings.allow_read.push("/r1".into());
        let mut config = McpServerConfig::new("s", "s", "srv");
        config.sandbox = Some(Mode::ReadOnly);
        config.network = Some(sandbox::NetworkEntry::Enabled(true));
        config.allow_read.push("/r2".into());
        let own = host.for_server(&config);
        assert_eq!(own.settings.mode, Mode::ReadOnly);
        assert!(own.settings.network.enabled);
        assert_eq!(
            own.settings.allow_read,
            [PathBuf::from("/r1"), "/r2".into()]
        );
        assert!(
            own.describe()
                .starts_with("read-only, network through the egress proxy")
        );
    }
}
