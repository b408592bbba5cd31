//! A stdio server's connection as rmcp's transport ([`Lines`]): one JSON-RPC message per
//! line each way, read and written as rmcp's own line transport does, with what a gateway
//! needs on top:
//!
//! - each progress notification goes to its call as it is read, before the message after
//!   it: the answer to a call never overtakes the call's own progress (rmcp would hand it
//!   to a task of its own, which may run after the answer has reached the call);
//! - the answer to a `tools/call` is read straight into its result. Read as any answer, it
//!   is tried as each result type of the protocol in turn until one fits, and the sixteenth
//!   does: about 27,000 instructions an answer (callgrind), most of them spent making error
//!   messages that are thrown away. An answer that is not a plain result (a task, an
//!   `input_required` round, an error) is read the general way.
//!
//! The reader hands on at most [`crate::pace::TURN`] messages before it lets the runtime
//! run the calls they answered, so their answers go on to the client while the rest of a
//! batch is read ([`crate::pace`]).
//!
//! As rmcp's: a line longer than the limit is dropped (logged), input that is not JSON is
//! ignored, and well-formed JSON that is no message is answered with `Invalid Request`.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorData, JsonRpcMessage,
    JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage, ServerNotification,
    ServerResult,
};
use rmcp::service::RoleClient;
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};

use super::outbox::{Direct, Writer};
use crate::relay::CallRoutes;
use envelope::{Answered, Envelope, plain_answer};

/// The longest line taken from a server (as rmcp's line transport: 16 MiB); a longer one
/// is dropped.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// At most this many `tools/call` requests are remembered unanswered (a server that never
/// answers does not grow the set without end: past it, the set starts again, and an answer
/// to a forgotten call is read the general way).
const REMEMBERED: usize = 65_536;

/// One server's stdin and stdout, as rmcp's transport.
pub(crate) struct Lines<R> {
    read: BufReader<R>,
    write: Arc<Writer>,
    /// toolhost's own calls on this connection ([`super::outbox`]).
    direct: Arc<Direct>,
    /// The line read so far (kept across a cancelled read: rmcp polls `receive` among
    /// other branches of a `select!`).
    line: Vec<u8>,
    /// The line being read is over [`MAX_LINE`]: the rest of it is skipped.
    skipping: bool,
    /// A well-formed message that was no message: `Invalid Request` is owed.
    owe_invalid: bool,
    calls: Arc<CallRoutes>,
    /// The ids of `tools/call` requests sent and not answered yet.
    tool_calls: HashSet<RequestId, foldhash::fast::RandomState>,
    id: Arc<str>,
    pace: crate::pace::Pace,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    /// The connection over a server's stdout (`read`) and stdin (`write`); progress goes
    /// to `calls`; `id` names the server in the log.
    pub(crate) fn new(
        read: R,
        write: impl AsyncWrite + Send + 'static,
        calls: Arc<CallRoutes>,
        id: &str,
    ) -> Self {
        let write = Arc::new(Writer::new(write));
        Lines {
            read: BufReader::with_capacity(1 << 16, read),
            direct: Direct::new(write.clone()),
            write,
            line: Vec::new(),
            skipping: false,
            owe_invalid: false,
            calls,
            tool_calls: HashSet::default(),
            id: id.into(),
            pace: crate::pace::Pace::default(),
        }
    }

    /// How toolhost sends its own calls on this connection.
    pub(crate) fn direct(&self) -> Arc<Direct> {
        self.direct.clone()
    }

    /// Reads up to the end of the next line into `self.line` (without its `\n`); `false`
    /// at the end of the input. A line over [`MAX_LINE`] is skipped whole.
    async fn next_line(&mut self) -> std::io::Result<bool> {
        loop {
            let buf = self.read.fill_buf().await?;
            if buf.is_empty() {
                return Ok(false);
            }
            let (take, complete) = match memchr::memchr(b'\n', buf) {
                Some(at) => (at, true),
                None => (buf.len(), false),
            };
            if !self.skipping {
                if self.line.len() + take > MAX_LINE {
                    self.skipping = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(&buf[..take]);
                }
            }
            self.read.consume(take + usize::from(complete));
            if !complete {
                continue;
            }
            if std::mem::take(&mut self.skipping) {
                tracing::warn!(server = %self.id, "a message over {MAX_LINE} bytes was dropped");
                continue;
            }
            return Ok(true);
        }
    }

    /// What the line read means: a message, nothing (a line to ignore), or a message that
    /// is none (owed `Invalid Request`).
    fn parse(&mut self) -> Option<ServerJsonRpcMessage> {
        let line = self
            .line
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(&self.line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        // Most lines are the answers to calls: read in one pass where they are plain.
        if let Some((id, result)) = plain_answer(line) {
            if let Some(n) = id.direct() {
                self.answer_direct(n, Ok(Answered::Tool(result)));
                return None;
            }
            let id = id.request_id();
            if self.tool_calls.remove(&id) {
                return Some(JsonRpcMessage::Response(JsonRpcResponse {
                    jsonrpc: JsonRpcVersion2_0,
                    id,
                    result: ServerResult::CallToolResult(result),
                }));
            }
        }
        // toolhost's own calls' other answers (a task, an error), read as far as they need;
        // anyone else's the general way, which reads a plain tool result as the one pass does.
        if let Ok(envelope) = serde_json::from_slice::<Envelope<'_>>(line)
            && envelope.method.is_none()
            && let Some(n) = envelope.id.as_ref().and_then(envelope::Id::direct)
            && let Some(answer) = envelope.answer()
        {
            self.answer_direct(n, answer);
            return None;
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
            Ok(message) => {
                if let JsonRpcMessage::Response(JsonRpcResponse { id, .. }) = &message {
                    self.tool_calls.remove(id);
                } else if let JsonRpcMessage::Error(e) = &message
                    && let Some(id) = &e.id
                {
                    self.tool_calls.remove(id);
                }
                Some(message)
            }
            Err(e) if matches!(e.classify(), serde_json::error::Category::Data) => {
                if ignorable(line) {
                    return None;
                }
                tracing::debug!(server = %self.id, "a message of the server is not one of MCP's: {e}");
                self.owe_invalid = true;
                None
            }
            Err(e) => {
                tracing::debug!(server = %self.id, "ignoring unparsable input from the server: {e}");
                None
            }
        }
    }

    /// Hands the answer to toolhost's own call `n` to it.
    fn answer_direct(&self, n: u64, answer: envelope::Answer) {
        if !self.direct.answer(n, answer) {
            tracing::debug!(server = %self.id, "an answer came to a call that no longer waits (toolhost-{n})");
        }
    }

    /// Answers a message that was no message with `Invalid Request`, as rmcp does.
    async fn answer_invalid(&mut self) {
        let error =
            ClientJsonRpcMessage::error(ErrorData::invalid_request("Invalid request", None), None);
        if self.write.queue(&error).is_ok() {
            let _ = self.write.flush().await;
        }
    }
}

/// Whether a line that is no MCP message may be ignored, as rmcp ignores it: a
/// notification of a method MCP does not define (an editor's, say).
fn ignorable(line: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Notification<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
        id: Option<IgnoredAny>,
    }
    serde_json::from_slice::<Notification<'_>>(line)
        .is_ok_and(|n| n.id.is_none() && n.method.is_some_and(|m| !is_mcp_notification(&m)))
}

/// The notifications MCP defines.
fn is_mcp_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/cancelled"
            | "notifications/initialized"
            | "notifications/message"
            | "notifications/progress"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/resources/updated"
            | "notifications/roots/list_changed"
            | "notifications/subscriptions/acknowledged"
            | "notifications/tools/list_changed"
    )
}

impl<R> rmcp::transport::Transport<RoleClient> for Lines<R>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        mut item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        super::client::without_unwanted_progress(&mut item);
        match &item {
            JsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::CallToolRequest(_)) =>
            {
                if self.tool_calls.len() >= REMEMBERED {
                    self.tool_calls.clear();
                }
                self.tool_calls.insert(r.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.tool_calls.remove(id);
                }
            }
            _ => {}
        }
        let queued = self.write.queue(&item);
        let write = self.write.clone();
        async move {
            queued?;
            write.flush().await
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            if std::mem::take(&mut self.owe_invalid) {
                self.answer_invalid().await;
            }
            self.pace.before_next().await;
            match self.next_line().await {
                Ok(true) => {}
                Ok(false) => {
                    self.direct.close();
                    return None;
                }
                Err(e) => {
                    tracing::debug!(server = %self.id, "reading from the server failed: {e}");
                    self.direct.close();
                    return None;
                }
            }
            let parsed = self.parse();
            self.line.clear();
            self.pace.handed();
            let Some(message) = parsed else { continue };
            if let JsonRpcMessage::Notification(n) = &message
                && let ServerNotification::ProgressNotification(p) = &n.notification
            {
                self.calls.progress(&p.params);
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let write = self.write.clone();
        async move {
            write.close().await;
            Ok(())
        }
    }
}

pub(crate) mod envelope;
#[cfg(test)]
mod tests;
