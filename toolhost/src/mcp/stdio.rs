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

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{JsonRpcMessage, RequestId, ServerResult};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use super::screen::{MessageBuffer, Rejection, answered_id, screen};

/// Newline-delimited JSON-RPC over a reader and a writer (a pipe, a socket, a file).
pub struct StdioTransport<R, W> {
    reader: BufReader<R>,
    writer: Arc<Mutex<W>>,
    /// The line read so far. Kept here, not in the reading future, because the protocol
    /// library may drop that future between two reads (it selects over several events).
    line: MessageBuffer,
    /// The ids of the requests read and not yet answered.
    in_flight: Arc<std::sync::Mutex<HashSet<RequestId>>>,
    /// Whether the client is served the 2025-11-25 tasks ([`super::tasks_2025`]).
    tasks_2025: bool,
    /// Whether the client began with `initialize` (a 2025-era client).
    legacy: Arc<AtomicBool>,
}

fn taken(
    ids: &std::sync::Mutex<HashSet<RequestId>>,
) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
    ids.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<R, W> StdioTransport<R, W> {
    /// A transport refusing messages over `max_message_bytes`.
    pub fn new(reader: R, writer: W, max_message_bytes: usize) -> Self
    where
        R: AsyncRead,
    {
        StdioTransport {
            reader: BufReader::with_capacity(64 * 1024, reader),
            writer: Arc::new(Mutex::new(writer)),
            line: MessageBuffer::new(max_message_bytes),
            in_flight: Arc::default(),
            tasks_2025: false,
            legacy: Arc::default(),
        }
    }

    /// Serves 2025-era clients the 2025-11-25 tasks too.
    pub fn with_tasks_2025(mut self, on: bool) -> Self {
        self.tasks_2025 = on;
        self
    }
}

/// A message's bytes; with the 2025-11-25 tasks on, a 2025-era answer to `initialize` or
/// `tools/list` declares them.
fn wire(
    item: &TxJsonRpcMessage<RoleServer>,
    tasks_2025: bool,
    legacy: &AtomicBool,
) -> serde_json::Result<Vec<u8>> {
    if let (true, JsonRpcMessage::Response(response)) = (tasks_2025, item) {
        let adapt: Option<fn(&mut serde_json::Value)> = match &response.result {
            ServerResult::InitializeResult(_) => {
                legacy.store(true, Ordering::Release);
                Some(super::tasks_2025::declare)
            }
            ServerResult::ListToolsResult(_) if legacy.load(Ordering::Acquire) => {
                Some(super::tasks_2025::offer)
            }
            _ => None,
        };
        if let Some(adapt) = adapt {
            let mut message = serde_json::to_value(item)?;
            if let Some(result) = message.get_mut("result") {
                adapt(result);
            }
            return serde_json::to_vec(&message);
        }
    }
    serde_json::to_vec(item)
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> StdioTransport<R, W> {
    /// The next line (or its refusal when over the limit), `None` at end of input.
    /// Cancel-safe: what was read stays in `self`.
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

    /// Answers a refused message from a task of its own, so that the answer is written
    /// whole even if the reading future is dropped.
    fn answer(writer: &Arc<Mutex<W>>, rejection: &Rejection)
    where
        W: Send + 'static,
    {
        rejection.log();
        let Some(response) = rejection.response() else {
            return;
        };
        let mut bytes = response.to_string().into_bytes();
        bytes.push(b'\n');
        let writer = writer.clone();
        tokio::spawn(async move {
            let mut w = writer.lock().await;
            if let Err(e) = async {
                w.write_all(&bytes).await?;
                w.flush().await
            }
            .await
            {
                tracing::debug!("could not answer a refused message: {e}");
            }
        });
    }
}

impl<R, W> Transport<RoleServer> for StdioTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(id) = answered_id(&item) {
            taken(&self.in_flight).remove(id);
        }
        let writer = self.writer.clone();
        let (tasks_2025, legacy) = (self.tasks_2025, self.legacy.clone());
        async move {
            let mut bytes = wire(&item, tasks_2025, &legacy)?;
            bytes.push(b'\n');
            let mut w = writer.lock().await;
            w.write_all(&bytes).await?;
            w.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let line = match self.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!("reading the protocol input failed: {e}");
                    return None;
                }
            };
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
                    Ok(JsonRpcMessage::Request(request))
                        if !taken(&self.in_flight).insert(request.id.clone()) =>
                    {
                        Rejection::duplicate_id(&request.id)
                    }
                    Ok(message) => return Some(message),
                    Err(rejection) => rejection,
                },
                Err(too_large) => too_large,
            };
            Self::answer(&self.writer, &rejection);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.flush().await
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
