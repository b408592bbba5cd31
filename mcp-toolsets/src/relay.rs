//! What a server sends for a call in flight, and where it goes: its progress (the call's
//! live output) and its requests to the user (`elicitation/create`,
//! `sampling/createMessage`), which go to the client that made the call through the host's
//! [`ClientRelay`], or to the host's confirmation broker when that client cannot take them.
//!
//! A 2025-era server's question to a 2026-07-28 client, which takes no requests while a
//! call runs, parks the call until the client's next round.
//!
//! A progress notification names its call (its progress token). A 2025-era server's
//! request does not: it goes to the call in flight on that connection when there is one,
//! or to the latest of several when they all run in one host session (one client). Calls
//! from several sessions in flight at once leave it ambiguous, and it is declined rather
//! than put to the wrong user.

#![allow(
    deprecated,
    reason = "sampling and logging are deprecated (SEP-2577), but servers still send them, and passing them through is this module's job"
)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    InputRequiredResult, InputResponses, ProgressToken,
};
use tokio::sync::oneshot;

/// What the client that made a call did with a server's request relayed to it.
#[derive(Debug)]
pub enum Relayed<T> {
    /// Its answer, to be passed back to the server unchanged.
    Answered(T),
    /// It was asked and the request failed (the message says how).
    Failed(String),
    /// It cannot take this kind of request (it did not declare the capability, or its
    /// protocol has no way to be asked while a call runs).
    CannotAsk,
}

/// A boxed future of a relay.
pub type RelayFuture<T> = Pin<Box<dyn Future<Output = Relayed<T>> + Send>>;

/// The answers a client gave to a server's `input_required` round that toolhost relayed,
/// brought back by the client's retry: the next round of the call sends them to the server.
#[derive(Debug, Clone)]
pub struct Resume {
    /// The client's `inputResponses`, unchanged.
    pub responses: InputResponses,
    /// The server's `requestState` of that round, unchanged.
    pub state: Option<String>,
}

/// Puts a mounted server's requests to the client that made one call (the host's side of
/// the gateway: toolhost's MCP server implements it over its clients' connections). One
/// relay serves one call: the host attaches it to the call ([`crate::Origin`]), and the
/// call's tool finds it in its context.
pub trait ClientRelay: Send + Sync {
    /// An `elicitation/create` (form or URL), with the server's own message and schema.
    fn elicit(&self, params: ElicitRequestParams) -> RelayFuture<ElicitResult>;
    /// A `sampling/createMessage`.
    fn sample(&self, params: CreateMessageRequestParams) -> RelayFuture<CreateMessageResult>;
    /// A 2026-07-28 server's `input_required` round, handed whole to a client that can
    /// answer every request in it (a client of the same era: its own round ends with
    /// these requests, and its retry brings the answers back through
    /// [`ClientRelay::resume`]). `false`: the client cannot, and toolhost answers.
    fn defer(&self, asked: &InputRequiredResult) -> bool;
    /// The answers this call's retry brought for a round handed over by
    /// [`ClientRelay::defer`], if it is such a retry (taken: a second call says `None`).
    fn resume(&self) -> Option<Resume>;
    /// What the client that made the call can be asked (elicitation, sampling, roots), to
    /// present to a 2026-07-28 server as the call's client capabilities, so that it asks
    /// what the client can answer; `None`: the connection's own declaration stands.
    fn capabilities(&self) -> Option<rmcp::model::ClientCapabilities>;
    /// The server made a task of the call (the tasks extension): the host may make the call
    /// a task of its own for its client. Resolves to whether it did; then what the server's
    /// task asks goes through [`ClientRelay::task_input`].
    fn became_task(&self) -> RelayFuture<bool> {
        Box::pin(std::future::ready(Relayed::Answered(false)))
    }
    /// A `roots/list` of the server while the call runs: the roots of the client that made
    /// the call, when it declared `roots`; [`Relayed::CannotAsk`] leaves the answer to
    /// toolhost (the session's workspace).
    fn roots(&self) -> RelayFuture<rmcp::model::ListRootsResult> {
        Box::pin(std::future::ready(Relayed::CannotAsk))
    }
    /// A request the server's task waits on, under the server's own `key`, put in the
    /// host's task for the call; its answer goes back to the server's task unchanged.
    /// [`Relayed::CannotAsk`] when the call is no task of the host's.
    fn task_input(
        &self,
        key: &str,
        request: rmcp::model::InputRequest,
    ) -> RelayFuture<serde_json::Value> {
        let _ = (key, request);
        Box::pin(std::future::ready(Relayed::CannotAsk))
    }
}

/// Where a call of a mounted server's tool comes from, as the host that took it knows:
/// who calls and with which credentials, and how the server's questions reach the
/// calling client. The host attaches it to the call
/// ([`dispatcher_core::Invocation::extend`]); the call's tool reads it from its context
/// ([`tool_api::ToolContext::extension`]). A call without one (the CLI's, an embedder's)
/// has no caller's credentials and asks through the host's confirmation broker.
#[derive(Clone, Default)]
pub struct Origin {
    /// Who calls, with the access token it presented: what a server whose entry takes its
    /// caller's credentials (`credentials = "caller"` or `"exchange"`) is reached with.
    pub caller: Option<Arc<crate::callers::CallerCredential>>,
    /// How a token for a mounted server is obtained for that caller (`"exchange"`).
    pub exchange: Option<Arc<dyn crate::callers::TokenExchange>>,
    /// Where the server's requests to the user go first: the client that made the call.
    pub relay: Option<Arc<dyn ClientRelay>>,
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("caller", &self.caller)
            .field("exchange", &self.exchange.is_some())
            .field("relay", &self.relay.is_some())
            .finish()
    }
}

/// What the server sent that a call in flight takes.
pub(crate) enum FromServer {
    /// A line of progress: its message, else how far it is.
    Progress(String),
    /// A request to the user, answered through the reply.
    Elicit(
        Box<ElicitRequestParams>,
        oneshot::Sender<Result<ElicitResult, rmcp::ErrorData>>,
    ),
    /// A request to sample a model, answered through the reply.
    Sample(
        Box<CreateMessageRequestParams>,
        oneshot::Sender<Result<CreateMessageResult, rmcp::ErrorData>>,
    ),
    /// `roots/list`, answered through the reply: the roots of the client that made the
    /// call when it declared them, else the session's workspace.
    Roots(oneshot::Sender<rmcp::model::ListRootsResult>),
}

/// The calls in flight on one connection, by the progress token of their request, and
/// progress that came for a token before its call was routed (rmcp handles each
/// notification in a task of its own, so one may run before the caller has the request's
/// token): kept, at most [`EARLY_PROGRESS`] lines, until its call is routed.
#[derive(Default)]
pub(crate) struct CallRoutes(Mutex<Routing>);

struct Route {
    /// The host session the call runs in.
    session: String,
    /// When it was routed (a count).
    order: u64,
    to: crate::mailbox::Sender<FromServer>,
}

#[derive(Default)]
struct Routing {
    /// Keyed by the tokens toolhost gives its requests (a server's notifications only look
    /// them up): a seeded fast hash, not SipHash (a few hundred instructions a call).
    to: HashMap<ProgressToken, Route, foldhash::fast::RandomState>,
    early: std::collections::VecDeque<(ProgressToken, String)>,
    routed: u64,
}

/// The most progress lines kept for calls not routed yet (the oldest go first).
const EARLY_PROGRESS: usize = 256;

impl CallRoutes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Routing> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends what the server sends for the request with `token` (a call in the host
    /// session `session`) to `to` until the guard drops.
    pub(crate) fn route(
        self: &Arc<Self>,
        token: ProgressToken,
        session: &str,
        to: crate::mailbox::Sender<FromServer>,
    ) -> RouteGuard {
        let mut routing = self.lock();
        routing.early.retain(|(t, text)| {
            if *t == token {
                let _ = to.send(FromServer::Progress(text.clone()));
            }
            *t != token
        });
        routing.routed += 1;
        let order = routing.routed;
        routing.to.insert(
            token.clone(),
            Route {
                session: session.to_string(),
                order,
                to,
            },
        );
        drop(routing);
        RouteGuard {
            routes: self.clone(),
            token,
        }
    }

    /// Routes a progress notification to its call.
    pub(crate) fn progress(&self, params: &rmcp::model::ProgressNotificationParam) {
        let text = match (&params.message, params.total) {
            (Some(message), _) => format!("{message}\n"),
            (None, Some(total)) => format!("progress {}/{total}\n", params.progress),
            (None, None) => format!("progress {}\n", params.progress),
        };
        let mut routing = self.lock();
        match routing.to.get(&params.progress_token) {
            Some(route) => {
                let _ = route.to.send(FromServer::Progress(text));
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

    /// Where a request that names no call goes: the call in flight, or the latest of
    /// several in one session. The error says why there is none to send it to.
    pub(crate) fn asker(&self) -> Result<crate::mailbox::Sender<FromServer>, String> {
        let routing = self.lock();
        let latest = routing
            .to
            .values()
            .max_by_key(|r| r.order)
            .ok_or_else(|| "no call of this server is in flight to ask for".to_string())?;
        let sessions: std::collections::HashSet<&str> =
            routing.to.values().map(|r| r.session.as_str()).collect();
        if sessions.len() > 1 {
            return Err(format!(
                "calls from {} sessions are in flight on this server, and its request does not \
                 say which call it is for, so toolhost cannot tell whose user to ask",
                sessions.len()
            ));
        }
        Ok(latest.to.clone())
    }
}

/// A call's route, removed when dropped.
pub(crate) struct RouteGuard {
    routes: Arc<CallRoutes>,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.lock().to.remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(n: i64) -> ProgressToken {
        ProgressToken(rmcp::model::NumberOrString::Number(n))
    }

    fn progress(n: i64, message: &str) -> rmcp::model::ProgressNotificationParam {
        rmcp::model::ProgressNotificationParam::new(token(n), 1.0).with_message(message)
    }

    fn line(rx: &mut crate::mailbox::Receiver<FromServer>) -> Option<String> {
        match rx.try_recv()? {
            FromServer::Progress(text) => Some(text),
            _ => None,
        }
    }

    #[test]
    fn progress_goes_to_its_own_call_even_when_it_comes_first() {
        let routes = Arc::new(CallRoutes::default());
        routes.progress(&progress(2, "early"));
        let (tx1, mut rx1) = crate::mailbox::channel();
        let (tx2, mut rx2) = crate::mailbox::channel();
        let _one = routes.route(token(1), "s", tx1);
        let _two = routes.route(token(2), "s", tx2);
        routes.progress(&progress(1, "one"));
        assert_eq!(line(&mut rx1).as_deref(), Some("one\n"));
        assert_eq!(line(&mut rx2).as_deref(), Some("early\n"));
        assert_eq!(line(&mut rx1), None);
    }

    #[test]
    fn a_request_naming_no_call_goes_to_the_latest_call_of_one_session() {
        let routes = Arc::new(CallRoutes::default());
        assert!(routes.asker().unwrap_err().contains("no call"));
        let (tx1, _rx1) = crate::mailbox::channel();
        let (tx2, mut rx2) = crate::mailbox::channel();
        let _one = routes.route(token(1), "s", tx1);
        let two = routes.route(token(2), "s", tx2);
        routes
            .asker()
            .unwrap()
            .send(FromServer::Progress("x".into()))
            .ok()
            .unwrap();
        assert_eq!(line(&mut rx2).as_deref(), Some("x"));
        drop(two);
        assert!(routes.asker().is_ok());
    }

    #[test]
    fn a_request_naming_no_call_is_refused_when_two_sessions_have_calls_in_flight() {
        let routes = Arc::new(CallRoutes::default());
        let (tx1, _rx1) = crate::mailbox::channel();
        let (tx2, _rx2) = crate::mailbox::channel();
        let _one = routes.route(token(1), "alice", tx1);
        let _two = routes.route(token(2), "bob", tx2);
        let why = routes.asker().unwrap_err();
        assert!(why.contains("2 sessions"), "{why}");
    }
}
