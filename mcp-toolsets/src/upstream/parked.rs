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
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use rmcp::model::ElicitResult;
use tokio::sync::oneshot;
use tool_api::ToolError;

use crate::cancel::Cancel;
use crate::relay::FromServer;
use crate::upstream::Called;

/// The longest a parked call waits for its client's retry.
pub(crate) const PARKED_FOR: Duration = Duration::from_secs(600);

/// The `requestState` prefix of a parked call's round (inside toolhost's sealed state).
pub(crate) const PARKED: &str = "toolhost-parked:";

/// The key of the server's question in the round a parked call's client is asked.
pub(crate) const QUESTION_KEY: &str = "elicitation";

/// A call's future upstream, to its outcome.
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = Result<Called, ToolError>> + Send>>;

/// A call in flight upstream: what the server sends for it, and its outcome.
///
/// Its future is polled by the call that made it, on the call's own task: no task of its
/// own to spawn, schedule and join for every call. Only a call parked beyond the call that
/// made it ([`ParkedCalls::park`]), or let go of before its end, gets a task of its own,
/// where it goes on to its outcome (or to telling the server it was cancelled).
pub(crate) struct InFlight {
    pub(crate) from_server: crate::mailbox::Receiver<FromServer>,
    /// Its outcome, once (polled again after it is ready, it fails the call).
    pub(crate) outcome: Outcome,
    /// Cancels it upstream.
    pub(crate) cancel: Arc<Cancel>,
    /// Where it gets a task of its own.
    runtime: tokio::runtime::Handle,
}

/// Where a call's future is polled, and the future of its outcome.
pub(crate) enum Outcome {
    /// By its caller.
    Here(CallFuture),
    /// In a task of its own.
    Spawned(tokio::task::JoinHandle<Result<Called, ToolError>>),
    /// Nowhere: its outcome was taken.
    Taken,
}

impl Future for Outcome {
    type Output = Result<Called, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let outcome = match this {
            Outcome::Here(call) => std::task::ready!(call.as_mut().poll(cx)),
            Outcome::Spawned(task) => {
                std::task::ready!(Pin::new(task).poll(cx)).unwrap_or_else(|e| {
                    Err(ToolError::failed(format!(
                        "the call to the MCP server stopped: {e}"
                    )))
                })
            }
            Outcome::Taken => Err(ToolError::failed(
                "the call to the MCP server had already ended",
            )),
        };
        *this = Outcome::Taken;
        Poll::Ready(outcome)
    }
}

impl InFlight {
    /// A call whose future is `call`, polled by its caller.
    pub(crate) fn new(
        call: CallFuture,
        from_server: crate::mailbox::Receiver<FromServer>,
        cancel: Arc<Cancel>,
        runtime: tokio::runtime::Handle,
    ) -> InFlight {
        InFlight {
            from_server,
            outcome: Outcome::Here(call),
            cancel,
            runtime,
        }
    }

    /// Whether it has ended.
    pub(crate) fn is_finished(&self) -> bool {
        match &self.outcome {
            Outcome::Here(_) => false,
            Outcome::Spawned(task) => task.is_finished(),
            Outcome::Taken => true,
        }
    }

    /// Gives its future a task of its own, if it has none: it goes on while nobody polls
    /// it.
    fn spawned(&mut self) {
        self.outcome = match std::mem::replace(&mut self.outcome, Outcome::Taken) {
            Outcome::Here(call) => Outcome::Spawned(self.runtime.spawn(call)),
            other => other,
        };
    }
}

impl Drop for InFlight {
    /// A call let go of before its outcome (its caller's time ran out and the caller's
    /// future was dropped, or a parked call expired) is cancelled upstream: the server is
    /// told, and stops working on it. Its future goes on in a task of its own to do that.
    fn drop(&mut self) {
        if !self.is_finished() {
            self.cancel.cancel();
            self.spawned();
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
        mut call: InFlight,
        reply: oneshot::Sender<Result<ElicitResult, rmcp::ErrorData>>,
    ) {
        // Nobody polls it while it waits here: it goes on in a task of its own.
        call.spawned();
        let mut parked = self.lock();
        parked.retain(|_, p| !p.call.is_finished() && p.since.elapsed() < PARKED_FOR);
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

    /// A call whose future `call` makes of its cancellation, polled by its caller.
    fn in_flight<F>(call: impl FnOnce(Arc<Cancel>) -> F) -> (InFlight, Arc<Cancel>)
    where
        F: Future<Output = Result<Called, ToolError>> + Send + 'static,
    {
        let cancel = Arc::new(Cancel::default());
        let call = InFlight::new(
            Box::pin(call(cancel.clone())),
            crate::mailbox::channel().1,
            cancel.clone(),
            tokio::runtime::Handle::current(),
        );
        (call, cancel)
    }

    #[tokio::test]
    async fn a_parked_call_is_taken_once_and_an_ended_one_is_swept() {
        let calls = ParkedCalls::default();
        let (waiting, _) = in_flight(|_| std::future::pending());
        let (ended, _) = in_flight(|_| async { Err(ToolError::failed("the server's call ended")) });
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

    #[tokio::test]
    async fn a_parked_call_goes_on_though_nobody_polls_it() {
        let calls = ParkedCalls::default();
        let (went_on, gone_on) = oneshot::channel();
        let (call, _) = in_flight(|_| async move {
            let _ = went_on.send(());
            Err(ToolError::failed("answered"))
        });
        let key = ParkedCalls::new_id();
        calls.park(&key, call, oneshot::channel().0);
        tokio::time::timeout(Duration::from_secs(5), gone_on)
            .await
            .expect("the parked call ran in a task of its own")
            .expect("it said so");
        let mut parked = calls.take(&key).expect("still parked");
        assert!(parked.call.is_finished());
        let outcome = (&mut parked.call.outcome).await;
        assert!(matches!(outcome, Err(ToolError::Failed(m)) if m == "answered"));
    }

    #[tokio::test]
    async fn a_call_let_go_of_before_its_end_is_cancelled_upstream() {
        let (told, was_told) = oneshot::channel();
        // As a call tells its server: once cancelled.
        let (call, _) = in_flight(|cancel| async move {
            cancel.cancelled().await;
            let _ = told.send(());
            Err(ToolError::Cancelled("cancelled".into()))
        });
        drop(call);
        tokio::time::timeout(Duration::from_secs(5), was_told)
            .await
            .expect("the call went on to tell the server")
            .expect("it told");
    }

    #[tokio::test]
    async fn a_call_polled_to_its_end_is_not_cancelled_and_has_one_outcome() {
        let (mut call, cancel) = in_flight(|_| async { Err(ToolError::failed("done")) });
        let outcome = (&mut call.outcome).await;
        assert!(matches!(outcome, Err(ToolError::Failed(m)) if m == "done"));
        assert!(call.is_finished());
        let again = (&mut call.outcome).await;
        assert!(matches!(again, Err(ToolError::Failed(m)) if m.contains("already ended")));
        drop(call);
        assert!(
            !cancel.is_cancelled(),
            "an ended call was cancelled when let go of"
        );
    }
}
