//! A stateless (2026-07-28) `tools/call` answered without rmcp's per-request service.
//!
//! rmcp's streamable HTTP service serves every stateless request by building a protocol
//! service for it: it parses the body again (through its generic message type), writes the
//! message back out to a `Value` to check the SEP-2243 headers, starts the service's loop
//! and a task waiting on it, and passes the request and its answer through channels.
//! A `tools/call` whose every part is plain takes this path instead: the message
//! [`crate::screen`] already parsed goes to the same handler
//! ([`McpServer::call_stateless`]) on a task of its own, and its answer is written as rmcp
//! writes it.
//!
//! Plain means what rmcp would accept as it is, checked here as rmcp checks it: a `POST`
//! that accepts JSON and event streams (named plainly, without weights), with a JSON body; one `MCP-Protocol-Version`
//! header, `2026-07-28`, the version in the request's `_meta` too, with the other keys that
//! version requires there (`clientInfo`, `clientCapabilities`); one `Mcp-Method` header,
//! `tools/call`, and one `Mcp-Name` header, the tool's name as it is (not Base64); and
//! nothing to send the client before the answer (no progress token, no log level). Any
//! other request, a refused one included, goes to rmcp, which answers or refuses it as
//! before.
//!
//! As on rmcp's path, a client that goes away (or a request over the timeout, which drops
//! it) cancels the call, and the call still runs to its end, so its events and records
//! are whole; shutdown cancels what still runs.

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, ProtocolVersion,
    RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};
use tokio_util::sync::CancellationToken;

use crate::{Caller, McpServer, principal_of_parts};

/// The one protocol version whose `tools/call` takes this path.
const VERSION: &str = "2026-07-28";

/// The headers SEP-2243 has a 2026-07-28 request carry, named once: a name given as text
/// is parsed and hashed again at every lookup.
pub(super) const PROTOCOL_VERSION: http::HeaderName =
    http::HeaderName::from_static("mcp-protocol-version");
const METHOD: http::HeaderName = http::HeaderName::from_static("mcp-method");
const NAME: http::HeaderName = http::HeaderName::from_static("mcp-name");

/// What answers the fast path's calls.
#[derive(Clone)]
pub(super) struct StatelessCalls {
    /// The handler, for every principal: a stateless call keeps nothing in it.
    server: Arc<McpServer>,
    /// Cancelled at shutdown, after the grace period.
    stop: CancellationToken,
}

impl StatelessCalls {
    pub(super) fn new(server: McpServer, stop: CancellationToken) -> StatelessCalls {
        StatelessCalls {
            server: Arc::new(server),
            stop,
        }
    }

    /// Answers `message` when it can take the fast path (see the module's docs); gives it
    /// back otherwise, for rmcp.
    pub(super) async fn answer(
        &self,
        parts: &Parts,
        message: ClientJsonRpcMessage,
    ) -> Result<Response, ClientJsonRpcMessage> {
        let ClientJsonRpcMessage::Request(mut request) = message else {
            return Err(message);
        };
        let mut call = match request.request {
            ClientRequest::CallToolRequest(call) if plain(parts, &call) => call,
            other => {
                request.request = other;
                return Err(ClientJsonRpcMessage::Request(request));
            }
        };
        let id = request.id;
        let meta = call
            .extensions
            .remove::<RequestMetaObject>()
            .unwrap_or_default();
        let ct = CancellationToken::new();
        let caller = Caller::stateless(principal_of_parts(parts), id.clone(), meta, ct.clone());
        let server = self.server.clone();
        // Polled here, in the request's task: no task of its own, and no wake-up to pass
        // its answer back, unless the request is dropped first.
        let mut running = RunsToEnd::new(
            Box::pin(async move { server.call_stateless(call.params, caller).await }),
            ct.clone(),
        );
        let joined = tokio::select! {
            joined = &mut running => joined,
            () = self.stop.cancelled() => {
                ct.cancel();
                running.await
            }
        };
        let message = match joined {
            Ok(Ok(response)) => ServerJsonRpcMessage::response(ServerResult::from(response), id),
            Ok(Err(error)) => ServerJsonRpcMessage::error(error, Some(id)),
            Err(why) => ServerJsonRpcMessage::error(
                ErrorData::internal_error(format!("the call stopped unexpectedly: {why}"), None),
                Some(id),
            ),
        };
        Ok(json_response(&message))
    }
}

/// The handler's answer to one call.
type Answer = Result<rmcp::model::CallToolResponse, ErrorData>;

/// A call's future, polled by the request that waits for it. Dropped before the answer
/// (the client went away, or the request timed out), it cancels `ct` and the call goes on
/// to its end on a task of its own, so its events and records are whole. A panic in the
/// call is its answer's error, not the connection's end.
struct RunsToEnd {
    call: Option<std::pin::Pin<Box<dyn Future<Output = Answer> + Send>>>,
    ct: CancellationToken,
}

impl RunsToEnd {
    fn new(
        call: std::pin::Pin<Box<dyn Future<Output = Answer> + Send>>,
        ct: CancellationToken,
    ) -> RunsToEnd {
        RunsToEnd {
            call: Some(call),
            ct,
        }
    }
}

impl Future for RunsToEnd {
    type Output = Result<Answer, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let Some(call) = self.call.as_mut() else {
            return std::task::Poll::Ready(Err("the call was already answered".into()));
        };
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call.as_mut().poll(cx)));
        match polled {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(answer)) => {
                self.call = None;
                std::task::Poll::Ready(Ok(answer))
            }
            Err(panic) => {
                self.call = None;
                std::task::Poll::Ready(Err(tool_api::abi::panic_message(&*panic)))
            }
        }
    }
}

impl Drop for RunsToEnd {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        self.ct.cancel();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(call);
            }
            // The runtime itself is going away: nothing is left to run the call on.
            Err(_) => tracing::debug!("a call was dropped with its runtime"),
        }
    }
}

/// Whether rmcp would take `call` as it is, and it needs nothing of rmcp's service.
fn plain(parts: &Parts, call: &CallToolRequest) -> bool {
    // Parsed, a request's `_meta` is in its extensions (as rmcp parses it).
    let none = RequestMetaObject::default();
    let meta = call.extensions.get::<RequestMetaObject>().unwrap_or(&none);
    let version = ProtocolVersion::V_2026_07_28;
    parts.method == http::Method::POST
        && accepts_json_and_events(&parts.headers)
        && is_json(&parts.headers)
        && only_header(&parts.headers, &PROTOCOL_VERSION) == Some(VERSION)
        && only_header(&parts.headers, &METHOD) == Some("tools/call")
        && only_header(&parts.headers, &NAME) == Some(&*call.params.name)
        && meta.protocol_version().as_ref() == Some(&version)
        && meta.missing_required_keys(&version).is_empty()
        && meta.get_progress_token().is_none()
        && meta.log_level().is_none()
}

/// The one value of header `name`, when there is exactly one and it is text.
fn only_header<'a>(headers: &'a http::HeaderMap, name: &http::HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// Whether `Accept` names both `application/json` and `text/event-stream`, as rmcp asks,
/// plainly: a media range with parameters (a weight, a quoted value) is rmcp's to read.
fn accepts_json_and_events(headers: &http::HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(http::header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains([';', '"']) {
            return false;
        }
        for media in value.split(',').map(str::trim) {
            json |= media.eq_ignore_ascii_case("application/json");
            events |= media.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && events
}

/// Whether the body is declared JSON.
fn is_json(headers: &http::HeaderMap) -> bool {
    only_header(headers, &http::header::CONTENT_TYPE).is_some_and(|t| {
        t.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .eq_ignore_ascii_case("application/json")
    })
}

/// The answer as rmcp writes a 2026-07-28 one: JSON, `200` unless the error is one that
/// revision gives an HTTP status of its own.
fn json_response(message: &ServerJsonRpcMessage) -> Response {
    let status = match message {
        ServerJsonRpcMessage::Error(error) => match error.error.code {
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    };
    match serde_json::to_vec(message) {
        Ok(body) => (
            status,
            [(http::header::CONTENT_TYPE, "application/json")],
            Body::from(body),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the answer could not be written as JSON: {e}"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `POST` with the headers a plain 2026-07-28 `tools/call` of `read_file` carries.
    fn parts(accept: &str) -> Parts {
        let (parts, ()) = http::Request::post("/mcp")
            .header("accept", accept)
            .header("content-type", "application/json")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "read_file")
            .body(())
            .expect("a request")
            .into_parts();
        parts
    }

    /// A call of `read_file` as the transport parses it, with `more` in its `_meta`.
    fn call(more: &str) -> CallToolRequest {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"a"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"c","version":"1"}},"io.modelcontextprotocol/clientCapabilities":{{}}{more}}}}}}}"#
        );
        match crate::screen::screen(line.as_bytes()) {
            Ok(ClientJsonRpcMessage::Request(request)) => match request.request {
                ClientRequest::CallToolRequest(call) => call,
                other => panic!("not a call: {other:?}"),
            },
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn a_plain_call_as_parsed_takes_the_fast_path_and_anything_more_goes_to_rmcp() {
        let both = "application/json, text/event-stream";
        let cases = [
            (parts(both), call(""), true),
            (parts(both), call(r#","progressToken":7"#), false),
            (
                parts(both),
                call(r#","io.modelcontextprotocol/logLevel":"debug""#),
                false,
            ),
            (
                parts("application/json;q=0, text/event-stream"),
                call(""),
                false,
            ),
        ];
        for (i, (parts, call, expected)) in cases.into_iter().enumerate() {
            assert_eq!(plain(&parts, &call), expected, "case {i}");
        }
    }

    /// A call that answers once `go` is sent, and says on `ended` that it ran to its end.
    fn call_until(
        go: tokio::sync::oneshot::Receiver<()>,
        ended: tokio::sync::oneshot::Sender<()>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Answer> + Send>> {
        Box::pin(async move {
            let _ = go.await;
            let _ = ended.send(());
            Ok(rmcp::model::CallToolResult::success(vec![]).into())
        })
    }

    #[tokio::test]
    async fn a_call_whose_request_is_dropped_is_told_to_stop_and_runs_to_its_end() {
        let (go_tx, go) = tokio::sync::oneshot::channel();
        let (ended_tx, ended) = tokio::sync::oneshot::channel();
        let ct = CancellationToken::new();
        let mut running = RunsToEnd::new(call_until(go, ended_tx), ct.clone());
        // Polled once, then the request goes away.
        assert!(futures_util::poll!(&mut running).is_pending());
        drop(running);
        assert!(ct.is_cancelled());
        go_tx.send(()).expect("the call is still there");
        tokio::time::timeout(std::time::Duration::from_secs(5), ended)
            .await
            .expect("the call ran to its end")
            .expect("and said so");
    }

    #[tokio::test]
    async fn a_call_answered_in_its_request_is_not_cancelled_and_a_panic_is_its_error() {
        let (go_tx, go) = tokio::sync::oneshot::channel();
        let (ended_tx, _ended) = tokio::sync::oneshot::channel();
        let ct = CancellationToken::new();
        go_tx.send(()).expect("sent");
        let answered = RunsToEnd::new(call_until(go, ended_tx), ct.clone()).await;
        assert!(matches!(answered, Ok(Ok(_))), "{answered:?}");
        assert!(!ct.is_cancelled());
        let panicked = RunsToEnd::new(
            Box::pin(async { panic!("the handler broke") }),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(panicked.err().as_deref(), Some("the handler broke"));
    }
}
