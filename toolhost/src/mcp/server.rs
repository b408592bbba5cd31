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

use dispatcher_core::{ConfirmationRequest, Dispatcher, Session, ToolResultBlock, ToolUse};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    CreateTaskResult, ElicitRequest, ElicitRequestParams, Implementation, InputRequest,
    InputRequests, InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;
use tokio::sync::oneshot;
use tool_api::{Content, SideEffect};

use super::confirm::{Question, Route, Routes, decision_of, decision_schema};
use super::gateway::Upstreams;
use super::list_changes::Listens;
use super::passthrough::Interest;
use super::progress::watch_call;
use super::request_state::{Confirmations, Opened};
use super::sessions::{Sessions, principal, principal_of};

/// MCP annotations for a side-effect class.
pub fn annotations(class: SideEffect) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(class <= SideEffect::Read)
        .destructive(matches!(class, SideEffect::Write | SideEffect::Execute))
        .open_world(class == SideEffect::Network)
}

/// What every connection and request of one server shares.
pub struct McpShared {
    /// The dispatcher (built with a [`super::McpConfirmer`] over [`Self::routes`]).
    pub dispatcher: Dispatcher,
    /// The calls in flight and how each is confirmed.
    pub routes: Arc<Routes>,
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
    next_call: AtomicU64,
}

impl McpShared {
    /// Shared state for a server.
    pub fn new(
        dispatcher: Dispatcher,
        routes: Arc<Routes>,
        confirmations: Confirmations,
        sessions: Sessions,
        upstreams: Upstreams,
        tasks: Arc<super::tasks::Tasks>,
    ) -> Arc<Self> {
        Arc::new(McpShared {
            dispatcher,
            routes,
            confirmations,
            sessions,
            upstreams,
            tasks,
            listens: Listens::default(),
            next_call: AtomicU64::new(1),
        })
    }
}

/// The MCP handler: one per connection on stdio, one per MCP session or stateless request
/// on HTTP.
pub struct McpServer {
    shared: Arc<McpShared>,
    /// The dispatcher session of this connection (HTTP, 2025 era), opened at first use
    /// (under the lock: concurrent first requests open one session, not two).
    own: Mutex<Option<Session>>,
    /// The task telling this connection's client of tool list changes (2025 era), stopped
    /// with the connection.
    list_watch: Mutex<Option<tokio::task::AbortHandle>>,
    /// Change watches taken when a `subscriptions/listen` was accepted, for its handler.
    early_watches: Mutex<Vec<tokio::sync::watch::Receiver<u64>>>,
    /// The change watch taken when the connection began, for its 2025-era client's
    /// watcher: a change made before `notifications/initialized` is handled is told too.
    connection_watch: Mutex<Option<tokio::sync::watch::Receiver<u64>>>,
    /// What this connection's 2025-era client subscribed to and its log level.
    interest: Arc<Interest>,
    /// The task passing mounted servers' notifications on to that client, stopped with
    /// the connection.
    passing_on: Mutex<Option<tokio::task::AbortHandle>>,
}

/// The protocol era of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    /// 2025-11-25 and older: `initialize`, sessions, server-to-client requests.
    Session,
    /// 2026-07-28: stateless, `input_required` instead of server-to-client requests.
    Stateless,
}

impl Era {
    fn of(context: &RequestContext<RoleServer>) -> Era {
        match context.protocol_version() {
            Some(v) if v >= ProtocolVersion::V_2026_07_28 => Era::Stateless,
            _ => Era::Session,
        }
    }
}

/// The `resultType` of a result passed on from a mounted server, as the client's era has
/// it (a server of the other era, or one that leaves it out, does not decide it).
fn result_type(context: &RequestContext<RoleServer>) -> Option<rmcp::model::ResultType> {
    (Era::of(context) == Era::Stateless).then_some(rmcp::model::ResultType::COMPLETE)
}

/// Whether a 2026 client can take an `input_required` round at all: toolhost's own
/// question (form elicitation) or a mounted server's (elicitation, sampling, roots).
fn takes_rounds(caps: &ClientCapabilities) -> bool {
    let asked = super::confirm::asked_of(caps);
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
fn tool_list(dispatcher: &Dispatcher, session: &Session) -> Vec<Tool> {
    let config = &dispatcher.config().sandbox;
    let workspace = session.workspace().root();
    dispatcher
        .listing_for_session(session)
        .into_iter()
        .map(|l| {
            let mut meta = rmcp::model::MetaObject::new();
            meta.0.insert(
                SANDBOX_META.into(),
                crate::sandbox_report::tool_json(&l, config, workspace),
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
    dispatcher: Dispatcher,
    session: Session,
    changes: tokio::sync::watch::Receiver<u64>,
    notify: impl Fn() -> Fut,
) where
    Fut: std::future::Future<Output = Result<(), String>>,
{
    super::list_changes::tell_of_changes(changes, || tool_list(&dispatcher, &session), notify)
        .await;
}

impl McpServer {
    /// A handler over the shared state.
    pub fn new(shared: Arc<McpShared>) -> Self {
        McpServer {
            own: Mutex::new(None),
            list_watch: Mutex::new(None),
            early_watches: Mutex::new(Vec::new()),
            connection_watch: Mutex::new(Some(shared.dispatcher.watch_tools())),
            interest: Arc::default(),
            passing_on: Mutex::new(None),
            shared,
        }
    }

    /// The session a request's calls run in.
    fn session(&self, era: Era, principal: &str) -> Result<Session, McpError> {
        let opened = |id: &str, open: &dyn Fn(&str) -> Result<Session, String>| {
            open(id)
                .map_err(|e| McpError::internal_error(format!("cannot open a session: {e}"), None))
        };
        match &self.shared.sessions {
            Sessions::One(session) => Ok(session.clone()),
            Sessions::PerClient { open, by_principal } => match era {
                Era::Stateless => {
                    let mut sessions = by_principal.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(s) = sessions.get(principal) {
                        return Ok(s.clone());
                    }
                    let s = opened(&format!("mcp-{principal}"), open.as_ref())?;
                    sessions.insert(principal.to_string(), s.clone());
                    Ok(s)
                }
                Era::Session => {
                    let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(s) = own.as_ref() {
                        return Ok(s.clone());
                    }
                    let n = self.shared.next_call.fetch_add(1, Ordering::Relaxed);
                    let s = opened(&format!("mcp-http-{n}"), open.as_ref())?;
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
            let mut read = server
                .read_resource(request)
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
                match self
                    .shared
                    .confirmations
                    .open(&state, &principal, &key, &arguments)
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
            let asked = caps.as_ref().map(super::confirm::asked_of);
            let got = server
                .get_prompt(request, asked)
                .await
                .map_err(|e| McpError::internal_error(e, None))?;
            return match got {
                rmcp::model::GetPromptResponse::Complete(mut got) => {
                    got.result_type = result_type(&context);
                    Ok(got.into())
                }
                rmcp::model::GetPromptResponse::InputRequired(asked)
                    if Era::of(&context) == Era::Stateless
                        && super::confirm::answers_all(&caps.unwrap_or_default(), &asked) =>
                {
                    let state = self.shared.confirmations.seal_relay(
                        &principal,
                        &key,
                        &arguments,
                        asked.request_state,
                    );
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
            Some(server) => server
                .complete(request)
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
        self.shared.upstreams.set_log_level(request.level).await;
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
        if let Err(e) = self.shared.upstreams.subscribe(&uri).await {
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
            self.shared.upstreams.unsubscribe(&request.uri).await;
        }
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
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
        let (dispatcher, peer) = (self.shared.dispatcher.clone(), context.peer);
        let changes = self
            .connection_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| dispatcher.watch_tools());
        let task = tokio::spawn(watch_session_tools(
            dispatcher,
            session,
            changes,
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
            accepted = accepted.resource_subscriptions(uris);
        }
        Some(accepted.build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
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
        // The resources it asked for are subscribed upstream while it listens.
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let mut subscribed = Vec::new();
        for uri in uris {
            match upstreams.subscribe(&uri).await {
                Ok(()) => subscribed.push(uri),
                Err(e) => tracing::warn!("a listen stream's subscription to {uri} failed: {e}"),
            }
        }
        let passed_on = super::passthrough::tell_stream(upstreams.events(), context.sink().clone());
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
                self.shared.dispatcher.clone(),
                session,
                changes,
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

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let session = self.session(Era::of(&context), &principal(&context))?;
        Ok(ListToolsResult::with_all_items(tool_list(
            &self.shared.dispatcher,
            &session,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let era = Era::of(&context);
        let principal = principal(&context);
        tracing::debug!(?era, version = ?context.protocol_version(), %principal, "tools/call");
        let session = self.session(era, &principal)?;
        let caps = context.client_capabilities().unwrap_or_default();
        let takes_tasks = self.shared.tasks.settings().enabled && caps.supports_tasks();
        let tool_use_id: Arc<str> = match self.shared.sessions {
            Sessions::One(_) if !takes_tasks => format!("mcp-{}", context.id).into(),
            // Clients sharing a session may reuse JSON-RPC ids, and a task's call outlives
            // its request's id.
            _ => format!(
                "mcp-{}-{}",
                self.shared.next_call.fetch_add(1, Ordering::Relaxed),
                context.id
            )
            .into(),
        };
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let (defer_tx, deferred) = oneshot::channel();
        let caps_declared = caps.clone();
        let mut resume = None;
        let route = match (era, request.request_state) {
            (Era::Stateless, Some(state)) => {
                let opened = self
                    .shared
                    .confirmations
                    .open(&state, &principal, &name, &arguments)
                    .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
                match opened {
                    // A mounted server's round the client answered: its answers go to the
                    // server with the server's state, and a next round can end this one.
                    Opened::Relay { state } => {
                        resume = Some(mcp_toolsets::Resume {
                            responses: request.input_responses.clone().unwrap_or_default(),
                            state,
                        });
                        Route::Defer {
                            to: defer_tx,
                            caps: Box::new(caps),
                            allowed: true,
                        }
                    }
                    Opened::Confirmation => {
                        let answer = request
                            .input_responses
                            .as_ref()
                            .and_then(|r| r.get("confirm"))
                            .ok_or_else(|| {
                                McpError::invalid_params(
                                    "inputResponses has no answer for 'confirm'; retry with the user's answer to the \
                                     confirmation form, or call again without requestState",
                                    None,
                                )
                            })?;
                        Route::Answered(decision_of(answer))
                    }
                }
            }
            (Era::Stateless, None) if takes_rounds(&caps) => {
                // Answers given up front (no round asked for them) are the client's to give:
                // a mounted server gets them, as it would directly; toolhost's own question
                // is never answered by them.
                if let Some(responses) = request.input_responses.clone() {
                    resume = Some(mcp_toolsets::Resume {
                        responses,
                        state: None,
                    });
                }
                Route::Defer {
                    to: defer_tx,
                    caps: Box::new(caps),
                    allowed: false,
                }
            }
            (Era::Session, _)
                if context
                    .peer
                    .supported_elicitation_modes()
                    .contains(&rmcp::service::ElicitationMode::Form) =>
            {
                Route::Elicit(context.peer.clone())
            }
            _ => Route::Fallback,
        };
        let client = (era == Era::Session).then(|| context.peer.clone());
        // What the client can be asked: a 2026 client declares it with the request; to a
        // 2025 client toolhost relays elicitation and sampling, not roots.
        let asked = match era {
            Era::Stateless => Some(caps_declared),
            Era::Session => context.peer.peer_info().map(|i| {
                let mut caps = i.capabilities.clone();
                #[allow(deprecated, reason = "clients still declare roots")]
                {
                    caps.roots = None;
                }
                caps
            }),
        };
        let routes = &self.shared.routes;
        let route = routes.enter(tool_use_id.clone(), route, client, asked);
        let promotion = takes_tasks.then(|| routes.offer_task(tool_use_id.clone()));
        if let Some(resume) = resume {
            routes.resume_with(tool_use_id.clone(), resume);
        }
        let dispatcher = &self.shared.dispatcher;
        let mut call = dispatcher.invocation(
            ToolUse::new(&*tool_use_id, &name, arguments.clone()),
            &session,
        );
        // Live output is forwarded as it comes when the client asked for progress.
        let watcher = context.meta.get_progress_token().map(|token| {
            let events = call.events();
            let (done, finished) = oneshot::channel();
            let peer = context.peer.clone();
            (
                done,
                tokio::spawn(watch_call(events, (token, peer), finished)),
            )
        });
        // A mounted server's log messages during the call, when the request asks for them
        // (2026-07-28's `_meta` logLevel).
        let mut logs = None;
        if let Some(least) = context.meta.log_level()
            && let Some(server) = self.shared.upstreams.server_of_tool(&name)
        {
            // Listening before the server is asked: nothing it sends after is missed.
            let (done, finished) = oneshot::channel();
            let told = tokio::spawn(super::passthrough::tell_call(
                self.shared.upstreams.events(),
                server.clone(),
                least,
                context.peer.clone(),
                finished,
            ));
            self.shared.upstreams.lower_log_level(&server, least).await;
            logs = Some((done, told));
        }
        // What tells the request's client as the call runs: stopped when a task takes the
        // call over (its request has been answered).
        let telling: Vec<tokio::task::AbortHandle> = watcher
            .iter()
            .map(|(_, task)| task.abort_handle())
            .chain(logs.iter().map(|(_, task)| task.abort_handle()))
            .collect();
        // The call, to its result as the client gets it; its route stays set while it runs.
        let run = async move {
            let _route = route;
            let _logs = AbortOnDrop(logs.as_ref().map(|(_, task)| task.abort_handle()));
            let block = call.run().await;
            if let Some((done, task)) = logs {
                // The log messages that came before the answer go first.
                let _ = done.send(());
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
            }
            if let Some((done, task)) = watcher {
                // Flush the last chunks before the result, so that they arrive first.
                let _ = done.send(());
                if tokio::time::timeout(std::time::Duration::from_secs(2), task)
                    .await
                    .is_err()
                {
                    tracing::debug!("live output to the MCP client did not flush in time");
                }
            }
            Finished::of(block)
        };
        let deferred = async {
            match deferred.await {
                Ok(question) => question,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::pin!(deferred);
        let Some(promotion) = promotion else {
            // On the heap: the request task rmcp spawns holds this handler's future, and a
            // large future is copied whole when the task is spawned.
            let mut run = Box::pin(run);
            return tokio::select! {
                // A question first: a relayed round ends the call right after it hands the
                // round over, and its result is not the answer.
                biased;
                // This round ends here: the question goes to the client with a sealed
                // state, and the call (waiting for its answer) is dropped.
                question = &mut deferred => Ok(self.round(question, &principal, &name, &arguments)),
                finished = &mut run => finished.answer(),
                _ = context.ct.cancelled() => {
                    tracing::info!(tool = %name, "client cancelled the call");
                    // Signal only: this task drives the call and must keep polling it.
                    dispatcher.request_cancel(session.id(), &tool_use_id);
                    run.await.answer()
                }
            };
        };
        // A client that takes tasks: the call runs on its own, and becomes a task when it
        // runs past `[mcp.tasks] after`, when a mounted server made a task of it, or when
        // it has to ask its user (the question waits in the task).
        let mut running = tokio::spawn(run);
        let after = tokio::time::sleep(self.shared.tasks.settings().after);
        tokio::pin!(after);
        let asking = tokio::select! {
            biased;
            question = &mut deferred => match question {
                Question::Confirm(request, reply) => Some((request, reply)),
                // A mounted server's round: its call upstream has ended, and so does this
                // round.
                relayed @ Question::Relay(_) => {
                    running.abort();
                    promotion.decide(false);
                    return Ok(self.round(relayed, &principal, &name, &arguments));
                }
            },
            finished = &mut running => {
                promotion.decide(false);
                return Finished::joined(finished).answer();
            }
            () = promotion.asked.notified() => None,
            () = &mut after => None,
            _ = context.ct.cancelled() => {
                tracing::info!(tool = %name, "client cancelled the call");
                dispatcher.request_cancel(session.id(), &tool_use_id);
                promotion.decide(false);
                return Finished::joined(running.await).answer();
            }
        };
        let cancel: super::tasks::Canceller = {
            let (dispatcher, session, call) = (
                dispatcher.clone(),
                session.id().to_string(),
                tool_use_id.clone(),
            );
            Box::new(move || {
                dispatcher.request_cancel(&session, &call);
            })
        };
        let task = self
            .shared
            .tasks
            .create(&principal, session.id(), cancel)
            .filter(|(_, handle)| {
                let became = routes.to_task(&tool_use_id, handle.clone(), asking.is_some());
                if !became {
                    self.shared.tasks.forget(handle.id());
                }
                became
            });
        promotion.decide(task.is_some());
        let Some((task, handle)) = task else {
            // No task (this client's tasks are all running, or a question ended the round
            // first): the call answers in its request, as without tasks.
            if let Some((request, reply)) = asking {
                running.abort();
                return Ok(self.round(
                    Question::Confirm(request, reply),
                    &principal,
                    &name,
                    &arguments,
                ));
            }
            return tokio::select! {
                biased;
                question = &mut deferred => {
                    running.abort();
                    Ok(self.round(question, &principal, &name, &arguments))
                }
                finished = &mut running => Finished::joined(finished).answer(),
            };
        };
        for task in telling {
            task.abort();
        }
        tracing::debug!(tool = %name, task = %handle.id(), "the call became a task");
        if let Some((request, reply)) = asking {
            let asked_in = handle.clone();
            tokio::spawn(async move {
                let _ = reply.send(super::confirm::asked_in_task(asked_in, request).await);
            });
        }
        tokio::spawn(async move {
            handle.finish(Finished::joined(running.await).outcome());
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        self.shared
            .tasks
            .get(&principal(&context), &request.task_id)
            .map(rmcp::model::GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared.tasks.update(
            &principal(&context),
            &request.task_id,
            request.input_responses,
        )
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared
            .tasks
            .cancel(&principal(&context), &request.task_id)
    }
}

/// How a call ended, as its client gets it.
struct Finished {
    result: Result<CallToolResult, McpError>,
    cancelled: bool,
}

impl Finished {
    /// The result block as an MCP result; a mounted server's protocol error (a capability
    /// the client did not declare, a task of its that failed) as that error, as the
    /// client would have had it directly.
    fn of(block: ToolResultBlock) -> Finished {
        let cancelled = block.error_class == Some(dispatcher_core::ErrorClass::Cancelled);
        let refused = block
            .metadata
            .get(mcp_toolsets::ERROR_META)
            .and_then(|e| serde_json::from_value::<McpError>(e.clone()).ok());
        let result = match refused {
            Some(error) => Err(error),
            None => Ok(to_mcp(block)),
        };
        Finished { result, cancelled }
    }

    /// A call that ran on its own: a panic in it is an internal error.
    fn joined(joined: Result<Finished, tokio::task::JoinError>) -> Finished {
        joined.unwrap_or_else(|e| Finished {
            result: Err(McpError::internal_error(
                format!("the call stopped unexpectedly: {e}"),
                None,
            )),
            cancelled: e.is_cancelled(),
        })
    }

    fn answer(self) -> Result<CallToolResponse, McpError> {
        self.result.map(Into::into)
    }

    fn outcome(self) -> super::tasks::Outcome {
        use super::tasks::Outcome;
        match self.result {
            _ if self.cancelled => Outcome::Cancelled,
            Ok(result) => Outcome::Completed(result),
            Err(error) => Outcome::Failed(error),
        }
    }
}

/// A result block as an MCP result.
fn to_mcp(block: ToolResultBlock) -> CallToolResult {
    let content: Vec<ContentBlock> = block
        .content
        .iter()
        .map(|c| match c {
            Content::Text { text } => ContentBlock::text(text.clone()),
            Content::Image { mime, data } => {
                use base64::Engine as _;
                ContentBlock::image(
                    base64::engine::general_purpose::STANDARD.encode(data),
                    mime.clone(),
                )
            }
        })
        .collect();
    let mut result = if block.is_error() {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    // A mounted server's result, whole (audio, embedded resources, structured content),
    // unless toolhost cut it for size.
    if let Some(whole) = block.metadata.get(mcp_toolsets::RESULT_META)
        && block.metadata.get("spooled_output").is_none()
    {
        if let Some(content) = whole
            .get("content")
            .and_then(|c| serde_json::from_value::<Vec<ContentBlock>>(c.clone()).ok())
        {
            result.content = content;
        }
        result.structured_content = whole
            .get("structuredContent")
            .filter(|v| !v.is_null())
            .cloned();
    }
    if !block.record.is_empty() {
        // What the tool did, for the client and its user (never part of the content the
        // model reads): `_meta` is the protocol's place for it.
        let mut meta = rmcp::model::MetaObject::new();
        if !block.record.files_modified.is_empty() {
            meta.0.insert(
                "toolhost/files_modified".into(),
                serde_json::json!(block.record.files_modified),
            );
        }
        if let Some(command) = &block.record.command_executed {
            meta.0.insert(
                "toolhost/command_executed".into(),
                serde_json::json!(command),
            );
        }
        result.meta = Some(meta);
    }
    result
}

/// Stops a task when dropped.
struct AbortOnDrop(Option<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl McpServer {
    /// The `input_required` result that ends a round with `question`: toolhost's own
    /// confirmation, or a mounted server's round whole, its state inside toolhost's.
    fn round(
        &self,
        question: Question,
        principal: &str,
        tool: &str,
        arguments: &Value,
    ) -> CallToolResponse {
        match question {
            Question::Confirm(question, _) => self
                .input_required(&question, principal, tool, arguments)
                .into(),
            Question::Relay(asked) => {
                let state = self.shared.confirmations.seal_relay(
                    principal,
                    tool,
                    arguments,
                    asked.request_state,
                );
                InputRequiredResult::new(asked.input_requests, Some(state)).into()
            }
        }
    }

    /// The `input_required` result asking `question`, with a state sealed for the retry.
    fn input_required(
        &self,
        question: &ConfirmationRequest,
        principal: &str,
        tool: &str,
        arguments: &Value,
    ) -> InputRequiredResult {
        let mut requests = InputRequests::new();
        if let Some(schema) = decision_schema() {
            requests.insert(
                "confirm".to_string(),
                InputRequest::Elicitation(ElicitRequest::new(
                    ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message: super::confirm::question(question),
                        requested_schema: schema,
                    },
                )),
            );
        }
        let state = self.shared.confirmations.seal(principal, tool, arguments);
        InputRequiredResult::new(Some(requests), Some(state))
    }
}
