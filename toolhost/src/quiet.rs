//! What `serve --mcp` does once its client falls quiet: it gives back the memory its
//! allocator holds free.
//!
//! mimalloc returns freed memory to the system a while after it was freed (10 ms), but
//! only when it next runs: a server whose client has stopped sending allocates nothing,
//! so it kept what its start and its last calls freed (2.6 MB: 14.4 MiB resident in an
//! idle `dist` server, 11.9 once released; `docs/performance.md`). The binary sets what
//! releases it ([`set_release`]: its allocator's collection); a server runs it once its
//! input has been quiet for [`QUIET`], and again after each later burst, never while
//! messages keep coming. A program that embeds toolhost and sets nothing releases nothing.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;

/// How long the input stays quiet before the free memory is released: ten times
/// mimalloc's own delay, and far shorter than a model's turn between two rounds of calls.
pub const QUIET: Duration = Duration::from_millis(100);

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Sets what gives the process's free memory back to the system, run on the thread of the
/// server's runtime once its input falls quiet. The first call decides; later ones are
/// ignored.
pub fn set_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// What the reader and the watcher share.
#[derive(Default)]
struct Input {
    /// Reads that returned bytes. It and `parked` are each written by one side and read
    /// by the other, in sequentially consistent order, so a read is never missed by a
    /// watcher about to park.
    reads: AtomicU64,
    /// The watcher released and waits for the next read.
    parked: AtomicBool,
    wake: Notify,
}

/// A protocol reader whose reads the watcher of [`watch`] counts.
pub struct Watched<R> {
    inner: R,
    input: Arc<Input>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.input.reads.fetch_add(1, Ordering::SeqCst);
            if self.input.parked.swap(false, Ordering::SeqCst) {
                self.input.wake.notify_one();
            }
        }
        poll
    }
}

/// Wraps `reader`; the future runs `release` each time the reads stop for `quiet` (not
/// again until they start and stop again). It never ends: drop or abort it with the
/// server.
pub fn watch<R>(
    reader: R,
    quiet: Duration,
    release: fn(),
) -> (Watched<R>, impl Future<Output = ()> + Send + 'static) {
    let input = Arc::new(Input::default());
    let watcher = {
        let input = input.clone();
        async move {
            let mut seen = input.reads.load(Ordering::SeqCst);
            loop {
                tokio::time::sleep(quiet).await;
                let now = input.reads.load(Ordering::SeqCst);
                if now != seen {
                    seen = now;
                    continue;
                }
                release();
                tracing::debug!(?quiet, "input quiet: gave the allocator's free memory back");
                // Parked until the next read: an idle server is not woken to look. A wake
                // left from an earlier read is taken and parked again.
                while input.reads.load(Ordering::SeqCst) == seen {
                    let woken = input.wake.notified();
                    input.parked.store(true, Ordering::SeqCst);
                    if input.reads.load(Ordering::SeqCst) == seen {
                        woken.await;
                    }
                }
                input.parked.store(false, Ordering::SeqCst);
                seen = input.reads.load(Ordering::SeqCst);
            }
        }
    };
    (
        Watched {
            inner: reader,
            input,
        },
        watcher,
    )
}

/// [`watch`] with the release the binary set and [`QUIET`]; with none set, the reader as
/// it is and no watcher.
pub fn watch_input<R>(reader: R) -> (Watched<R>, Option<impl Future<Output = ()> + Send>) {
    match RELEASE.get() {
        Some(&release) => {
            let (reader, watcher) = watch(reader, QUIET, release);
            (reader, Some(watcher))
        }
        None => (
            Watched {
                inner: reader,
                input: Arc::default(),
            },
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    static RELEASED: AtomicU64 = AtomicU64::new(0);

    fn count() {
        RELEASED.fetch_add(1, Ordering::SeqCst);
    }

    /// Real time, with wide margins: the watcher's quiet is 300 ms, the busy spell's gaps
    /// 20 ms, and each quiet spell lasts a second.
    #[tokio::test]
    async fn release_runs_once_per_quiet_spell_and_never_while_messages_keep_coming() {
        let (mut client, server) = tokio::io::duplex(64);
        let (mut reader, watcher) = watch(server, Duration::from_millis(300), count);
        let watcher = tokio::spawn(watcher);
        let mut buf = [0u8; 1];
        // Messages every 20 ms for longer than the quiet: never quiet for 300.
        for _ in 0..25 {
            client.write_all(b"x").await.unwrap();
            reader.read_exact(&mut buf).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(RELEASED.load(Ordering::SeqCst), 0, "released while busy");
        // Quiet: released once, however long it stays quiet.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            RELEASED.load(Ordering::SeqCst),
            1,
            "released again while quiet"
        );
        // Another burst, another quiet spell: once more.
        client.write_all(b"y").await.unwrap();
        reader.read_exact(&mut buf).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(RELEASED.load(Ordering::SeqCst), 2);
        watcher.abort();
    }
}
