//! A call's cancellation ([`Cancel`]): set once, and seen by the one future that waits for
//! it, at the cost of two atomic operations a poll. Each call of a mounted tool waited on
//! two `tokio::sync::Notify`s (the call's, and its request's upstream), and each wait took
//! the notify's lock twice, to enter its list of waiters and to leave it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures_util::task::AtomicWaker;

/// A cancellation: once [`Cancel::cancel`]led it stays so. One future waits for it at a
/// time (a second waiter takes the first one's place).
#[derive(Default)]
pub(crate) struct Cancel {
    set: AtomicBool,
    waiter: AtomicWaker,
}

impl Cancel {
    /// Cancels, and wakes the future waiting for it.
    pub(crate) fn cancel(&self) {
        self.set.store(true, Ordering::Release);
        self.waiter.wake();
    }

    /// Whether it was cancelled.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Ready once it is cancelled (at once if it already was).
    pub(crate) fn cancelled(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.is_cancelled() {
                return Poll::Ready(());
            }
            self.waiter.register(cx.waker());
            // Cancelled between the look and the registration: its wake found no waker.
            if self.is_cancelled() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_cancellation_before_the_wait_is_seen_at_once() {
        let cancel = Cancel::default();
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), cancel.cancelled())
            .await
            .expect("seen at once");
        assert!(cancel.is_cancelled());
    }

    #[tokio::test]
    async fn a_cancellation_wakes_the_future_waiting_for_it() {
        let cancel = Arc::new(Cancel::default());
        let waiting = tokio::spawn({
            let cancel = cancel.clone();
            async move { cancel.cancelled().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "it waits until cancelled");
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .expect("ended");
    }

    #[tokio::test]
    async fn it_stays_cancelled() {
        let cancel = Cancel::default();
        cancel.cancel();
        cancel.cancelled().await;
        tokio::time::timeout(Duration::from_secs(5), cancel.cancelled())
            .await
            .expect("still cancelled");
    }
}
