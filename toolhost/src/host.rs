//! The host a configuration describes, as every command builds it: the dispatcher with
//! the built-in tools, the plugin packages of `plugin_dirs` (and `--plugins`), and the MCP
//! servers of `[[mcp_servers]]`. The CLI and the Python wheel build it alike.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use dispatcher_core::{Dispatcher, Session, SessionSpec};

use crate::config::{self, Config};
use crate::error::UsageError;
use crate::self_mount;
use mcp_server as mcp;

/// Where a command's session works (`--workspace`).
#[derive(Args)]
pub struct SessionArgs {
    /// The workspace root the tools are confined to (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,
}

/// The hidden subcommand a host starts its plugin workers with (isolation `process`):
/// `toolhost plugin-worker --library …`. The binary's allocator reads it too, before `main`.
pub const PLUGIN_WORKER: &str = "plugin-worker";

/// The configuration file `explicit` names, else the one found (`./toolhost.toml`, else the
/// user's config directory), else the defaults; with the file it came from.
pub fn load_config(explicit: Option<&Path>) -> Result<(Config, PathBuf), UsageError> {
    match Config::locate(explicit) {
        Some(file) => Ok((Config::load(&file)?, file)),
        None => Ok((Config::default(), PathBuf::from(config::FILE_NAME))),
    }
}

/// What a host is built from: the configuration (and its file), more plugin directories,
/// and how a plugin worker is started.
pub struct Sources<'a> {
    /// The configuration.
    pub config: &'a Config,
    /// Its file (relative paths in it are relative to this file).
    pub file: &'a Path,
    /// Plugin directories besides the config's `plugin_dirs` (the CLI's `--plugins`).
    pub extra_plugin_dirs: &'a [PathBuf],
    /// The program and arguments that start a plugin worker (before the worker's own
    /// arguments); `None`: this program, `plugin-worker`.
    pub worker: Option<(PathBuf, Vec<OsString>)>,
}

impl Sources<'_> {
    /// Each directory once, however it was named (in the config and on the command line,
    /// relative and absolute): a directory read twice would load every package twice.
    pub fn plugin_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for dir in self.config.plugin_dirs.iter().chain(self.extra_plugin_dirs) {
            if seen.insert(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone())) {
                dirs.push(dir.clone());
            }
        }
        dirs
    }
}

/// Everything a command runs over: the dispatcher with built-ins, plugins and MCP servers.
/// Dropping it stops the plugin workers and the MCP servers it started.
pub struct Host {
    /// The dispatcher, with every tool registered.
    pub dispatcher: Dispatcher,
    /// What became of each plugin package.
    pub plugins: plugin_host::LoadReport,
    /// Per configured MCP server: its toolset, or why it could not start.
    pub mcp: Vec<(String, Result<Arc<mcp_toolsets::McpToolset>, String>)>,
}

impl Host {
    /// The MCP servers that started, whose prompts and resources pass through and whose
    /// requests to the user go to the calling clients (through `routes`).
    pub(crate) async fn upstreams(&self, routes: &Arc<mcp::Routes>) -> mcp::Upstreams {
        let started = self
            .mcp
            .iter()
            .filter_map(|(id, r)| r.as_ref().ok().map(|ts| (id, ts)))
            .map(|(id, ts)| (id.clone(), ts.config().prefix.clone(), ts.clone()))
            .collect();
        mcp::Upstreams::new(
            started,
            &self.dispatcher.config().toolset_separator,
            routes.clone(),
        )
        .await
    }

    /// The toolsets a session enables: every MCP server that started.
    pub fn toolsets(&self) -> Vec<String> {
        self.mcp
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A session `id` over the workspace `args` names.
    pub fn open_session(&self, id: &str, args: &SessionArgs) -> Result<Session, UsageError> {
        self.open_session_in(id, &args.workspace)
    }

    /// A session `id` over `workspace`, with every MCP server that started.
    pub fn open_session_in(&self, id: &str, workspace: &Path) -> Result<Session, UsageError> {
        Ok(self
            .dispatcher
            .open_session(SessionSpec::new(id, workspace).toolsets(self.toolsets()))?)
    }

    /// One line per plugin package and MCP server.
    pub fn report_lines(&self) -> Vec<String> {
        let mut lines = self.plugins.lines();
        lines.extend(self.plugins.worker_lines());
        for (id, r) in &self.mcp {
            match r {
                Ok(ts) => {
                    let tools: Vec<String> = dispatcher_core::Toolset::tools(ts.as_ref())
                        .iter()
                        .map(|t| {
                            format!("{} ({})", t.definition().name, t.definition().side_effects)
                        })
                        .collect();
                    let prefix = match ts.config().prefix.as_str() {
                        "" => "no prefix".to_string(),
                        p => format!("prefix {p}"),
                    };
                    lines.push(format!(
                        "loaded   MCP server '{id}' ({prefix}): {}",
                        tools.join(", ")
                    ));
                    lines.extend(ts.left_out().into_iter().map(|(_, why)| {
                        format!("left out MCP server '{id}': {why} (its other tools are published)")
                    }));
                }
                Err(e) => lines.push(format!("refused  MCP server '{id}': {e}")),
            }
        }
        lines
    }

    /// Whether anything was refused: a plugin package, an MCP server, or one of a loaded
    /// server's tools (left out).
    pub fn any_refused(&self) -> bool {
        self.plugins.refused().next().is_some()
            || self.mcp.iter().any(|(_, r)| match r {
                Ok(ts) => !ts.left_out().is_empty(),
                Err(_) => true,
            })
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for worker in &self.plugins.workers {
            worker.stop();
        }
        // MCP server processes never outlive toolhost.
        for ts in self.mcp.iter().filter_map(|(_, r)| r.as_ref().ok()) {
            dispatcher_core::Toolset::stop(ts.as_ref());
        }
    }
}

/// Where the pinned definitions of mounted MCP servers' tools are kept: `[mcp] pins_file`,
/// else the state directory.
pub(crate) fn pin_store(config: &Config) -> Arc<dyn mcp_toolsets::PinStore> {
    match config
        .mcp
        .pins_file
        .clone()
        .or_else(mcp_toolsets::FilePins::default_path)
    {
        Some(path) => Arc::new(mcp_toolsets::FilePins::new(path)),
        None => {
            if !config.mcp_servers.is_empty() {
                tracing::warn!(
                    "neither XDG_STATE_HOME nor HOME is set: MCP tool definitions are pinned for this process only; set [mcp] pins_file to keep them"
                );
            }
            Arc::new(mcp_toolsets::MemoryPins::default())
        }
    }
}

/// Builds the host the config describes: built-in tools, plugin packages, then MCP servers
/// (started concurrently). A refused package or a server that fails to start is logged as a
/// warning and skipped; the others still load.
pub async fn build_host(
    sources: &Sources<'_>,
    workspace: &Path,
    confirmer: Option<Arc<dyn dispatcher_core::Confirmer>>,
) -> Result<Host, UsageError> {
    build_host_observed(sources, workspace, confirmer, Vec::new()).await
}

/// [`build_host`], its dispatcher also handing every ended call to `observers` (metrics,
/// traces) after the audit log.
pub(crate) async fn build_host_observed(
    sources: &Sources<'_>,
    workspace: &Path,
    confirmer: Option<Arc<dyn dispatcher_core::Confirmer>>,
    observers: Vec<Arc<dyn dispatcher_core::audit::AuditSink>>,
) -> Result<Host, UsageError> {
    let config = sources.config;
    let store = config
        .store
        .open()
        .map_err(|e| format!("{}: [store] {e}", sources.file.display()))?;
    let mut builder = Dispatcher::builder()
        .config(config.dispatcher_config())
        .policy(config.tool_confirmation.clone())
        .store(store);
    for capability in &config.capabilities {
        builder = builder.capability(capability.clone());
    }
    if let Some(c) = confirmer {
        builder = builder.confirmer(c);
    }
    let (pre_hooks, post_hooks) = config.command_hooks();
    for hook in pre_hooks {
        builder = builder.hook(Arc::new(hook));
    }
    for hook in post_hooks {
        builder = builder.post_hook(Arc::new(hook));
    }
    if let Some(path) = &config.audit.path {
        let a = &config.audit;
        let log = crate::audit::AuditFile::open(path, a.max_bytes.0, a.keep, a.sync)
            .map_err(|e| format!("{}: [audit] {e}", sources.file.display()))?;
        builder = builder.audit(Arc::new(log));
    }
    for observer in observers {
        builder = builder.audit(observer);
    }
    if let Some(remote) = &config.remote {
        let sandbox = Arc::new(mcp_toolsets::ServerSandbox {
            workspace: workspace.to_path_buf(),
            settings: config.sandbox.clone(),
        });
        builder = builder.remote(crate::remote::RemoteTools::connect(remote, sandbox).await);
    }
    let dispatcher = builder.build();
    for factory in builtin_tools::factories() {
        dispatcher.register(factory)?;
    }
    let dirs = sources.plugin_dirs();
    let plugins = if dirs.is_empty() {
        plugin_host::LoadReport::default()
    } else {
        let (program, args) = match &sources.worker {
            Some((program, args)) => (program.clone(), args.clone()),
            None => (
                std::env::current_exe().map_err(|e| {
                    format!("cannot find this program to start plugin workers: {e}")
                })?,
                vec![OsString::from(PLUGIN_WORKER)],
            ),
        };
        config
            .plugin_host(dirs, program, args, workspace)
            .load_into(&dispatcher)
    };
    let mut starting = tokio::task::JoinSet::new();
    let servers = Arc::new(mcp_toolsets::ServerSandbox {
        workspace: workspace.to_path_buf(),
        settings: config.sandbox.clone(),
    });
    let pins = pin_store(config);
    for (i, server) in config.mcp_servers.iter().enumerate() {
        let mut server = server.clone();
        if server.url.is_none() {
            server
                .env
                .extend(self_mount::env_for_server(sources.file, &server.id));
        }
        let sandbox = servers.clone();
        let pins = pins.clone();
        starting.spawn(async move {
            (
                i,
                mcp_toolsets::McpToolset::start(server, &sandbox, pins).await,
            )
        });
    }
    let mut started = Vec::new();
    while let Some(joined) = starting.join_next().await {
        if let Ok(pair) = joined {
            started.push(pair);
        }
    }
    started.sort_by_key(|(i, _)| *i);
    let mut mcp = Vec::new();
    for (i, result) in started {
        let id = config.mcp_servers[i].id.clone();
        let result = result.map_err(|e| e.to_string()).and_then(|ts| {
            dispatcher
                .register_toolset(dispatcher_core::ToolsetDef {
                    id: id.clone(),
                    // `prefix = ""`: a transparent mount, under the tools' own names.
                    prefix: Some(ts.config().prefix.clone()).filter(|p| !p.is_empty()),
                    binding: dispatcher_core::ToolsetBinding::Shared(ts.clone()),
                })
                .map_err(|e| {
                    dispatcher_core::Toolset::stop(ts.as_ref());
                    e.to_string()
                })?;
            Ok(ts)
        });
        if let Err(e) = &result {
            tracing::warn!("MCP server '{id}' not loaded: {e}");
        }
        mcp.push((id, result));
    }
    Ok(Host {
        dispatcher,
        plugins,
        mcp,
    })
}
