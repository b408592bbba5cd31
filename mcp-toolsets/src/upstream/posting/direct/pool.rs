//! The connections to one server kept open between its calls ([`Pool`]), each driven by
//! the call that uses it ([`Line`], [`Driven`]).
//!
//! A connection has no task of its own: the call that takes it writes its request and reads
//! its answer in its own task, polling the connection beside the answer. Through hyper's
//! pooled client, each call handed its request to the connection's task and had its answer
//! handed back (two wake-ups of tasks a call), and found its connection in a pool keyed by
//! scheme and host (hashed on every call); a gateway in front of `serve --http` spent
//! 132,000 instructions a call, and about 10,000 of them there (callgrind).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long a kept connection may stay unused before it is closed (reqwest's own).
pub(super) const IDLE: Duration = Duration::from_secs(90);

/// How many unused connections to one server are kept; one freed beyond them is closed.
pub(super) const MAX_IDLE: usize = 64;

/// One connection to the server: where a request is handed over, and the connection that
/// writes it and reads its answer as it is polled.
pub(super) struct Line {
    send: http1::SendRequest<Full<Bytes>>,
    /// Boxed: a call's future, its answer's body and the pool move the line between them,
    /// and the connection's buffers are most of it.
    conn: Box<http1::Connection<TokioIo<TcpStream>, Full<Bytes>>>,
}

/// A request that got no answer: why, and the request itself when it never went out (the
/// connection had closed before it was written), to be sent on another.
pub(super) struct Unanswered {
    pub(super) error: String,
    pub(super) unsent: Option<http::Request<Full<Bytes>>>,
}

impl Line {
    /// Starts HTTP/1.1 on a connection just made.
    pub(super) async fn open(io: TokioIo<TcpStream>) -> hyper::Result<Line> {
        let (send, conn) = http1::handshake(io).await?;
        Ok(Line {
            send,
            conn: Box::new(conn),
        })
    }

    /// Polls the connection: `true` once it has ended (closed by either side, or failed).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut *self.conn).poll(cx).is_ready()
    }

    /// Whether the connection is open and free for a request, found without waiting: what
    /// came on it meanwhile (the server closing it) is taken in first.
    fn free(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        !self.drive(&mut cx) && self.send.is_ready()
    }

    /// Sends `request` and waits for the head of its answer, driving the connection; the
    /// answer, and the connection while it stays open (its body comes through it).
    pub(super) async fn send(
        mut self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<(http::Response<Incoming>, Option<Line>), Unanswered> {
        // The future hyper returns owns what it waits on: the connection stays ours to poll.
        let mut sent = std::pin::pin!(self.send.try_send_request(request));
        let mut open = true;
        let answer = poll_fn(|cx| {
            if open && self.drive(cx) {
                open = false;
            }
            match sent.as_mut().poll(cx) {
                Poll::Ready(answer) => Poll::Ready(Some(answer)),
                // hyper answers every request on a connection that ends; never left waiting.
                Poll::Pending if !open => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        match answer {
            Some(Ok(response)) => Ok((response, open.then_some(self))),
            Some(Err(mut e)) => Err(Unanswered {
                unsent: e.take_message(),
                error: super::super::chain(e.error()),
            }),
            None => Err(Unanswered {
                error: "the connection closed before the answer came".into(),
                unsent: None,
            }),
        }
    }
}

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

/// The body of an answer, read through the connection it came on, which it drives as it is
/// read: read to its end, it gives that connection back to its pool, free for the next call.
/// Dropped before its end, it closes the connection (what is left of the answer would come
/// before the next one).
pub(crate) struct Driven {
    body: Incoming,
    line: Option<Line>,
    pool: Weak<Pool>,
    ended: bool,
}

impl Driven {
    pub(super) fn new(body: Incoming, line: Option<Line>, pool: &Arc<Pool>) -> Driven {
        Driven {
            body,
            line,
            pool: Arc::downgrade(pool),
            ended: false,
        }
    }
}

impl http_body::Body for Driven {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(line) = &mut this.line
            && line.drive(cx)
        {
            this.line = None;
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.ended = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        if !self.is_end_stream() {
            return;
        }
        // Its connection, having handed over the answer's end, waits for the next request.
        if let Some(line) = self.line.take()
            && line.send.is_ready()
            && let Some(pool) = self.pool.upgrade()
        {
            pool.put(line);
        }
    }
}
