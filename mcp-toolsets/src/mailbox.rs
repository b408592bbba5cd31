//! A call's mailbox ([`channel`]): what its server sends for it while it runs (progress, a
//! question), from the connection that read it to the one call that reads it.
//!
//! Every call of a mounted tool has one, and most never get a message: tokio's unbounded
//! channel allocated a block of 32 slots for each, and each poll of its receiver looked
//! through that block (about 750 instructions a call). This is a queue under a lock and one
//! waker: a poll of an empty mailbox takes the lock once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;

use futures_util::task::AtomicWaker;

struct Shared<T> {
    /// What was sent and not read yet; `None` once the receiver is gone.
    queue: Mutex<Option<VecDeque<T>>>,
    reader: AtomicWaker,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Option<VecDeque<T>>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A new mailbox: where its messages are sent from (cloned for each sender), and where the
/// call reads them.
pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Some(VecDeque::new())),
        reader: AtomicWaker::new(),
    });
    (Sender(shared.clone()), Receiver(shared))
}

/// Sends to a call's mailbox.
pub(crate) struct Sender<T>(Arc<Shared<T>>);

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender(self.0.clone())
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mailbox::Sender")
    }
}

impl<T> Sender<T> {
    /// Leaves `message` for the call and wakes it; the message back when the call no longer
    /// reads its mailbox (its receiver was dropped).
    pub(crate) fn send(&self, message: T) -> Result<(), T> {
        match self.0.lock().as_mut() {
            Some(queue) => queue.push_back(message),
            None => return Err(message),
        }
        self.0.reader.wake();
        Ok(())
    }
}

/// Where a call reads what was sent to it. Dropped, what is in it is dropped (a question's
/// reply with it, which tells its asker that the call ended), and later sends fail.
pub(crate) struct Receiver<T>(Arc<Shared<T>>);

impl<T> Receiver<T> {
    /// The oldest message not read yet, if any.
    pub(crate) fn try_recv(&mut self) -> Option<T> {
        self.0.lock().as_mut().and_then(VecDeque::pop_front)
    }

    /// The next message, once one is sent (pending for as long as none is: a mailbox whose
    /// senders are all gone waits for ever).
    pub(crate) fn recv(&mut self) -> impl Future<Output = T> + '_ {
        std::future::poll_fn(move |cx| {
            if let Some(message) = self.try_recv() {
                return Poll::Ready(message);
            }
            self.0.reader.register(cx.waker());
            // Sent between the look and the registration: its wake found no waker.
            match self.try_recv() {
                Some(message) => Poll::Ready(message),
                None => Poll::Pending,
            }
        })
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // Dropped outside the lock: a message's reply tells its asker as it drops.
        let left = self.0.lock().take();
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn messages_come_in_the_order_they_were_sent() {
        let (tx, mut rx) = channel();
        tx.send(1).unwrap();
        tx.clone().send(2).unwrap();
        assert_eq!(rx.recv().await, 1);
        assert_eq!(rx.try_recv(), Some(2));
        assert_eq!(rx.try_recv(), None);
    }

    #[tokio::test]
    async fn a_send_wakes_the_call_waiting_for_it() {
        let (tx, mut rx) = channel();
        let waiting = tokio::spawn(async move { rx.recv().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "it waits until a message is sent");
        tx.send("hello").unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .expect("ended");
        assert_eq!(got, "hello");
    }

    #[test]
    fn once_the_call_stops_reading_a_send_fails_and_what_was_left_is_dropped() {
        let (tx, rx) = channel();
        let (reply, answer) = tokio::sync::oneshot::channel::<()>();
        tx.send(reply).unwrap();
        drop(rx);
        let (late, _) = tokio::sync::oneshot::channel::<()>();
        assert!(tx.send(late).is_err());
        // The question left in it is dropped: its asker hears the call ended.
        assert!(answer.blocking_recv().is_err());
    }
}
