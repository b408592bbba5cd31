//! The connection to one server, shared by its toolset and its tools' factories
//! ([`Upstream`]): starting it (in its sandbox) or reaching it, listing its tools, calling
//! them (restarting a dead server with backoff), re-listing on a change, stopping it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use dispatcher_core::ToolsetHandle;
use rmcp::model::CallToolResult;
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use tool_api::ToolError;

use crate::config::{InputSchemas, MAX_NESTING, McpServerConfig, NESTING_ENV, nesting};
use crate::confine::ServerSandbox;
use crate::error::UpstreamError;
use crate::pins::PinStore;
use crate::relay::CallRoutes;
use crate::upstream::client::{ClientSide, Live};
use crate::upstream::events::ServerEvent;

mod calling;
pub(crate) mod client;
mod connect;
pub(crate) mod events;
pub(crate) mod http_client;
mod lines;
pub(crate) mod offers;
mod outbox;
pub(crate) mod parked;
mod per_caller;
mod posting;
mod stderr;

/// Who makes a call: the host session it runs in, and what its client can be asked (see
/// [`crate::ClientRelay::capabilities`]).
pub(crate) struct Caller {
    pub(crate) session: String,
    /// The client that made the call, when the host relays to it: asked for its
    /// capabilities only by a call that presents them (a large value, which every call's
    /// state would otherwise carry).
    pub(crate) relay: Option<Arc<dyn crate::relay::ClientRelay>>,
    /// Someone follows the call's live output: the server is asked for its progress.
    pub(crate) progress: bool,
}

impl Caller {
    /// What the calling client can be asked, when the host relays to it.
    pub(crate) fn capabilities(&self) -> Option<rmcp::model::ClientCapabilities> {
        self.relay.as_ref().and_then(|r| r.capabilities())
    }
}

/// What a `tools/call` round got.
pub(crate) enum Called {
    Complete(CallToolResult),
    InputRequired(rmcp::model::InputRequiredResult),
    /// The server made a task of the call (the tasks extension): its result comes from
    /// following the task ([`crate::task`]).
    Task(rmcp::model::CreateTaskResult),
    /// A 2025-era server said the tool has no `tools/call` (`-32601`): it runs only as a
    /// 2025-11-25 task ([`crate::task`]).
    NeedsTask2025,
    /// The server's task for the call failed, with its JSON-RPC error.
    Failed(rmcp::ErrorData),
    /// The server refused the call for a capability the calling client did not declare
    /// (`-32021`): the client's protocol error, not the tool's.
    NeedsCapability(rmcp::ErrorData),
}

/// How toolhost sends its own `tools/call`s on a connection.
pub(crate) enum Way {
    /// Written on a stdio server's input ([`outbox::Direct`]).
    Written(Arc<outbox::Direct>),
    /// Posted to a server over HTTP ([`posting::Posts`]).
    Posted(Arc<posting::Posts>),
    /// Through rmcp's requests.
    Rmcp,
}

enum Conn {
    Up(Live),
    Down {
        since: Instant,
        backoff: Duration,
        reason: String,
    },
}

/// A server's process, shared by its connection and its calls.
pub(crate) type Child = Option<Arc<tokio::sync::Mutex<tokio::process::Child>>>;

/// The connection to one server, shared by the toolset and the factories of its tools.
pub(crate) struct Upstream {
    pub(crate) config: McpServerConfig,
    /// Its sandbox settings (stdio servers).
    sandbox: ServerSandbox,
    /// What the running process is confined by (`host (unconfined)`, `workspace-write`…).
    confined: Mutex<String>,
    pub(crate) runtime: tokio::runtime::Handle,
    conn: tokio::sync::Mutex<Conn>,
    /// The server's last listing: the tools to publish.
    pub(crate) tools: Mutex<Vec<rmcp::model::Tool>>,
    /// The tools of that listing left out, each with why (see [`schema_problem`]), decided
    /// once per listing.
    pub(crate) left_out: Mutex<Vec<(String, String)>>,
    /// Given by the dispatcher when the toolset was bound; announces changed tools.
    pub(crate) handle: Mutex<Option<ToolsetHandle>>,
    /// How many `tools/list_changed` notifications it has sent.
    list_changes: AtomicU64,
    /// Re-listings, one at a time.
    relisting: tokio::sync::Mutex<()>,
    /// Stopped on purpose ([`Upstream::stop`]): what fails after that is no fault.
    stopped: AtomicBool,
    /// The pinned definitions its tools are checked against.
    pins: Arc<dyn PinStore>,
    /// Its tools published although they differ from their pins (`on_change = "warn"`).
    pub(crate) unpinned: Mutex<std::collections::HashSet<String>>,
    /// The version it gave when it was last reached (`serverInfo.version`).
    pub(crate) version: Mutex<Option<Arc<str>>>,
    /// The calls in flight, which take the server's progress and requests.
    pub(crate) calls: Arc<CallRoutes>,
    /// Its tools whose input schema promotes arguments to `Mcp-Param-*` headers (SEP-2243):
    /// their calls go through rmcp's requests, which write those headers.
    pub(crate) param_headers: Mutex<std::collections::HashSet<String>>,
    /// Its tools that run only as 2025-11-25 tasks (learnt at their first call).
    pub(crate) tasks_2025: Mutex<std::collections::HashSet<String>>,
    /// The prompts, resources and resource templates it offered when they were last
    /// listed ([`McpToolset::list_offers`]).
    pub(crate) offers: Mutex<Arc<crate::upstream::offers::Offers>>,
    /// What it tells its client besides tool changes and progress.
    pub(crate) events: tokio::sync::broadcast::Sender<ServerEvent>,
    /// The resource subscriptions held for the host's clients.
    pub(crate) subscriptions: crate::upstream::events::Subscriptions,
    /// The log level it was last asked for (its rank), if any.
    pub(crate) log_level: Mutex<Option<u8>>,
    /// Calls waiting for a 2026 client's answer to the server's question.
    pub(crate) parked: crate::upstream::parked::ParkedCalls,
    /// Each caller's own connection, by principal, with the token it presents
    /// (`credentials = "caller"` or `"exchange"`), bounded.
    pub(crate) per_caller: per_caller::PerCaller,
}

/// Whether a schema (or one within it) promotes a property to a header (`x-mcp-header`).
fn names_param_headers(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key("x-mcp-header") || map.values().any(names_param_headers)
        }
        Value::Array(items) => items.iter().any(names_param_headers),
        _ => false,
    }
}

/// Takes a connection down for good: its process is killed (its connection task ends when
/// the pipes close) and what it writes from now on is not logged.
fn take_down(conn: &mut Conn) {
    let down = Conn::Down {
        since: Instant::now(),
        backoff: Duration::from_secs(30),
        reason: "stopped".into(),
    };
    if let Conn::Up(live) = std::mem::replace(conn, down) {
        live.hush();
        if let Some(child) = &live.child {
            match child.try_lock() {
                Ok(mut child) => {
                    let _ = child.start_kill();
                }
                // Someone waits on it: killed once they are done.
                Err(_) => {
                    let child = child.clone();
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        runtime.spawn(async move {
                            let _ = child.lock().await.start_kill();
                        });
                    }
                }
            }
        }
        live.service.cancellation_token().cancel();
    }
}

async fn exit_status(child: Option<&tokio::sync::Mutex<tokio::process::Child>>) -> String {
    let Some(child) = child else {
        return "still running (reached over HTTP)".to_string();
    };
    match waited(child).await {
        Ok(Some(status)) => status.to_string(),
        Ok(None) => "still running but not answering".to_string(),
        Err(e) => format!("unknown exit status ({e})"),
    }
}

/// How the child ended, if it has (or does within half a second).
async fn waited(
    child: &tokio::sync::Mutex<tokio::process::Child>,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let mut child = child.lock().await;
    match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
        Ok(r) => r.map(Some),
        Err(_) => Ok(None),
    }
}

/// Why an MCP tool cannot be published as it is, if it cannot: its input schema is outside
/// the subset the dispatcher publishes (what model providers accept; unless its entry
/// takes schemas as given), or not a schema.
fn schema_problem(tool: &rmcp::model::Tool, schemas: InputSchemas) -> Option<String> {
    let name = tool.name.as_ref();
    let schema = Value::Object((*tool.input_schema).clone());
    let subset = match schemas {
        InputSchemas::Subset => dispatcher_core::schema::check_subset(name, &schema)
            .map_err(|e| format!("{e}; or set `input_schemas = \"as-given\"` in its [[mcp_servers]] entry to publish it as it is")),
        InputSchemas::AsGiven => Ok(()),
    };
    subset
        .and_then(|()| {
            dispatcher_core::schema::InputValidator::compile(name, &schema)
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .err()
}

impl Upstream {
    /// What its process runs in (see [`McpToolset::confinement`]).
    pub(crate) fn confinement(&self) -> String {
        self.confined
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) async fn start(
        config: McpServerConfig,
        sandbox: ServerSandbox,
        pins: Arc<dyn PinStore>,
    ) -> Result<Arc<Upstream>, UpstreamError> {
        if config.url.is_none() && nesting() >= MAX_NESTING {
            return Err(UpstreamError::Initialize {
                id: config.id.clone(),
                detail: format!(
                    "not started: this toolhost is {} levels deep in toolhosts started as MCP servers ({NESTING_ENV}); \
                     a configuration that starts toolhost as its own MCP server would recurse without end",
                    nesting()
                ),
            });
        }
        let server = Arc::new(Upstream {
            runtime: tokio::runtime::Handle::current(),
            conn: tokio::sync::Mutex::new(Conn::Down {
                since: Instant::now(),
                backoff: Duration::ZERO,
                reason: "not started".into(),
            }),
            tools: Mutex::new(Vec::new()),
            left_out: Mutex::new(Vec::new()),
            unpinned: Mutex::default(),
            version: Mutex::default(),
            param_headers: Mutex::default(),
            handle: Mutex::new(None),
            list_changes: AtomicU64::new(0),
            relisting: tokio::sync::Mutex::new(()),
            stopped: AtomicBool::new(false),
            pins,
            calls: Arc::default(),
            tasks_2025: Mutex::default(),
            offers: Mutex::default(),
            events: tokio::sync::broadcast::channel(crate::upstream::events::EVENTS).0,
            subscriptions: crate::upstream::events::Subscriptions::default(),
            log_level: Mutex::new(None),
            parked: crate::upstream::parked::ParkedCalls::default(),
            per_caller: per_caller::PerCaller::default(),
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

    /// Toolhost's side of a new connection to it.
    fn client_side(&self, me: Weak<Upstream>) -> ClientSide {
        ClientSide {
            on_list_changed: Upstream::on_list_changed(me.clone()),
            on_offers_changed: Upstream::on_offers_changed(me),
            events: self.events.clone(),
            calls: self.calls.clone(),
            id: self.config.id.clone(),
            workspace: self.sandbox.workspace.as_path().into(),
        }
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
    fn on_list_changed(me: Weak<Upstream>) -> Arc<dyn Fn() + Send + Sync> {
        Arc::new(move || {
            let Some(this) = me.upgrade() else { return };
            this.list_changes.fetch_add(1, Ordering::AcqRel);
            let runtime = this.runtime.clone();
            runtime.spawn(async move {
                match this.relist().await {
                    Ok(true) => this.announce("tools/list_changed"),
                    Ok(false) => {}
                    // Stopped on purpose meanwhile (toolhost is exiting): nothing wrong.
                    Err(e) if this.stopped.load(Ordering::Acquire) => {
                        tracing::debug!(server = %this.config.id, "not re-listed, stopped: {e}")
                    }
                    Err(e) => {
                        tracing::warn!(server = %this.config.id, "re-listing tools failed: {e}")
                    }
                }
            });
        })
    }

    /// Lists the server's tools again and keeps them; `Ok(false)` when it was stopped on
    /// purpose (nothing to re-list, nothing wrong). Re-listings run one at a time, so an
    /// older listing never replaces a newer one; the connection is locked only to reach
    /// the peer, so stopping the server never waits for a listing.
    async fn relist(&self) -> Result<bool, String> {
        let _one_at_a_time = self.relisting.lock().await;
        let peer = match &*self.conn.lock().await {
            Conn::Up(live) => live.service.peer().clone(),
            Conn::Down { .. } if self.stopped.load(Ordering::Acquire) => return Ok(false),
            Conn::Down { .. } => return Err("server is down".into()),
        };
        let tools = peer.list_all_tools().await.map_err(|e| e.to_string())?;
        if self.stopped.load(Ordering::Acquire) {
            return Ok(false);
        }
        self.keep_tools(tools);
        Ok(true)
    }

    /// Keeps a fresh listing of the server's tools: those to publish, and those left out
    /// (logged).
    fn keep_tools(&self, listed: Vec<rmcp::model::Tool>) {
        let mut tools = Vec::with_capacity(listed.len());
        let mut left_out = Vec::new();
        for tool in listed {
            match schema_problem(&tool, self.config.input_schemas) {
                None => tools.push(tool),
                Some(why) => {
                    tracing::warn!(server = %self.config.id, "{why}: left out, the server's other tools are published");
                    left_out.push((tool.name.to_string(), why));
                }
            }
        }
        let tools = self.pinned(tools, &mut left_out);
        *self
            .param_headers
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = tools
            .iter()
            .filter(|t| {
                t.input_schema.contains_key("x-mcp-header")
                    || t.input_schema.values().any(names_param_headers)
            })
            .map(|t| t.name.to_string())
            .collect();
        *self.tools.lock().unwrap_or_else(PoisonError::into_inner) = tools;
        *self.left_out.lock().unwrap_or_else(PoisonError::into_inner) = left_out;
    }

    /// `tools` checked against their pinned definitions: those that changed are withheld
    /// (into `left_out`, saying what changed and how to approve) or, with `on_change =
    /// "warn"`, kept with a warning. Where the pins cannot be read, every tool is withheld:
    /// a change could not be seen.
    fn pinned(
        &self,
        tools: Vec<rmcp::model::Tool>,
        left_out: &mut Vec<(String, String)>,
    ) -> Vec<rmcp::model::Tool> {
        let id = &self.config.id;
        let verdicts = match crate::pins::check(self.pins.as_ref(), &self.config.pin_key(), &tools)
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(server = %id, "{e}: its tools are withheld");
                left_out.extend(tools.iter().map(|t| {
                    (
                        t.name.to_string(),
                        format!("tool '{}' withheld: {e}", t.name),
                    )
                }));
                return Vec::new();
            }
        };
        let mut kept = Vec::with_capacity(tools.len());
        let mut unpinned = std::collections::HashSet::new();
        for (tool, verdict) in tools.into_iter().zip(verdicts) {
            let crate::pins::Verdict::Changed(change) = verdict else {
                kept.push(tool);
                continue;
            };
            let name = tool.name.to_string();
            match self.config.on_change {
                crate::pins::OnChange::Block => {
                    let why = format!(
                        "tool '{name}' withheld: its definition changed since it was pinned ({change}); \
                         if you trust the change, approve it with `toolhost mcp approve {id} {name}`"
                    );
                    tracing::warn!(server = %id, "{why}");
                    left_out.push((name, why));
                }
                crate::pins::OnChange::Warn => {
                    tracing::warn!(server = %id, "tool '{name}' changed its definition since it was pinned ({change}); published anyway (on_change = \"warn\"); `toolhost mcp approve {id} {name}` pins the new one");
                    unpinned.insert(name);
                    kept.push(tool);
                }
            }
        }
        *self.unpinned.lock().unwrap_or_else(PoisonError::into_inner) = unpinned;
        kept
    }

    /// The connection's peer and process, starting the server again first if it is down
    /// and its backoff has passed.
    /// The connected server's peer; `None` when it is not connected (nothing is started).
    pub(crate) async fn peer_if_up(&self) -> Option<Peer<RoleClient>> {
        match &*self.conn.lock().await {
            Conn::Up(live) => Some(live.service.peer().clone()),
            _ => None,
        }
    }

    pub(crate) async fn live_peer(
        self: &Arc<Self>,
    ) -> Result<(Peer<RoleClient>, Child), ToolError> {
        self.live().await.map(|(peer, child, _)| (peer, child))
    }

    /// [`Upstream::live_peer`], and how toolhost sends its own calls on the connection
    /// (a stdio server's).
    pub(crate) async fn live(
        self: &Arc<Self>,
    ) -> Result<(Peer<RoleClient>, Child, Way), ToolError> {
        let id = &self.config.id;
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
            // On the heap: a restart's future is large, and every call would carry it.
            match Box::pin(self.connect(Arc::downgrade(self))).await {
                Ok(live) => {
                    tracing::info!(server = %id, "MCP server restarted");
                    let peer = live.service.peer().clone();
                    *conn = Conn::Up(live);
                    self.stopped.store(false, Ordering::Release);
                    self.announce("restart");
                    // What the host's clients hold there is asked for again: its offers may
                    // have changed, and it has forgotten their subscriptions.
                    let this = self.clone();
                    self.runtime
                        .spawn(async move { this.after_restart(peer).await });
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
        let way = match (&live.direct, &live.posts) {
            (Some(direct), _) => Way::Written(direct.clone()),
            (None, Some(posts)) => Way::Posted(posts.clone()),
            (None, None) => Way::Rmcp,
        };
        Ok((live.service.peer().clone(), live.child.clone(), way))
    }

    /// [`Upstream::stop`], then waits (up to 5 s) until its process has exited and been
    /// reaped.
    pub(crate) async fn stop_and_reap(self: &Arc<Self>) {
        let child = match &*self.conn.lock().await {
            Conn::Up(live) => live.child.clone(),
            _ => None,
        };
        self.stop();
        if let Some(child) = child {
            let reaped = async {
                let mut child = child.lock().await;
                let _ = child.start_kill();
                child.wait().await
            };
            if tokio::time::timeout(Duration::from_secs(5), reaped)
                .await
                .is_err()
            {
                tracing::warn!(server = %self.config.id, "a stopped connection's process did not exit within 5 s");
            }
        }
    }

    /// Stops it now (synchronous, so it also works while the process is exiting); its
    /// next call starts it again.
    /// A connection busy at that moment (a call reaching its peer) is stopped as soon as
    /// it is free, by a task of its own.
    pub(crate) fn stop(self: &Arc<Self>) {
        self.stopped.store(true, Ordering::Release);
        self.per_caller.stop();
        // Kill the child now: the connection task ends when its pipes close.
        match self.conn.try_lock() {
            Ok(mut conn) => take_down(&mut conn),
            Err(_) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let this = self.clone();
                    runtime.spawn(async move { take_down(&mut *this.conn.lock().await) });
                }
            }
        }
    }
}
