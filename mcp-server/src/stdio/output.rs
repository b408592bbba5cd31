//! The protocol output: whole messages, in the order they were sent, written by one task
//! that writes everything queued since its last write in one go.
//!
//! With several requests in flight, their answers are ready in the same turn of the
//! runtime; writing each with a write and a flush of its own cost a system call and, on a
//! pipe, a wake-up of the client for every answer. Here they go out together.
//!
//! A message is queued when it is sent, before the sender's future runs, so the order of
//! sends is the order on the wire (a tool's last progress notification goes before its
//! result). The future resolves at once unless over [`BACKLOG`] bytes are waiting to be
//! written (a client that does not read): then it waits until the writer catches up.

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::ServerJsonRpcMessage;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, watch};

/// How many bytes may wait to be written before a sender waits.
pub const BACKLOG: u64 = 1 << 20;

/// The sending side of the output; clones share one writer.
#[derive(Clone)]
pub struct Output {
    shared: Arc<Shared>,
    /// How many bytes the writer has written so far; closed when the writer stopped.
    written: watch::Receiver<u64>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer.
    ready: Notify,
}

#[derive(Default)]
struct Queue {
    bytes: Vec<u8>,
    /// How many bytes were ever queued.
    queued: u64,
    /// Why writing stopped, once it has.
    failed: Option<std::io::ErrorKind>,
}

impl Output {
    /// An output writing to `writer` from a task of its own (on the current runtime),
    /// which ends when every clone of the output is gone or a write fails.
    pub fn spawn<W>(writer: W) -> Output
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
        });
        let (progress, written) = watch::channel(0);
        tokio::spawn(write_out(shared.clone(), writer, progress));
        Output { shared, written }
    }

    /// Queues `message` (one JSON-RPC message, no newline in it) as a line now; the future
    /// waits only while the backlog is over [`BACKLOG`], and fails once the output is
    /// closed.
    pub fn send(&self, message: &[u8]) -> impl Future<Output = std::io::Result<()>> + Send + use<> {
        self.within_backlog(self.queue_bytes(message))
    }

    /// [`Output::send`] of `message` serialized straight into the queue, with no buffer of
    /// its own to fill and copy. One that cannot be serialized is not queued at all.
    pub fn send_message(
        &self,
        message: &ServerJsonRpcMessage,
    ) -> impl Future<Output = std::io::Result<()>> + Send + use<> {
        self.within_backlog(self.queue_message(message))
    }

    /// Queues `message` as a line: how many bytes were ever queued, with it.
    pub(super) fn queue_bytes(&self, message: &[u8]) -> std::io::Result<u64> {
        self.queue(|bytes| {
            bytes.extend_from_slice(message);
            Ok(())
        })
    }

    /// Queues `message`, serialized straight into the queue, as a line.
    pub(super) fn queue_message(&self, message: &ServerJsonRpcMessage) -> std::io::Result<u64> {
        self.queue(|bytes| serde_json::to_writer(bytes, message).map_err(Into::into))
    }

    /// Appends one line written by `write` to the queue and wakes the writer: how many
    /// bytes were ever queued, with it. A line `write` fails on is taken back whole.
    fn queue(
        &self,
        write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    ) -> std::io::Result<u64> {
        let queued = {
            let mut queue = self.lock();
            if let Some(kind) = queue.failed {
                return Err(closed(kind));
            }
            let before = queue.bytes.len();
            if let Err(e) = write(&mut queue.bytes) {
                queue.bytes.truncate(before);
                return Err(e);
            }
            queue.bytes.push(b'\n');
            queue.queued += (queue.bytes.len() - before) as u64;
            queue.queued
        };
        self.shared.ready.notify_one();
        Ok(queued)
    }

    /// Resolves at once while no more than [`BACKLOG`] bytes wait before `queued`; fails
    /// when it was not queued or the writer stopped.
    pub(super) fn within_backlog(
        &self,
        queued: std::io::Result<u64>,
    ) -> impl Future<Output = std::io::Result<()>> + Send + use<> {
        let mut written = self.written.clone();
        async move {
            let queued = queued?;
            // Within the backlog at once; otherwise once the writer is back within it.
            written
                .wait_for(|&w| w + BACKLOG >= queued)
                .await
                .map(drop)
                .map_err(|_| closed(std::io::ErrorKind::BrokenPipe))
        }
    }

    /// Waits until everything queued so far is written and flushed.
    pub async fn flush(&self) -> std::io::Result<()> {
        let queued = self.lock().queued;
        let mut written = self.written.clone();
        written
            .wait_for(|&w| w >= queued)
            .await
            .map(drop)
            .map_err(|_| closed(self.lock().failed.unwrap_or(std::io::ErrorKind::BrokenPipe)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn closed(kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::new(kind, "the protocol output is closed")
}

/// Writes what is queued, in batches, until every clone of the output is gone (what was
/// queued by then is written first) or a write fails.
async fn write_out<W: AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    mut writer: W,
    progress: watch::Sender<u64>,
) {
    let mut batch = Vec::new();
    let mut written = 0u64;
    loop {
        std::mem::swap(
            &mut batch,
            &mut shared
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .bytes,
        );
        if batch.is_empty() {
            if progress.is_closed() {
                return;
            }
            // A message queued since the swap left a permit: this wakes at once.
            tokio::select! {
                () = shared.ready.notified() => {}
                () = progress.closed() => {}
            }
            continue;
        }
        let result = async {
            writer.write_all(&batch).await?;
            writer.flush().await
        }
        .await;
        if let Err(e) = result {
            tracing::debug!("writing the protocol output failed: {e}");
            shared
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .failed = Some(e.kind());
            return;
        }
        written += batch.len() as u64;
        batch.clear();
        progress.send_replace(written);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn messages_arrive_whole_and_in_the_order_they_were_sent() {
        let (writer, mut reader) = tokio::io::duplex(1 << 16);
        let output = Output::spawn(writer);
        let sends: Vec<_> = (0..100)
            .map(|i| output.send(format!("{{\"id\":{i}}}").as_bytes()))
            .collect();
        for sent in sends {
            sent.await.unwrap();
        }
        output.flush().await.unwrap();
        drop(output);
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        let expected: String = (0..100).map(|i| format!("{{\"id\":{i}}}\n")).collect();
        assert_eq!(text, expected);
    }

    #[tokio::test]
    async fn a_message_serialized_into_the_queue_is_one_line_between_the_others() {
        let (writer, mut reader) = tokio::io::duplex(1 << 16);
        let output = Output::spawn(writer);
        let message = ServerJsonRpcMessage::response(
            rmcp::model::ServerResult::empty(()),
            rmcp::model::RequestId::Number(7),
        );
        output.send(b"{\"id\":1}").await.unwrap();
        output.send_message(&message).await.unwrap();
        output.send(b"{\"id\":2}").await.unwrap();
        output.flush().await.unwrap();
        drop(output);
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        let serialized = serde_json::to_string(&message).unwrap();
        assert_eq!(text, format!("{{\"id\":1}}\n{serialized}\n{{\"id\":2}}\n"));
    }

    #[tokio::test]
    async fn a_sender_waits_while_the_backlog_is_over_its_limit_and_goes_on_once_read() {
        let (writer, mut reader) = tokio::io::duplex(1024);
        let output = Output::spawn(writer);
        let line = vec![b'x'; 64 * 1024 - 1];
        // What one send queues: the message and its newline.
        let each = line.len() as u64 + 1;
        // Up to the limit a send does not wait, though nobody reads.
        let mut queued = 0;
        while queued + each <= BACKLOG {
            tokio::time::timeout(Duration::from_secs(5), output.send(&line))
                .await
                .expect("a send within the backlog does not wait")
                .unwrap();
            queued += each;
        }
        let over = output.send(&line);
        tokio::pin!(over);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut over)
                .await
                .is_err(),
            "a send over the backlog waits while nobody reads"
        );
        let reading = tokio::spawn(async move {
            let mut sink = Vec::new();
            reader.read_to_end(&mut sink).await.map(|_| sink.len())
        });
        tokio::time::timeout(Duration::from_secs(5), &mut over)
            .await
            .expect("the send goes on once the reader reads")
            .unwrap();
        output.flush().await.unwrap();
        drop(output);
        let read = reading.await.unwrap().unwrap() as u64;
        assert_eq!(read, queued + each);
    }

    #[tokio::test]
    async fn once_the_reader_is_gone_sends_and_flushes_fail_with_a_broken_pipe() {
        let (writer, reader) = tokio::io::duplex(64);
        drop(reader);
        let output = Output::spawn(writer);
        let first = output.send(b"{\"id\":1}").await;
        let flushed = output.flush().await;
        assert!(
            first.is_err() || flushed.is_err(),
            "the write to a closed reader fails"
        );
        let later = output.send(b"{\"id\":2}").await.unwrap_err();
        assert_eq!(later.kind(), std::io::ErrorKind::BrokenPipe, "{later}");
    }
}
