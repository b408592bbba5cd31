//! What confines each tool, as `toolhost sandbox` prints it, `toolhost list --json` adds
//! to each tool and MCP clients read in each tool's `_meta` (`toolhost/sandbox`).
//!
//! A tool runs in toolhost's process (built-ins, trusted plugins), in a plugin worker, in an
//! MCP server's process, or on another host ([`Placement`]). What runs in toolhost's
//! process reaches files only through the workspace API; the programs it starts (`shell`)
//! run in the call's command sandbox, shown here as configured (a runtime policy may
//! grant a call another).

use std::path::{Path, PathBuf};

use dispatcher_core::ToolListing;
use dispatcher_core::confines::{ProgramsState, programs, tool_json};
use sandbox::Settings;
use serde_json::{Value, json};
use tool_api::Placement;

/// One line for a tool's sandbox.
fn tool_line(listing: &ToolListing, config: &Settings, workspace: &Path) -> String {
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
pub fn text(listing: &[ToolListing], config: &Settings, workspace: &Path) -> String {
    let mut out = format!("kernel ({} {}):\n", std::env::consts::OS, kernel_release());
    for line in mechanism_lines() {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&settings_text(config, workspace));
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
pub fn json(listing: &[ToolListing], config: &Settings, workspace: &Path) -> Value {
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
        "commands": settings_json(config, workspace),
        "tools": tools,
    })
}

/// Whether anything in the listing runs without the sandbox it should have (unconfined
/// by `allow_unsandboxed`), or cannot run here because its sandbox cannot be enforced. A
/// partly enforced sandbox is reported with its gaps, not counted here.
pub fn anything_unsandboxed(listing: &[ToolListing], config: &Settings, workspace: &Path) -> bool {
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

/// What commands (`shell`, stdio MCP servers, an `execute` worker's programs) get, by
/// name only: the paths hidden from them, the caches they write, where their network may
/// go, and which of toolhost's environment variables they see and which are withheld.
fn settings_json(config: &Settings, workspace: &Path) -> Value {
    let hidden = config.hidden(workspace);
    let vars: Vec<_> = std::env::vars_os().collect();
    let passed: Vec<String> = {
        let mut v: Vec<String> = config
            .env
            .environment(vars.clone())
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    json!({
        "mode": config.mode,
        "hidden": hidden.paths,
        "hidden_search_cut": hidden.cut,
        "allow_read": config.allow_read,
        "writable_roots": config.writable_roots,
        "writable_caches": config.caches(),
        "network": {
            "enabled": config.network.enabled,
            "allow": config.network.allow.entries(),
            "deny": config.network.deny.entries(),
        },
        "environment": {
            "inherit": config.env.inherit,
            "passed": passed,
            "withheld": config.env.withheld(vars),
            "set": config.env.set.keys().collect::<Vec<_>>(),
        },
    })
}

/// [`settings_json`] as text.
fn settings_text(config: &Settings, workspace: &Path) -> String {
    let v = settings_json(config, workspace);
    let list = |v: &Value| -> String {
        let items: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if items.is_empty() {
            "none".into()
        } else {
            items.join(", ")
        }
    };
    let mut out = format!(
        "commands (shell, stdio MCP servers, execute workers' programs; mode {}):\n",
        config.mode
    );
    out.push_str(&format!(
        "  hidden        {} (the deny list, as present here; [sandbox] deny_read adds, allow_read re-opens)\n",
        list(&v["hidden"])
    ));
    if let Some(cut) = v["hidden_search_cut"].as_str() {
        out.push_str(&format!("  hidden        commands are refused: {cut}\n"));
    }
    out.push_str(&format!(
        "  writes        the workspace, a private temporary directory, writable_roots: {}\n",
        list(&v["writable_roots"])
    ));
    out.push_str(&format!(
        "  caches        {} (writable_caches; [] is the strict setting)\n",
        list(&v["writable_caches"])
    ));
    let net = &v["network"];
    out.push_str(&format!(
        "  network       {}; through the egress proxy to {} (deny: {})\n",
        if net["enabled"].as_bool() == Some(true) {
            "on"
        } else {
            "off unless granted"
        },
        list(&net["allow"]),
        list(&net["deny"])
    ));
    let env = &v["environment"];
    out.push_str(&format!(
        "  environment   inherit = {}; passed: {}\n",
        env["inherit"].as_str().unwrap_or("filtered"),
        list(&env["passed"])
    ));
    out.push_str(&format!("  withheld      {}\n", list(&env["withheld"])));
    if env["set"].as_array().is_some_and(|a| !a.is_empty()) {
        out.push_str(&format!("  set           {}\n", list(&env["set"])));
    }
    out
}

/// What each stdio MCP server gets besides what every command gets, by name only: the
/// variables its entry's `env` sets, its own sandbox keys.
pub fn servers_json(servers: &[mcp_toolsets::McpServerConfig]) -> Value {
    servers
        .iter()
        .filter(|s| s.url.is_none())
        .map(|s| {
            json!({
                "id": s.id,
                "env": s.env.keys().collect::<Vec<_>>(),
                "sandbox": s.sandbox,
                "network": s.network.as_ref().map(|n| match n {
                    sandbox::NetworkEntry::Enabled(on) => json!({ "enabled": on }),
                    sandbox::NetworkEntry::Own { enabled, allow, deny } => json!({
                        "enabled": enabled,
                        "allow": allow.as_ref().map(sandbox::HostList::entries),
                        "deny": deny.entries(),
                    }),
                }),
                "allow_read": s.allow_read,
                "writable_roots": s.writable_roots,
            })
        })
        .collect()
}

/// [`servers_json`] as text: one line per stdio server.
pub fn servers_text(servers: &[mcp_toolsets::McpServerConfig]) -> String {
    let mut out = String::new();
    for s in servers.iter().filter(|s| s.url.is_none()) {
        let env: Vec<&str> = s.env.keys().map(String::as_str).collect();
        let mut own = Vec::new();
        if let Some(mode) = s.sandbox {
            own.push(format!("mode {mode}"));
        }
        match &s.network {
            Some(sandbox::NetworkEntry::Enabled(true)) => own.push("network".into()),
            Some(sandbox::NetworkEntry::Enabled(false)) => own.push("no network".into()),
            Some(sandbox::NetworkEntry::Own {
                enabled: true,
                allow,
                ..
            }) => own.push(match allow {
                Some(allow) => format!("network to {allow}"),
                None => "network".into(),
            }),
            Some(sandbox::NetworkEntry::Own { enabled: false, .. }) => {
                own.push("no network".into());
            }
            None => {}
        }
        out.push_str(&format!(
            "  {:13} the environment above{}{}\n",
            s.id,
            if env.is_empty() {
                String::new()
            } else {
                format!(", and its entry's env: {}", env.join(", "))
            },
            if own.is_empty() {
                String::new()
            } else {
                format!("; its own: {}", own.join(", "))
            }
        ));
    }
    if out.is_empty() {
        out
    } else {
        format!("\nstdio MCP servers (what each gets besides what commands get):\n{out}")
    }
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
