//! The `toolhost` command line.
//!
//! ```text
//! toolhost list [--json] [--workspace DIR]
//! toolhost call NAME --input JSON [--workspace DIR] [--yes] [--json]
//! toolhost plugins
//! toolhost plugin install|update …                     (see `plugin_sources.rs`)
//! toolhost plugin new|build|package|verify|keygen|sign|publish …   (see `authoring.rs`)
//! toolhost sandbox [--json] [--workspace DIR]
//! toolhost serve --mcp [--control ADDR] | --http ADDR   (see `serve.rs`)
//! ```
//!
//! Global options: `--config FILE` (else `./toolhost.toml`, else the user's config dir),
//! `--plugins DIR` (repeatable; added to the config's `plugin_dirs`).
//! Exit codes: 0 the call succeeded, 1 the call returned an error result, 2 bad usage or
//! configuration. Logs go to stderr (`TOOLHOST_LOG=debug` for more).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use dispatcher_core::{Dispatcher, Session, ToolUse};
use serde_json::{Value, json};

use crate::error::UsageError;
use crate::host::{PLUGIN_WORKER, SessionArgs, Sources, build_host, load_config, pin_store};
use crate::terminal::{NoTerminalConfirmer, TerminalConfirmer, YesConfirmer};
use crate::{sandbox_report, self_mount, serve, terminal};
use mcp_server as mcp;

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
    /// refused (with the reason). Exit code 1 if any package was refused. `plugin install`
    /// and `plugin update` install plugins from OCI registries; `plugin new`, `package`,
    /// `sign`, `publish` and the rest are a plugin author's.
    #[command(alias = "plugin")]
    Plugins {
        #[command(subcommand)]
        action: Option<PluginAction>,
    },
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
enum PluginAction {
    /// Install REF (registry/repository:tag) from an OCI registry: adds it to the config's
    /// [[plugins.sources]], pulls this host's package, checks it as a host checks a local
    /// one (checksum, signature, trusted_keys, require_signatures) and pins its digest in
    /// toolhost.lock beside the config. Without REF: installs every source the config
    /// lists, as the lock pins it. A tag that now names other content than the lock pins
    /// is refused unless --update.
    Install {
        /// registry/repository:tag (a tag that is a version: updates stay within ^TAG).
        reference: Option<String>,
        /// Move to what the tag names now (or the newest version within its range).
        #[arg(long)]
        update: bool,
        /// Accept a widened side-effect class without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Move each source (or the one named: plugin name or REF) to the newest version within
    /// its range (`^TAG`, or its `version`), print what changed (tools added, removed,
    /// classes widened or narrowed) and pin it. A widened class asks first.
    Update {
        /// A plugin name or a source's REF (default: every source).
        which: Option<String>,
        /// Accept a widened side-effect class without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    #[command(flatten)]
    Author(crate::authoring::AuthorCommand),
}

#[derive(Subcommand)]
enum McpCommand {
    /// Add a [[mcp_servers]] entry from a server's server.json (the MCP Registry's format):
    /// NAME looked up in the registry at `[mcp] registry` (or --registry), or the document
    /// at --file or --url. Shows the entry (the package at its pinned version, its runner,
    /// the environment variables to set, the sandbox grant it needs) and writes it once you
    /// accept; nothing is started.
    Add {
        /// The server's registry name (io.github.acme/weather); optional with --file/--url.
        name: Option<String>,
        /// Read server.json from this file.
        #[arg(long, value_name = "FILE", conflicts_with = "url")]
        file: Option<PathBuf>,
        /// Read server.json from this URL.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// The registry API's base URL (instead of `[mcp] registry`).
        #[arg(long, value_name = "URL")]
        registry: Option<String>,
        /// The server version to look up in the registry (default: its latest).
        #[arg(long, value_name = "VERSION", default_value = "latest")]
        version: String,
        /// The entry's id (default: the last part of the server's name).
        #[arg(long)]
        id: Option<String>,
        /// The prefix of its tools' names (default: the id).
        #[arg(long)]
        prefix: Option<String>,
        /// Accept the entry without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Pin the changed definitions of SERVER's tools (those `toolhost plugins` reports as
    /// withheld): all of them, or the TOOLs named. toolhost publishes them from its next
    /// start (a running server: from its next listing).
    Approve {
        /// The server's `id` in `[[mcp_servers]]`.
        server: String,
        /// The tools to approve (default: every pending one).
        tools: Vec<String>,
    },
    /// Log toolhost in to SERVER, a remote MCP server that requires OAuth: finds where
    /// (its protected resource metadata), registers toolhost there (or takes
    /// --client-id), and opens the login in your browser (authorization code with PKCE).
    /// The refresh token is kept outside every workspace; an entry with `credentials =
    /// "login"` then connects with it.
    Login {
        /// The server's `id` in `[[mcp_servers]]` (it must have a `url`).
        server: String,
        /// A client id registered for toolhost at the authorization server, for one that
        /// offers no dynamic registration.
        #[arg(long, value_name = "ID")]
        client_id: Option<String>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ManifestFormat {
    Json,
    Markdown,
}

/// Logs go to stderr (stdout may be speaking MCP), filtered by `TOOLHOST_LOG` (default
/// `warn`). Colour codes only reach a terminal: an MCP client that keeps a server's stderr
/// in a log file, or a pipe into `grep`, gets plain text; `NO_COLOR` turns them off anywhere.
///
/// By default the protocol library's own service loop logs errors only: its warnings are
/// about what a peer did (each error response sent to a client, an answer arriving for a
/// request toolhost stopped waiting for as it exits), which toolhost reports in its own
/// words where it matters; `TOOLHOST_LOG=warn` shows them.
fn init_logging(telemetry: Option<&crate::telemetry::Telemetry>) {
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
    let registry = tracing_subscriber::registry()
        .with(stderr)
        .with(mcp::own_logs::layer());
    // The calls' spans, only when they are exported: a layer that is there but empty (a
    // `None`) would take every span and event as wanted, and every call would make and
    // enter its span for nothing.
    // A program that set up its own subscriber before running the CLI (a Python program
    // that made a `toolhost.Host` before calling the command) keeps it.
    #[cfg(feature = "otlp")]
    if let Some(tracer) = telemetry.and_then(crate::telemetry::Telemetry::tracer) {
        let _ = registry
            .with(
                crate::telemetry::otlp::layer(tracer)
                    .with_filter(crate::telemetry::otlp::call_spans_only()),
            )
            .try_init();
        return;
    }
    #[cfg(not(feature = "otlp"))]
    let _ = telemetry;
    let _ = registry.try_init();
}

/// The log filter without `TOOLHOST_LOG`: warnings, and what a wait is for (a first compile
/// of a WebAssembly component), and what a reload changed under a running server.
const DEFAULT_LOG: &str = "warn,rmcp::service=error,toolhost::progress=info,toolhost::reload=info";

/// The `toolhost` program.
pub fn main() -> ExitCode {
    main_with(std::env::args_os().collect(), None)
}

/// How a program that runs the CLI but is not the `toolhost` binary (the Python wheel's
/// `toolhost` command) starts its parts in new processes: each a program and the arguments
/// that come first.
#[derive(Debug, Clone)]
pub struct StartedAs {
    /// A plugin worker (isolation `process`), as [`Sources::worker`]
    /// (`python -m toolhost._worker`).
    pub worker: (PathBuf, Vec<OsString>),
    /// This CLI, followed by a subcommand (`python -m toolhost`): the child that inspects
    /// and verifies a plugin for an author's commands.
    pub cli: (PathBuf, Vec<OsString>),
}

/// The `toolhost` program run with `args` (its name first, as `std::env::args_os` gives
/// them), in a program that is not this binary, which starts its parts as `started_as`
/// says (`None`: this binary's `plugin-worker` and itself). Returns the exit status (0 the
/// call succeeded, 1 it returned an error result, 2 bad usage or configuration).
pub fn run_command(args: Vec<OsString>, started_as: Option<StartedAs>) -> u8 {
    let code = main_with(args, started_as);
    // `ExitCode` shows its number only to the process it ends.
    (0..=u8::MAX)
        .find(|n| ExitCode::from(*n) == code)
        .unwrap_or(1)
}

fn main_with(args: Vec<OsString>, started_as: Option<StartedAs>) -> ExitCode {
    // A plugin worker (isolation `process`), started by a host: not a user command.
    let mut rest = args.iter().skip(1).cloned();
    if rest.next().is_some_and(|a| a == PLUGIN_WORKER) {
        init_logging(None);
        return match plugin_host::worker::WorkerArgs::parse(rest) {
            Ok(worker) => {
                ExitCode::from(u8::try_from(plugin_host::worker::run(worker)).unwrap_or(1))
            }
            Err(e) => {
                eprintln!("toolhost plugin-worker: {e}");
                ExitCode::from(2)
            }
        };
    }
    // The child side of an author's command (`__inspect LIB`, `__verify PACKAGE`), started
    // by this program: one library or package, no runtime.
    if let [_, command, path] = args.as_slice()
        && let Some(command) = crate::authoring::CHILD_COMMANDS
            .iter()
            .find(|c| command.as_os_str() == **c)
    {
        return crate::authoring::child(command, Path::new(path));
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and the version are printed to stdout and succeed; a mistake is usage.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let (worker, this) = match started_as {
        Some(StartedAs { worker, cli }) => (Some(worker), cli),
        None => (None, (plugin_dev::this_program(), Vec::new())),
    };
    // An author's commands need no configuration and wait on cargo or a child: no runtime
    // but the one `publish` makes for its registry requests.
    if let Command::Plugins {
        action: Some(PluginAction::Author(command)),
    } = cli.command
    {
        init_logging(None);
        return crate::authoring::run(command, this);
    }
    // `serve --mcp` answers one client: its requests, their tools' inline work and the
    // protocol I/O all run on one thread, so no message waits for a wake-up on another core
    // (tools that block still run on the blocking pool). `serve --http` answers many, each
    // connection on one of a worker per core. The other commands run one call.
    let workers = match &cli.command {
        Command::Serve(args) if args.http.is_none() => None,
        Command::Serve(_) => Some(std::thread::available_parallelism().map_or(2, |n| n.get())),
        _ => Some(2),
    };
    let mut builder = match workers {
        None => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolhost: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // A server's telemetry, before logging: its spans are a layer of the log's subscriber.
    let telemetry = match &cli.command {
        Command::Serve(args) => {
            let _on_the_runtime = runtime.enter();
            match crate::telemetry::Telemetry::for_serve(args.http.is_some()) {
                Ok(telemetry) => Some(telemetry),
                Err(e) => {
                    eprintln!("toolhost: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => None,
    };
    init_logging(telemetry.as_ref());
    let outcome = runtime.block_on(run(cli, telemetry, worker));
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

async fn run(
    cli: Cli,
    telemetry: Option<crate::telemetry::Telemetry>,
    worker: Option<(PathBuf, Vec<OsString>)>,
) -> Result<ExitCode, UsageError> {
    match &cli.command {
        Command::Plugins {
            action:
                Some(PluginAction::Install {
                    reference,
                    update,
                    yes,
                }),
        } => {
            return crate::plugin_sources::install_command(
                cli.config.as_deref(),
                reference.as_deref(),
                *update,
                *yes,
            )
            .await;
        }
        Command::Plugins {
            action: Some(PluginAction::Update { which, yes }),
        } => {
            return crate::plugin_sources::update_command(
                cli.config.as_deref(),
                which.as_deref(),
                *yes,
            )
            .await;
        }
        _ => {}
    }
    let (config, file) = load_config(cli.config.as_deref())?;
    self_mount::check(&file)?;
    let sources = Sources {
        config: &config,
        file: &file,
        extra_plugin_dirs: &cli.plugins,
        worker,
    };
    match cli.command {
        Command::Plugins { .. } => plugins(&sources).await,
        Command::Serve(args) => serve::serve(&sources, &args, telemetry.unwrap_or_default()).await,
        Command::Mcp(McpCommand::Approve { server, tools }) => approve(&sources, &server, &tools),
        Command::Mcp(McpCommand::Add {
            name,
            file: from_file,
            url,
            registry,
            version,
            id,
            prefix,
            yes,
        }) => {
            let origin = match (from_file, url) {
                (Some(path), _) => crate::mcp_add::Origin::File(path),
                (None, Some(url)) => crate::mcp_add::Origin::Url(url),
                (None, None) => {
                    let Some(base) = registry.or_else(|| config.mcp.registry.clone()) else {
                        return Err(
                            "mcp add needs a server.json: --file FILE, --url URL, or a registry to look NAME up in (--registry URL, or [mcp] registry = \"https://registry.modelcontextprotocol.io\" in toolhost.toml)"
                                .into(),
                        );
                    };
                    let Some(name) = name.clone() else {
                        return Err("mcp add: give the server's NAME to look up (e.g. io.github.acme/weather)".into());
                    };
                    crate::mcp_add::Origin::Registry {
                        base,
                        name,
                        version,
                    }
                }
            };
            let args = crate::mcp_add::AddArgs {
                origin,
                name,
                id,
                prefix,
                yes,
            };
            crate::mcp_add::add(&file, args).await
        }
        Command::Mcp(McpCommand::Login { server, client_id }) => {
            crate::login::login(&sources, &server, client_id.as_deref()).await
        }
        Command::Sandbox { session, json } => sandbox(&sources, &session, json).await,
        Command::Manifest { format, session } => manifest(&sources, format, &session).await,
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
        } => call(&sources, &name, input, &session, yes, json).await,
    }
}

/// `toolhost plugins`: what was loaded and refused.
async fn plugins(sources: &Sources<'_>) -> Result<ExitCode, UsageError> {
    let host = build_host(sources, Path::new("."), None).await?;
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

/// `toolhost mcp approve SERVER [TOOL…]`: accepts a mounted server's changed definitions.
fn approve(sources: &Sources<'_>, server: &str, tools: &[String]) -> Result<ExitCode, UsageError> {
    let config = sources.config;
    let entry = config
        .mcp_server(server)
        .map_err(|e| UsageError(format!("{}: {e}", sources.file.display())))?;
    let store = pin_store(config);
    let key = entry.pin_key();
    let approved = mcp_toolsets::pins::approve(store.as_ref(), &key, tools)
        .map_err(|e| UsageError(format!("MCP server '{server}': {e}")))?;
    if approved.is_empty() {
        println!("MCP server '{server}': no changed definition is pending");
    }
    for (tool, change) in approved {
        println!("approved MCP server '{server}' tool '{tool}': {change}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolhost sandbox`: what confines each tool, and the settings behind it.
async fn sandbox(
    sources: &Sources<'_>,
    session: &SessionArgs,
    json: bool,
) -> Result<ExitCode, UsageError> {
    let host = build_host(sources, &session.workspace, None).await?;
    let session = host.open_session("cli", session)?;
    let listing = host.dispatcher.listing_for_session(&session);
    let config = &host.dispatcher.config().sandbox;
    let workspace = sandbox_report::absolute(session.workspace().root());
    if json {
        let mut report = sandbox_report::json(&listing, config, &workspace);
        report["servers"] = sandbox_report::servers_json(&sources.config.mcp_servers);
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", sandbox_report::text(&listing, config, &workspace));
        print!(
            "{}",
            sandbox_report::servers_text(&sources.config.mcp_servers)
        );
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

/// `toolhost manifest`: the tools as JSON or Markdown.
async fn manifest(
    sources: &Sources<'_>,
    format: ManifestFormat,
    session: &SessionArgs,
) -> Result<ExitCode, UsageError> {
    let host = build_host(sources, &session.workspace, None).await?;
    let session = host.open_session("cli", session)?;
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

/// `toolhost call NAME --input JSON`: one call, asking on the terminal unless `yes`.
async fn call(
    sources: &Sources<'_>,
    name: &str,
    input: String,
    session: &SessionArgs,
    yes: bool,
    json: bool,
) -> Result<ExitCode, UsageError> {
    let file = sources.file;
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
    let host = build_host(sources, &session.workspace, Some(confirmer)).await?;
    let session = host.open_session("cli", session)?;
    let call = host
        .dispatcher
        .invocation(ToolUse::new("toolu_cli_1", name, input), &session);
    let run = call.run();
    tokio::pin!(run);
    let result = tokio::select! {
        result = &mut run => result,
        signal = serve::shutdown_signal() => {
            // Signal only: this task drives the call and must keep polling it while
            // the tool stops (a shell's process group gets SIGTERM, then SIGKILL).
            host.dispatcher.request_cancel(session.id(), "toolu_cli_1");
            let grace = host.dispatcher.config().timeouts.cancel_grace;
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

fn list(dispatcher: &Dispatcher, session: &Session, as_json: bool) {
    let listing = dispatcher.listing_for_session(session);
    if as_json {
        let mut tools = listing_json(&listing);
        let workspace = sandbox_report::absolute(session.workspace().root());
        if let Value::Array(items) = &mut tools {
            for (item, l) in items.iter_mut().zip(&listing) {
                item["sandbox"] = dispatcher_core::confines::tool_json(
                    l,
                    &dispatcher.config().sandbox,
                    &workspace,
                );
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

#[cfg(all(test, feature = "wasm"))]
mod tests {
    #[test]
    fn the_default_log_lets_through_what_a_wait_is_for() {
        let progress = format!("{}=info", plugin_host::plugin_wasm::PROGRESS);
        assert!(
            super::DEFAULT_LOG.contains(&progress),
            "{}",
            super::DEFAULT_LOG
        );
    }
}
