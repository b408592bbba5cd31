//! The stdio transport: newline-delimited JSON-RPC on the protocol's input and output,
//! every line screened ([`super::screen`]) before the protocol library sees it.
//!
//! Replaces rmcp's own byte-stream transport, which drops a line it cannot parse (or one
//! over its length limit) without an answer. Here a refused line is answered with a
//! JSON-RPC error on the same output and the server reads on. A line over the limit is
//! never held: it is read through, its id recovered on the way, and refused with its size.
//!
//! A request whose id is already taken by one still in flight is refused too (`-32600`,
//! naming the id). rmcp keys its requests by id, so a second one would replace the first
//! in its table and one of the two answers would be dropped without a word. An id is free
//! again once its response is sent; the id of a cancelled request stays taken (MCP says a
//! client never reuses an id within a session, and rmcp sends nothing for it).
//!
//! Answers are written by one task ([`output`]), everything ready at once in one write. A
//! 2025-era session's plain `tools/call` is answered by the transport itself, without
//! rmcp's per-request service (`calls`).
//!
//! The reader hands on at most `mcp_toolsets::pace::TURN` messages before it lets the
//! runtime run what they started (`mcp_toolsets::pace`): the first answers (or, in a
//! gateway, the first calls upstream) go out while the rest of a batch is read.

mod calls;
pub mod output;

pub use calls::DirectCalls;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{JsonRpcMessage, RequestId, ServerResult};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio_util::sync::CancellationToken;

use super::screen::{MessageBuffer, Rejection, answered_id, screen};
use output::Output;

/// The ids of the requests read and not yet answered; a request the transport answers
/// itself ([`calls`]) with the token that cancels it.
type InFlight = std::sync::Mutex<InFlightIds>;
/// Keyed by ids the client chose: foldhash's per-map random seed, not SipHash's cost on
/// every request.
type InFlightIds = HashMap<RequestId, Option<CancellationToken>, foldhash::fast::RandomState>;

/// Newline-delimited JSON-RPC over a reader and a writer (a pipe, a socket, a file).
pub struct StdioTransport<R> {
    reader: BufReader<R>,
    output: Output,
    /// The line read so far. Kept here, not in the reading future, because the protocol
    /// library may drop that future between two reads (it selects over several events).
    line: MessageBuffer,
    in_flight: Arc<InFlight>,
    /// Whether the client is served the 2025-11-25 tasks ([`super::tasks_2025`]).
    tasks_2025: bool,
    /// Whether the client began with `initialize` (a 2025-era client).
    legacy: Arc<AtomicBool>,
    /// Where plain `tools/call` requests go, if anywhere but rmcp.
    direct: Option<DirectCalls>,
    pace: mcp_toolsets::pace::Pace,
}

fn taken(ids: &InFlight) -> std::sync::MutexGuard<'_, InFlightIds> {
    ids.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<R> StdioTransport<R> {
    /// A transport refusing messages over `max_message_bytes`; its writing task is
    /// spawned on the current Tokio runtime.
    pub fn new<W>(reader: R, writer: W, max_message_bytes: usize) -> Self
    where
        R: AsyncRead,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        StdioTransport {
            reader: BufReader::with_capacity(64 * 1024, reader),
            output: Output::spawn(writer),
            line: MessageBuffer::new(max_message_bytes),
            in_flight: Arc::default(),
            tasks_2025: false,
            legacy: Arc::default(),
            direct: None,
            pace: mcp_toolsets::pace::Pace::default(),
        }
    }

    /// Serves 2025-era clients the 2025-11-25 tasks too.
    pub fn with_tasks_2025(mut self, on: bool) -> Self {
        self.tasks_2025 = on;
        self
    }

    /// Answers a 2025-era session's plain `tools/call` requests itself, with `server` (a
    /// handler over the same shared state as the one rmcp serves: a call keeps nothing
    /// in the handler), once the returned handle is opened ([`DirectCalls::open`]).
    pub fn answer_calls(&mut self, server: super::McpServer) -> DirectCalls {
        let direct = DirectCalls::new(server, self.output.clone());
        self.direct = Some(direct.clone());
        direct
    }
}

/// With the 2025-11-25 tasks on, a 2025-era answer to `initialize` or `tools/list` as it
/// declares them; `None` for a message sent as it is.
fn adapted(
    item: &TxJsonRpcMessage<RoleServer>,
    tasks_2025: bool,
    legacy: &AtomicBool,
) -> Option<serde_json::Result<Vec<u8>>> {
    let (true, JsonRpcMessage::Response(response)) = (tasks_2025, item) else {
        return None;
    };
    let adapt: fn(&mut serde_json::Value) = match &response.result {
        ServerResult::InitializeResult(_) => {
            legacy.store(true, Ordering::Release);
            super::tasks_2025::declare
        }
        ServerResult::ListToolsResult(_) if legacy.load(Ordering::Acquire) => {
            super::tasks_2025::offer
        }
        _ => return None,
    };
    Some(serde_json::to_value(item).and_then(|mut message| {
        if let Some(result) = message.get_mut("result") {
            adapt(result);
        }
        serde_json::to_vec(&message)
    }))
}

impl<R: AsyncRead + Unpin> StdioTransport<R> {
    /// The next line (or its refusal when over the limit), `None` at end of input.
    /// Cancel-safe: what was read stays in `self`.
    #[allow(
        clippy::result_large_err,
        reason = "a refusal is the rare path (see screen.rs)"
    )]
    async fn next_line(&mut self) -> std::io::Result<Option<Result<Vec<u8>, Rejection>>> {
        loop {
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                return Ok((!self.line.is_empty()).then(|| self.line.take()));
            }
            let (chunk, ends) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], true),
                None => (buf, false),
            };
            let taken = chunk.len() + usize::from(ends);
            self.line.push(chunk);
            self.reader.consume(taken);
            if ends {
                return Ok(Some(self.line.take().map(|mut line| {
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    line
                })));
            }
        }
    }

    /// Answers a refused message: queued now, whole, even if the reading future is
    /// dropped next.
    fn answer(&self, rejection: &Rejection) {
        rejection.log();
        let Some(response) = rejection.response() else {
            return;
        };
        let sent = self.output.send(response.to_string().as_bytes());
        tokio::spawn(async move {
            if let Err(e) = sent.await {
                tracing::debug!("could not answer a refused message: {e}");
            }
        });
    }
}

impl<R> Transport<RoleServer> for StdioTransport<R>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(id) = answered_id(&item) {
            taken(&self.in_flight).remove(id);
        }
        // Queued now, in the order rmcp sends: a notification goes before the answer
        // sent after it. A message sent as it is is serialized straight into the queue.
        let queued = match adapted(&item, self.tasks_2025, &self.legacy) {
            None => self.output.queue_message(&item),
            Some(bytes) => bytes
                .map_err(Into::into)
                .and_then(|bytes| self.output.queue_bytes(&bytes)),
        };
        self.output.within_backlog(queued)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            self.pace.before_next().await;
            let line = match self.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!("reading the protocol input failed: {e}");
                    return None;
                }
            };
            self.pace.handed();
            let rejection = match line {
                Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(mut bytes) => match screen({
                    if self.tasks_2025
                        && let Some(renamed) = super::tasks_2025::rename(&bytes)
                    {
                        bytes = renamed;
                    }
                    &bytes
                }) {
                    Ok(JsonRpcMessage::Request(request)) => {
                        if taken(&self.in_flight).contains_key(&request.id) {
                            Rejection::duplicate_id(&request.id)
                        } else {
                            let passed = match &self.direct {
                                Some(direct) => direct.take(request, &self.in_flight),
                                None => Some(request),
                            };
                            let Some(request) = passed else { continue };
                            taken(&self.in_flight).insert(request.id.clone(), None);
                            return Some(JsonRpcMessage::Request(request));
                        }
                    }
                    Ok(message) => {
                        // A call answered here is cancelled here; rmcp, which does not
                        // know its id, passes the notification by.
                        if let Some(id) = calls::cancelled_id(&message)
                            && let Some(Some(ct)) = taken(&self.in_flight).get(id)
                        {
                            ct.cancel();
                        }
                        return Some(message);
                    }
                    Err(rejection) => rejection,
                },
                Err(too_large) => too_large,
            };
            self.answer(&rejection);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.output.flush().await
    }
}

/// Stdin that reports end-of-file: when the client closes its end, running tools are
/// cancelled at once instead of after the protocol layer's drain period.
pub struct EofNotify<R> {
    inner: R,
    on_eof: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<R> EofNotify<R> {
    /// Wraps `inner`; `on_eof` fires once, at the first end-of-file or read error.
    pub fn new(inner: R, on_eof: tokio::sync::oneshot::Sender<()>) -> Self {
        EofNotify {
            inner,
            on_eof: Some(on_eof),
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EofNotify<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &poll {
            std::task::Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            std::task::Poll::Ready(Err(_)) => true,
            std::task::Poll::Pending => false,
        };
        if ended && let Some(tx) = self.on_eof.take() {
            let _ = tx.send(());
        }
        poll
    }
}

#[cfg(test)]
mod tests;
