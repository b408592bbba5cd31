//! toolhost's side of a connection to a server: what it declares and how it reacts to the
//! server's notifications ([`ClientSide`]), a live connection ([`Live`]), and listening for
//! a 2026-07-28 server's tool list changes.

#![allow(
    deprecated,
    reason = "sampling and logging are deprecated (SEP-2577), but servers still send them, and passing them through is this module's job"
)]

use std::future::Future;
use std::sync::Arc;

use rmcp::ClientHandler;
use rmcp::service::{NotificationContext, RoleClient, RunningService};

use crate::relay::{CallRoutes, FromServer};
use crate::upstream::events::ServerEvent;

/// A connected service and its tools.
pub(crate) async fn listed(
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

/// Client side of the connection: reacts to `tools/list_changed` (and to prompt and
/// resource list changes, resource updates and log messages: [`crate::upstream::events`])
/// and takes the server's requests to the user to the call they are for
/// ([`crate::relay`]). It declares form and URL elicitation and sampling (relayed to the
/// client that made the call, or answered by the host's broker; a call whose client
/// cannot sample fails, naming the server), so the server publishes the tools that need
/// them.
#[derive(Clone)]
pub(crate) struct ClientSide {
    pub(crate) on_list_changed: Arc<dyn Fn() + Send + Sync>,
    /// Lists prompts and resources again, then passes the event on.
    pub(crate) on_offers_changed: Arc<dyn Fn(ServerEvent) + Send + Sync>,
    /// Where resource updates and log messages are passed on.
    pub(crate) events: tokio::sync::broadcast::Sender<ServerEvent>,
    /// The calls in flight, which take the server's progress and requests.
    pub(crate) calls: Arc<CallRoutes>,
    /// The server's id, for the log.
    pub(crate) id: String,
    /// The workspace: the root declared to the server when no client's roots are relayed.
    pub(crate) workspace: Arc<std::path::Path>,
}

impl ClientHandler for ClientSide {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps: rmcp::model::ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            // The session's workspace, or the roots of the client that made the call.
            "roots": {"listChanged": true},
            // toolhost follows a server's tasks itself (`crate::task`).
            "extensions": {rmcp::model::TASKS_EXTENSION_ID: {}},
        }))
        .unwrap_or_default();
        rmcp::model::ClientConfig::new(
            caps,
            rmcp::model::Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        (self.on_list_changed)();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        (self.on_offers_changed)(ServerEvent::PromptsChanged);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        (self.on_offers_changed)(ServerEvent::ResourcesChanged);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self
            .events
            .send(ServerEvent::ResourceUpdated { uri: params.uri });
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.events.send(ServerEvent::Log(params));
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.ask(
            FromServer::Elicit(Box::new(request), reply),
            "elicitation/create",
        )?;
        answer.await.unwrap_or_else(|_| Err(call_ended()))
    }

    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.ask(
            FromServer::Sample(Box::new(request), reply),
            "sampling/createMessage",
        )?;
        answer.await.unwrap_or_else(|_| Err(call_ended()))
    }

    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        // During a call, the call's client may have roots of its own; else the workspace.
        let Ok(to) = self.calls.asker() else {
            return Ok(self.workspace_roots());
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        if to.send(FromServer::Roots(reply)).is_err() {
            return Ok(self.workspace_roots());
        }
        Ok(answer.await.unwrap_or_else(|_| self.workspace_roots()))
    }
}

impl ClientSide {
    /// What `roots/list` answers outside a call, and when no client's roots are relayed.
    pub(crate) fn workspace_roots(&self) -> rmcp::model::ListRootsResult {
        workspace_roots(&self.workspace)
    }
}

/// The workspace as the one root (`file://` URI, named `workspace`).
pub(crate) fn workspace_roots(workspace: &std::path::Path) -> rmcp::model::ListRootsResult {
    let root =
        rmcp::model::Root::new(format!("file://{}", workspace.display())).with_name("workspace");
    rmcp::model::ListRootsResult::new(vec![root])
}

/// What a server is told when the call its request was for ended before it was answered.
fn call_ended() -> rmcp::ErrorData {
    rmcp::ErrorData::internal_error("the tool call this request was for has ended", None)
}

impl ClientSide {
    /// Hands a server's request to the call it is for; the error (logged) when there is
    /// none.
    fn ask(&self, request: FromServer, method: &str) -> Result<(), rmcp::ErrorData> {
        let refused = |why: String| {
            tracing::warn!(server = %self.id, "{method} from the server refused: {why}");
            rmcp::ErrorData::invalid_request(format!("toolhost refused {method}: {why}"), None)
        };
        let to = self.calls.asker().map_err(refused)?;
        to.send(request)
            .map_err(|_| refused("the call it was for has ended".into()))
    }
}

pub(crate) struct Live {
    pub(crate) service: RunningService<RoleClient, ClientSide>,
    /// The server's process; `None` for a server reached over HTTP.
    pub(crate) child: Option<Arc<tokio::sync::Mutex<tokio::process::Child>>>,
    /// How toolhost sends its own `tools/call`s, past rmcp's requests: on a stdio server's
    /// input, or posted to a server over HTTP.
    pub(crate) direct: Option<Arc<super::outbox::Direct>>,
    pub(crate) posts: Option<Arc<super::posting::Posts>>,
    /// The task reading a 2026-07-28 server's `subscriptions/listen` stream, stopped with
    /// the connection.
    pub(crate) listen: Option<tokio::task::AbortHandle>,
    /// A stdio server's error output: hushed when the connection is dropped (toolhost is
    /// stopping it).
    pub(crate) stderr: Option<Arc<super::stderr::StderrTail>>,
    /// The private temporary directory of a sandboxed server, removed when it stops.
    pub(crate) _tmp: Option<sandbox::PrivateTmp>,
    /// Its egress proxy (a server with network): stops accepting when it stops.
    pub(crate) _egress: Option<sandbox::egress::Egress>,
}

impl Live {
    /// toolhost is stopping the server: what it writes now is not the user's to see.
    pub(crate) fn hush(&self) {
        if let Some(stderr) = &self.stderr {
            stderr.hush();
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.hush();
        if let Some(listen) = self.listen.take() {
            listen.abort();
        }
    }
}

/// A 2026-07-28 server sends no notification it was not asked for: when it declares
/// `listChanged` for its tools, prompts or resources, this opens a `subscriptions/listen`
/// stream for those changes and handles each as the connection would, until the stream
/// ends (the server stopped: the next connection opens another). `None` for an older
/// server (it notifies on the connection), one that declares none of them, or one that
/// does not acknowledge the stream within `within`.
pub(crate) async fn listen_for_changes(
    service: &RunningService<RoleClient, ClientSide>,
    client: &ClientSide,
    within: std::time::Duration,
) -> Option<tokio::task::AbortHandle> {
    let id = &client.id;
    let peer = service.peer();
    let info = peer.peer_info()?;
    let stateless = info.protocol_version >= rmcp::model::ProtocolVersion::V_2026_07_28;
    let caps = &info.capabilities;
    let tools = caps.tools.as_ref().and_then(|t| t.list_changed) == Some(true);
    let prompts = caps.prompts.as_ref().and_then(|p| p.list_changed) == Some(true);
    let resources = caps.resources.as_ref().and_then(|r| r.list_changed) == Some(true);
    if !stateless || !(tools || prompts || resources) {
        return None;
    }
    let mut filter = rmcp::model::SubscriptionFilter::builder();
    if tools {
        filter = filter.tools_list_changed();
    }
    if prompts {
        filter = filter.prompts_list_changed();
    }
    if resources {
        filter = filter.resources_list_changed();
    }
    let mut subscription = match tokio::time::timeout(within, peer.listen(filter.build())).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(server = %id, "could not listen for list changes: {e}");
            return None;
        }
        Err(_) => {
            tracing::warn!(
                server = %id,
                "no acknowledgment of the list change subscription within {within:?}; not listening"
            );
            return None;
        }
    };
    let (id, client) = (id.clone(), client.clone());
    let task = tokio::spawn(async move {
        use rmcp::model::ServerNotification as N;
        loop {
            match subscription.next().await {
                Ok(Some(N::ToolListChangedNotification(_))) => (client.on_list_changed)(),
                Ok(Some(N::PromptListChangedNotification(_))) => {
                    (client.on_offers_changed)(ServerEvent::PromptsChanged)
                }
                Ok(Some(N::ResourceListChangedNotification(_))) => {
                    (client.on_offers_changed)(ServerEvent::ResourcesChanged)
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::debug!(server = %id, end = ?subscription.end(), "list change subscription ended");
                    return;
                }
                Err(e) => {
                    tracing::warn!(server = %id, "list change subscription failed: {e}");
                    return;
                }
            }
        }
    });
    Some(task.abort_handle())
}

/// The request meta key by which a call asks its transport to send it without a progress
/// token: nobody follows its live output, so the server is not asked for progress it would
/// spend on writing and toolhost on reading. The transport removes the key with the token.
pub(crate) const NO_PROGRESS: &str = "io.toolhost/no-progress";

/// Takes the progress token out of a request that asked for none ([`NO_PROGRESS`]).
pub(crate) fn without_unwanted_progress(item: &mut rmcp::model::ClientJsonRpcMessage) {
    use rmcp::model::GetMeta as _;
    if let rmcp::model::JsonRpcMessage::Request(r) = item {
        let meta = r.request.get_meta_mut();
        if meta.remove(NO_PROGRESS).is_some() {
            meta.remove("progressToken");
        }
    }
}

/// A server's transport that hands each progress notification to its call as it is read,
/// before the message after it: the answer to a call never overtakes the call's own
/// progress. (rmcp hands each notification to the client's handler in a task of its own,
/// which may run after the answer that followed it has reached the call.) Everything else
/// passes through unchanged. Messages toolhost read elsewhere for the connection (on the
/// event stream of a call it posted itself: [`super::posting`]) are received as if read on
/// it.
pub(crate) struct ProgressFirst<T> {
    pub(crate) inner: T,
    pub(crate) calls: Arc<CallRoutes>,
    pub(crate) read_elsewhere:
        Option<tokio::sync::mpsc::UnboundedReceiver<rmcp::service::RxJsonRpcMessage<RoleClient>>>,
}

impl<T: rmcp::transport::Transport<RoleClient>> rmcp::transport::Transport<RoleClient>
    for ProgressFirst<T>
{
    type Error = T::Error;

    fn send(
        &mut self,
        mut item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        without_unwanted_progress(&mut item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = match &mut self.read_elsewhere {
                Some(elsewhere) => tokio::select! {
                    message = self.inner.receive() => message?,
                    message = elsewhere.recv() => match message {
                        Some(message) => message,
                        // Nothing more will be read elsewhere.
                        None => {
                            self.read_elsewhere = None;
                            continue;
                        }
                    },
                },
                None => self.inner.receive().await?,
            };
            if let rmcp::model::JsonRpcMessage::Notification(n) = &message
                && let rmcp::model::ServerNotification::ProgressNotification(p) = &n.notification
            {
                self.calls.progress(&p.params);
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
