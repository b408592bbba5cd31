//! What confines each tool in toolhost's process: the programs it starts (`shell`) run in
//! the call's command sandbox, shown here as configured (a runtime policy may grant a call
//! another). `toolhost sandbox` prints it, `toolhost list --json` adds it to each tool and
//! MCP clients read it in each tool's `_meta` (`toolhost/sandbox`).

use std::path::Path;

use sandbox::{CommandGrant, Settings};
use serde::Serialize;
use serde_json::{Value, json};
use tool_api::{Placement, SandboxMode};

use crate::registry::ToolListing;

/// The sandbox of the programs a tool in toolhost's process starts.
#[derive(Debug, Clone, Serialize)]
pub struct Programs {
    /// `host`, `read-only` or `workspace-write`.
    pub mode: SandboxMode,
    /// Whether they may open connections (under `host`, anything goes).
    pub network: bool,
    /// How far that holds here.
    pub state: ProgramsState,
    /// What holds them, or why nothing does.
    pub detail: String,
}

/// How far the sandbox of a tool's programs holds on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgramsState {
    /// Everything holds.
    Enforced,
    /// Some of it holds; the detail names what does not.
    Partial,
    /// It cannot be enforced here and `allow_unsandboxed` runs them unconfined.
    Unsandboxed,
    /// It cannot be enforced here, so commands are not run.
    Refused,
    /// Mode `host`: no OS sandbox, your rights.
    Host,
}

/// The programs' sandbox for a tool in `workspace` under `config`.
pub fn programs(config: &Settings, tool: &str, workspace: &Path) -> Programs {
    let mode = crate::config::sandbox_mode(config, tool);
    let Some(command_mode) = config.mode_of(tool).command() else {
        return Programs {
            mode,
            network: true,
            state: ProgramsState::Host,
            detail: "host: no OS sandbox, they run with your rights".into(),
        };
    };
    let grant = CommandGrant {
        mode: command_mode,
        network: config.network.enabled,
    };
    // Every listing of tools asks this: the shape, not the filesystem.
    let confinement = config.shape(grant, workspace, &std::env::temp_dir());
    let (state, detail) = match sandbox::expected(&confinement) {
        Ok(e) if e.state == sandbox::State::Enforced => (ProgramsState::Enforced, e.summary()),
        Ok(e) => (ProgramsState::Partial, e.summary()),
        Err(missing) if config.allow_unsandboxed => (
            ProgramsState::Unsandboxed,
            format!("UNSANDBOXED (allow_unsandboxed = true): {missing}"),
        ),
        Err(missing) => (
            ProgramsState::Refused,
            format!(
                "refused: {missing}; commands are not run (allow_unsandboxed = true in [sandbox] accepts the risk)"
            ),
        ),
    };
    Programs {
        mode,
        network: config.network.enabled,
        state,
        detail,
    }
}

/// One tool's sandbox as JSON: its [`Placement`] (`runs`: `in_process`, `worker`, `wasm`,
/// `server`, `remote`) and, in toolhost's process, its programs' sandbox.
pub fn tool_json(listing: &ToolListing, config: &Settings, workspace: &Path) -> Value {
    let mut v = serde_json::to_value(&listing.placement).unwrap_or(Value::Null);
    if listing.placement == Placement::InProcess {
        v["programs"] = json!(programs(config, &listing.definition.name, workspace));
    }
    v
}
