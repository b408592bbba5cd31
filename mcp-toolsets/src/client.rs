//! toolhost's side of a connection to a server: what it declares and how it reacts to the
//! server's notifications ([`ClientSide`]), a live connection ([`Live`]), and listening for
//! a 2026-07-28 server's tool list changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::ClientHandler;
use rmcp::service::{NotificationContext, RoleClient, RunningService};

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

/// Installs rustls's `ring` provider for `https://` servers (once; a provider installed by
/// the host first is kept).
pub(crate) fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Client side of the connection: reacts to `tools/list_changed`; over HTTP it also says
/// it can answer form and URL elicitation and `roots/list` (through `input_required`).
#[derive(Clone)]
pub(crate) struct ClientSide {
    pub(crate) on_list_changed: Arc<dyn Fn() + Send + Sync>,
    pub(crate) answers_input: bool,
    /// Where a call in flight takes the server's progress notifications.
    pub(crate) progress: Arc<ProgressRoutes>,
}

/// The calls in flight that take progress, by the progress token of their request, and
/// progress that came for a token before its call was routed (rmcp handles each
/// notification in a task of its own, so one may run before the caller has the request's
/// token): kept, at most [`EARLY_PROGRESS`] lines, until its call is routed.
#[derive(Default)]
pub(crate) struct ProgressRoutes(Mutex<Routing>);

#[derive(Default)]
struct Routing {
    to: HashMap<rmcp::model::ProgressToken, tokio::sync::mpsc::UnboundedSender<String>>,
    early: std::collections::VecDeque<(rmcp::model::ProgressToken, String)>,
}

/// The most progress lines kept for calls not routed yet (the oldest go first).
const EARLY_PROGRESS: usize = 256;

impl ProgressRoutes {
    /// Sends the progress of the request with `token` to `to` until the guard drops.
    pub(crate) fn route(
        self: &Arc<Self>,
        token: rmcp::model::ProgressToken,
        to: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> ProgressGuard {
        let mut routing = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        routing.early.retain(|(t, text)| {
            if *t == token {
                let _ = to.send(text.clone());
            }
            *t != token
        });
        routing.to.insert(token.clone(), to);
        drop(routing);
        ProgressGuard {
            routes: self.clone(),
            token,
        }
    }

    fn send(&self, params: &rmcp::model::ProgressNotificationParam) {
        // What the user sees of it: the server's message, else how far it is.
        let text = match (&params.message, params.total) {
            (Some(message), _) => format!("{message}\n"),
            (None, Some(total)) => format!("progress {}/{total}\n", params.progress),
            (None, None) => format!("progress {}\n", params.progress),
        };
        let mut routing = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match routing.to.get(&params.progress_token) {
            Some(to) => {
                let _ = to.send(text);
            }
            None => {
                if routing.early.len() == EARLY_PROGRESS {
                    routing.early.pop_front();
                }
                routing
                    .early
                    .push_back((params.progress_token.clone(), text));
            }
        }
    }
}

/// A call's progress route, removed when dropped.
pub(crate) struct ProgressGuard {
    routes: Arc<ProgressRoutes>,
    token: rmcp::model::ProgressToken,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.routes
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .to
            .remove(&self.token);
    }
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

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.send(&params);
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

pub(crate) struct Live {
    pub(crate) service: RunningService<RoleClient, ClientSide>,
    /// The server's process; `None` for a server reached over HTTP.
    pub(crate) child: Option<Arc<tokio::sync::Mutex<tokio::process::Child>>>,
    /// The task reading a 2026-07-28 server's `subscriptions/listen` stream, stopped with
    /// the connection.
    pub(crate) listen: Option<tokio::task::AbortHandle>,
    /// The private temporary directory of a sandboxed server, removed when it stops.
    pub(crate) _tmp: Option<sandbox::PrivateTmp>,
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
pub(crate) async fn listen_for_tool_changes(
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
