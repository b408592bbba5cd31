//! How a call waits for its worker's frames: on its own thread's channel, or as a future
//! woken from an inbox. The worker's reader sends each frame to the call's [`Waiter`].

use std::collections::VecDeque;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::lock;
use crate::protocol::FromWorker;

/// What a call's waiting side hears.
pub(super) enum Event {
    Frame(FromWorker),
    /// The worker is gone, with the cause.
    Died(String),
    /// The call was asked to stop: the grace period starts.
    Cancel,
}

/// Where a call hears its events: the channel its own thread waits on, or the inbox a
/// call run as a future ([`tool_api::Tool::execute_async`]) is woken from.
#[derive(Clone)]
pub(super) enum Waiter {
    Thread(Sender<Event>),
    Task(Arc<Inbox>),
}

impl Waiter {
    pub(super) fn send(&self, event: Event) {
        match self {
            Waiter::Thread(tx) => {
                let _ = tx.send(event);
            }
            Waiter::Task(inbox) => inbox.push(event),
        }
    }
}

/// The events of a call run as a future, the waker of the task polling it, and when the
/// first event came.
#[derive(Default)]
pub(super) struct Inbox(Mutex<InboxState>);

#[derive(Default)]
struct InboxState {
    events: VecDeque<Event>,
    waker: Option<Waker>,
    first_came: Option<Instant>,
}

impl Inbox {
    pub(super) fn push(&self, event: Event) {
        let waker = {
            let mut inbox = lock(&self.0);
            inbox.first_came.get_or_insert_with(Instant::now);
            inbox.events.push_back(event);
            inbox.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// When the first event came (not when it was taken: a task that slept is woken
    /// later than that).
    pub(super) fn first_came(&self) -> Option<Instant> {
        lock(&self.0).first_came
    }

    /// The next event, if one has come.
    pub(super) fn try_next(&self) -> Option<Event> {
        lock(&self.0).events.pop_front()
    }

    /// Every event not yet taken, in order.
    pub(super) fn drain(&self) -> Vec<Event> {
        lock(&self.0).events.drain(..).collect()
    }

    /// The next event, or `Pending` (woken by the next [`Inbox::push`]).
    pub(super) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Event> {
        let mut inbox = lock(&self.0);
        match inbox.events.pop_front() {
            Some(event) => Poll::Ready(event),
            None => {
                inbox.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inbox_remembers_when_its_first_event_came_not_when_it_was_taken() {
        let inbox = Inbox::default();
        assert!(inbox.first_came().is_none());
        inbox.push(Event::Cancel);
        let came = inbox.first_came().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        inbox.push(Event::Died("gone".into()));
        assert!(matches!(inbox.try_next(), Some(Event::Cancel)));
        assert_eq!(inbox.first_came(), Some(came));
        assert!(matches!(inbox.drain().as_slice(), [Event::Died(_)]));
    }
}
