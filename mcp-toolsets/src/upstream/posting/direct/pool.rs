//! The connections to one server kept open between its calls ([`Pool`]), each used by
//! the call that takes it ([`Driven`]).
//!
//! A connection has no task of its own: the call that takes it writes its request and
//! reads its answer in its own task ([`super::wire`]). Through hyper's pooled client, each
//! call handed its request to the connection's task and had its answer handed back (two
//! wake-ups of tasks a call), and found its connection in a pool keyed by scheme and host
//! (hashed on every call).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::wire::{Framing, Line};

/// How long a kept connection may stay unused before it is closed (reqwest's own).
pub(super) const IDLE: Duration = Duration::from_secs(90);

/// How many unused connections to one server are kept; one freed beyond them is closed.
pub(super) const MAX_IDLE: usize = 64;

/// The unused connections to one server, the most recently used last.
#[derive(Default)]
pub(super) struct Pool {
    idle: Mutex<Vec<Idle>>,
    /// A task closes connections left unused too long.
    reaped: AtomicBool,
}

struct Idle {
    line: Line,
    since: Instant,
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A free connection, the most recently used first; the ones found closed or unused
    /// too long on the way are closed.
    pub(super) fn take(&self) -> Option<Line> {
        let mut idle = self.lock();
        while let Some(Idle { mut line, since }) = idle.pop() {
            if since.elapsed() < IDLE && line.free() {
                return Some(line);
            }
        }
        None
    }

    /// Keeps `line`, free again, for a later call (closed instead when enough are kept).
    fn put(&self, line: Line) {
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                line,
                since: Instant::now(),
            });
        }
    }

    /// How many connections are kept.
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.lock().len()
    }

    /// Closes the kept connections unused for `IDLE` or closed by the server.
    fn expire(&self) {
        let now = Instant::now();
        self.lock()
            .retain_mut(|idle| now.duration_since(idle.since) < IDLE && idle.line.free());
    }

    /// Starts the task that closes connections left unused (once; it ends with the pool).
    pub(super) fn reap(self: &Arc<Pool>) {
        if self.reaped.swap(true, Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.reaped.store(false, Ordering::Relaxed);
            return;
        };
        let pool = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(IDLE / 3).await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                pool.expire();
            }
        });
    }
}

/// The body of an answer, read off the connection it came on: read to its end, it gives
/// that connection back to its pool, free for the next call. Dropped before its end, it
/// closes the connection (what is left of the answer would come before the next one).
pub(crate) struct Driven {
    line: Option<Line>,
    framing: Framing,
    /// The connection may carry another request once the body is read.
    reusable: bool,
    /// The server closed the connection.
    closed: bool,
    pool: Weak<Pool>,
}

impl Driven {
    pub(super) fn new(line: Line, framing: Framing, reusable: bool, pool: &Arc<Pool>) -> Driven {
        let mut driven = Driven {
            line: Some(line),
            framing,
            reusable,
            closed: false,
            pool: Arc::downgrade(pool),
        };
        // An answer without a body frees its connection at once, read or not.
        if driven.framing == Framing::Length(0) {
            driven.framing = Framing::Ended;
            driven.give_back();
        }
        driven
    }

    /// The body was read to its end: its connection goes back to the pool, if it may
    /// carry another request and nothing but the answer came on it.
    fn give_back(&mut self) {
        if let Some(mut line) = self.line.take()
            && self.reusable
            && !self.closed
            && line.buffer().is_empty()
            && let Some(pool) = self.pool.upgrade()
        {
            pool.put(line);
        }
    }
}

impl http_body::Body for Driven {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        loop {
            let Some(line) = &mut this.line else {
                return Poll::Ready(None);
            };
            match this.framing.next(line.buffer(), this.closed) {
                Err(e) => {
                    this.line = None;
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                Ok(data) => {
                    if this.framing == Framing::Ended {
                        this.give_back();
                    }
                    if let Some(data) = data {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    if this.framing == Framing::Ended {
                        return Poll::Ready(None);
                    }
                }
            }
            let Some(line) = &mut this.line else {
                return Poll::Ready(None);
            };
            match ready!(line.poll_fill(cx)) {
                Ok(0) => this.closed = true,
                Ok(_) => {}
                Err(e) => {
                    this.line = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.framing == Framing::Ended
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(left) => SizeHint::with_exact(left),
            Framing::Ended => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
