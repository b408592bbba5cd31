//! The host a configuration describes, as every command builds it: the dispatcher with
//! the built-in tools, the plugin packages of `plugin_dirs` (and `--plugins`), and the MCP
//! servers of `[[mcp_servers]]`. The CLI and the Python wheel build it alike.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use dispatcher_core::{
    CommandHook, Dispatcher, DispatcherConfig, HookMatcher, Session, SessionSpec,
};

use crate::config::{self, Config, HookConfig, PluginGrant};
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
        let (installed, _) = crate::plugin_sources::installed(self.config, self.file);
        for dir in self
            .config
            .plugin_dirs
            .iter()
            .chain(self.extra_plugin_dirs)
            .chain(&installed)
        {
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
    /// The `[[plugins.sources]]` that could not be installed, each with why.
    pub sources: Vec<String>,
}

impl Host {
    /// The MCP servers that started, whose prompts and resources pass through (what they
    /// ask the user during a call goes to the calling client through the route the call
    /// carries).
    pub(crate) async fn upstreams(&self) -> mcp::Upstreams {
        mcp::Upstreams::new(
            started(&self.mcp),
            &self.dispatcher.config().toolset_separator,
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
        lines.extend(self.sources.iter().map(|why| format!("refused  {why}")));
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
            || !self.sources.is_empty()
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
    build_host_observed(sources, workspace, confirmer, None).await
}

/// [`build_host`], its dispatcher also handing every ended call to `telemetry`'s metrics
/// after the audit log, and running each in its span.
pub(crate) async fn build_host_observed(
    sources: &Sources<'_>,
    workspace: &Path,
    confirmer: Option<Arc<dyn dispatcher_core::Confirmer>>,
    telemetry: Option<&crate::telemetry::Telemetry>,
) -> Result<Host, UsageError> {
    let config = sources.config;
    let store = config
        .store
        .open()
        .map_err(|e| format!("{}: [store] {e}", sources.file.display()))?;
    let mut builder = Dispatcher::builder()
        .config(dispatcher_config(config))
        .policy(config.tool_confirmation.clone())
        .store(store);
    for capability in &config.capabilities {
        builder = builder.capability(capability.clone());
    }
    if let Some(c) = confirmer {
        builder = builder.confirmer(c);
    }
    let (pre_hooks, post_hooks) = command_hooks(config);
    for hook in pre_hooks {
        builder = builder.hook(Arc::new(hook));
    }
    for hook in post_hooks {
        builder = builder.post_hook(Arc::new(hook));
    }
    for g in &config.guardrails {
        let guardrail = Arc::new(
            crate::guardrail::Guardrail::new(g.clone())
                .map_err(|e| format!("{}: [[guardrails]] {e}", sources.file.display()))?,
        );
        builder = builder.hook(guardrail.clone()).post_hook(guardrail);
    }
    if let Some(path) = &config.audit.path {
        let a = &config.audit;
        let log = crate::audit::AuditFile::open(path, a.max_bytes.0, a.keep, a.sync)
            .map_err(|e| format!("{}: [audit] {e}", sources.file.display()))?;
        builder = builder.audit(Arc::new(log));
    }
    if let Some(telemetry) = telemetry {
        for sink in telemetry.sinks() {
            builder = builder.audit(sink);
        }
        if let Some(spans) = telemetry.call_spans() {
            builder = builder.call_spans(spans);
        }
    }
    if let Some(remote) = &config.remote {
        let sandbox = Arc::new(mcp_toolsets::ServerSandbox {
            workspace: workspace.to_path_buf(),
            settings: config.sandbox.clone(),
        });
        builder = builder.remote(crate::remote::RemoteTools::connect(remote, sandbox).await);
    }
    let dispatcher = builder.build();
    // Before any server starts: a model that cannot be read stops the host at once.
    crate::text_model::apply(
        config.mcp.discovery.model.as_deref(),
        sources.file,
        &dispatcher,
    )?;
    for factory in builtin_tools::factories() {
        dispatcher.register(factory)?;
    }
    // The sources the store lacks are installed first (what the lock pins), so that they
    // load with the rest; one that cannot be is reported, and the others still load.
    let source_problems = crate::plugin_sources::install_missing(config, sources.file).await;
    for why in &source_problems {
        tracing::warn!("{why}");
    }
    let dirs = sources.plugin_dirs();
    let plugins = if dirs.is_empty() {
        plugin_host::LoadReport::default()
    } else {
        let (program, args) = worker_command(sources.worker.as_ref())?;
        plugin_host(config, dirs, program, args, workspace).load_into(&dispatcher)
    };
    let started = start_servers(config, sources.file, workspace, &config.mcp_servers).await;
    let mut mcp = Vec::new();
    for (server, result) in config.mcp_servers.iter().zip(started) {
        let result = result.and_then(|ts| register_server(&dispatcher, ts));
        if let Err(e) = &result {
            tracing::warn!("MCP server '{}' not loaded: {e}", server.id);
        }
        mcp.push((server.id.clone(), result));
    }
    // Policies are checked against the tools there are now: every one is registered.
    crate::policy_files::apply(config, sources.file, &dispatcher)?;
    Ok(Host {
        dispatcher,
        plugins,
        mcp,
        sources: source_problems,
    })
}

/// The servers of `mcp` that started, as the gateway mounts them (id, prefix, toolset).
pub(crate) fn started(
    mcp: &[(String, Result<Arc<mcp_toolsets::McpToolset>, String>)],
) -> Vec<mcp_server::gateway::Started> {
    mcp.iter()
        .filter_map(|(id, r)| r.as_ref().ok().map(|ts| (id, ts)))
        .map(|(id, ts)| (id.clone(), ts.config().prefix.clone(), ts.clone()))
        .collect()
}

/// The program and arguments that start a plugin worker: `worker`, else this program's
/// `plugin-worker`.
pub(crate) fn worker_command(
    worker: Option<&(PathBuf, Vec<OsString>)>,
) -> Result<(PathBuf, Vec<OsString>), UsageError> {
    Ok(match worker {
        Some((program, args)) => (program.clone(), args.clone()),
        None => (
            std::env::current_exe()
                .map_err(|e| format!("cannot find this program to start plugin workers: {e}"))?,
            vec![OsString::from(PLUGIN_WORKER)],
        ),
    })
}

/// Starts `servers` (concurrently) in their sandboxes over `workspace`: per server, in
/// order, its toolset or why it could not start.
pub(crate) async fn start_servers(
    config: &Config,
    file: &Path,
    workspace: &Path,
    servers: &[mcp_toolsets::McpServerConfig],
) -> Vec<Result<Arc<mcp_toolsets::McpToolset>, String>> {
    let mut starting = tokio::task::JoinSet::new();
    let sandbox = Arc::new(mcp_toolsets::ServerSandbox {
        workspace: workspace.to_path_buf(),
        settings: config.sandbox.clone(),
    });
    let pins = pin_store(config);
    for (i, server) in servers.iter().enumerate() {
        let mut server = server.clone();
        if server.url.is_none() {
            server
                .env
                .extend(self_mount::env_for_server(file, &server.id));
        }
        let (sandbox, pins) = (sandbox.clone(), pins.clone());
        starting.spawn(async move {
            let started = mcp_toolsets::McpToolset::start(server, &sandbox, pins).await;
            (i, started.map_err(|e| e.to_string()))
        });
    }
    let mut started: Vec<Option<Result<_, String>>> = servers.iter().map(|_| None).collect();
    while let Some(joined) = starting.join_next().await {
        if let Ok((i, result)) = joined {
            started[i] = Some(result);
        }
    }
    started
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("its start was interrupted".into())))
        .collect()
}

/// Registers a started server's toolset (stopping it when the dispatcher refuses it).
pub(crate) fn register_server(
    dispatcher: &Dispatcher,
    ts: Arc<mcp_toolsets::McpToolset>,
) -> Result<Arc<mcp_toolsets::McpToolset>, String> {
    dispatcher
        .register_toolset(dispatcher_core::ToolsetDef {
            id: ts.config().id.clone(),
            // `prefix = ""`: a transparent mount, under the tools' own names.
            prefix: Some(ts.config().prefix.clone()).filter(|p| !p.is_empty()),
            binding: dispatcher_core::ToolsetBinding::Shared(ts.clone()),
        })
        .map_err(|e| {
            dispatcher_core::Toolset::stop(ts.as_ref());
            e.to_string()
        })?;
    Ok(ts)
}

/// The command hooks `config` declares: (pre-use, post-use).
fn command_hooks(config: &Config) -> (Vec<CommandHook>, Vec<CommandHook>) {
    let make = |h: &HookConfig| CommandHook {
        command: h.command.clone(),
        matcher: match &h.tools {
            Some(tools) => HookMatcher::Tools(tools.clone()),
            None => HookMatcher::All,
        },
        timeout: h.timeout.0,
    };
    (
        config.hooks.pre_tool_use.iter().map(make).collect(),
        config.hooks.post_tool_use.iter().map(make).collect(),
    )
}

/// The plugin host `config` describes: its directories' packages, isolation,
/// signatures and workers (started as `worker_program plugin-worker …`, sandboxed for
/// sessions in `workspace`).
pub(crate) fn plugin_host(
    config: &Config,
    dirs: Vec<PathBuf>,
    worker_program: PathBuf,
    worker_args: Vec<std::ffi::OsString>,
    workspace: &Path,
) -> plugin_host::PluginHost {
    let mut worker = plugin_host::WorkerSettings::new(worker_program, worker_args);
    worker.sandbox = plugin_host::WorkerSandbox {
        workspaces: vec![workspace.to_path_buf()],
        settings: config.sandbox.clone(),
    };
    worker.memory_limit = (config.plugin_memory_limit_mib > 0)
        .then(|| config.plugin_memory_limit_mib.saturating_mul(1 << 20));
    worker.cancel_grace = config.timeouts.cancel_grace;
    let mut host = plugin_host::PluginHost::new(dirs)
        .isolation(config.plugin_isolation)
        .worker(worker)
        .trusted_keys(config.trusted_keys.iter().copied())
        .require_signatures(config.require_signatures);
    #[cfg(feature = "wasm")]
    {
        let bytes = config.wasm_memory_limit_mib.0.saturating_mul(1 << 20);
        host = host.wasm_memory(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    for (name, plugin) in config.plugins.iter() {
        if let Some(isolation) = plugin.isolation {
            host = host.isolate(name.clone(), isolation);
        }
        host = host.sandbox(
            name.clone(),
            plugin_host::PluginSandbox {
                grant: match plugin.sandbox {
                    Some(PluginGrant::Classes(g)) => Some(g),
                    _ => None,
                },
                tcp_ports: plugin.tcp_ports.clone(),
                http_hosts: plugin.http_hosts.clone(),
                allow_unsandboxed: plugin.allow_unsandboxed,
                unconfined: plugin.sandbox == Some(PluginGrant::Unconfined),
            },
        );
    }
    host
}

/// The dispatcher's settings: the file's sections are the core's own types
/// ([`dispatcher_core::Timeouts`], [`dispatcher_core::ResultLimits`],
/// [`dispatcher_core::RateLimits`], [`sandbox::Settings`]), passed on whole.
pub(crate) fn dispatcher_config(config: &Config) -> DispatcherConfig {
    DispatcherConfig {
        max_concurrency: config.max_concurrency.0,
        timeouts: config.timeouts.clone(),
        results: config.results.clone(),
        toolset_separator: config.toolset_separator.0.clone(),
        tool_concurrency: config
            .tool_concurrency
            .iter()
            .map(|(k, v)| (k.clone(), v.0))
            .collect(),
        on_execute_error: config.on_execute_error,
        interrupt: config.interrupt.clone().into_iter().collect(),
        sandbox: config.sandbox.clone(),
        limits: config.limits.clone(),
        // Its rules were compiled when the file was read: they compile here too.
        secrets: dispatcher_core::Secrets::new(config.secrets.clone()).unwrap_or_else(|e| {
            tracing::error!("{e}; the built-in rules are used");
            dispatcher_core::Secrets::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatcher_core::{InterruptBehavior, OnExecuteError};

    fn parse(text: &str) -> Result<Config, config::ConfigError> {
        Config::parse(Path::new("toolhost.toml"), text)
    }

    #[test]
    fn scheduling_results_and_hooks_keys_reach_the_dispatcher_config() {
        let c = parse(
            r#"
            on_execute_error = "cancel_siblings"
            sandbox = "host"
            [tool_concurrency]
            shell = 1
            [interrupt]
            write_file = "block"
            [results]
            max_chars = 5000
            preview_chars = 100
            [results.per_tool]
            shell = 300
            [[hooks.pre_tool_use]]
            command = "exit 0"
            tools = ["shell"]
            timeout_secs = 2
            [[hooks.post_tool_use]]
            command = "exit 0"
            "#,
        )
        .unwrap();
        let d = dispatcher_config(&c);
        assert_eq!(d.on_execute_error, OnExecuteError::CancelSiblings);
        assert_eq!(d.tool_concurrency["shell"], 1);
        assert_eq!(d.interrupt["write_file"], InterruptBehavior::Block);
        assert_eq!((d.results.max_chars, d.results.preview_chars), (5000, 100));
        assert_eq!(d.results.per_tool["shell"], 300);
        let (pre, post) = command_hooks(&c);
        assert_eq!((pre.len(), post.len()), (1, 1));
        assert!(pre[0].matcher.matches("shell") && !pre[0].matcher.matches("read_file"));
        assert_eq!(pre[0].timeout, std::time::Duration::from_secs(2));
    }

    #[test]
    fn toolset_separator_reaches_the_dispatcher() {
        let c = parse("toolset_separator = \".\"").unwrap();
        assert_eq!(dispatcher_config(&c).toolset_separator, ".");
    }
}
