//! `toolhost serve`: the MCP server on stdio (`--mcp`, optionally with the control API on
//! `--control ADDR`) or on streamable HTTP (`--http ADDR`, with the control API and the
//! console on the same address).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use dispatcher_core::{Dispatcher, SessionSpec};

use crate::error::UsageError;
use crate::host::build_host_observed;
use crate::host::{SessionArgs, Sources};
use crate::reload::{Access, Reloader};
use crate::telemetry::Telemetry;
use mcp_server as mcp;
use mcp_server::http::{self, HttpOptions};

/// `toolhost serve`'s options.
#[derive(Args)]
pub struct ServeArgs {
    /// MCP on stdin/stdout.
    #[arg(long, conflicts_with = "http")]
    pub mcp: bool,
    /// MCP over streamable HTTP at ADDR (e.g. 127.0.0.1:8765): `/mcp`, with the control
    /// API (`/v1/…`) and the web console (`/`).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// With `--mcp`: also serve the control API and the console at ADDR, so that a person
    /// can watch this session and answer its confirmations from a browser.
    #[arg(long, value_name = "ADDR", requires = "mcp")]
    pub control: Option<SocketAddr>,
    /// Bearer tokens, one per line (or TOOLHOST_HTTP_TOKEN). Required to bind a
    /// non-loopback address.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Another `Host` this server answers to (repeatable; `*`: any, behind a load
    /// balancer with a token). Loopback names and the bound address always pass.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// A browser origin allowed besides the server's own (repeatable), e.g.
    /// `https://ide.example.com`.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// How long one HTTP request may take, in seconds, before `504` (its call is cancelled;
    /// in a 2025-era session, the error ends its event stream).
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    pub request_timeout: u64,
    #[command(flatten)]
    pub session: SessionArgs,
}

/// Runs `serve` as its options say.
pub async fn serve(
    sources: &Sources<'_>,
    args: &ServeArgs,
    telemetry: Telemetry,
) -> Result<ExitCode, UsageError> {
    if sources.config.mcp.client_logs {
        mcp::own_logs::switch_on();
    }
    telemetry.announce();
    match (args.mcp, args.http) {
        (true, _) => serve_mcp(sources, args, telemetry).await,
        (false, Some(addr)) => serve_http(sources, args, addr, telemetry).await,
        (false, None) => Err(UsageError(
            "serve needs a protocol: toolhost serve --mcp (stdio) or toolhost serve --http ADDR"
                .into(),
        )),
    }
}

/// What serving HTTP needs once bound: the listener, its address, the transport's options,
/// and the token exchange at the identity provider when `[http.auth.client]` makes one.
type Listening = (
    tokio::net::TcpListener,
    SocketAddr,
    HttpOptions,
    Option<Arc<dyn mcp_toolsets::TokenExchange>>,
);

/// Checks the access rules (a bad token file, or a public address without a token, stops
/// the server here, before anything is bound or loaded), then binds ADDR. The rules learn
/// the bound port, which ADDR may leave to the system (port 0).
async fn listen(
    sources: &Sources<'_>,
    args: &ServeArgs,
    addr: SocketAddr,
) -> Result<Listening, UsageError> {
    let tokens = http::access::load_tokens(args.token_file.as_deref())?;
    if args.request_timeout == 0 {
        return Err(UsageError(
            "--request-timeout must be at least 1 second".into(),
        ));
    }
    let auth = &sources.config.http.auth;
    if let Some(settings) = auth
        && settings.resource.is_none()
        && addr.ip().is_unspecified()
    {
        return Err(UsageError(format!(
            "{}: [http.auth] resource: serving on {addr} (every address), name the URL clients reach this server at (resource = \"https://mcp.example.com/mcp\")",
            sources.file.display()
        )));
    }
    // Checked before binding: a public address with no way to prove who calls is refused.
    let check = http::access::Access::new(addr, tokens.clone(), None, &[], &[]);
    if let (Err(e), None) = (check, auth) {
        return Err(UsageError(e));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| UsageError(format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr().unwrap_or(addr);
    let mut exchange: Option<Arc<dyn mcp_toolsets::TokenExchange>> = None;
    let oauth = match auth {
        Some(settings) => {
            let server =
                oauth::ResourceServer::new(settings.clone(), Some(format!("http://{local}/mcp")))
                    .map_err(|e| UsageError(format!("{}: {e}", sources.file.display())))?;
            let server = Arc::new(server);
            tracing::info!(target: "toolhost::auth", resource = %server.resource(), issuers = ?settings.issuers,
                "taking OAuth access tokens; protected resource metadata at {}", server.metadata_url());
            let prefetch = server.clone();
            tokio::spawn(async move { prefetch.prefetch().await });
            if settings.client.is_some() {
                exchange = Some(Arc::new(Exchange(server.clone())));
            }
            Some(server)
        }
        None => None,
    };
    let access = http::access::Access::new(
        addr,
        tokens,
        oauth,
        &args.allowed_hosts,
        &args.allowed_origins,
    )?;
    let options = HttpOptions {
        access: Arc::new(access.on_port(local.port())),
        max_message_bytes: sources.config.mcp.max_message_bytes.0,
        request_timeout: Duration::from_secs(args.request_timeout),
    };
    Ok((listener, local, options, exchange))
}

async fn serve_http(
    sources: &Sources<'_>,
    args: &ServeArgs,
    addr: SocketAddr,
    telemetry: Telemetry,
) -> Result<ExitCode, UsageError> {
    let (listener, local, options, exchange) = listen(sources, args, addr).await?;
    let consoles = mcp::Consoles::new(
        sources.config.mcp.prompt_fallback,
        sources.file.display().to_string(),
    );
    let confirmer = Arc::new(mcp::McpConfirmer::new(consoles.clone()));
    let mut host = build_host_observed(
        sources,
        &args.session.workspace,
        Some(confirmer),
        Some(&telemetry),
    )
    .await?;
    if let Some(metrics) = &telemetry.metrics {
        metrics.watch_dispatcher(&host.dispatcher);
        metrics.watch_workers(&host.plugins.workers);
    }
    consoles.share_watchers_through(host.dispatcher.store());
    let dispatcher = host.dispatcher.clone();
    let workspace = args.session.workspace.clone();
    // Fail now, not at the first request, if the workspace cannot hold a session.
    drop(host.open_session("mcp-check", &args.session)?);
    let per_caller = !sources.config.access.is_empty();
    let access = Access::new(sources.config.access.clone());
    let opener = {
        let (dispatcher, access) = (dispatcher.clone(), access.clone());
        move |id: &str, principal: &mcp::Principal, shared: bool| {
            // Every server's tools, also one a reload adds.
            let spec = SessionSpec::new(id, &workspace)
                .every_shared_toolset()
                .shared(shared)
                .principal(principal.id.as_str())
                .caller(dispatcher_core::CallerFacts {
                    groups: principal.groups.clone(),
                    claims: (*principal.claims).clone(),
                });
            let session = dispatcher
                .open_session(access.apply(principal, spec))
                .map_err(|e| e.to_string())?;
            access.opened(&session, principal);
            Ok(session)
        }
    };
    let upstreams = host.upstreams().await;
    // Plugins and servers are the reloader's from here on.
    let reloader = Reloader::take(
        sources,
        &args.session.workspace,
        &mut host,
        access,
        telemetry.metrics.clone(),
    );
    let watching = reloader.watch();
    // Over a shared store, a task made here is read, answered and cancelled anywhere.
    let tasks = mcp::Tasks::new(sources.config.mcp.tasks.clone());
    tasks.share_through(dispatcher.store());
    let running_tasks = tasks.clone();
    let shared = mcp::McpShared::new(
        dispatcher.clone(),
        confirmations(sources, &dispatcher)?,
        mcp::Sessions::PerClient {
            open: Box::new(opener),
            by_principal: Default::default(),
        },
        upstreams,
        tasks,
    );
    shared.set_tools_per_caller(per_caller);
    shared.set_discovery(sources.config.mcp.discovery.clone());
    if let Some(exchange) = exchange {
        shared.exchange_tokens_through(exchange);
    }
    reloader.serve_through(shared.clone());
    let control = http::control::Control::new(dispatcher.clone(), consoles).metrics(
        telemetry
            .metrics
            .clone()
            .map(|m| m as Arc<dyn http::control::MetricsExposition>),
    );
    let server = http::Server::new(Some(shared), control, options);
    tracing::info!(workspace = %args.session.workspace.display(), "MCP over HTTP at http://{local}/mcp; console at http://{local}/");
    eprintln!("toolhost: serving MCP at http://{local}/mcp, the console at http://{local}/");
    let grace = dispatcher.config().timeouts.cancel_grace;
    let (signal_tx, signal_rx) = tokio::sync::oneshot::channel();
    let shutdown = async move {
        let signal = shutdown_signal().await;
        tracing::info!(
            "{}: draining requests in flight (up to {} s)",
            signal.name,
            grace.as_secs()
        );
        let _ = signal_tx.send((signal, std::time::Instant::now()));
    };
    let drained = server
        .serve(listener, shutdown, grace)
        .await
        .map_err(|e| UsageError(format!("the HTTP server failed: {e}")))?;
    let mut signal_rx = signal_rx;
    let (signal, since) = match signal_rx.try_recv() {
        Ok((signal, at)) => (Some(signal), at),
        Err(_) => (None, std::time::Instant::now()),
    };
    let left = || grace.saturating_sub(since.elapsed());
    // Tasks are calls no request waits on: they get what is left of the grace period too.
    let settled = drained && running_tasks.settle(left()).await;
    if !settled {
        tracing::warn!(
            "calls or tasks still running {} s after the signal; cancelling them",
            grace.as_secs()
        );
    }
    // Stop whatever still runs in any session (shell process groups included).
    let sessions = dispatcher.session_ids();
    let closing =
        futures_util::future::join_all(sessions.iter().map(|id| dispatcher.close_session(id)));
    let _ = tokio::time::timeout(left().max(STOP_AT_LEAST), closing).await;
    // Each task's last state (completed, cancelled) reaches the shared store, where the
    // other instances answer `tasks/get` for it.
    running_tasks.settle(STOP_AT_LEAST).await;
    running_tasks.flush(STOP_AT_LEAST).await;
    watching.abort();
    drop(reloader);
    telemetry.flush().await;
    Ok(match signal {
        Some(signal) => signal.exit_code(),
        None => ExitCode::SUCCESS,
    })
}

/// The control API and console beside stdio, on `addr`, until the process ends.
async fn control_beside_stdio(
    sources: &Sources<'_>,
    args: &ServeArgs,
    addr: SocketAddr,
    dispatcher: &Dispatcher,
    consoles: Arc<mcp::Consoles>,
) -> Result<tokio::task::JoinHandle<()>, UsageError> {
    let (listener, local, options, _) = listen(sources, args, addr).await?;
    tracing::info!("control API and console at http://{local}/");
    eprintln!("toolhost: control API and console at http://{local}/");
    let server = http::Server::new(
        None,
        http::control::Control::new(dispatcher.clone(), consoles),
        options,
    );
    Ok(tokio::spawn(async move {
        if let Err(e) = server
            .serve(listener, std::future::pending(), Duration::ZERO)
            .await
        {
            tracing::warn!("the control API stopped: {e}");
        }
    }))
}

/// Token exchange at the identity provider, for mounted servers that take a token
/// obtained for their caller (`credentials = "exchange"`).
struct Exchange(Arc<oauth::ResourceServer>);

impl mcp_toolsets::TokenExchange for Exchange {
    fn exchange<'a>(
        &'a self,
        subject: &'a str,
        resource: &'a str,
    ) -> mcp_toolsets::callers::ExchangeFuture<'a> {
        Box::pin(async move {
            self.0
                .exchange(subject, resource)
                .await
                .map(|exchanged| exchanged.token)
        })
    }
}

/// How long the calls still running when the protocol input ends are waited for, as rmcp
/// waits for its own.
const STDIO_DRAIN: Duration = Duration::from_secs(5);

async fn serve_mcp(
    sources: &Sources<'_>,
    serve: &ServeArgs,
    telemetry: Telemetry,
) -> Result<ExitCode, UsageError> {
    let args = &serve.session;
    use rmcp::ServiceExt as _;
    let consoles = mcp::Consoles::new(
        sources.config.mcp.prompt_fallback,
        sources.file.display().to_string(),
    );
    let confirmer = Arc::new(mcp::McpConfirmer::new(consoles.clone()));
    let mut host =
        build_host_observed(sources, &args.workspace, Some(confirmer), Some(&telemetry)).await?;
    if let Some(metrics) = &telemetry.metrics {
        metrics.watch_dispatcher(&host.dispatcher);
        metrics.watch_workers(&host.plugins.workers);
    }
    consoles.share_watchers_through(host.dispatcher.store());
    let dispatcher = host.dispatcher.clone();
    // Every server's tools, also one a reload adds.
    let session = dispatcher
        .open_session(SessionSpec::new("mcp", &args.workspace).every_shared_toolset())
        .map_err(|e| UsageError(e.to_string()))?;
    let upstreams = host.upstreams().await;
    let reloader = Reloader::take(
        sources,
        &args.workspace,
        &mut host,
        Access::new(Vec::new()),
        telemetry.metrics.clone(),
    );
    let watching = reloader.watch();
    let control = match serve.control {
        Some(addr) => {
            Some(control_beside_stdio(sources, serve, addr, &dispatcher, consoles.clone()).await?)
        }
        None => None,
    };
    let shared = mcp::McpShared::new(
        dispatcher.clone(),
        confirmations(sources, &dispatcher)?,
        mcp::Sessions::One(session),
        upstreams,
        mcp::Tasks::new(sources.config.mcp.tasks.clone()),
    );
    shared.set_discovery(sources.config.mcp.discovery.clone());
    reloader.serve_through(shared.clone());
    let server = mcp::McpServer::new(shared.clone());
    let direct_server = server.for_same_client();
    tracing::info!(workspace = %args.workspace.display(), "MCP server on stdio");
    let (eof_tx, eof_rx) = tokio::sync::oneshot::channel();
    let (stdin, quiet) = crate::quiet::watch_input(protocol_stdin());
    let quiet = quiet.map(tokio::spawn);
    let stdin = mcp::EofNotify::new(stdin, eof_tx);
    let on_eof = {
        let dispatcher = dispatcher.clone();
        tokio::spawn(async move {
            if eof_rx.await.is_ok() {
                tracing::info!("stdin closed: cancelling running tools");
                // Open listen streams would keep the session waiting for nobody.
                shared.listens.end(Duration::ZERO).await;
                dispatcher.cancel_session_tools("mcp").await;
            }
        })
    };
    let stdout = protocol_stdout()
        .map_err(|e| UsageError(format!("cannot set up stdout for the protocol: {e}")))?;
    let mut exit = ExitCode::SUCCESS;
    let mut transport =
        mcp::stdio::StdioTransport::new(stdin, stdout, sources.config.mcp.max_message_bytes.0)
            .with_tasks_2025(sources.config.mcp.tasks.enabled);
    let direct = transport.answer_calls(direct_server);
    let serving = async {
        match server.serve(transport).await {
            Ok(running) => {
                direct.open(running.peer());
                if let Err(e) = running.waiting().await {
                    tracing::warn!("MCP session ended with an error: {e}");
                }
                // As rmcp waits for the calls it answers when the input ends.
                direct.finish(STDIO_DRAIN).await;
            }
            Err(e) => tracing::warn!("MCP initialization failed: {e}"),
        }
    };
    tokio::pin!(serving);
    let grace = dispatcher.config().timeouts.cancel_grace;
    tokio::select! {
        () = &mut serving => {}
        signal = shutdown_signal() => {
            tracing::info!("{}: cancelling running tools and exiting", signal.name);
            exit = signal.exit_code();
            // The calls run in the server's request tasks: interrupt them (shell process
            // groups get SIGTERM, then SIGKILL) before the server goes away.
            let cancelled = dispatcher.cancel_session_tools("mcp");
            if tokio::time::timeout(grace, cancelled).await.is_err() {
                tracing::warn!("tools still running {}s after {}; exiting anyway", grace.as_secs(), signal.name);
            }
        }
    }
    on_eof.abort();
    if let Some(quiet) = quiet {
        quiet.abort();
    }
    if let Some(control) = control {
        control.abort();
    }
    // The client is gone: stop whatever still runs (shell process groups included), but
    // never wait longer than the cancellation grace period for it.
    if tokio::time::timeout(grace, dispatcher.close_session("mcp"))
        .await
        .is_err()
    {
        tracing::warn!(
            "tools still running {}s after the client left; exiting anyway",
            grace.as_secs()
        );
    }
    watching.abort();
    drop(reloader);
    telemetry.flush().await;
    Ok(exit)
}

/// Stateless confirmations, sealed with the configured key ring (or a key of this
/// process's own), valid for the confirmation timeout.
pub fn confirmations(
    sources: &Sources<'_>,
    dispatcher: &Dispatcher,
) -> Result<mcp::request_state::Confirmations, UsageError> {
    let file = sources.config.mcp.request_state_keys.as_ref().map(|f| {
        sources
            .file
            .parent()
            .map_or_else(|| f.clone(), |dir| dir.join(f))
    });
    let (codec, from) = mcp::request_state::load_codec(file.as_deref())?;
    if let Some(from) = from {
        tracing::info!("request-state key ring from {from}");
    }
    Ok(mcp::request_state::Confirmations::new(
        codec,
        dispatcher.config().timeouts.confirmation,
        dispatcher.store(),
    ))
}

/// What stopping may take past the grace period: closing sessions, the last store writes.
const STOP_AT_LEAST: std::time::Duration = std::time::Duration::from_secs(2);

/// A signal that asks toolhost to stop.
pub struct Shutdown {
    pub name: &'static str,
    number: u8,
}

impl Shutdown {
    /// 128 + the signal number, as shells report a process ended by a signal.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(128 + self.number)
    }
}

/// Resolves at the first SIGINT or SIGTERM (never, if they cannot be watched).
pub async fn shutdown_signal() -> Shutdown {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot watch for SIGINT/SIGTERM; they will end toolhost abruptly");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => Shutdown { name: "SIGINT", number: 2 },
        _ = term.recv() => Shutdown { name: "SIGTERM", number: 15 },
    }
}

type ProtocolReader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type ProtocolWriter = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// The protocol's input. A pipe (how MCP clients start servers) or a socket is read by the
/// runtime's event loop; anything else (a terminal, a file) through tokio's stdin, which
/// reads on a blocking thread. The event loop saves two thread handoffs per message.
fn protocol_stdin() -> ProtocolReader {
    let dup = rustix::io::dup(std::io::stdin()).map_err(std::io::Error::from);
    let async_fd = dup.and_then(|fd| {
        let file = std::fs::File::from(fd);
        match file.metadata()?.file_type() {
            t if std::os::unix::fs::FileTypeExt::is_fifo(&t) => {
                let pipe = tokio::net::unix::pipe::Receiver::from_file(file)?;
                Ok(Box::new(pipe) as ProtocolReader)
            }
            t if std::os::unix::fs::FileTypeExt::is_socket(&t) => {
                let socket = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(file));
                socket.set_nonblocking(true)?;
                Ok(Box::new(tokio::net::UnixStream::from_std(socket)?) as ProtocolReader)
            }
            _ => Err(std::io::ErrorKind::Unsupported.into()),
        }
    });
    async_fd.unwrap_or_else(|_| Box::new(tokio::io::stdin()))
}

/// The protocol's own copy of stdout. File descriptor 1 then points at stderr, so nothing
/// a tool, a plugin or a library prints (whatever its copy of `std`) can reach the client
/// as a frame: it lands in the log stream instead. A pipe or socket is written by the
/// event loop (as for [`protocol_stdin`]); anything else through a blocking thread.
fn protocol_stdout() -> std::io::Result<ProtocolWriter> {
    let protocol = std::fs::File::from(rustix::io::dup(std::io::stdout())?);
    rustix::stdio::dup2_stdout(std::io::stderr())?;
    let file_type = protocol.metadata()?.file_type();
    if std::os::unix::fs::FileTypeExt::is_fifo(&file_type) {
        let pipe = tokio::net::unix::pipe::Sender::from_file(protocol)?;
        return Ok(Box::new(pipe));
    }
    if std::os::unix::fs::FileTypeExt::is_socket(&file_type) {
        let socket = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(protocol));
        socket.set_nonblocking(true)?;
        return Ok(Box::new(tokio::net::UnixStream::from_std(socket)?));
    }
    Ok(Box::new(tokio::fs::File::from_std(protocol)))
}
