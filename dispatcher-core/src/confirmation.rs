//! Asking the user: confirmation requests, the broker that collects answers from any number
//! of clients, and the [`Confirmer`] trait for a client the host wires in directly.
//!
//! A call that needs confirmation registers a request with the [`ConfirmationBroker`] and
//! emits `tool.confirmation_requested`. Any client that sees the event (a terminal, an IDE,
//! a web dashboard) may answer with [`ConfirmationBroker::resolve`]: the first answer wins,
//! and every later answer gets [`ResolveError::AlreadyResolved`] naming the winner. Nobody
//! answering within the confirmation timeout (default 5 minutes) ends the call with
//! `confirmation_timeout`.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tool_api::SideEffect;

/// A user's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run this call.
    Allow,
    /// Do not run this call (`user_denied`).
    Deny,
    /// Run this call and every later call of this tool in this session without asking.
    AlwaysAllow,
}

/// What a user is asked about.
#[derive(Debug, Clone, Serialize)]
pub struct ConfirmationRequest {
    /// Id to answer with.
    pub request_id: Arc<str>,
    /// The session.
    pub session_id: Arc<str>,
    /// The turn.
    pub turn_id: Arc<str>,
    /// The tool_use block.
    pub tool_use_id: Arc<str>,
    /// The tool.
    pub tool_name: Arc<str>,
    /// The tool's class.
    pub side_effects: SideEffect,
    /// A short rendering of the input.
    pub input_summary: String,
    /// What the call would change, e.g. `will modify src/auth.ts`.
    pub projected_modifications: Vec<String>,
    /// The rule that asked (e.g. `tool_confirmation.default.write`).
    pub reason: String,
}

/// A client the host wires in to answer requests (a terminal prompt, a test double).
///
/// The dispatcher starts `confirm` for every request and feeds its answer to the broker
/// under [`Confirmer::name`]; if another client answered first, the late answer is
/// discarded. The future is dropped when the request is resolved or times out.
pub trait Confirmer: Send + Sync {
    /// A name for `resolved_by` in events.
    fn name(&self) -> &str;
    /// Asks the user.
    fn confirm(
        &self,
        request: ConfirmationRequest,
    ) -> Pin<Box<dyn Future<Output = Decision> + Send>>;
}

/// An answer that could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Another client answered first (or the request timed out).
    #[error("confirmation request '{request_id}' was already resolved by {by} ({decision})")]
    AlreadyResolved {
        /// The request.
        request_id: String,
        /// The winning answer (`allow`, `deny`, `always_allow`, `timeout`, `cancelled`).
        decision: String,
        /// Who gave it.
        by: String,
    },
    /// No such request was ever made (or it is too old to remember).
    #[error("no confirmation request '{request_id}' is known")]
    Unknown {
        /// The request.
        request_id: String,
    },
}

struct Pending {
    request: ConfirmationRequest,
    tx: oneshot::Sender<(Decision, String)>,
}

#[derive(Default)]
struct BrokerState {
    pending: HashMap<Arc<str>, Pending>,
    resolved: HashMap<Arc<str>, (String, String)>,
    resolved_order: VecDeque<Arc<str>>,
}

/// How many resolved requests the broker remembers, to tell late answers who won.
const RESOLVED_MEMORY: usize = 4096;

/// Collects answers to confirmation requests from any number of clients; first wins.
#[derive(Clone, Default)]
pub struct ConfirmationBroker {
    state: Arc<Mutex<BrokerState>>,
}

impl std::fmt::Debug for ConfirmationBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmationBroker").finish_non_exhaustive()
    }
}

impl ConfirmationBroker {
    fn lock(&self) -> MutexGuard<'_, BrokerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn register(
        &self,
        request: ConfirmationRequest,
    ) -> oneshot::Receiver<(Decision, String)> {
        let (tx, rx) = oneshot::channel();
        self.lock()
            .pending
            .insert(request.request_id.clone(), Pending { request, tx });
        rx
    }

    /// Answers a pending request on behalf of `client`. The first answer wins; a later one
    /// gets [`ResolveError::AlreadyResolved`].
    pub fn resolve(
        &self,
        request_id: &str,
        decision: Decision,
        client: &str,
    ) -> Result<(), ResolveError> {
        let mut state = self.lock();
        match state.pending.remove(request_id) {
            Some(p) => {
                let id = p.request.request_id.clone();
                Self::remember(
                    &mut state,
                    id,
                    crate::events::decision_name(decision).into(),
                    client.into(),
                );
                drop(state);
                // The waiting call may have just timed out; then the answer is moot.
                let _ = p.tx.send((decision, client.to_string()));
                Ok(())
            }
            None => match state.resolved.get(request_id) {
                Some((decision, by)) => Err(ResolveError::AlreadyResolved {
                    request_id: request_id.into(),
                    decision: decision.clone(),
                    by: by.clone(),
                }),
                None => Err(ResolveError::Unknown {
                    request_id: request_id.into(),
                }),
            },
        }
    }

    /// Ends a request nobody answered (timeout or cancellation). Returns `false` if an
    /// answer arrived first.
    pub(crate) fn expire(&self, request_id: &Arc<str>, why: &str) -> bool {
        let mut state = self.lock();
        if state.pending.remove(request_id).is_some() {
            Self::remember(&mut state, request_id.clone(), why.into(), why.into());
            true
        } else {
            false
        }
    }

    fn remember(state: &mut BrokerState, id: Arc<str>, decision: String, by: String) {
        state.resolved.insert(id.clone(), (decision, by));
        state.resolved_order.push_back(id);
        while state.resolved_order.len() > RESOLVED_MEMORY {
            if let Some(old) = state.resolved_order.pop_front() {
                state.resolved.remove(&old);
            }
        }
    }

    /// The requests waiting for an answer, optionally only one session's, oldest first.
    pub fn pending(&self, session_id: Option<&str>) -> Vec<ConfirmationRequest> {
        let mut out: Vec<ConfirmationRequest> = self
            .lock()
            .pending
            .values()
            .filter(|p| session_id.is_none_or(|s| &*p.request.session_id == s))
            .map(|p| p.request.clone())
            .collect();
        out.sort_by(|a, b| a.request_id.cmp(&b.request_id));
        out
    }
}
