//! # mcp-toolsets: other MCP servers as toolhost toolsets
//!
//! [`McpToolset::start`] spawns a server (`command` + `args`, with `env` and `cwd`) and
//! speaks MCP to it over its stdin/stdout, or reaches one over streamable HTTP (`url`, with
//! an optional bearer token from the environment variable `bearer_token_env`); it
//! initializes within the startup timeout, lists its tools and offers them as a
//! [`Toolset`]; the host publishes them under the configured prefix.
//!
//! - **Both protocol eras over HTTP.** The client probes with `server/discover` and speaks
//!   2026-07-28 to a server that knows it, 2025-11-25 (`initialize`) to one that does not.
//!   A 2026 server's `input_required` result is answered through the host's confirmation
//!   channel ([`tool_api::ToolContext::ask_user`]: the same broker, prompts and console as
//!   toolhost's own confirmations; see [`input`] for what each kind of request gets), and
//!   the call is retried with the answers and the server's `requestState`, up to
//!   [`MAX_INPUT_ROUNDS`] rounds.
//!
//! - **Side effects are not taken on trust.** A tool without annotations counts as
//!   `execute`; `readOnlyHint: true` → `read`; otherwise `openWorldHint` (true unless said
//!   false) → `network`; a closed-world tool with `destructiveHint: false` → `write`; else
//!   `execute`. Per-tool overrides in the configuration win over all of that.
//! - **A server that dies**: its calls fail with `execution_error` naming the server and its
//!   exit status; the next call restarts it, with a backoff that doubles from 1 s up to 30 s
//!   between failed attempts.
//! - `notifications/tools/list_changed` from the server re-lists its tools and republishes
//!   them, through the [`ToolsetHandle`] the dispatcher gave the toolset when it was
//!   registered (shared) or started for a session (per session). A 2026-07-28 server that
//!   declares `tools.listChanged` sends it on a `subscriptions/listen` stream the client
//!   opens once connected.
//! - Cancelling a call sends `notifications/cancelled` to the server.
//! - The server's stderr is passed through to ours (logs); [`Toolset::stop`] kills it.
//! - **A stdio server runs in an OS sandbox** ([`ServerSandbox`]; `workspace-write` unless
//!   its entry or the host says otherwise): it reads the system, the workspace, its program
//!   and scripts and the readable roots; it writes the workspace, a private temporary
//!   directory and the writable roots; no network unless granted. Where that cannot be
//!   enforced it is not started ([`McpError::Sandbox`]) unless `allow_unsandboxed`.

mod confine;
pub mod input;

pub use confine::ServerSandbox;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use dispatcher_core::config::{Seconds, SupportedSandbox};
use dispatcher_core::{Toolset, ToolsetHandle};
use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ServerResult,
};
use rmcp::service::{
    NotificationContext, PeerRequestOptions, RoleClient, RunningService, ServiceExt,
};
use serde::Deserialize;
use serde_json::Value;
use tool_api::{SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput};

/// Environment variable counting how deep this process is in a chain of toolhosts started
/// as each other's MCP servers (toolhost-in-toolhost). Children get it incremented.
pub const NESTING_ENV: &str = "TOOLHOST_NESTING";
/// A toolhost this deep starts no MCP servers: a configuration that lists toolhost as its own
/// MCP server would otherwise start copies of itself without end.
pub const MAX_NESTING: u32 = 3;

/// This process's nesting depth (0 when not started by a toolhost).
pub fn nesting() -> u32 {
    std::env::var(NESTING_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Seconds a server may take to start and initialize, unless configured.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Seconds a call may take, unless configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One `[[mcp_servers]]` entry. Bad values are refused while it is deserialized.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Toolset id (what session allowlists and messages name).
    #[serde(deserialize_with = "dispatcher_core::config::non_empty")]
    pub id: String,
    /// Prefix of its published tool names ([`dispatcher_core::toolset::check_prefix`]).
    #[serde(deserialize_with = "prefix")]
    pub prefix: String,
    /// The program to run (or `url`).
    #[serde(default)]
    pub command: String,
    /// A streamable HTTP endpoint instead of a program (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// With `url`: the environment variable holding a bearer token to send.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory (default: toolhost's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Time to start and initialize (default [`DEFAULT_STARTUP_TIMEOUT`]).
    #[serde(default = "default_startup", rename = "startup_timeout_secs")]
    pub startup_timeout: Seconds,
    /// Time a call may take (default [`DEFAULT_CALL_TIMEOUT`]).
    #[serde(default = "default_call", rename = "call_timeout_secs")]
    pub call_timeout: Seconds,
    /// Per-tool side-effect classes; win over the server's annotations.
    #[serde(default)]
    pub side_effects: BTreeMap<String, SideEffect>,
    /// Where a stdio server runs: `host`, `read-only` or `workspace-write` (default: the
    /// host's).
    #[serde(default)]
    pub sandbox: Option<SupportedSandbox>,
    /// Whether it may open connections (default: the host's setting).
    #[serde(default)]
    pub network: Option<bool>,
    /// More directories it may read, besides the host's.
    #[serde(default)]
    pub readable_roots: Vec<PathBuf>,
    /// More directories it may write under `workspace-write`, besides the host's.
    #[serde(default)]
    pub writable_roots: Vec<PathBuf>,
    /// Start it unconfined where its sandbox cannot be enforced (default: the host's).
    #[serde(default)]
    pub allow_unsandboxed: Option<bool>,
}

fn default_startup() -> Seconds {
    Seconds(DEFAULT_STARTUP_TIMEOUT)
}

fn default_call() -> Seconds {
    Seconds(DEFAULT_CALL_TIMEOUT)
}

fn prefix<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    dispatcher_core::toolset::check_prefix(&s).map_err(serde::de::Error::custom)?;
    Ok(s)
}

impl McpServerConfig {
    /// A server `id` running `command`, published under `prefix`, with every default.
    pub fn new(
        id: impl Into<String>,
        prefix: impl Into<String>,
        command: impl Into<String>,
    ) -> Self {
        McpServerConfig {
            id: id.into(),
            prefix: prefix.into(),
            command: command.into(),
            url: None,
            bearer_token_env: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            startup_timeout: default_startup(),
            call_timeout: default_call(),
            side_effects: BTreeMap::new(),
            sandbox: None,
            network: None,
            readable_roots: Vec::new(),
            writable_roots: Vec::new(),
            allow_unsandboxed: None,
        }
    }

    /// A server `id` reached at `url` (streamable HTTP), published under `prefix`.
    pub fn http(id: impl Into<String>, prefix: impl Into<String>, url: impl Into<String>) -> Self {
        let mut config = McpServerConfig::new(id, prefix, "");
        config.url = Some(url.into());
        config
    }

    /// What is wrong with an entry whose fields are each well-formed: it needs exactly one
    /// of `command` and `url`, an `http(s)://` URL, and a token variable only with a URL.
    pub fn problem(&self) -> Option<String> {
        match (&self.url, self.command.trim().is_empty()) {
            (Some(_), false) => Some("set `command` or `url`, not both".into()),
            (None, true) => Some(
                "set `command` (a program to run) or `url` (a streamable HTTP endpoint)".into(),
            ),
            (Some(url), true) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                Some(format!(
                    "`url` must start with http:// or https://, found {url:?}"
                ))
            }
            (None, false) if self.bearer_token_env.is_some() => {
                Some("`bearer_token_env` goes with `url`, not with `command`".into())
            }
            (Some(_), true)
                if self.sandbox.is_some()
                    || self.network.is_some()
                    || !self.readable_roots.is_empty()
                    || !self.writable_roots.is_empty()
                    || self.allow_unsandboxed.is_some() =>
            {
                Some("the sandbox settings (`sandbox`, `network`, `readable_roots`, `writable_roots`, `allow_unsandboxed`) go with `command`: a server reached over `url` runs elsewhere".into())
            }
            _ => None,
        }
    }

    fn startup_timeout(&self) -> Duration {
        self.startup_timeout.0
    }
    fn call_timeout(&self) -> Duration {
        self.call_timeout.0
    }
}

/// Why a server could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    /// The command could not be started.
    #[error("MCP server '{id}': cannot start `{command}`: {detail}")]
    Spawn {
        /// Server id.
        id: String,
        /// The command.
        command: String,
        /// The OS error.
        detail: String,
    },
    /// It did not initialize in time.
    #[error(
        "MCP server '{id}' did not finish initializing within {timeout} (startup_timeout_secs); it was stopped"
    )]
    StartupTimeout {
        /// Server id.
        id: String,
        /// The timeout.
        timeout: Seconds,
    },
    /// Its sandbox could not be made, or cannot be enforced here.
    #[error(
        "MCP server '{id}' was not started: its sandbox ({mode}) {detail}. It is never started unconfined unless allowed: set `allow_unsandboxed = true` on its [[mcp_servers]] entry (or in [sandbox]) to accept the risk, or `sandbox = \"host\"` to run it with your rights"
    )]
    Sandbox {
        /// Server id.
        id: String,
        /// The mode it was to run in.
        mode: String,
        /// What is missing or failed.
        detail: String,
    },
    /// Initialization or listing failed.
    #[error("MCP server '{id}' failed to initialize: {detail}")]
    Initialize {
        /// Server id.
        id: String,
        /// What failed.
        detail: String,
    },
}

/// A connected service and its tools.
async fn listed(
    service: RunningService<RoleClient, ClientSide>,
) -> Result<
    (
        RunningService<RoleClient, ClientSide>,
        Vec<rmcp::model::Tool>,
    ),
    String,
> {
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| e.to_string())?;
    Ok((service, tools))
}

/// Installs rustls's `ring` provider for `https://` servers (once; a provider installed by
/// the host first is kept).
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why an MCP tool cannot be published as it is, if it cannot: its input schema is outside
/// the subset the dispatcher publishes (what model providers accept), or not a schema.
fn schema_problem(tool: &rmcp::model::Tool) -> Option<String> {
    let name = tool.name.as_ref();
    let schema = Value::Object((*tool.input_schema).clone());
    dispatcher_core::schema::check_subset(name, &schema)
        .and_then(|()| dispatcher_core::schema::InputValidator::compile(name, &schema).map(drop))
        .err()
        .map(|e| e.to_string())
}

/// The class of an MCP tool: annotations read conservatively, config overrides win.
pub fn side_effects_of(
    tool: &rmcp::model::Tool,
    overrides: &BTreeMap<String, SideEffect>,
) -> SideEffect {
    if let Some(class) = overrides.get(tool.name.as_ref()) {
        return *class;
    }
    let Some(a) = &tool.annotations else {
        return SideEffect::Execute;
    };
    if a.read_only_hint == Some(true) {
        SideEffect::Read
    } else if a.open_world_hint != Some(false) {
        SideEffect::Network
    } else if a.destructive_hint == Some(false) {
        SideEffect::Write
    } else {
        SideEffect::Execute
    }
}

/// How many `input_required` rounds one call may take before toolhost gives up.
pub const MAX_INPUT_ROUNDS: usize = 10;

/// Client side of the connection: reacts to `tools/list_changed`; over HTTP it also says
/// it can answer form and URL elicitation and `roots/list` (through `input_required`).
#[derive(Clone)]
struct ClientSide {
    on_list_changed: Arc<dyn Fn() + Send + Sync>,
    answers_input: bool,
}

impl ClientHandler for ClientSide {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps = if self.answers_input {
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build()
        } else {
            rmcp::model::ClientCapabilities::default()
        };
        rmcp::model::ClientConfig::new(
            caps,
            rmcp::model::Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        (self.on_list_changed)();
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        // A 2025-era server asking outside any call's context: nobody to route it to.
        tracing::warn!(
            "an MCP server sent elicitation/create; toolhost answers elicitation only through input_required (protocol 2026-07-28): declined"
        );
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Decline,
        ))
    }
}

struct Live {
    service: RunningService<RoleClient, ClientSide>,
    /// The server's process; `None` for a server reached over HTTP.
    child: Option<Arc<tokio::sync::Mutex<tokio::process::Child>>>,
    /// The task reading a 2026-07-28 server's `subscriptions/listen` stream, stopped with
    /// the connection.
    listen: Option<tokio::task::AbortHandle>,
    /// The private temporary directory of a sandboxed server, removed when it stops.
    _tmp: Option<sandbox::PrivateTmp>,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(listen) = self.listen.take() {
            listen.abort();
        }
    }
}

/// A 2026-07-28 server sends no notification it was not asked for: when it declares
/// `tools.listChanged`, this opens a `subscriptions/listen` stream for tool list changes
/// and runs `on_change` for each, until the stream ends (the server stopped: the next
/// connection opens another). `None` for an older server (it notifies on the connection),
/// one that does not declare the capability, or one that does not acknowledge the stream
/// within `within`.
async fn listen_for_tool_changes(
    service: &RunningService<RoleClient, ClientSide>,
    on_change: Arc<dyn Fn() + Send + Sync>,
    id: &str,
    within: std::time::Duration,
) -> Option<tokio::task::AbortHandle> {
    let peer = service.peer();
    let info = peer.peer_info()?;
    let stateless = info.protocol_version >= rmcp::model::ProtocolVersion::V_2026_07_28;
    let declares = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|t| t.list_changed)
        == Some(true);
    if !stateless || !declares {
        return None;
    }
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut subscription = match tokio::time::timeout(within, peer.listen(filter)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(server = %id, "could not listen for tool list changes: {e}");
            return None;
        }
        Err(_) => {
            tracing::warn!(
                server = %id,
                "no acknowledgment of the tool list subscription within {within:?}; not listening"
            );
            return None;
        }
    };
    let id = id.to_string();
    let task = tokio::spawn(async move {
        loop {
            match subscription.next().await {
                Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))) => {
                    on_change();
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::debug!(server = %id, end = ?subscription.end(), "tool list subscription ended");
                    return;
                }
                Err(e) => {
                    tracing::warn!(server = %id, "tool list subscription failed: {e}");
                    return;
                }
            }
        }
    });
    Some(task.abort_handle())
}

/// What a `tools/call` round got.
enum Called {
    Complete(CallToolResult),
    InputRequired(rmcp::model::InputRequiredResult),
}

enum Conn {
    Up(Live),
    Down {
        since: Instant,
        backoff: Duration,
        reason: String,
    },
}

/// A running MCP server offered as a toolset.
pub struct McpToolset {
    server: Arc<Server>,
}

/// The connection to one server, shared by the toolset and the factories of its tools.
struct Server {
    config: McpServerConfig,
    /// Its sandbox settings (stdio servers).
    sandbox: ServerSandbox,
    /// What the running process is confined by (`host (unconfined)`, `workspace-write`…).
    confined: Mutex<String>,
    runtime: tokio::runtime::Handle,
    conn: tokio::sync::Mutex<Conn>,
    /// The server's last listing: the tools to publish.
    tools: Mutex<Vec<rmcp::model::Tool>>,
    /// The tools of that listing left out, each with why (see [`schema_problem`]), decided
    /// once per listing.
    left_out: Mutex<Vec<(String, String)>>,
    /// Given by the dispatcher when the toolset was bound; announces changed tools.
    handle: Mutex<Option<ToolsetHandle>>,
    /// How many `tools/list_changed` notifications it has sent.
    list_changes: AtomicU64,
}

impl std::fmt::Debug for McpToolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolset")
            .field("id", &self.server.config.id)
            .finish_non_exhaustive()
    }
}

async fn exit_status(child: Option<&tokio::sync::Mutex<tokio::process::Child>>) -> String {
    let Some(child) = child else {
        return "still running (reached over HTTP)".to_string();
    };
    let mut child = child.lock().await;
    match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(e)) => format!("unknown exit status ({e})"),
        Err(_) => "still running but not answering".to_string(),
    }
}

impl McpToolset {
    /// Starts the server (a stdio server in its sandbox: `host`'s settings under its own
    /// entry's, [`ServerSandbox::for_server`]), initializes it within its startup timeout
    /// and lists its tools. Refused when this process is already [`MAX_NESTING`] toolhosts
    /// deep.
    pub async fn start(
        config: McpServerConfig,
        host: &ServerSandbox,
    ) -> Result<Arc<McpToolset>, McpError> {
        let sandbox = host.for_server(&config);
        Server::start(config, sandbox)
            .await
            .map(|server| Arc::new(McpToolset { server }))
    }

    /// What its process runs in: `workspace-write`, `read-only, network`, `host
    /// (unconfined)`, `unsandboxed (…)`, or `remote (…)` for a server reached over HTTP.
    pub fn confinement(&self) -> String {
        self.server.confinement()
    }

    /// The server's tools that are left out, each with why (the message names the tool): an
    /// input schema the dispatcher would refuse (outside the subset model providers accept,
    /// or not a valid schema). One such tool does not cost the server its other tools.
    pub fn left_out(&self) -> Vec<(String, String)> {
        self.server
            .left_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &McpServerConfig {
        &self.server.config
    }
}

impl Server {
    /// What its process runs in (see [`McpToolset::confinement`]).
    fn confinement(&self) -> String {
        self.confined
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn start(
        config: McpServerConfig,
        sandbox: ServerSandbox,
    ) -> Result<Arc<Server>, McpError> {
        if config.url.is_none() && nesting() >= MAX_NESTING {
            return Err(McpError::Initialize {
                id: config.id.clone(),
                detail: format!(
                    "not started: this toolhost is {} levels deep in toolhosts started as MCP servers ({NESTING_ENV}); \
                     a configuration that starts toolhost as its own MCP server would recurse without end",
                    nesting()
                ),
            });
        }
        let server = Arc::new(Server {
            runtime: tokio::runtime::Handle::current(),
            conn: tokio::sync::Mutex::new(Conn::Down {
                since: Instant::now(),
                backoff: Duration::ZERO,
                reason: "not started".into(),
            }),
            tools: Mutex::new(Vec::new()),
            left_out: Mutex::new(Vec::new()),
            handle: Mutex::new(None),
            list_changes: AtomicU64::new(0),
            confined: Mutex::new(match &config.url {
                Some(url) => format!("remote ({url}: not confined by toolhost)"),
                None => "not started".into(),
            }),
            sandbox,
            config,
        });
        {
            // Held while it starts: a list change it announces meanwhile is re-listed once it
            // is up, not refused as "down".
            let mut conn = server.conn.lock().await;
            *conn = Conn::Up(server.connect(Arc::downgrade(&server)).await?);
        }
        Ok(server)
    }

    /// Republishes the tools through the handle, if the toolset is bound.
    fn announce(&self, why: &str) {
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(handle) = handle else { return };
        match handle.tools_changed() {
            Ok(n) => {
                tracing::info!(server = %self.config.id, tools = n, "{why}: tools republished")
            }
            // The dispatcher (or the session) is gone: toolhost is shutting down.
            Err(e) if !handle.is_live() => {
                tracing::debug!(server = %self.config.id, "{why}: not republished: {e}")
            }
            Err(e) => {
                tracing::warn!(server = %self.config.id, "{why}: republishing tools failed: {e}")
            }
        }
    }

    /// What `notifications/tools/list_changed` does: re-list, then republish.
    fn on_list_changed(me: Weak<Server>) -> Arc<dyn Fn() + Send + Sync> {
        Arc::new(move || {
            let Some(this) = me.upgrade() else { return };
            this.list_changes.fetch_add(1, Ordering::AcqRel);
            let runtime = this.runtime.clone();
            runtime.spawn(async move {
                if let Err(e) = this.relist().await {
                    tracing::warn!(server = %this.config.id, "re-listing tools failed: {e}");
                    return;
                }
                this.announce("tools/list_changed");
            });
        })
    }

    async fn relist(&self) -> Result<(), String> {
        let conn = self.conn.lock().await;
        let live = match &*conn {
            Conn::Up(live) => live,
            // Stopped on purpose (toolhost is exiting): nothing to re-list, nothing wrong.
            Conn::Down { reason, .. } if reason == STOPPED => return Ok(()),
            Conn::Down { .. } => return Err("server is down".into()),
        };
        let tools = live
            .service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| e.to_string())?;
        self.keep_tools(tools);
        Ok(())
    }

    /// Keeps a fresh listing of the server's tools: those to publish, and those left out
    /// (logged).
    fn keep_tools(&self, listed: Vec<rmcp::model::Tool>) {
        let mut tools = Vec::with_capacity(listed.len());
        let mut left_out = Vec::new();
        for tool in listed {
            match schema_problem(&tool) {
                None => tools.push(tool),
                Some(why) => {
                    tracing::warn!(server = %self.config.id, "{why}: left out, the server's other tools are published");
                    left_out.push((tool.name.to_string(), why));
                }
            }
        }
        *self.tools.lock().unwrap_or_else(PoisonError::into_inner) = tools;
        *self.left_out.lock().unwrap_or_else(PoisonError::into_inner) = left_out;
    }

    /// Starts (or reaches) the server and lists its tools. A change it announced while
    /// starting, which its first listing may predate, is listed again before it counts
    /// as up, so the host publishes what the server has now.
    async fn connect(&self, me: Weak<Server>) -> Result<Live, McpError> {
        let changes = self.list_changes.load(Ordering::Acquire);
        let live = match self.config.url.clone() {
            Some(url) => self.connect_http(&url, me).await,
            None => self.connect_child(me).await,
        }?;
        if self.list_changes.load(Ordering::Acquire) != changes {
            match live.service.peer().list_all_tools().await {
                Ok(tools) => self.keep_tools(tools),
                Err(e) => {
                    tracing::warn!(server = %self.config.id, "re-listing tools after a change announced at start failed: {e}")
                }
            }
        }
        Ok(live)
    }

    /// Reaches the server over streamable HTTP: `server/discover` first (2026-07-28), then
    /// `initialize` for a server that does not know it.
    async fn connect_http(&self, url: &str, me: Weak<Server>) -> Result<Live, McpError> {
        use rmcp::ClientServiceExt as _;
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let c = &self.config;
        install_tls_provider();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(var) = &c.bearer_token_env {
            let token = std::env::var(var).map_err(|_| McpError::Initialize {
                id: c.id.clone(),
                detail: format!(
                    "bearer_token_env names {var}, which is not set in toolhost's environment"
                ),
            })?;
            config.auth_header = Some(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let on_list_changed = Server::on_list_changed(me);
        let client = ClientSide {
            on_list_changed: on_list_changed.clone(),
            answers_input: true,
        };
        let init = async {
            let service = client
                .serve_with_lifecycle(
                    transport,
                    rmcp::ClientLifecycleMode::Auto {
                        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                        legacy_version: Some(rmcp::model::ProtocolVersion::V_2025_11_25),
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            listed(service).await
        };
        match tokio::time::timeout(c.startup_timeout(), init).await {
            Ok(Ok((service, tools))) => {
                self.keep_tools(tools);
                tracing::info!(server = %c.id, url, "MCP server reached over HTTP");
                let listen =
                    listen_for_tool_changes(&service, on_list_changed, &c.id, c.startup_timeout())
                        .await;
                Ok(Live {
                    service,
                    child: None,
                    listen,
                    _tmp: None,
                })
            }
            Ok(Err(detail)) => Err(McpError::Initialize {
                id: c.id.clone(),
                detail: format!("{detail} (at {url})"),
            }),
            Err(_) => Err(McpError::StartupTimeout {
                id: c.id.clone(),
                timeout: c.startup_timeout,
            }),
        }
    }

    async fn connect_child(&self, me: Weak<Server>) -> Result<Live, McpError> {
        let c = &self.config;
        let confined = confine::confine(c, &self.sandbox)?;
        let mut cmd = tokio::process::Command::new(&c.command);
        cmd.args(&c.args)
            .envs(&c.env)
            .env(NESTING_ENV, (nesting() + 1).to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        if let Some(cwd) = &c.cwd {
            cmd.current_dir(cwd);
        }
        if let Some(tmp) = &confined.tmp {
            cmd.env("TMPDIR", tmp.path());
        }
        if let Some(prepared) = confined.prepared {
            prepared.attach(cmd.as_std_mut());
        }
        let mut child = cmd.spawn().map_err(|e| McpError::Spawn {
            id: c.id.clone(),
            command: c.command.clone(),
            detail: if e.kind() == std::io::ErrorKind::PermissionDenied && confined.tmp.is_some()
            {
                format!(
                    "{e}: under its sandbox ({}) it may run only programs in the system directories, the workspace and its readable roots; add the program's directory to `readable_roots`",
                    confined.label
                )
            } else {
                e.to_string()
            },
        })?;
        *self.confined.lock().unwrap_or_else(PoisonError::into_inner) = confined.label.clone();
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(McpError::Spawn {
                id: c.id.clone(),
                command: c.command.clone(),
                detail: "no stdio pipes".into(),
            });
        };
        let child = Arc::new(tokio::sync::Mutex::new(child));
        let client = ClientSide {
            on_list_changed: Server::on_list_changed(me),
            answers_input: false,
        };
        let init = async {
            let service = client
                .serve((stdout, stdin))
                .await
                .map_err(|e| e.to_string())?;
            listed(service).await
        };
        match tokio::time::timeout(c.startup_timeout(), init).await {
            Ok(Ok((service, tools))) => {
                self.keep_tools(tools);
                tracing::info!(server = %c.id, "MCP server started");
                // Started with `initialize` (2025 era): it notifies on the connection.
                Ok(Live {
                    service,
                    child: Some(child),
                    listen: None,
                    _tmp: confined.tmp,
                })
            }
            Ok(Err(detail)) => {
                let status = exit_status(Some(&child)).await;
                let _ = child.lock().await.kill().await;
                Err(McpError::Initialize {
                    id: c.id.clone(),
                    detail: format!("{detail} (process: {status})"),
                })
            }
            Err(_) => {
                let _ = child.lock().await.kill().await;
                Err(McpError::StartupTimeout {
                    id: c.id.clone(),
                    timeout: c.startup_timeout,
                })
            }
        }
    }

    /// Calls a tool, restarting a dead server first (with backoff).
    async fn call(
        self: &Arc<Self>,
        params: CallToolRequestParams,
        cancel: Arc<tokio::sync::Notify>,
    ) -> Result<Called, ToolError> {
        let id = &self.config.id;
        let (peer, child) = {
            let mut conn = self.conn.lock().await;
            if let Conn::Down {
                since,
                backoff,
                reason,
            } = &*conn
            {
                let wait = backoff.saturating_sub(since.elapsed());
                if !wait.is_zero() {
                    return Err(ToolError::failed(format!(
                        "MCP server '{id}' is down ({reason}); next restart attempt in {:.1}s",
                        wait.as_secs_f64()
                    )));
                }
                let next_backoff =
                    (*backoff * 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
                match self.connect(Arc::downgrade(self)).await {
                    Ok(live) => {
                        tracing::info!(server = %id, "MCP server restarted");
                        *conn = Conn::Up(live);
                        self.announce("restart");
                    }
                    Err(e) => {
                        *conn = Conn::Down {
                            since: Instant::now(),
                            backoff: next_backoff,
                            reason: e.to_string(),
                        };
                        return Err(ToolError::failed(format!(
                            "{e}; retrying in {}s",
                            next_backoff.as_secs()
                        )));
                    }
                }
            }
            let Conn::Up(live) = &*conn else {
                return Err(ToolError::failed(format!(
                    "MCP server '{id}' is not running"
                )));
            };
            (live.service.peer().clone(), live.child.clone())
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = peer
            .send_cancellable_request(
                request,
                PeerRequestOptions::with_timeout(self.config.call_timeout()),
            )
            .await;
        let outcome = match sent {
            Ok(handle) => {
                let request_id = handle.id.clone();
                tokio::select! {
                    r = handle.await_response() => r,
                    _ = cancel.notified() => {
                        let _ = peer
                            .notify_cancelled(CancelledNotificationParam::new(
                                Some(request_id),
                                Some("cancelled by toolhost".into()),
                            ))
                            .await;
                        return Err(ToolError::Cancelled(format!("call to MCP server '{id}' cancelled")));
                    }
                }
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(ServerResult::CallToolResult(result)) => Ok(Called::Complete(result)),
            Ok(ServerResult::InputRequiredResult(asked)) => Ok(Called::InputRequired(asked)),
            Ok(_) => Err(ToolError::failed(format!(
                "MCP server '{id}' answered tools/call with something else"
            ))),
            Err(e) => {
                let status = exit_status(child.as_deref()).await;
                let reason = format!("exited with {status}");
                let died = !status.starts_with("still running");
                if died {
                    *self.conn.lock().await = Conn::Down {
                        since: Instant::now(),
                        backoff: Duration::ZERO,
                        reason: reason.clone(),
                    };
                    Err(ToolError::failed(format!(
                        "MCP server '{id}' {reason} during the call; it will be restarted on the next call"
                    )))
                } else {
                    Err(ToolError::failed(format!("MCP server '{id}': {e}")))
                }
            }
        }
    }
}

impl Toolset for McpToolset {
    fn tools(&self) -> Vec<Arc<dyn ToolFactory>> {
        let server = &self.server;
        let tools = server
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        tools
            .iter()
            .map(|t| {
                let schema = Value::Object((*t.input_schema).clone());
                let mut def = ToolDefinition::new(
                    t.name.to_string(),
                    t.description.as_deref().unwrap_or("").to_string(),
                    side_effects_of(t, &server.config.side_effects),
                    schema,
                );
                def.timeout_ms = Some(
                    u64::try_from(server.config.call_timeout().as_millis()).unwrap_or(u64::MAX),
                );
                Arc::new(McpToolFactory {
                    server: server.clone(),
                    definition: def,
                    source: format!("mcp:{}", server.config.id),
                }) as Arc<dyn ToolFactory>
            })
            .collect()
    }

    fn bind(&self, handle: ToolsetHandle) {
        *self
            .server
            .handle
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(handle);
    }

    fn stop(&self) {
        // Synchronous, so it also works while the process is exiting: kill the child now;
        // the connection task ends when its pipes close.
        if let Ok(mut conn) = self.server.conn.try_lock() {
            let down = Conn::Down {
                since: Instant::now(),
                backoff: Duration::from_secs(30),
                reason: STOPPED.into(),
            };
            if let Conn::Up(live) = std::mem::replace(&mut *conn, down) {
                if let Some(Ok(mut child)) = live.child.as_ref().map(|c| c.try_lock()) {
                    let _ = child.start_kill();
                }
                live.service.cancellation_token().cancel();
            }
        }
    }
}

/// Why a server stopped on purpose is down.
const STOPPED: &str = "stopped";

struct McpToolFactory {
    server: Arc<Server>,
    definition: ToolDefinition,
    source: String,
}

impl ToolFactory for McpToolFactory {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(McpTool {
            server: self.server.clone(),
            name: self.definition.name.clone(),
            cancel: Arc::new(tokio::sync::Notify::new()),
        }))
    }
    fn source(&self) -> &str {
        &self.source
    }
    fn placement(&self) -> tool_api::Placement {
        match &self.server.config.url {
            Some(url) => tool_api::Placement::Remote { url: url.clone() },
            None => tool_api::Placement::Server {
                sandbox: self.server.confinement(),
            },
        }
    }
}

struct McpTool {
    server: Arc<Server>,
    name: String,
    cancel: Arc<tokio::sync::Notify>,
}

impl Tool for McpTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Value::Object(args) = input else {
            return Err(ToolError::invalid_input(
                "MCP tool arguments must be a JSON object",
            ));
        };
        let id = &self.server.config.id;
        let mut params = CallToolRequestParams::new(self.name.clone()).with_arguments(args);
        let mut rounds = 0;
        let result = loop {
            let called = self
                .server
                .runtime
                .block_on(self.server.call(params.clone(), self.cancel.clone()))?;
            match called {
                Called::Complete(result) => break result,
                Called::InputRequired(_) if rounds == MAX_INPUT_ROUNDS => {
                    return Err(ToolError::failed(format!(
                        "MCP server '{id}' still asked for input after {MAX_INPUT_ROUNDS} rounds; the call was abandoned"
                    )));
                }
                Called::InputRequired(asked) => {
                    rounds += 1;
                    let requests = asked.input_requests.unwrap_or_default();
                    params.input_responses = Some(input::answer(id, requests, ctx)?);
                    params.request_state = asked.request_state;
                }
            }
        };
        let mut out = ToolOutput::text("");
        out.content = result
            .content
            .iter()
            .filter_map(|c| match c {
                rmcp::model::ContentBlock::Text(t) => Some(tool_api::Content::text(t.text.clone())),
                rmcp::model::ContentBlock::Image(i) => {
                    use base64::Engine as _;
                    Some(
                        match base64::engine::general_purpose::STANDARD.decode(&i.data) {
                            Ok(data) => tool_api::Content::Image {
                                mime: i.mime_type.clone(),
                                data,
                            },
                            // Said, not dropped: the model learns an image was there.
                            Err(e) => tool_api::Content::text(format!(
                                "[an image ({}) from MCP server '{id}' was not valid base64 ({e}) and is left out]",
                                i.mime_type
                            )),
                        },
                    )
                }
                other => serde_json::to_string(other)
                    .ok()
                    .map(tool_api::Content::text),
            })
            .collect();
        out.success = result.is_error != Some(true);
        if let Some(structured) = result.structured_content {
            out.metadata = structured;
        }
        Ok(out)
    }

    fn cancel(&self) -> bool {
        self.cancel.notify_one();
        true
    }
}
