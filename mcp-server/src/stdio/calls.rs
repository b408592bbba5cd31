//! A `tools/call` of a 2025-era stdio session answered without rmcp's per-request
//! service.
//!
//! rmcp serves each request of a session by moving it through its service loop: a task
//! per request with the handler's future in it, a cancellation token in its table, and
//! the answer passed back through a channel to the loop, which writes it. For a plain
//! `tools/call` the transport does the same work itself: it builds the request's context
//! as rmcp builds it, runs the same handler ([`McpServer::serve_call`]) on a task of its
//! own, and queues the answer on the output.
//!
//! Plain means what rmcp would pass to the handler unchanged: a session opened with
//! `initialize` at a version before 2026-07-28, and a request whose `_meta` names no
//! protocol version (rmcp would check it), asks for no progress and no log level (sent
//! through rmcp, they could arrive after the answer). Every other message goes to rmcp.
//!
//! As on rmcp's path, `notifications/cancelled` for the request cancels the call, and the
//! call then gets no answer; when the input ends, the calls still running are waited for
//! (as rmcp waits for its own) and their answers written ([`DirectCalls::finish`]).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcMessage, JsonRpcRequest, ProtocolVersion,
    RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use tokio_util::task::TaskTracker;

use super::output::Output;
use super::{InFlight, taken};
use crate::McpServer;

/// Where a stdio session's plain `tools/call` requests go
/// ([`super::StdioTransport::answer_calls`]); open once the session is.
#[derive(Clone)]
pub struct DirectCalls {
    server: Arc<McpServer>,
    /// The initialized session's peer, set only for a 2025-era session.
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    output: Output,
    /// The calls running.
    running: TaskTracker,
}

impl DirectCalls {
    pub(super) fn new(server: McpServer, output: Output) -> DirectCalls {
        DirectCalls {
            server: Arc::new(server),
            peer: Arc::default(),
            output,
            running: TaskTracker::new(),
        }
    }

    /// Waits, at most `grace`, for the calls still running to end, and for every answer
    /// queued to be written: for the session's end, as rmcp waits for its own calls.
    pub async fn finish(&self, grace: Duration) {
        self.running.close();
        let ended = async {
            self.running.wait().await;
            if let Err(e) = self.output.flush().await {
                tracing::debug!("the last answers could not be written: {e}");
            }
        };
        if tokio::time::timeout(grace, ended).await.is_err() {
            tracing::warn!(
                "calls still running {}s after the input ended; their answers are dropped",
                grace.as_secs()
            );
        }
    }

    /// Opens the path for the session `peer` (after `initialize`); a session of
    /// 2026-07-28 or later keeps every request on rmcp's path.
    pub fn open(&self, peer: &Peer<RoleServer>) {
        let legacy = peer
            .peer_info()
            .is_some_and(|info| info.protocol_version < ProtocolVersion::V_2026_07_28);
        if legacy {
            let _ = self.peer.set(peer.clone());
        }
    }

    /// Answers `request` when it is plain (see the module's docs), from a task of its
    /// own: its id is in `in_flight` until the answer is queued. Gives it back otherwise.
    pub(super) fn take(
        &self,
        request: JsonRpcRequest<ClientRequest>,
        in_flight: &Arc<InFlight>,
    ) -> Option<JsonRpcRequest<ClientRequest>> {
        let Some(peer) = self.peer.get() else {
            return Some(request);
        };
        if !plain(&request.request) {
            return Some(request);
        }
        let JsonRpcRequest { id, request, .. } = request;
        let ClientRequest::CallToolRequest(mut call) = request else {
            return Some(JsonRpcRequest::new(id, request));
        };
        // The context as rmcp builds it: the request's `_meta`, then its extensions; its
        // token is the call's (one token per call, not a second one thrown away).
        let mut context = RequestContext::new(id.clone(), peer.clone());
        let ct = context.ct.clone();
        taken(in_flight).insert(id.clone(), Some(ct.clone()));
        context.meta = call
            .extensions
            .remove::<RequestMetaObject>()
            .unwrap_or_default();
        context.extensions = std::mem::take(&mut call.extensions);
        let (server, in_flight, output) =
            (self.server.clone(), in_flight.clone(), self.output.clone());
        // Boxed: the task holds a pointer, not the handler's whole future, which spawning
        // and finishing would copy.
        self.running.spawn(Box::pin(async move {
            let result = server.serve_call(call.params, context).await;
            // Cancelled by the client: no answer, and its id stays taken.
            if ct.is_cancelled() {
                return;
            }
            taken(&in_flight).remove(&id);
            let message = match result.map(ServerResult::from) {
                // Only a 2026-07-28 request can be answered with a round.
                Ok(ServerResult::InputRequiredResult(_)) => ServerJsonRpcMessage::error(
                    McpError::invalid_request(
                        "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
                        None,
                    ),
                    Some(id),
                ),
                // A session before 2026-07-28 is answered in its own shape, without
                // `resultType`, as rmcp answers on its path.
                Ok(mut result) => {
                    result.strip_result_type_for_legacy_peer();
                    ServerJsonRpcMessage::response(result, id)
                }
                Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
            };
            if let Err(e) = answer(&output, &message).await {
                tracing::debug!("could not answer a tools/call: {e}");
            }
        }));
        None
    }
}

/// Whether rmcp would pass `request` to the handler as it is, and nothing it asks for
/// goes through rmcp (see the module's docs).
fn plain(request: &ClientRequest) -> bool {
    // Parsed, a request's `_meta` is in its extensions (as rmcp parses it).
    let meta = request.get_meta();
    matches!(request, ClientRequest::CallToolRequest(_))
        && meta.protocol_version().is_none()
        && meta.get_progress_token().is_none()
        && meta.log_level().is_none()
}

/// Queues `message` as one line.
async fn answer(output: &Output, message: &ServerJsonRpcMessage) -> std::io::Result<()> {
    output.send_message(message).await
}

/// The request a `notifications/cancelled` names, when it is one.
pub(super) fn cancelled_id(message: &ClientJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Notification(n) => match &n.notification {
            rmcp::model::ClientNotification::CancelledNotification(c) => {
                c.params.request_id.as_ref()
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `line` as the transport parses it.
    fn request(line: &str) -> ClientRequest {
        match crate::screen::screen(line.as_bytes()) {
            Ok(JsonRpcMessage::Request(request)) => request.request,
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn a_plain_call_as_parsed_takes_the_direct_path_and_anything_more_goes_to_rmcp() {
        let call = |meta: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"a"}}{meta}}}}}"#
            )
        };
        let cases = [
            (call(""), true),
            (call(r#","_meta":{"note":"kept"}"#), true),
            (call(r#","_meta":{"progressToken":7}"#), false),
            (
                call(r#","_meta":{"io.modelcontextprotocol/logLevel":"debug"}"#),
                false,
            ),
            (
                call(r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}"#),
                false,
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.to_string(),
                false,
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(plain(&request(&line)), expected, "{line}");
        }
    }
}
