//! A 2025-era server's question to a 2026-07-28 client. The server asks with
//! `elicitation/create` while its call waits; the client takes no requests while a call
//! runs, so it can only be asked in an `input_required` round of its own. The call stays
//! open upstream, parked here under a random id, while the client's round ends with the
//! server's form. The client's retry carries the id inside toolhost's sealed state, and
//! brings the answer: the parked call gets it and goes on.
//!
//! A parked call lives on this instance only. It waits as long as the server's call may
//! take (its `call_timeout_secs`), and at most [`PARKED_FOR`]; a retry that finds nothing
//! is told to call again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::ElicitResult;
use tokio::sync::{mpsc, oneshot};
use tool_api::ToolError;

use crate::relay::FromServer;
use crate::upstream::Called;

/// The longest a parked call waits for its client's retry.
pub(crate) const PARKED_FOR: Duration = Duration::from_secs(600);

/// The `requestState` prefix of a parked call's round (inside toolhost's sealed state).
pub(crate) const PARKED: &str = "toolhost-parked:";

/// The key of the server's question in the round a parked call's client is asked.
pub(crate) const QUESTION_KEY: &str = "elicitation";

/// A call in flight upstream: what the server sends for it, and its outcome.
pub(crate) struct InFlight {
    pub(crate) from_server: mpsc::UnboundedReceiver<FromServer>,
    pub(crate) outcome: tokio::task::JoinHandle<Result<Called, ToolError>>,
    /// Cancels it upstream.
    pub(crate) cancel: Arc<tokio::sync::Notify>,
}

impl Drop for InFlight {
    /// A call let go of before its outcome (its caller's time ran out and the caller's
    /// future was dropped, or a parked call expired) is cancelled upstream: the server is
    /// told, and stops working on it.
    fn drop(&mut self) {
        if !self.outcome.is_finished() {
            self.cancel.notify_one();
        }
    }
}

/// A call waiting for its client's answer to the server's question.
pub(crate) struct Parked {
    pub(crate) call: InFlight,
    pub(crate) reply: oneshot::Sender<Result<ElicitResult, rmcp::ErrorData>>,
    since: Instant,
}

/// The parked calls of one server.
#[derive(Default)]
pub(crate) struct ParkedCalls(Mutex<HashMap<String, Parked>>);

impl ParkedCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new id to park a call under.
    pub(crate) fn new_id() -> String {
        let mut id = [0u8; 16];
        if getrandom::fill(&mut id).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            id = t.to_le_bytes();
        }
        id.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parks `call` under `id`, dropping calls that ended or waited too long (their
    /// server gets an error for its question).
    pub(crate) fn park(
        &self,
        id: &str,
        call: InFlight,
        reply: oneshot::Sender<Result<ElicitResult, rmcp::ErrorData>>,
    ) {
        let mut parked = self.lock();
        parked.retain(|_, p| !p.call.outcome.is_finished() && p.since.elapsed() < PARKED_FOR);
        parked.insert(
            id.to_string(),
            Parked {
                call,
                reply,
                since: Instant::now(),
            },
        );
    }

    /// The call parked under `id`, taken.
    pub(crate) fn take(&self, id: &str) -> Option<Parked> {
        self.lock().remove(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_flight(outcome: tokio::task::JoinHandle<Result<Called, ToolError>>) -> InFlight {
        InFlight {
            from_server: mpsc::unbounded_channel().1,
            outcome,
            cancel: Arc::default(),
        }
    }

    #[tokio::test]
    async fn a_parked_call_is_taken_once_and_an_ended_one_is_swept() {
        let calls = ParkedCalls::default();
        let waiting = in_flight(tokio::spawn(std::future::pending()));
        let ended = in_flight(tokio::spawn(async {
            Err(ToolError::failed("the server's call ended"))
        }));
        let (first, second) = (ParkedCalls::new_id(), ParkedCalls::new_id());
        assert_ne!(first, second);
        calls.park(&first, ended, oneshot::channel().0);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Parking another sweeps the call that ended meanwhile.
        calls.park(&second, waiting, oneshot::channel().0);
        assert!(calls.take(&first).is_none());
        assert!(calls.take(&second).is_some());
        assert!(calls.take(&second).is_none());
    }
}
