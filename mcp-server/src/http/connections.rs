//! The server's connections: accepted, each served by hyper on a task of its own until it
//! closes or the server stops ([`serve`]), and polled through [`Inline`].
//!
//! Why not `axum::serve`, which does the same: its task polls hyper's connection under the
//! runtime's own waker, and hyper wakes that waker from inside the poll on every request
//! with a body (its body channel wakes the connection's writer when the handler takes the
//! body, the connection being both). tokio takes a task woken while it runs as one that
//! yields: it goes to the back of the queue and another worker is woken to take it, a
//! futex and a context switch a request on a server otherwise busy on one core (the
//! gateway's and the mounted server's connections alike, counted with uprobes on tokio's
//! wakers). Here such a wake polls the connection again before the poll returns, as the
//! yield would have, without the round trip through the scheduler.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::routing::future::RouteFuture;
use futures_util::task::AtomicWaker;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower_service::Service as _;

/// Serves `app` on the connections `listener` accepts until `stop` resolves; then accepts
/// no more, asks each connection to close once its request in flight is answered, and
/// returns when all have closed.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    // Dropped when the server stops: each connection sees it and closes gracefully.
    let (stopping, stop_seen) = watch::channel(());
    // Held by each connection while it lives: the server waits for every copy to go.
    let (closed, open) = watch::channel(());
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        match accepted {
            Ok((tcp, _)) => {
                spawn_connection(tcp, app.clone(), stop_seen.clone(), open.clone());
            }
            Err(e) => pause_after(e).await,
        }
    }
    drop(stopping);
    drop((stop_seen, open));
    closed.closed().await;
}

/// Waits as long as an accept that failed with `e` calls for: not at all when the failure
/// was the connection's own (it went before it was taken); a second when the process is
/// out of something (descriptors, memory), so that the loop does not spin until some is
/// freed.
async fn pause_after(e: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::warn!("cannot accept a connection: {e}; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Serves one connection on a task of its own.
fn spawn_connection(
    tcp: TcpStream,
    app: Router,
    mut stop_seen: watch::Receiver<()>,
    open: watch::Receiver<()>,
) {
    // Each answer goes out as soon as it is written: a session's event stream writes
    // its head and its events apart, and with Nagle's algorithm the second write waits
    // for the client's delayed acknowledgement (40 ms a call for most clients).
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY on an accepted connection: {e}");
    }
    tokio::spawn(Inline::new(async move {
        let connection = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tcp), App(app));
        let mut connection = std::pin::pin!(connection);
        let mut stopping = false;
        loop {
            tokio::select! {
                biased;
                served = connection.as_mut() => {
                    if let Err(e) = served {
                        tracing::trace!("a connection ended: {e}");
                    }
                    break;
                }
                _ = stop_seen.changed(), if !stopping => {
                    stopping = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
        drop(open);
    }));
}

/// The router as hyper calls it, each request on a clone (an `Arc`'s).
struct App(Router);

impl hyper::service::Service<Request<Incoming>> for App {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = RouteFuture<Infallible>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.0.clone().call(request)
    }
}

/// How many times in a row a future woken while it is polled is polled again at once;
/// then it waits its turn among the runtime's tasks, as any task that yields (as it does
/// at once when the runtime's budget for one poll of a task is spent).
const AGAIN: usize = 4;

/// A future polled with a waker of its own: a wake that comes while it is being polled
/// (from itself, or from another thread meanwhile) polls it again before the poll returns;
/// a wake between polls wakes its task.
struct Inline<F> {
    future: Pin<Box<F>>,
    wakes: Arc<Wakes>,
    waker: Waker,
}

/// Where [`Inline`]'s waker notes a wake.
struct Wakes {
    /// [`IDLE`], [`POLLING`] or [`WOKEN`].
    state: AtomicU8,
    /// The task's waker, for a wake between polls.
    task: AtomicWaker,
}

/// Not being polled: a wake wakes the task.
const IDLE: u8 = 0;
/// Being polled, not woken since the poll began.
const POLLING: u8 = 1;
/// Woken while being polled: polled again.
const WOKEN: u8 = 2;

impl<F: Future> Inline<F> {
    fn new(future: F) -> Inline<F> {
        let wakes = Arc::new(Wakes {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Inline {
            future: Box::pin(future),
            waker: Waker::from(wakes.clone()),
            wakes,
        }
    }
}

impl<F: Future> Future for Inline<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.wakes.task.register(cx.waker());
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..AGAIN {
            this.wakes.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(output) = this.future.as_mut().poll(&mut inner) {
                this.wakes.state.store(IDLE, Ordering::Release);
                return Poll::Ready(output);
            }
            // Not woken during the poll: a later wake finds it idle and wakes the task.
            if this
                .wakes
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
            // Out of the runtime's budget for one poll of a task (the wake was tokio's
            // own, asking it to yield): polled again only after the others.
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        this.wakes.state.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // Noted: the poll under way polls again.
            Ok(_) => {}
            Err(IDLE) => self.task.wake(),
            // Already noted.
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wake_count::counting;
    use std::sync::atomic::AtomicUsize;

    /// A future that wakes itself on its first `n` polls, then is ready; counts its polls.
    fn waking_itself(n: usize, polls: Arc<AtomicUsize>) -> impl Future<Output = ()> {
        std::future::poll_fn(move |cx| {
            if polls.fetch_add(1, Ordering::SeqCst) < n {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    }

    #[test]
    fn a_wake_during_the_poll_polls_again_without_waking_the_task() {
        let (count, waker) = counting();
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = std::pin::pin!(Inline::new(waking_itself(1, polls.clone())));
        let ready = future.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(ready.is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(count.get(), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_task_after_a_few_polls() {
        let (count, waker) = counting();
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = std::pin::pin!(Inline::new(waking_itself(usize::MAX, polls.clone())));
        let pending = future.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(pending.is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), AGAIN);
        assert_eq!(count.get(), 1);
    }

    #[test]
    fn a_wake_between_polls_wakes_the_task_once() {
        let (count, waker) = counting();
        let kept: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
        let keep = kept.clone();
        let mut future = std::pin::pin!(Inline::new(std::future::poll_fn(move |cx| {
            *keep.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        })));
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(count.get(), 0);
        let inner = kept.lock().unwrap().clone().unwrap();
        inner.wake_by_ref();
        assert_eq!(count.get(), 1);
        // The task's waker is taken by the wake: a second one before the next poll finds
        // the task already woken.
        inner.wake_by_ref();
        assert_eq!(count.get(), 1);
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        inner.wake();
        assert_eq!(count.get(), 2);
    }
}
