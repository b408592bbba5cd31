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

    /// Queues `message` (one whole line, its newline included) now; the future waits only
    /// while the backlog is over [`BACKLOG`], and fails once the output is closed.
    pub fn send(&self, message: &[u8]) -> impl Future<Output = std::io::Result<()>> + Send + use<> {
        let queued = {
            let mut queue = self.lock();
            match queue.failed {
                Some(kind) => Err(kind),
                None => {
                    queue.bytes.extend_from_slice(message);
                    queue.queued += message.len() as u64;
                    Ok(queue.queued)
                }
            }
        };
        if queued.is_ok() {
            self.shared.ready.notify_one();
        }
        let mut written = self.written.clone();
        async move {
            let queued = queued.map_err(closed)?;
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
