//! `toolhost`: run LLM agent tools safely from the command line.
//!
//! ```text
//! toolhost list [--json] [--workspace DIR]
//! toolhost call NAME --input JSON [--workspace DIR] [--yes] [--json]
//! toolhost plugins
//! toolhost sandbox [--json] [--workspace DIR]
//! toolhost serve --mcp [--control ADDR] | --http ADDR   (see `serve.rs`)
//! ```
//!
//! Global options: `--config FILE` (else `./toolhost.toml`, else the user's config dir),
//! `--plugins DIR` (repeatable; added to the config's `plugin_dirs`).
//! Exit codes: 0 the call succeeded, 1 the call returned an error result, 2 bad usage or
//! configuration. Logs go to stderr (`TOOLHOST_LOG=debug` for more).

mod config;
mod http;
mod mcp;
mod sandbox_report;
mod self_mount;
mod serve;
mod terminal;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use dispatcher_core::{Dispatcher, Session, SessionSpec, ToolUse};
use serde_json::{Value, json};

use crate::config::Config;
use crate::terminal::{NoTerminalConfirmer, TerminalConfirmer, YesConfirmer};

#[derive(Parser)]
#[command(
    name = "toolhost",
    version,
    about = "Run LLM agent tools safely: validated, workspace-scoped, confirmed."
)]
struct Cli {
    /// Configuration file (default: ./toolhost.toml, else ~/.config/toolhost/toolhost.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A directory of plugin packages to load (repeatable; added to `plugin_dirs`).
    #[arg(long = "plugins", global = true, value_name = "DIR")]
    plugins: Vec<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the tools visible in the workspace, with their side effects and sources.
    #[command(visible_alias = "tools")]
    List {
        #[command(flatten)]
        session: SessionArgs,
        /// Print JSON (definitions with input schemas) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Dispatch one tool call and print its result.
    #[command(alias = "run")]
    Call {
        /// The tool name.
        name: String,
        /// The tool input, as a JSON object; `-` reads it from stdin (for large inputs).
        #[arg(long, value_name = "JSON", default_value = "{}")]
        input: String,
        #[command(flatten)]
        session: SessionArgs,
        /// Answer "allow" to every confirmation prompt (policy `deny` still applies).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print the tool_result block as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Load the plugin directories and print, per package, loaded (with its tools) or
    /// refused (with the reason). Exit code 1 if any package was refused.
    #[command(alias = "plugin")]
    Plugins,
    /// What the kernel enforces here (Landlock, seccomp, no_new_privs, limits) and what
    /// confines each tool: toolhost's process, a plugin worker's sandbox, an MCP server's,
    /// and the sandbox of the programs a tool starts. Exit code 1 if anything runs
    /// unsandboxed (allow_unsandboxed) or cannot run because its sandbox cannot be
    /// enforced here.
    Sandbox {
        #[command(flatten)]
        session: SessionArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Render every visible tool (name, source, side effects, description, input schema)
    /// for offline documentation.
    Manifest {
        /// `json` or `markdown`.
        #[arg(long, value_enum, default_value = "json")]
        format: ManifestFormat,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Serve the tools over MCP: `--mcp` on stdin/stdout, or `--http ADDR` (streamable
    /// HTTP, with the control API and the web console).
    Serve(serve::ServeArgs),
    /// Mounted MCP servers: approve a tool definition that changed since it was pinned.
    #[command(subcommand)]
    Mcp(McpCommand),
}

#[derive(Subcommand)]
enum McpCommand {
    /// Pin the changed definitions of SERVER's tools (those `toolhost plugins` reports as
    /// withheld): all of them, or the TOOLs named. toolhost publishes them from its next
    /// start (a running server: from its next listing).
    Approve {
        /// The server's `id` in `[[mcp_servers]]`.
        server: String,
        /// The tools to approve (default: every pending one).
        tools: Vec<String>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ManifestFormat {
    Json,
    Markdown,
}

#[derive(Args)]
struct SessionArgs {
    /// The workspace root the tools are confined to (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    workspace: PathBuf,
}

/// A usage or configuration problem: exit code 2.
struct UsageError(String);

impl<E: std::fmt::Display> From<E> for UsageError {
    fn from(e: E) -> Self {
        UsageError(e.to_string())
    }
}

/// Logs go to stderr (stdout may be speaking MCP), filtered by `TOOLHOST_LOG` (default
/// `warn`). Colour codes only reach a terminal: an MCP client that keeps a server's stderr
/// in a log file, or a pipe into `grep`, gets plain text; `NO_COLOR` turns them off anywhere.
///
/// By default the protocol library's own service loop logs errors only: its warnings are
/// about what a peer did (each error response sent to a client, an answer arriving for a
/// request toolhost stopped waiting for as it exits), which toolhost reports in its own
/// words where it matters; `TOOLHOST_LOG=warn` shows them.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLHOST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false)
        .with_filter(filter);
    tracing_subscriber::registry()
        .with(stderr)
        .with(mcp::own_logs::layer())
        .init();
}

/// The log filter without `TOOLHOST_LOG`.
const DEFAULT_LOG: &str = "warn,rmcp::service=error";

fn main() -> ExitCode {
    init_logging();
    // A plugin worker (isolation `process`), started by a host: not a user command.
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == "plugin-worker") {
        return match plugin_host::worker::WorkerArgs::parse(args) {
            Ok(worker) => {
                ExitCode::from(u8::try_from(plugin_host::worker::run(worker)).unwrap_or(1))
            }
            Err(e) => {
                eprintln!("toolhost plugin-worker: {e}");
                ExitCode::from(2)
            }
        };
    }
    let cli = Cli::parse();
    // `serve` answers one client: its requests, their tools' inline work and the protocol
    // I/O all run on one thread, so no message waits for a wake-up on another core (tools
    // that block still run on the blocking pool). The other commands run one call.
    let mut builder = if matches!(cli.command, Command::Serve(_)) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolhost: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(run(cli));
    // A tool abandoned after cancellation or timeout must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match outcome {
        Ok(code) => code,
        Err(UsageError(message)) => {
            eprintln!("toolhost: {message}");
            ExitCode::from(2)
        }
    }
}

fn load_config(explicit: Option<&Path>) -> Result<(Config, PathBuf), UsageError> {
    match Config::locate(explicit) {
        Some(file) => Ok((Config::load(&file)?, file)),
        None => Ok((Config::default(), PathBuf::from(config::FILE_NAME))),
    }
}

/// Where plugins come from: the config's `plugin_dirs`, then `--plugins`.
struct Sources<'a> {
    config: &'a Config,
    file: &'a Path,
    extra_plugin_dirs: &'a [PathBuf],
}

impl Sources<'_> {
    /// Each directory once, however it was named (in the config and on the command line,
    /// relative and absolute): a directory read twice would load every package twice.
    fn plugin_dirs(&self) -> Vec<PathBuf> {
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
struct Host {
    dispatcher: Dispatcher,
    plugins: plugin_host::LoadReport,
    /// Per configured MCP server: its toolset, or why it could not start.
    mcp: Vec<(String, Result<Arc<mcp_toolsets::McpToolset>, String>)>,
}

impl Host {
    /// The MCP servers that started, whose prompts and resources pass through and whose
    /// requests to the user go to the calling clients (through `routes`).
    async fn upstreams(&self, routes: &Arc<mcp::Routes>) -> mcp::Upstreams {
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
    fn toolsets(&self) -> Vec<String> {
        self.mcp
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn open_session(&self, id: &str, args: &SessionArgs) -> Result<Session, UsageError> {
        Ok(self
            .dispatcher
            .open_session(SessionSpec::new(id, &args.workspace).toolsets(self.toolsets()))?)
    }

    /// One line per plugin package and MCP server.
    fn report_lines(&self) -> Vec<String> {
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
    fn any_refused(&self) -> bool {
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
fn pin_store(config: &Config) -> Arc<dyn mcp_toolsets::PinStore> {
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
async fn build_host(
    sources: &Sources<'_>,
    workspace: &Path,
    confirmer: Option<Arc<dyn dispatcher_core::Confirmer>>,
) -> Result<Host, UsageError> {
    let config = sources.config;
    let mut builder = Dispatcher::builder()
        .config(config.dispatcher_config())
        .policy(config.tool_confirmation.clone());
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
    let dispatcher = builder.build();
    for factory in builtin_tools::factories() {
        dispatcher.register(factory)?;
    }
    let dirs = sources.plugin_dirs();
    let plugins = if dirs.is_empty() {
        plugin_host::LoadReport::default()
    } else {
        let program = std::env::current_exe()
            .map_err(|e| format!("cannot find this program to start plugin workers: {e}"))?;
        config
            .plugin_host(dirs, program, workspace)
            .load_into(&dispatcher)
    };
    let mut starting = tokio::task::JoinSet::new();
    let servers = Arc::new(config.sandbox.servers(workspace));
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

async fn run(cli: Cli) -> Result<ExitCode, UsageError> {
    let (config, file) = load_config(cli.config.as_deref())?;
    self_mount::check(&file)?;
    let sources = Sources {
        config: &config,
        file: &file,
        extra_plugin_dirs: &cli.plugins,
    };
    match cli.command {
        Command::Plugins => {
            let host = build_host(&sources, Path::new("."), None).await?;
            let lines = host.report_lines();
            if lines.is_empty() {
                println!(
                    "no plugin packages or MCP servers found (plugin directories: {})",
                    if sources.plugin_dirs().is_empty() {
                        "none; use --plugins DIR or plugin_dirs in toolhost.toml".to_string()
                    } else {
                        sources
                            .plugin_dirs()
                            .iter()
                            .map(|d| d.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                );
            }
            for line in lines {
                println!("{line}");
            }
            Ok(if host.any_refused() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Serve(args) => serve::serve(&sources, &args).await,
        Command::Mcp(McpCommand::Approve { server, tools }) => {
            let Some(entry) = config.mcp_servers.iter().find(|s| s.id == server) else {
                let known: Vec<&str> = config.mcp_servers.iter().map(|s| s.id.as_str()).collect();
                return Err(UsageError(format!(
                    "no MCP server '{server}' in {} (its [[mcp_servers]] ids: {})",
                    file.display(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            };
            let store = pin_store(&config);
            let key = mcp_toolsets::pins::server_key(entry);
            let approved = mcp_toolsets::pins::approve(store.as_ref(), &key, &tools)
                .map_err(|e| UsageError(format!("MCP server '{server}': {e}")))?;
            if approved.is_empty() {
                println!("MCP server '{server}': no changed definition is pending");
            }
            for (tool, change) in approved {
                println!("approved MCP server '{server}' tool '{tool}': {change}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Sandbox { session, json } => {
            let host = build_host(&sources, &session.workspace, None).await?;
            let session = host.open_session("cli", &session)?;
            let listing = host.dispatcher.listing_for_session(&session);
            let config = &host.dispatcher.config().sandbox;
            let workspace = sandbox_report::absolute(session.workspace().root());
            if json {
                let report = sandbox_report::json(&listing, config, &workspace);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                print!("{}", sandbox_report::text(&listing, config, &workspace));
                let others: Vec<String> = host
                    .report_lines()
                    .into_iter()
                    .filter(|l| !l.starts_with("loaded "))
                    .collect();
                if !others.is_empty() {
                    println!("\nplugin workers and refusals:");
                    for line in others {
                        println!("  {line}");
                    }
                }
            }
            Ok(
                if sandbox_report::anything_unsandboxed(&listing, config, &workspace) {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                },
            )
        }
        Command::Manifest { format, session } => {
            let host = build_host(&sources, &session.workspace, None).await?;
            let session = host.open_session("cli", &session)?;
            let listing = host.dispatcher.listing_for_session(&session);
            match format {
                ManifestFormat::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&listing_json(&listing)).unwrap_or_default()
                ),
                ManifestFormat::Markdown => print!("{}", manifest_markdown(&listing)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List { session, json } => {
            let host = build_host(&sources, &session.workspace, None).await?;
            let session = host.open_session("cli", &session)?;
            list(&host.dispatcher, &session, json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Call {
            name,
            input,
            session,
            yes,
            json,
        } => {
            let (input, from) = if input == "-" {
                let text = std::io::read_to_string(std::io::stdin())
                    .map_err(|e| UsageError(format!("could not read --input from stdin: {e}")))?;
                (text, " (read from stdin)")
            } else {
                (input, "")
            };
            let input: Value = serde_json::from_str(&input)
                .map_err(|e| UsageError(format!("--input{from} is not valid JSON: {e}")))?;
            if !input.is_object() {
                return Err(UsageError(
                    "--input must be a JSON object, e.g. '{\"path\": \"README.md\"}'".into(),
                ));
            }
            let confirmer: Arc<dyn dispatcher_core::Confirmer> = if yes {
                Arc::new(YesConfirmer)
            } else if terminal::interactive() {
                Arc::new(TerminalConfirmer)
            } else {
                Arc::new(NoTerminalConfirmer {
                    config_file: file.display().to_string(),
                })
            };
            let host = build_host(&sources, &session.workspace, Some(confirmer)).await?;
            let session = host.open_session("cli", &session)?;
            let call = host
                .dispatcher
                .invocation(ToolUse::new("toolu_cli_1", &name, input), &session);
            let run = call.run();
            tokio::pin!(run);
            let result = tokio::select! {
                result = &mut run => result,
                signal = serve::shutdown_signal() => {
                    // Signal only: this task drives the call and must keep polling it while
                    // the tool stops (a shell's process group gets SIGTERM, then SIGKILL).
                    host.dispatcher.request_cancel(session.id(), "toolu_cli_1");
                    let grace = host.dispatcher.config().cancel_grace;
                    if tokio::time::timeout(grace, &mut run).await.is_err() {
                        tracing::warn!("the call did not stop within the grace period after {}", signal.name);
                    }
                    return Ok(signal.exit_code());
                }
            };
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&result).unwrap_or_default()
                );
            } else {
                // The text as the model reads it, ended by one newline (not a second one
                // after text that already ends with it).
                let text = result.text();
                if text.ends_with('\n') {
                    print!("{text}");
                } else {
                    println!("{text}");
                }
            }
            if let Some(class) = result.error_class {
                eprintln!("toolhost: '{name}' ended with {class}");
                Ok(ExitCode::from(1))
            } else {
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn list(dispatcher: &Dispatcher, session: &Session, as_json: bool) {
    let listing = dispatcher.listing_for_session(session);
    if as_json {
        let mut tools = listing_json(&listing);
        let workspace = sandbox_report::absolute(session.workspace().root());
        if let Value::Array(items) = &mut tools {
            for (item, l) in items.iter_mut().zip(&listing) {
                item["sandbox"] =
                    sandbox_report::tool_json(l, &dispatcher.config().sandbox, &workspace);
            }
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&tools).unwrap_or_default()
        );
        return;
    }
    let width = listing
        .iter()
        .map(|l| l.definition.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let sources: Vec<String> = listing
        .iter()
        .map(|l| match &l.original_name {
            Some(original) => format!("{}:{original}", l.source),
            None => l.source.clone(),
        })
        .collect();
    let source_width = sources.iter().map(String::len).max().unwrap_or(6).max(6);
    println!(
        "{:width$}  {:8}  {:source_width$}  DESCRIPTION",
        "NAME", "EFFECTS", "SOURCE"
    );
    for (l, source) in listing.iter().zip(&sources) {
        let first_line = l.definition.description.lines().next().unwrap_or("");
        let first_line = match first_line.char_indices().nth(72) {
            Some((cut, _)) => format!("{}…", &first_line[..cut]),
            None => first_line.to_string(),
        };
        println!(
            "{:width$}  {:8}  {:source_width$}  {}",
            l.definition.name, l.definition.side_effects, source, first_line
        );
    }
}

/// Tool listings as JSON: each definition plus its source (and toolset identity).
fn listing_json(listing: &[dispatcher_core::ToolListing]) -> Value {
    let tools: Vec<Value> = listing
        .iter()
        .map(|l| {
            let mut v = serde_json::to_value(&l.definition).unwrap_or(Value::Null);
            v["source"] = json!(l.source);
            if let (Some(toolset), Some(original)) = (&l.toolset, &l.original_name) {
                v["toolset"] = json!(toolset);
                v["original_name"] = json!(original);
            }
            v
        })
        .collect();
    Value::Array(tools)
}

/// Tool listings as a Markdown document.
fn manifest_markdown(listing: &[dispatcher_core::ToolListing]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("# Tools\n\n| tool | side effects | source |\n|---|---|---|\n");
    for l in listing {
        let _ = writeln!(
            out,
            "| [`{0}`](#{0}) | {1} | {2} |",
            l.definition.name, l.definition.side_effects, l.source
        );
    }
    for l in listing {
        let d = &l.definition;
        let _ = write!(
            out,
            "\n## {}\n\n*{}* · {}",
            d.name, d.side_effects, l.source
        );
        if let Some(original) = &l.original_name {
            let _ = write!(
                out,
                " (`{original}` in toolset `{}`)",
                l.toolset.as_deref().unwrap_or("")
            );
        }
        let schema = serde_json::to_string_pretty(&d.input_schema).unwrap_or_default();
        let _ = write!(out, "\n\n{}\n\n```json\n{schema}\n```\n", d.description);
    }
    out
}
