//! rmcp's session manager for the 2025 era's sessions (`Mcp-Session-Id`), holding each
//! session's requests to what `serve --http` promises of any request: one request per id,
//! and each under the request timeout.
//!
//! **One per id.** rmcp routes a session's answers by request id, so a second request with
//! the id of one still in flight takes the first one's place: the first POST then waits
//! for an answer that never comes. Here such a request is answered at once with `-32600`
//! naming the id, as on stdio ([`crate::stdio`]), and the first one runs on. An id is
//! free again once its answer leaves the session. It stays taken when its POST went away
//! before the answer (the request still runs, and its answer would reach the newer
//! request's stream), and when it timed out or was cancelled: MCP says a client never
//! reuses an id within a session. What a session held goes with it when it is closed.
//!
//! **Under the timeout.** A session's answer comes on an event stream whose `200` is sent
//! at once, so the `504` that bounds a stateless request cannot bound it. Here the stream
//! carries the same JSON-RPC error (`-32001`) when the timeout passes before the answer,
//! then ends, and the request is cancelled in its session (as by the client's own
//! `notifications/cancelled`), which cancels its call.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use serde_json::json;

use crate::screen::{Rejection, answered_id};

/// `M`, with each session's requests held to one per id and to the request timeout.
pub struct SessionRequests<M>(Arc<Shared<M>>);

struct Shared<M> {
    inner: M,
    /// The ids each session has taken.
    taken: Mutex<HashMap<SessionId, HashSet<RequestId>>>,
    timeout: Duration,
}

impl<M> SessionRequests<M> {
    /// Wraps `inner`; a request still unanswered after `timeout` gets `-32001` and is
    /// cancelled.
    pub fn new(inner: M, timeout: Duration) -> Self {
        SessionRequests(Arc::new(Shared {
            inner,
            taken: Mutex::default(),
            timeout,
        }))
    }
}

impl<M> Shared<M> {
    fn taken(&self) -> MutexGuard<'_, HashMap<SessionId, HashSet<RequestId>>> {
        self.taken.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `id` in `session`; false when it is taken already.
    fn take(&self, session: &SessionId, id: &RequestId) -> bool {
        self.taken()
            .entry(session.clone())
            .or_default()
            .insert(id.clone())
    }

    /// Frees `id` in `session`, and forgets the session when it holds no other.
    fn free(&self, session: &SessionId, id: &RequestId) {
        let mut taken = self.taken();
        if let Some(ids) = taken.get_mut(session) {
            ids.remove(id);
            if ids.is_empty() {
                taken.remove(session);
            }
        }
    }
}

/// `rejection` as the one message of a stream, logged as every refusal is.
fn error_message(rejection: Rejection, id: &RequestId) -> ServerSseMessage {
    rejection.log();
    ServerSseMessage::from_message(ServerJsonRpcMessage::error(
        rmcp::ErrorData::new(
            rmcp::model::ErrorCode(rejection.code),
            rejection.message,
            rejection.data,
        ),
        Some(id.clone()),
    ))
}

/// A request's stream of messages from its session, up to its answer or its deadline.
struct Answering<M, S> {
    stream: Pin<Box<S>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    shared: Arc<Shared<M>>,
    session: SessionId,
    id: RequestId,
    answered: bool,
    ended: bool,
}

impl<M: SessionManager, S: Stream<Item = ServerSseMessage>> Answering<M, S> {
    /// Cancels the request in its session, as the client's `notifications/cancelled` would.
    fn cancel(&self) {
        let cancelled = serde_json::from_value::<ClientJsonRpcMessage>(json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.id, "reason": "the request timed out"},
        }));
        let (shared, session) = (self.shared.clone(), self.session.clone());
        match cancelled {
            Ok(cancelled) => {
                tokio::spawn(async move {
                    if let Err(e) = shared.inner.accept_message(&session, cancelled).await {
                        tracing::debug!("could not cancel a timed-out request: {e}");
                    }
                });
            }
            Err(e) => tracing::error!("could not cancel a timed-out request: {e}"),
        }
    }
}

impl<M: SessionManager, S: Stream<Item = ServerSseMessage>> Stream for Answering<M, S> {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        match this.stream.as_mut().poll_next(cx) {
            Poll::Ready(Some(message)) => {
                if !this.answered
                    && message.message.as_deref().and_then(answered_id) == Some(&this.id)
                {
                    this.answered = true;
                    this.shared.free(&this.session, &this.id);
                }
                return Poll::Ready(Some(message));
            }
            Poll::Ready(None) => {
                this.ended = true;
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if this.answered || this.deadline.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.ended = true;
        this.cancel();
        let id = serde_json::to_value(&this.id).unwrap_or_default();
        Poll::Ready(Some(error_message(
            Rejection::timed_out(id, this.shared.timeout),
            &this.id,
        )))
    }
}

impl<M: SessionManager> SessionManager for SessionRequests<M> {
    type Error = M::Error;
    type Transport = M::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.0.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.0.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.0.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.0.taken().remove(id);
        self.0.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let JsonRpcMessage::Request(request) = &message else {
            // rmcp asks for a stream for requests only; anything else passes as it is.
            let stream = self.0.inner.create_stream(id, message).await?;
            return Ok(stream.left_stream().left_stream());
        };
        let request = request.id.clone();
        if !self.0.take(id, &request) {
            let refused = error_message(Rejection::duplicate_id(&request), &request);
            return Ok(futures_util::stream::once(async move { refused })
                .right_stream()
                .left_stream());
        }
        let deadline = Box::pin(tokio::time::sleep(self.0.timeout));
        let stream = match self.0.inner.create_stream(id, message).await {
            Ok(stream) => stream,
            Err(e) => {
                self.0.free(id, &request);
                return Err(e);
            }
        };
        Ok(Answering {
            stream: Box::pin(stream),
            deadline,
            shared: self.0.clone(),
            session: id.clone(),
            id: request,
            answered: false,
            ended: false,
        }
        .right_stream())
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.0.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.0.inner.restore_session(id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.0.inner.event_store()
    }
}
