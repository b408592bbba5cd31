//! Where a component's stdout and stderr go: kept in memory up to a limit, for the log.
//! Past the limit, writes still succeed and are dropped: a tool that prints a lot must not
//! fail because of it (wasmtime's `MemoryOutputPipe` traps the component instead).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The first `limit` bytes written, and how many more were dropped.
#[derive(Clone)]
pub(crate) struct KeptOutput {
    kept: Arc<Mutex<(Vec<u8>, u64)>>,
    limit: usize,
}

impl KeptOutput {
    pub(crate) fn new(limit: usize) -> Self {
        KeptOutput {
            kept: Arc::new(Mutex::new((Vec::new(), 0))),
            limit,
        }
    }

    fn keep(&self, bytes: &[u8]) {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let room = self.limit.saturating_sub(kept.0.len());
        let taken = bytes.len().min(room);
        kept.0.extend_from_slice(&bytes[..taken]);
        kept.1 += (bytes.len() - taken) as u64;
    }

    /// Forgets what was kept (an instance kept for another call starts its output afresh).
    pub(crate) fn clear(&self) {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.0.clear();
        kept.1 = 0;
    }

    /// What was kept, as text, with a last line saying how much was dropped.
    pub(crate) fn text(&self) -> String {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut text = String::from_utf8_lossy(&kept.0).into_owned();
        if kept.1 > 0 {
            text.push_str(&format!("\n[{} more bytes not kept]", kept.1));
        }
        text
    }
}

impl IsTerminal for KeptOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for KeptOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for KeptOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for KeptOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for KeptOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_and_counts_the_rest_without_failing() {
        let mut out = KeptOutput::new(8);
        for chunk in ["hello ", "world", "!"] {
            assert!(OutputStream::write(&mut out, Bytes::from(chunk)).is_ok());
        }
        assert_eq!(out.text(), "hello wo\n[4 more bytes not kept]");
        assert!(out.check_write().is_ok_and(|n| n > 0), "always writable");
    }
}
