//! What goes to a stdio server's stdin ([`Writer`]), and the calls toolhost sends on it
//! itself ([`Direct`]).
//!
//! A `tools/call` goes straight to the server's input and its answer straight back from the
//! line that reads it ([`super::lines`]), past rmcp's requests: no request queue, one
//! task to write the calls of a batch, no table of rmcp's to find its answer in (a few thousand
//! instructions a call, and wake-ups of the tasks between). Everything else the
//! connection says (listing, prompts, resources, cancellation of rmcp's requests, the
//! server's own requests and notifications) still goes through rmcp. Its ids are strings of
//! their own (`toolhost-N`), so that they never meet rmcp's numbers.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage,
    ClientNotification, NumberOrString, ProgressToken, RequestId,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use super::lines::envelope::{Answer, ID_PREFIX};

/// What goes to a server's stdin: the messages sent and not written yet, and the pipe.
/// Messages sent together are written together: rmcp hands over every request waiting
/// before it runs the writes, and toolhost's own calls are written by a task of their own
/// once the calls made in the same turn of the runtime are queued (one system call, and
/// one wake-up of the server, for a batch of calls: written as each call was made, a batch
/// of four cost the server three more wake-ups, and the gateway three more writes).
pub(crate) struct Writer {
    pending: Mutex<Vec<u8>>,
    out: tokio::sync::Mutex<Option<Pin<Box<dyn AsyncWrite + Send>>>>,
    /// A task is on its way to write what is pending.
    writing_soon: AtomicBool,
}

impl Writer {
    pub(crate) fn new(out: impl AsyncWrite + Send + 'static) -> Writer {
        Writer {
            pending: Mutex::new(Vec::new()),
            out: tokio::sync::Mutex::new(Some(Box::pin(out))),
            writing_soon: AtomicBool::new(false),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `message` to what is pending, as a line; nothing of it when it cannot be
    /// written as JSON.
    pub(crate) fn queue(&self, message: &ClientJsonRpcMessage) -> std::io::Result<()> {
        self.queue_with(|line| serde_json::to_writer(line, message))
    }

    /// Adds the line `write` writes to what is pending; nothing of it when it fails.
    fn queue_with(
        &self,
        write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
    ) -> std::io::Result<()> {
        let mut pending = self.pending();
        let before = pending.len();
        match write(&mut pending) {
            Ok(()) => {
                pending.push(b'\n');
                Ok(())
            }
            Err(e) => {
                pending.truncate(before);
                Err(std::io::Error::other(e))
            }
        }
    }

    /// Writes what is pending (nothing, when an earlier write took it).
    pub(crate) async fn flush(&self) -> std::io::Result<()> {
        let mut out = self.out.lock().await;
        let batch = std::mem::take(&mut *self.pending());
        if batch.is_empty() {
            return Ok(());
        }
        let Some(w) = out.as_mut() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the server's input is closed",
            ));
        };
        w.write_all(&batch).await?;
        w.flush().await
    }

    /// Closes the server's input.
    pub(crate) async fn close(&self) {
        drop(self.out.lock().await.take());
    }
}

/// The calls toolhost sends on one connection itself, waiting for their answers.
pub(crate) struct Direct {
    write: Arc<Writer>,
    /// By the number of each call's id.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>, foldhash::fast::RandomState>>,
    next: AtomicU64,
    /// The server's output ended: no answer will come.
    closed: AtomicBool,
}

/// A call sent directly: its id, the token its progress is routed by, and its answer to
/// come. Dropped, it stops waiting (an answer that comes later is ignored).
pub(crate) struct Sent {
    direct: Arc<Direct>,
    n: u64,
    pub(crate) id: RequestId,
    pub(crate) token: ProgressToken,
    pub(crate) answer: oneshot::Receiver<Answer>,
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.direct.lock().remove(&self.n);
    }
}

impl Direct {
    pub(crate) fn new(write: Arc<Writer>) -> Arc<Direct> {
        Arc::new(Direct {
            write,
            waiting: Mutex::default(),
            next: AtomicU64::new(1),
            closed: AtomicBool::new(false),
        })
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Answer>, foldhash::fast::RandomState>>
    {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a `tools/call` with `params` (asking for progress when `progress`): it goes
    /// out with the next flush. `Err` when the server's output has ended. The parameters
    /// are only read (the call keeps them for a later round), but for a call that asks for
    /// progress, whose copy carries the token.
    pub(crate) fn send(
        self: &Arc<Self>,
        params: &CallToolRequestParams,
        progress: bool,
    ) -> std::io::Result<Sent> {
        if self.closed.load(Ordering::Acquire) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the server's output has ended",
            ));
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut label = String::with_capacity(ID_PREFIX.len() + 20);
        label.push_str(ID_PREFIX);
        label.push_str(itoa::Buffer::new().format(n));
        let label: Arc<str> = label.into();
        let id = RequestId::String(label.clone());
        let token = ProgressToken(NumberOrString::String(label.clone()));
        let with_token;
        let params = if progress {
            let mut copy = params.clone();
            copy.meta
                .get_or_insert_default()
                .set_progress_token(token.clone());
            with_token = copy;
            &with_token
        } else {
            params
        };
        let (tx, answer) = oneshot::channel();
        self.lock().insert(n, tx);
        let sent = Sent {
            direct: self.clone(),
            n,
            id: id.clone(),
            token,
            answer,
        };
        // The request written as its parts are (rmcp's own message type would merge its
        // metadata into the parameters through a map first: twice the instructions).
        self.write.queue_with(|line| {
            line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
            serde_json::to_writer(&mut *line, &*label)?;
            line.extend_from_slice(br#","method":"tools/call","params":"#);
            serde_json::to_writer(&mut *line, params)?;
            line.push(b'}');
            Ok(())
        })?;
        Ok(sent)
    }

    /// Writes what is queued.
    #[cfg(test)]
    pub(crate) async fn flush(&self) -> std::io::Result<()> {
        self.write.flush().await
    }

    /// Has what is queued written by a task of its own, which the runtime runs after the
    /// tasks already waiting to run: the calls they make go out with this one. A write that
    /// fails ends the calls waiting (the server can take no more), as the end of its output
    /// would.
    pub(crate) fn flush_soon(self: &Arc<Self>) {
        if self.write.writing_soon.swap(true, Ordering::AcqRel) {
            return;
        }
        let direct = self.clone();
        tokio::spawn(async move {
            // Cleared before the batch is taken: a call queued after it schedules a write
            // of its own.
            direct.write.writing_soon.store(false, Ordering::Release);
            if let Err(e) = direct.write.flush().await {
                tracing::debug!("calls could not be written to the server: {e}");
                direct.close();
            }
        });
    }

    /// Tells the server the call `id` is cancelled (`notifications/cancelled`).
    pub(crate) async fn cancel(&self, id: &RequestId, reason: &str) {
        let cancelled = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(id.clone()), Some(reason.to_string())),
        ));
        if self
            .write
            .queue(&ClientJsonRpcMessage::notification(cancelled))
            .is_ok()
        {
            let _ = self.write.flush().await;
        }
    }

    /// How many calls wait for their answers.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().len()
    }

    /// Hands `answer` to the call numbered `n` waits for; `false` when none does (it
    /// ended).
    pub(crate) fn answer(&self, n: u64, answer: Answer) -> bool {
        match self.lock().remove(&n) {
            Some(waiting) => waiting.send(answer).is_ok(),
            None => false,
        }
    }

    /// The server's output ended: every call waiting gets no answer (its receiver says the
    /// sender is gone), and later calls fail at once.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests;
