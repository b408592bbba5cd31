//! What confines each tool, as `toolhost sandbox` prints it, `toolhost list --json` adds
//! to each tool and MCP clients read in each tool's `_meta` (`toolhost/sandbox`).
//!
//! A tool runs in toolhost's process (built-ins, trusted plugins), in a plugin worker, in an
//! MCP server's process, or on another host ([`Placement`]). What runs in toolhost's
//! process reaches files only through the workspace API; the programs it starts (`shell`)
//! run in the call's command sandbox, shown here as configured (a runtime policy may
//! grant a call another).

use std::path::{Path, PathBuf};

use dispatcher_core::config::SandboxConfig;
use dispatcher_core::{SandboxMode, ToolListing};
use sandbox::{CommandMode, CommandPolicy};
use serde::Serialize;
use serde_json::{Value, json};
use tool_api::Placement;

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
pub fn programs(config: &SandboxConfig, tool: &str, workspace: &Path) -> Programs {
    let mode = config.mode_of(tool);
    let command_mode = match mode {
        SandboxMode::ReadOnly => CommandMode::ReadOnly,
        SandboxMode::WorkspaceWrite => CommandMode::WorkspaceWrite,
        other => {
            return Programs {
                mode: other,
                network: true,
                state: ProgramsState::Host,
                detail: "host: no OS sandbox, they run with your rights".into(),
            };
        }
    };
    let policy = CommandPolicy {
        mode: command_mode,
        workspace: workspace.to_path_buf(),
        readable_roots: config.readable_roots.clone(),
        writable_roots: config.writable_roots.clone(),
        network: config.network,
    };
    let confinement = policy.confinement(&std::env::temp_dir(), None);
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
        network: config.network,
        state,
        detail,
    }
}

/// One tool's sandbox as JSON: its [`Placement`] (`runs`: `in_process`, `worker`, `wasm`,
/// `server`, `remote`) and, in toolhost's process, its programs' sandbox.
pub fn tool_json(listing: &ToolListing, config: &SandboxConfig, workspace: &Path) -> Value {
    let mut v = serde_json::to_value(&listing.placement).unwrap_or(Value::Null);
    if listing.placement == Placement::InProcess {
        v["programs"] = json!(programs(config, &listing.definition.name, workspace));
    }
    v
}

/// One line for a tool's sandbox.
fn tool_line(listing: &ToolListing, config: &SandboxConfig, workspace: &Path) -> String {
    match &listing.placement {
        Placement::InProcess => {
            let who = if listing.source.starts_with("plugin:") {
                "in toolhost's process (a trusted plugin: no OS sandbox of its own)"
            } else {
                "in toolhost's process"
            };
            let class = listing.definition.side_effects;
            if class == tool_api::SideEffect::Execute {
                let p = programs(config, &listing.definition.name, workspace);
                let network = if p.network && p.state != ProgramsState::Host {
                    " + network"
                } else {
                    ""
                };
                format!("{who}; its programs: {}{network}, {}", p.mode, p.detail)
            } else {
                format!("{who}; files only through the workspace API ({class})")
            }
        }
        Placement::Worker { grant, detail, .. } => {
            format!("plugin worker, may {}: {detail}", grant_words(grant))
        }
        Placement::Wasm { http_hosts } => {
            let class = listing.definition.side_effects;
            let network = match (class, http_hosts.is_empty()) {
                (tool_api::SideEffect::Network, true) => {
                    "HTTP to no host (none listed in http_hosts)".to_string()
                }
                (tool_api::SideEffect::Network, false) => {
                    format!("HTTP only to {}", http_hosts.join(", "))
                }
                _ => "no network".to_string(),
            };
            format!(
                "WebAssembly sandbox; files only through the workspace API ({class}); {network}"
            )
        }
        Placement::Server { sandbox } => format!("MCP server process: {sandbox}"),
        Placement::Remote { url } => format!("remote MCP server {url}: not confined by toolhost"),
    }
}

/// What a worker grant (as `plugin_host::WorkerGrant` shows it) lets it do, in words.
fn grant_words(grant: &str) -> String {
    match grant {
        "context only" => "only use its context (no files, network or programs of its own)".into(),
        "network" => "use its context and open outbound connections".into(),
        "execute" => "use its context and start programs (under workspace-write)".into(),
        "network, execute" => {
            "use its context, open outbound connections and start programs".into()
        }
        other => format!("use its context and {other}"),
    }
}

/// The mechanisms this kernel enforces, one line each.
fn mechanism_lines() -> Vec<String> {
    sandbox::probe()
        .mechanisms()
        .into_iter()
        .map(|m| format!("  {:13} {:12} {}", m.name, m.state.to_string(), m.detail))
        .collect()
}

/// The whole report as text: the kernel's mechanisms, then each tool.
pub fn text(listing: &[ToolListing], config: &SandboxConfig, workspace: &Path) -> String {
    let mut out = format!("kernel ({} {}):\n", std::env::consts::OS, kernel_release());
    for line in mechanism_lines() {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&format!("\ntools (workspace {}):\n", workspace.display()));
    let width = listing
        .iter()
        .map(|l| l.definition.name.len())
        .max()
        .unwrap_or(4);
    for l in listing {
        out.push_str(&format!(
            "  {:width$}  {:8} {}\n",
            l.definition.name,
            l.definition.side_effects.to_string(),
            tool_line(l, config, workspace)
        ));
    }
    out
}

/// The whole report as JSON.
pub fn json(listing: &[ToolListing], config: &SandboxConfig, workspace: &Path) -> Value {
    let mechanisms: Vec<Value> = sandbox::probe()
        .mechanisms()
        .into_iter()
        .map(|m| json!({"name": m.name, "state": m.state, "detail": m.detail}))
        .collect();
    let tools: Vec<Value> = listing
        .iter()
        .map(|l| {
            json!({
                "name": l.definition.name,
                "side_effects": l.definition.side_effects,
                "source": l.source,
                "sandbox": tool_json(l, config, workspace),
            })
        })
        .collect();
    json!({
        "os": std::env::consts::OS,
        "kernel": kernel_release(),
        "mechanisms": mechanisms,
        "workspace": workspace,
        "tools": tools,
    })
}

/// Whether anything in the listing runs without the sandbox it should have (unconfined
/// by `allow_unsandboxed`), or cannot run here because its sandbox cannot be enforced. A
/// partly enforced sandbox is reported with its gaps, not counted here.
pub fn anything_unsandboxed(
    listing: &[ToolListing],
    config: &SandboxConfig,
    workspace: &Path,
) -> bool {
    listing.iter().any(|l| match &l.placement {
        Placement::Worker { state, .. } => state == "unsandboxed",
        Placement::Server { sandbox } => sandbox.starts_with("unsandboxed"),
        Placement::InProcess if l.definition.side_effects == tool_api::SideEffect::Execute => {
            matches!(
                programs(config, &l.definition.name, workspace).state,
                ProgramsState::Unsandboxed | ProgramsState::Refused
            )
        }
        _ => false,
    })
}

/// The running kernel's release (`uname -r`).
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The workspace as an absolute path (reports name it).
pub fn absolute(workspace: &Path) -> PathBuf {
    std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf())
}
