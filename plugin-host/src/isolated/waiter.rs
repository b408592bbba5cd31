//! How a call waits for its worker's frames: on its own thread's channel, or as a future
//! woken from an inbox. The worker's reader sends each frame to the call's [`Waiter`].

use std::collections::VecDeque;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

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

/// The events of a call run as a future, and the waker of the task polling it.
#[derive(Default)]
pub(super) struct Inbox(Mutex<(VecDeque<Event>, Option<std::task::Waker>)>);

impl Inbox {
    pub(super) fn push(&self, event: Event) {
        let waker = {
            let mut inbox = lock(&self.0);
            inbox.0.push_back(event);
            inbox.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The next event, if one has come.
    pub(super) fn try_next(&self) -> Option<Event> {
        lock(&self.0).0.pop_front()
    }

    /// Every event not yet taken, in order.
    pub(super) fn drain(&self) -> Vec<Event> {
        lock(&self.0).0.drain(..).collect()
    }

    /// The next event, or `Pending` (woken by the next [`Inbox::push`]).
    pub(super) fn poll_next(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Event> {
        let mut inbox = lock(&self.0);
        match inbox.0.pop_front() {
            Some(event) => std::task::Poll::Ready(event),
            None => {
                inbox.1 = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    }
}
