//! The MCP request handler: `tools/list` and `tools/call` over the dispatcher, for both
//! protocol eras at once.
//!
//! - `tools/list` lists the session's visible tools with their input schemas and annotations
//!   derived from side effects: `none`/`read` are read-only, `write`/`execute` destructive,
//!   `network` open-world.
//! - `tools/call` goes through the dispatcher: unknown tools, invalid arguments, denials and
//!   tool failures come back as results with `isError: true` and the dispatcher's message;
//!   only protocol faults are JSON-RPC errors.
//! - `notifications/cancelled` cancels the call (the shell's process group is stopped).
//! - The server declares `tools.listChanged` and tells a client when its session's tool
//!   list changes ([`super::list_changes`]): after `notifications/initialized` (2025 era),
//!   or on a `subscriptions/listen` stream that asks for `toolsListChanged` (2026-07-28).
//! - A call whose request carries `_meta.progressToken` gets the tool's live output
//!   (`tool.output_delta`, e.g. a command's stdout as it prints) as
//!   `notifications/progress`: `progress` counts the characters streamed so far and
//!   `message` holds the chunk ([`super::progress`]).
//!
//! How the user is asked: [`super::confirm`].

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dispatcher_core::{Dispatcher, Session, ToolListing};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, Implementation,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;
use tool_api::SideEffect;

use crate::era::Era;
use crate::gateway::Upstreams;
use crate::list_changes::Listens;
use crate::passthrough::Interest;
use crate::request_state::{Confirmations, Opened};
use crate::sessions::{Principal, Sessions, principal, principal_of};

mod call;
mod finding;
mod task_requests;

/// MCP annotations for a side-effect class.
pub fn annotations(class: SideEffect) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(class <= SideEffect::Read)
        .destructive(matches!(class, SideEffect::Write | SideEffect::Execute))
        .open_world(class == SideEffect::Network)
}

/// What every connection and request of one server shares.
pub struct McpShared {
    /// The dispatcher (built with a [`super::McpConfirmer`]: each call carries its route
    /// to its user).
    pub dispatcher: Dispatcher,
    /// Seals and opens stateless confirmations.
    pub confirmations: Confirmations,
    /// Where calls run.
    pub sessions: Sessions,
    /// The open `subscriptions/listen` streams, which a stopping server ends.
    pub listens: Listens,
    /// The mounted MCP servers whose prompts and resources pass through.
    pub upstreams: Upstreams,
    /// The calls that became tasks.
    pub tasks: Arc<super::tasks::Tasks>,
    /// Callers see tools of their own (`[[access]]` rules): a 2026-07-28 `tools/list`
    /// answer says `cacheScope: "private"`, so that no cache shares it across callers.
    tools_per_caller: std::sync::atomic::AtomicBool,
    pub(super) next_call: AtomicU64,
    /// How a token for a mounted server is obtained for a caller (`credentials =
    /// "exchange"`): the host's identity provider, when it is a client of its own.
    pub(super) exchange: std::sync::OnceLock<Arc<dyn mcp_toolsets::TokenExchange>>,
    /// Progressive discovery (`[mcp.discovery]`), replaced whole on a reload.
    discovery: std::sync::RwLock<Arc<crate::discovery::Discovery>>,
}

impl McpShared {
    /// Shared state for a server.
    pub fn new(
        dispatcher: Dispatcher,
        confirmations: Confirmations,
        sessions: Sessions,
        upstreams: Upstreams,
        tasks: Arc<super::tasks::Tasks>,
    ) -> Arc<Self> {
        Arc::new(McpShared {
            dispatcher,
            confirmations,
            sessions,
            upstreams,
            tasks,
            listens: Listens::default(),
            tools_per_caller: std::sync::atomic::AtomicBool::new(false),
            next_call: AtomicU64::new(1),
            exchange: std::sync::OnceLock::new(),
            discovery: std::sync::RwLock::new(Arc::default()),
        })
    }

    /// Sets progressive discovery (`[mcp.discovery]`): what the next `tools/list` and
    /// search of every session follows.
    pub fn set_discovery(&self, discovery: crate::discovery::Discovery) {
        *self
            .discovery
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(discovery);
    }

    /// Progressive discovery as set now.
    pub fn discovery(&self) -> Arc<crate::discovery::Discovery> {
        self.discovery
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Exchanges each caller's token for one to a mounted server whose entry takes
    /// `credentials = "exchange"`, through `exchange` (set once; a second is ignored).
    /// Each call carries the exchange with its caller ([`mcp_toolsets::Origin`]).
    pub fn exchange_tokens_through(&self, exchange: Arc<dyn mcp_toolsets::TokenExchange>) {
        let _ = self.exchange.set(exchange);
    }

    /// Says whether callers see tools of their own (`[[access]]` rules): a 2026-07-28
    /// `tools/list` answer then says `cacheScope: "private"`.
    pub fn set_tools_per_caller(&self, per_caller: bool) {
        self.tools_per_caller.store(per_caller, Ordering::Relaxed);
    }
}

/// The resource subscriptions of one accepted `subscriptions/listen`: the URIs accepted,
/// and each one's subscription on its way upstream.
type EarlySubscriptions = (
    Vec<String>,
    Vec<tokio::task::JoinHandle<Result<(), String>>>,
);

/// The MCP handler: one per connection on stdio, one per MCP session or stateless request
/// on HTTP.
pub struct McpServer {
    pub(super) shared: Arc<McpShared>,
    /// The dispatcher session of this connection (HTTP, 2025 era), opened at first use
    /// (under the lock: concurrent first requests open one session, not two).
    own: Mutex<Option<Session>>,
    /// The task telling this connection's client of tool list changes (2025 era), stopped
    /// with the connection.
    list_watch: Mutex<Option<tokio::task::AbortHandle>>,
    /// Change watches taken when a `subscriptions/listen` was accepted, for its handler.
    early_watches: Mutex<Vec<tokio::sync::watch::Receiver<u64>>>,
    /// Mounted servers' events followed from when a `subscriptions/listen` was accepted,
    /// for its handler: what a server tells between the acknowledgment and the handler's
    /// start (a list change the client caused at once) is not missed.
    early_events: Mutex<Vec<super::passthrough::Events>>,
    /// The resource subscriptions of an accepted `subscriptions/listen`, on their way
    /// upstream from before its acknowledgment (a call the client makes at once waits for
    /// them), for its handler: by the URIs accepted.
    early_subscriptions: Mutex<Vec<EarlySubscriptions>>,
    /// The change watch taken when the connection began, for its 2025-era client's
    /// watcher: a change made before `notifications/initialized` is handled is told too.
    connection_watch: Mutex<Option<tokio::sync::watch::Receiver<u64>>>,
    /// What this connection's 2025-era client subscribed to and its log level.
    interest: Arc<Interest>,
    /// The task passing mounted servers' notifications on to that client, stopped with
    /// the connection.
    passing_on: Mutex<Option<tokio::task::AbortHandle>>,
    /// What this connection's 2025-era client declared at `initialize`, for its calls.
    pub(super) declared: crate::caller::DeclaredOnce,
    /// The tools its client found (progressive discovery), listed from then on.
    pub(super) found: Arc<crate::discovery::Found>,
    /// The watch of `found` taken when the connection began, for its 2025-era client's
    /// watcher: a tool found before `notifications/initialized` is handled is told too.
    found_watch: Mutex<Option<tokio::sync::watch::Receiver<u64>>>,
}

/// The `resultType` of a result passed on from a mounted server, as the client's era has
/// it (a server of the other era, or one that leaves it out, does not decide it).
fn result_type(context: &RequestContext<RoleServer>) -> Option<rmcp::model::ResultType> {
    (Era::of(context) == Era::Stateless).then_some(rmcp::model::ResultType::COMPLETE)
}

/// Whether a 2026 client that can be `asked` this ([`crate::route::asked_of`]) can take
/// an `input_required` round at all: toolhost's own question (form elicitation) or a
/// mounted server's (elicitation, sampling, roots).
pub(super) fn takes_rounds(asked: &ClientCapabilities) -> bool {
    #[allow(deprecated, reason = "clients still declare sampling and roots")]
    let more = asked.sampling.is_some() || asked.roots.is_some();
    asked.elicitation.is_some() || more
}

/// What `resources/subscribe` and `resources/unsubscribe` are told when no mounted server
/// offers subscriptions.
const NO_SUBSCRIPTIONS: &str = "toolhost passes resource subscriptions through to the MCP servers it mounts, \
     and none of them offers subscriptions";

/// `-32601` for `method`, naming it and saying what the server does answer (rmcp's own
/// answer carries only the method's name as its message).
fn method_not_found(method: &str, hint: &str) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: '{method}'; {hint}"),
        Some(serde_json::json!({"method": method})),
    )
}

/// A session's `tools/list`: its visible tools with their input schemas, annotations, and
/// in `_meta` (`toolhost/sandbox`) what confines each.
fn tool_list(shared: &McpShared, session: &Session, found: &crate::discovery::Found) -> Vec<Tool> {
    let dispatcher = &shared.dispatcher;
    let discovery = shared.discovery();
    let (listing, discovering) =
        crate::discovery::listed(dispatcher.listing_for_session(session), &discovery, found);
    let mut tools = tools_of(dispatcher, session, listing);
    if discovering {
        tools.extend(crate::discovery::discovery_tools(discovery.results));
    }
    tools
}

/// How `tools/list` shows each of `listing`.
fn tools_of(dispatcher: &Dispatcher, session: &Session, listing: Vec<ToolListing>) -> Vec<Tool> {
    let config = &dispatcher.config().sandbox;
    let workspace = session.workspace().root();
    listing
        .into_iter()
        .map(|l| {
            let mut meta = rmcp::model::MetaObject::new();
            meta.0.insert(
                SANDBOX_META.into(),
                dispatcher_core::confines::tool_json(&l, config, workspace),
            );
            let d = l.definition;
            let schema = match d.input_schema {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            let mut tool = Tool::new(d.name, d.description, Arc::new(schema))
                .annotate(annotations(d.side_effects));
            tool.meta = Some(meta);
            tool
        })
        .collect()
}

/// The `_meta` key of a listed tool that says what confines it.
pub const SANDBOX_META: &str = "toolhost/sandbox";

/// Tells the client of `session` of changes to its tool list (seen by `changes`, subscribed
/// when the client's subscription began) through `notify`, until that fails or the
/// dispatcher is gone.
async fn watch_session_tools<Fut>(
    shared: Arc<McpShared>,
    session: Session,
    found: Arc<crate::discovery::Found>,
    changes: (
        tokio::sync::watch::Receiver<u64>,
        Option<tokio::sync::watch::Receiver<u64>>,
    ),
    notify: impl Fn() -> Fut,
) where
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let (changes, own) = changes;
    super::list_changes::tell_of_changes(
        changes,
        own,
        || tool_list(&shared, &session, &found),
        notify,
    )
    .await;
}

impl McpServer {
    /// A handler over the shared state.
    pub fn new(shared: Arc<McpShared>) -> Self {
        let found = Arc::<crate::discovery::Found>::default();
        McpServer {
            own: Mutex::new(None),
            list_watch: Mutex::new(None),
            early_watches: Mutex::new(Vec::new()),
            early_events: Mutex::new(Vec::new()),
            early_subscriptions: Mutex::new(Vec::new()),
            connection_watch: Mutex::new(Some(shared.dispatcher.watch_tools())),
            interest: Arc::default(),
            passing_on: Mutex::new(None),
            declared: Default::default(),
            found: found.clone(),
            found_watch: Mutex::new(Some(found.watch())),
            shared,
        }
    }

    /// A second handler for the same client's connection (the stdio transport answers
    /// plain calls through one of its own): it shares what that client found.
    pub fn for_same_client(&self) -> Self {
        let mut server = McpServer::new(self.shared.clone());
        server.found = self.found.clone();
        server.found_watch = Mutex::new(None);
        server
    }

    /// The session a request's calls run in.
    pub(super) fn session(&self, era: Era, principal: &Principal) -> Result<Session, McpError> {
        let opened =
            |id: &str,
             shared: bool,
             open: &dyn Fn(&str, &Principal, bool) -> Result<Session, String>| {
                open(id, principal, shared).map_err(|e| {
                    McpError::internal_error(format!("cannot open a session: {e}"), None)
                })
            };
        match &self.shared.sessions {
            Sessions::One(session) => Ok(session.clone()),
            Sessions::PerClient { open, by_principal } => match era {
                Era::Stateless => {
                    let mut sessions = by_principal.lock().unwrap_or_else(|p| p.into_inner());
                    // Found without building its id: a caller's every request looks it up.
                    if let Some((_, s)) = sessions.get(&principal.id).and_then(|kept| {
                        kept.iter().find(|(groups, _)| *groups == principal.groups)
                    }) {
                        return Ok(s.clone());
                    }
                    let s = opened(&principal.session_id(), true, open.as_ref())?;
                    sessions
                        .entry(principal.id.clone())
                        .or_default()
                        .push((principal.groups.clone(), s.clone()));
                    Ok(s)
                }
                Era::Session => {
                    let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(s) = own.as_ref() {
                        // A session is its opener's: another caller presenting its id is
                        // refused, never let into it.
                        if s.principal() != principal.id {
                            return Err(McpError::invalid_request(
                                "this MCP session was opened by another caller: initialize a session of your own",
                                None,
                            ));
                        }
                        return Ok(s.clone());
                    }
                    let n = self.shared.next_call.fetch_add(1, Ordering::Relaxed);
                    let s = opened(&format!("mcp-http-{n}"), false, open.as_ref())?;
                    Ok(own.insert(s).clone())
                }
            },
        }
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        for task in [&mut self.list_watch, &mut self.passing_on] {
            if let Some(task) = task.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
                task.abort();
            }
        }
        // Its subscriptions end with it.
        let uris = self.interest.take_all();
        if !uris.is_empty()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let shared = self.shared.clone();
            handle.spawn(async move {
                for uri in uris {
                    shared.upstreams.unsubscribe(&uri).await;
                }
            });
        }
        // An HTTP client's session ends with its MCP session: stop what still runs there.
        // Its tasks outlive it: the session closes once they have ended.
        let own = self.own.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(session) = own
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let shared = self.shared.clone();
            handle.spawn(async move {
                while shared.tasks.running_in(session.id()) > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                shared.dispatcher.close_session(session.id()).await;
            });
        }
    }
}

impl McpServer {
    /// A listen stream, until its client closes it or the server stops: tool list changes
    /// and what the mounted servers tell, with the resources it asked for subscribed
    /// upstream meanwhile.
    async fn listen_until_closed(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let listens = &self.shared.listens;
        let _open = listens.enter();
        // Any early watch will do: all of this handler's listens are in one session.
        let changes = self
            .early_watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_else(|| self.shared.dispatcher.watch_tools());
        let upstreams = &self.shared.upstreams;
        let events = self
            .early_events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_else(|| upstreams.events());
        // The resources it asked for are subscribed upstream while it listens.
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let mut early = {
            let mut early = self
                .early_subscriptions
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            early
                .iter()
                .position(|(accepted, _)| *accepted == uris)
                .map(|at| early.swap_remove(at).1)
        };
        let mut subscribed = Vec::new();
        for (at, uri) in uris.into_iter().enumerate() {
            let made = match early.as_mut().and_then(|e| e.get_mut(at)) {
                Some(task) => task.await.unwrap_or_else(|e| Err(e.to_string())),
                None => upstreams.subscribe(&uri).await,
            };
            match made {
                Ok(()) => subscribed.push(uri),
                Err(e) => tracing::warn!("a listen stream's subscription to {uri} failed: {e}"),
            }
        }
        let passed_on = super::passthrough::tell_stream(events, context.sink().clone());
        let tools = async {
            if context.accepted().tools_list_changed != Some(true) {
                return std::future::pending().await;
            }
            let request = context.request_context();
            let session = match self.session(Era::of(request), &principal(request)) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("no tool list changes on this stream: {}", e.message);
                    return std::future::pending().await;
                }
            };
            let sink = context.sink().clone();
            watch_session_tools(
                self.shared.clone(),
                session,
                Arc::default(),
                (changes, None),
                move || {
                    let sink = sink.clone();
                    async move {
                        sink.notify_tool_list_changed()
                            .await
                            .map_err(|e| e.to_string())
                    }
                },
            )
            .await;
        };
        tokio::select! {
            () = context.cancelled() => {}
            () = listens.stop.cancelled() => {}
            () = tools => {}
            () = passed_on => {}
        }
        for uri in subscribed {
            upstreams.unsubscribe(&uri).await;
        }
        Ok(())
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        // Prompts and resources are declared (what mounted servers offer; lists empty
        // without them), so that a client that lists them gets an answer, not an error;
        // logging too (mounted servers' log messages). Completion, list changes of prompts
        // and resources, and resource subscriptions are declared when a mounted server
        // offers them.
        let upstreams = &self.shared.upstreams;
        let mut capabilities = serde_json::json!({
            "tools": {"listChanged": true},
            "prompts": {},
            "resources": {},
            "logging": {},
        });
        if upstreams.prompts_change() {
            capabilities["prompts"]["listChanged"] = Value::Bool(true);
        }
        if upstreams.resources_change() {
            capabilities["resources"]["listChanged"] = Value::Bool(true);
        }
        if upstreams.completes() {
            capabilities["completions"] = serde_json::json!({});
        }
        if upstreams.subscribes() {
            capabilities["resources"]["subscribe"] = Value::Bool(true);
        }
        if self.shared.tasks.settings().enabled {
            capabilities["extensions"] = serde_json::json!({ rmcp::model::TASKS_EXTENSION_ID: {} });
        }
        let capabilities: ServerCapabilities =
            serde_json::from_value(capabilities).unwrap_or_default();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "toolhost runs tools with input validation, workspace scoping and a confirmation policy. \
                 Errors come back as tool results with isError set; read them and adjust.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        // Both eras: 2024-11-05 to 2025-11-25 with `initialize`, and 2026-07-28.
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        Ok(rmcp::model::ListPromptsResult::with_all_items(
            self.shared.upstreams.prompts(),
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        Ok(rmcp::model::ListResourcesResult::with_all_items(
            self.shared.upstreams.resources(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            self.shared.upstreams.templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        if let Some(server) = self.shared.upstreams.resource(&request.uri) {
            let mut read = Box::pin(server.read_resource(request))
                .await
                .map_err(|e| McpError::internal_error(e, None))?;
            read.result_type = result_type(&context);
            return Ok(read.into());
        }
        // An unknown URI: 2026-07-28 says -32602 with the URI; earlier revisions'
        // convention is -32002.
        let data = Some(serde_json::json!({"uri": request.uri}));
        let message = format!(
            "Resource not found: {} (no mounted MCP server offers it; resources/list shows what there is)",
            request.uri
        );
        Err(match Era::of(&context) {
            Era::Stateless => McpError::invalid_params(message, data),
            Era::Session => McpError::resource_not_found(message, data),
        })
    }

    async fn get_prompt(
        &self,
        mut request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        if let Some((server, own_name)) = self.shared.upstreams.prompt(&request.name) {
            let published = std::mem::replace(&mut request.name, own_name);
            // A relayed round of the server's (2026-07-28) is bound, like a tool call's, to
            // the caller, the prompt and its arguments.
            let principal = principal(&context);
            let key = format!("prompts/get {published}");
            let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
            let caps = context.client_capabilities();
            if Era::of(&context) == Era::Stateless
                && let Some(state) = request.request_state.take()
            {
                match Box::pin(self.shared.confirmations.open(
                    &state,
                    &principal.id,
                    &key,
                    &arguments,
                ))
                .await
                {
                    Ok(Opened::Relay { state }) => request.request_state = state,
                    Ok(Opened::Confirmation) => {
                        let refused = super::request_state::StateRefused::Invalid;
                        return Err(McpError::invalid_params(refused.to_string(), None));
                    }
                    Err(refused) => {
                        return Err(McpError::invalid_params(refused.to_string(), None));
                    }
                }
            }
            let asked = caps.as_ref().map(crate::route::asked_of);
            let got = Box::pin(server.get_prompt(request, asked))
                .await
                .map_err(|e| McpError::internal_error(e, None))?;
            return match got {
                rmcp::model::GetPromptResponse::Complete(mut got) => {
                    got.result_type = result_type(&context);
                    Ok(got.into())
                }
                rmcp::model::GetPromptResponse::InputRequired(asked)
                    if Era::of(&context) == Era::Stateless
                        && crate::route::answers_all(&caps.unwrap_or_default(), &asked) =>
                {
                    let state = self
                        .shared
                        .confirmations
                        .seal_relay(&principal.id, &key, &arguments, asked.request_state)
                        .await
                        .map_err(call::unsealed)?;
                    Ok(InputRequiredResult::new(asked.input_requests, Some(state)).into())
                }
                _ => Err(McpError::internal_error(
                    format!(
                        "MCP server '{}' asks for input before it gives prompt '{published}', \
                         and this client cannot answer it (it takes input_required rounds only \
                         at protocol 2026-07-28, for what it declared)",
                        server.config().id
                    ),
                    None,
                )),
            };
        }
        // An unknown name is an unknown prompt (-32602, as the specification says), not an
        // unknown method.
        Err(McpError::invalid_params(
            format!(
                "Prompt not found: '{}' (prompts/list shows the prompts of the mounted MCP servers)",
                request.name
            ),
            Some(serde_json::json!({"name": request.name})),
        ))
    }

    async fn complete(
        &self,
        mut request: rmcp::model::CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        let upstreams = &self.shared.upstreams;
        let server = match &mut request.r#ref {
            rmcp::model::Reference::Prompt(p) => upstreams.prompt(&p.name).map(|(server, own)| {
                p.name = own;
                server
            }),
            rmcp::model::Reference::Resource(r) => upstreams.template(&r.uri),
            _ => None,
        };
        match server {
            Some(server) => Box::pin(server.complete(request))
                .await
                .map_err(|e| McpError::internal_error(e, None)),
            // Nothing to complete: no values (what a client of a server without completions
            // gets, and what the conformance suite expects), not an error.
            None => Ok(rmcp::model::CompleteResult::default()),
        }
    }

    #[allow(
        deprecated,
        reason = "logging is deprecated (SEP-2577), but clients of earlier revisions still send setLevel"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // The mounted servers' log messages of this level and above reach this client;
        // toolhost's own logs stay on stderr (TOOLHOST_LOG).
        self.interest.set_log_level(request.level);
        Box::pin(self.shared.upstreams.set_log_level(request.level)).await;
        Ok(())
    }

    #[allow(
        deprecated,
        reason = "resources/subscribe is legacy-only, but clients of earlier revisions still send it"
    )]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !self.shared.upstreams.subscribes() {
            return Err(method_not_found("resources/subscribe", NO_SUBSCRIPTIONS));
        }
        let uri = request.uri;
        if !self.interest.subscribe(&uri) {
            return Ok(());
        }
        if let Err(e) = Box::pin(self.shared.upstreams.subscribe(&uri)).await {
            self.interest.unsubscribe(&uri);
            return Err(McpError::invalid_params(
                format!("cannot subscribe to {uri}: {e}"),
                Some(serde_json::json!({"uri": uri})),
            ));
        }
        Ok(())
    }

    #[allow(
        deprecated,
        reason = "resources/unsubscribe is legacy-only, but clients of earlier revisions still send it"
    )]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !self.shared.upstreams.subscribes() {
            return Err(method_not_found("resources/unsubscribe", NO_SUBSCRIPTIONS));
        }
        if self.interest.unsubscribe(&request.uri) {
            Box::pin(self.shared.upstreams.unsubscribe(&request.uri)).await;
        }
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        if let Some(answer) = Box::pin(self.serve_task_2025(&request, context)).await {
            return answer;
        }
        Err(method_not_found(
            &request.method,
            "this server answers initialize, server/discover, ping, tools/list, tools/call, \
             tasks/get, tasks/update, tasks/cancel (the tasks extension), \
             subscriptions/listen, logging/setLevel, and the prompts and resources of the MCP \
             servers it mounts (prompts/list, prompts/get, resources/list, \
             resources/templates/list, resources/read, resources/subscribe, \
             resources/unsubscribe, completion/complete)",
        ))
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        // Its roots are what a mounted server gets for its calls: the servers are told.
        self.shared.upstreams.roots_changed().await;
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A 2025-era client: its connection carries notifications from here on.
        tracing::debug!("client initialized");
        let session = match self.session(Era::Session, &principal_of(&context.extensions)) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("no tool list changes for this client: {}", e.message);
                return;
            }
        };
        let passing_on = tokio::spawn(super::passthrough::tell_connection(
            self.shared.upstreams.events(),
            context.peer.clone(),
            self.interest.clone(),
        ));
        if let Some(previous) = self
            .passing_on
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(passing_on.abort_handle())
        {
            previous.abort();
        }
        let peer = context.peer;
        let changes = self
            .connection_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| self.shared.dispatcher.watch_tools());
        let found_changes = self
            .found_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| self.found.watch());
        self.found.mark_watched();
        let task = tokio::spawn(watch_session_tools(
            self.shared.clone(),
            session,
            self.found.clone(),
            (changes, Some(found_changes)),
            move || {
                let peer = peer.clone();
                async move {
                    peer.notify_tool_list_changed()
                        .await
                        .map_err(|e| e.to_string())
                }
            },
        ));
        let previous = self
            .list_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(task.abort_handle());
        if let Some(previous) = previous {
            previous.abort();
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Changes are watched from here, before rmcp sends the acknowledgment: a change
        // the client makes right after it must not fall between the two.
        self.early_watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.shared.dispatcher.watch_tools());
        self.early_events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.shared.upstreams.events());
        // Tools always; prompts and resources (what mounted servers offer) when asked, and
        // the resources asked for that a mounted server can tell updates of.
        let upstreams = &self.shared.upstreams;
        let mut accepted = SubscriptionFilter::builder().tools_list_changed();
        if requested.prompts_list_changed == Some(true) && upstreams.prompts_change() {
            accepted = accepted.prompts_list_changed();
        }
        if requested.resources_list_changed == Some(true) && upstreams.resources_change() {
            accepted = accepted.resources_list_changed();
        }
        let uris: Vec<&String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| upstreams.can_subscribe(uri))
            .collect();
        if !uris.is_empty() {
            // Made upstream from now on: a call the client makes once it is told its
            // subscription stands waits for them ([`EarlySubscriptions`]).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let tasks = uris
                    .iter()
                    .map(|uri| runtime.spawn(upstreams.subscribing(uri)))
                    .collect();
                let accepted = uris.iter().map(|uri| uri.to_string()).collect();
                self.early_subscriptions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((accepted, tasks));
            }
            accepted = accepted.resource_subscriptions(uris);
        }
        Some(accepted.build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        Box::pin(self.listen_until_closed(context)).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let era = Era::of(&context);
        let session = self.session(era, &principal(&context))?;
        let mut list =
            ListToolsResult::with_all_items(tool_list(&self.shared, &session, &self.found));
        if era == Era::Stateless && self.shared.tools_per_caller.load(Ordering::Relaxed) {
            list.cache_scope = Some(rmcp::model::CacheScope::Private);
        }
        Ok(list)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Box::pin(self.serve_call(request, context)).await
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        Box::pin(
            self.shared
                .tasks
                .get_anywhere(&principal(&context).id, &request.task_id),
        )
        .await
        .map(rmcp::model::GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Box::pin(self.shared.tasks.update_anywhere(
            &principal(&context).id,
            &request.task_id,
            request.input_responses,
        ))
        .await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Box::pin(
            self.shared
                .tasks
                .cancel_anywhere(&principal(&context).id, &request.task_id),
        )
        .await
    }
}
