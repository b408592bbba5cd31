//! Where a `shell` command runs: the call's sandbox (its grant, with the host's settings
//! record), the egress proxy of a command granted network, and what the sandbox denied a
//! command that failed.

use std::path::{Path, PathBuf};

use sandbox::denials::Explainer;
use sandbox::egress::{Egress, Rules};
use sandbox::{CommandGrant, CommandMode, Settings};
use tool_api::{SandboxMode, ToolContext, ToolError};

/// Where a command runs: its sandbox, kept alive while it runs.
pub(super) struct Confined {
    /// `workspace-write`, `read-only`, `host`, or `unsandboxed (…)`.
    pub(super) label: String,
    /// The private temporary directory, removed when the call ends.
    pub(super) tmp: Option<sandbox::PrivateTmp>,
    pub(super) prepared: Option<sandbox::Prepared>,
    /// The host's settings (the environment policy, the network's lists).
    pub(super) settings: Settings,
    /// What the command was granted, when it runs in an OS sandbox.
    pub(super) grant: Option<CommandGrant>,
}

/// The host's settings record, as the call's context carries it (tool-api 1.6); an older
/// host's call gets the defaults.
fn settings_of(ctx: &ToolContext) -> Result<Settings, ToolError> {
    match ctx.sandbox_settings() {
        None => Ok(Settings::default()),
        Some(v) => serde_json::from_value(v).map_err(|e| {
            ToolError::failed(format!(
                "the command was not run: the host's sandbox settings could not be read ({e})"
            ))
        }),
    }
}

/// The call's sandbox for a command: nothing under `host`; else the OS sandbox of its
/// mode, or a refusal where it cannot be enforced (unless the host allows unconfined).
pub(super) fn confine(ctx: &ToolContext) -> Result<Confined, ToolError> {
    let granted = ctx.process_sandbox();
    let settings = settings_of(ctx)?;
    let mode = match granted.mode {
        SandboxMode::Host => {
            return Ok(Confined {
                label: "host".into(),
                tmp: None,
                prepared: None,
                settings,
                grant: None,
            });
        }
        SandboxMode::ReadOnly => CommandMode::ReadOnly,
        SandboxMode::WorkspaceWrite => CommandMode::WorkspaceWrite,
        other => {
            return Err(ToolError::PermissionDenied(format!(
                "the command was not run: sandbox mode '{other}' is not provided here (supported: host, read-only, workspace-write)"
            )));
        }
    };
    let grant = CommandGrant {
        mode,
        network: granted.network,
    };
    let tmp = sandbox::PrivateTmp::new().map_err(|e| ToolError::failed(e.to_string()))?;
    if mode == CommandMode::WorkspaceWrite {
        settings.create_caches();
    }
    let workspace = PathBuf::from(ctx.workspace_root());
    let confinement = settings
        .confinement(grant, &workspace, tmp.path())
        .map_err(|e| ToolError::PermissionDenied(format!("the command was not run: {e}")))?;
    let label = if grant.network {
        format!("{mode}, network through the egress proxy")
    } else {
        mode.to_string()
    };
    match sandbox::Prepared::new(&confinement) {
        Ok(prepared) => Ok(Confined {
            label,
            tmp: Some(tmp),
            prepared: Some(prepared),
            settings,
            grant: Some(grant),
        }),
        Err(sandbox::SandboxError::Unenforceable(missing))
            if granted.allow_unsandboxed || settings.allow_unsandboxed =>
        {
            ctx.log().warn(format_args!(
                "running the command UNSANDBOXED (allow_unsandboxed = true): {missing}"
            ));
            Ok(Confined {
                label: format!("unsandboxed ({missing})"),
                tmp: None,
                prepared: None,
                settings,
                grant: None,
            })
        }
        Err(e @ sandbox::SandboxError::Unenforceable(_)) => {
            Err(ToolError::PermissionDenied(format!(
                "the command was not run: its sandbox '{mode}' {}; it is never run unconfined unless the host allows it (allow_unsandboxed = true in [sandbox]), or grant it sandbox \"host\" ([sandbox.per_tool] shell = \"host\")",
                e.to_string().trim_start_matches("the sandbox ")
            )))
        }
        Err(e) => Err(ToolError::failed(format!(
            "the command was not run: its sandbox '{mode}' could not be prepared: {e}"
        ))),
    }
}

/// Serves a command's egress listener (its one way out) under the host's network lists.
pub(super) fn serve_egress(
    settings: &Settings,
    attached: sandbox::Attached,
) -> Result<Option<Egress>, ToolError> {
    let rules = Rules::new(
        settings.network.allow.clone(),
        settings.network.deny.clone(),
        "[sandbox.network] allow",
    );
    attached
        .serve(rules, None)
        .map_err(|e| ToolError::failed(format!("the command's egress proxy could not start: {e}")))
}

/// What the sandbox denied a failed command, from its output and the proxy's refusals.
pub(super) fn denials(
    confined: &Confined,
    ctx: &ToolContext,
    egress: Option<&Egress>,
    output: &str,
) -> Vec<String> {
    let explainer = confined
        .grant
        .zip(confined.tmp.as_ref())
        .map(|(grant, tmp)| {
            Explainer::new(
                &confined.settings,
                grant,
                Path::new(ctx.workspace_root()),
                tmp.path(),
                "[sandbox]",
            )
        });
    sandbox::denials::of_failure(egress, explainer.as_ref(), output)
}
