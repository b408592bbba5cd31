//! Asking the user ([`ConfirmationBroker`]).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tool_api::SideEffect;

use crate::call::CallHeader;

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

impl Decision {
    /// The wire name: `allow`, `deny` or `always_allow`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::AlwaysAllow => "always_allow",
        }
    }
}

/// What a [`Confirmer`] answers: a decision, and whether a user made it or the client
/// answered from its configuration because it could not ask anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The decision.
    pub decision: Decision,
    /// When no user was asked (e.g. an MCP client without elicitation, answered by
    /// `[mcp] prompt_fallback`): why, and how to allow the call. A denied call's result
    /// says it, so the model reads who decided.
    pub fallback: Option<Arc<str>>,
}

impl Answer {
    /// An answer the client's configuration gave because no user could be asked; `why`
    /// says why nobody was asked and what to change to allow the call.
    pub fn fallback(decision: Decision, why: impl Into<Arc<str>>) -> Answer {
        Answer {
            decision,
            fallback: Some(why.into()),
        }
    }
}

impl From<Decision> for Answer {
    /// A user's answer.
    fn from(decision: Decision) -> Answer {
        Answer {
            decision,
            fallback: None,
        }
    }
}

/// Who settled whether a call runs. Serialized with a `by` tag: `{"by": "policy", "rule":
/// "tool_confirmation.default.read"}`, `{"by": "user", "client": "terminal"}`, …
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum DecidedBy {
    /// The confirmation policy let it run without asking.
    Policy {
        /// The config key that decided (borrowed for the built-in keys, so a call the
        /// default policy lets run allocates nothing to say so).
        rule: std::borrow::Cow<'static, str>,
    },
    /// A pre-use hook allowed it without a prompt.
    Hook {
        /// The hook's name.
        name: String,
    },
    /// An earlier "always allow" answer in this session.
    Approval,
    /// A user, through this client (a terminal, an MCP client's elicitation, a web console).
    User {
        /// The client's name.
        client: String,
    },
    /// A client that could not ask a user answered from its configuration.
    Fallback {
        /// The client's name.
        client: String,
        /// Why nobody was asked, and how to allow the call.
        reason: Arc<str>,
    },
    /// Nobody answered within the confirmation timeout.
    Timeout,
    /// The call was cancelled while it waited.
    Cancelled,
}

impl DecidedBy {
    /// Its `by` tag as serialized: `policy`, `hook`, `approval`, `user`, `fallback`,
    /// `timeout` or `cancelled` (a metric's label, read without serializing).
    pub fn by(&self) -> &'static str {
        match self {
            DecidedBy::Policy { .. } => "policy",
            DecidedBy::Hook { .. } => "hook",
            DecidedBy::Approval => "approval",
            DecidedBy::User { .. } => "user",
            DecidedBy::Fallback { .. } => "fallback",
            DecidedBy::Timeout => "timeout",
            DecidedBy::Cancelled => "cancelled",
        }
    }

    fn answered(answer: Answer, client: &str) -> DecidedBy {
        let client = client.to_string();
        match answer.fallback {
            Some(reason) => DecidedBy::Fallback { client, reason },
            None => DecidedBy::User { client },
        }
    }
}

/// What a user is asked about.
#[derive(Debug, Clone, Serialize)]
pub struct ConfirmationRequest {
    /// Id to answer with.
    pub request_id: Arc<str>,
    /// The call that asks.
    #[serde(flatten)]
    pub call: Arc<CallHeader>,
    /// A short rendering of the input; for a tool's own question, the question.
    pub input_summary: String,
    /// What the call would change, e.g. `will modify src/auth.ts`.
    pub projected_modifications: Vec<String>,
    /// The rule that asked (e.g. `tool_confirmation.default.write`).
    pub reason: String,
    /// Asked by the tool while it runs ([`tool_api::ToolContext::ask_user`]), not by the
    /// policy before it starts: a client that can only answer between calls (an MCP
    /// client of protocol 2026-07-28) cannot take this one.
    pub mid_call: bool,
}

impl ConfirmationRequest {
    /// The tool's published name.
    pub fn tool_name(&self) -> &str {
        &self.call.tool_name
    }

    /// The tool's class.
    pub fn side_effects(&self) -> SideEffect {
        // A call reaches confirmation only after its tool was found.
        self.call.side_effects.unwrap_or(SideEffect::Execute)
    }
}

/// What a [`Confirmer`] returns.
pub type ConfirmFuture = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A client the host wires in to answer requests (a terminal prompt, a test double).
///
/// The dispatcher starts `confirm` for every request and feeds its answer to the broker
/// under [`Confirmer::name`]; if another client answered first, the late answer is
/// discarded. The future is dropped when the request is resolved or times out.
pub trait Confirmer: Send + Sync {
    /// A name for `resolved_by` in events.
    fn name(&self) -> &str;
    /// Asks the user (or answers from configuration: [`Answer::fallback`]).
    fn confirm(&self, request: ConfirmationRequest) -> ConfirmFuture;
    /// Whether this client already has the user's answer for `call` (e.g. a verified retry
    /// that carries it), so that [`Confirmer::confirm`] answers at once: the dispatcher
    /// then skips what it would look up before asking (an "always" grant in the shared
    /// state). Default: no.
    fn answers_at_once(&self, call: &CallHeader) -> bool {
        let _ = call;
        false
    }
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
    /// The request waits on another instance, and the shared state store that reaches it
    /// cannot be reached now.
    #[error("confirmation request '{request_id}' cannot be answered from here now: {why}")]
    Unreachable {
        /// The request.
        request_id: String,
        /// Why.
        why: String,
    },
}

struct Pending {
    request: ConfirmationRequest,
    tx: oneshot::Sender<(Answer, String)>,
}

#[derive(Default)]
struct BrokerState {
    pending: HashMap<Arc<str>, Pending>,
    /// Requests published to the other instances (to withdraw when they end).
    published: std::collections::HashSet<Arc<str>>,
    resolved: HashMap<Arc<str>, (String, String)>,
    resolved_order: VecDeque<Arc<str>>,
}

/// How many resolved requests the broker remembers, to tell late answers who won.
const RESOLVED_MEMORY: usize = 4096;

/// Asking the user: confirmation requests, the broker that collects answers from any number
/// of clients, and the [`Confirmer`] trait for a client the host wires in directly.
///
/// A call that needs confirmation registers a request with the [`ConfirmationBroker`] and
/// emits `tool.confirmation_requested`. Any client that sees the event (a terminal, an IDE,
/// a web dashboard) may answer with [`ConfirmationBroker::resolve`]: the first answer wins,
/// and every later answer gets [`ResolveError::AlreadyResolved`] naming the winner. Nobody
/// answering within the confirmation timeout (default 5 minutes) ends the call with
/// `confirmation_timeout`.
///
/// Collects answers to confirmation requests from any number of clients; first wins.
#[derive(Clone, Default)]
pub struct ConfirmationBroker {
    state: Arc<Mutex<BrokerState>>,
    /// The store shared with other instances, where the first answer is taken
    /// ([`crate::first_answer`]); `None`: this broker is the whole truth.
    shared: Option<Arc<dyn crate::store::Store>>,
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

    /// Registers a request; clients may answer it from now on.
    pub(crate) fn register(&self, request: ConfirmationRequest) -> PendingConfirmation {
        let (tx, rx) = oneshot::channel();
        let id = request.request_id.clone();
        let confirmers = Vec::new();
        self.lock()
            .pending
            .insert(id.clone(), Pending { request, tx });
        PendingConfirmation {
            broker: self.clone(),
            id,
            rx,
            confirmers,
        }
    }

    /// Answers a pending request on behalf of `client` (a user's answer). The first answer
    /// wins; a later one gets [`ResolveError::AlreadyResolved`].
    pub fn resolve(
        &self,
        request_id: &str,
        decision: Decision,
        client: &str,
    ) -> Result<(), ResolveError> {
        self.settle(request_id, decision.into(), client)
    }

    /// A broker whose first answers are taken in `store`, shared with other instances.
    pub(crate) fn shared_through(store: Arc<dyn crate::store::Store>) -> ConfirmationBroker {
        ConfirmationBroker {
            state: Arc::default(),
            shared: Some(store),
        }
    }

    /// Settles a request with an answer given here, if it is the first anywhere (an
    /// answer given on another instance may have taken it; its message settles it). When
    /// the shared store cannot be reached, the answer given here stands: no other instance
    /// can answer either.
    async fn settle_first(&self, request_id: &str, answer: Answer, client: &str) {
        let Some(store) = &self.shared else {
            let _ = self.settle(request_id, answer, client);
            return;
        };
        let Err(answer) = self.settle_if_unpublished(request_id, answer, client) else {
            return;
        };
        match crate::first_answer::claim(store, request_id, answer.decision.as_str(), client).await
        {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => tracing::debug!("{e}; the answer given here stands"),
        }
        let _ = self.settle(request_id, answer, client);
    }

    /// Settles a request never published to the other instances (nobody elsewhere can
    /// answer it): checked and settled under one lock, so it cannot be published in
    /// between. `Err` gives the answer back when it was published.
    pub(crate) fn settle_if_unpublished(
        &self,
        request_id: &str,
        answer: Answer,
        client: &str,
    ) -> Result<Result<(), ResolveError>, Answer> {
        let state = self.lock();
        if state.published.contains(request_id) {
            return Err(answer);
        }
        Ok(Self::settle_locked(state, request_id, answer, client))
    }

    pub(crate) fn settle(
        &self,
        request_id: &str,
        answer: Answer,
        client: &str,
    ) -> Result<(), ResolveError> {
        Self::settle_locked(self.lock(), request_id, answer, client)
    }

    fn settle_locked(
        mut state: MutexGuard<'_, BrokerState>,
        request_id: &str,
        answer: Answer,
        client: &str,
    ) -> Result<(), ResolveError> {
        match state.pending.remove(request_id) {
            Some(p) => {
                let id = p.request.request_id.clone();
                Self::remember(
                    &mut state,
                    id,
                    answer.decision.as_str().into(),
                    client.into(),
                );
                drop(state);
                // The waiting call may have just timed out; then the answer is moot.
                let _ = p.tx.send((answer, client.to_string()));
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
    fn expire(&self, request_id: &Arc<str>, why: &str) -> bool {
        let mut state = self.lock();
        if state.pending.remove(request_id).is_some() {
            Self::remember(&mut state, request_id.clone(), why.into(), why.into());
            true
        } else {
            false
        }
    }

    /// Whether `request_id` waits here for an answer.
    pub(crate) fn is_pending(&self, request_id: &str) -> bool {
        self.lock().pending.contains_key(request_id)
    }

    /// Marks `request_id` as published to the other instances, if it still waits.
    pub(crate) fn mark_published(&self, request_id: &Arc<str>) -> bool {
        let mut state = self.lock();
        state.pending.contains_key(request_id) && state.published.insert(request_id.clone())
    }

    /// The store shared with other instances, if any.
    pub(crate) fn shared(&self) -> Option<&Arc<dyn crate::store::Store>> {
        self.shared.as_ref()
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
            .filter(|p| session_id.is_none_or(|s| &*p.request.call.session_id == s))
            .map(|p| p.request.clone())
            .collect();
        out.sort_by(|a, b| a.request_id.cmp(&b.request_id));
        out
    }
}

/// How a confirmation ended.
pub(crate) enum Resolution {
    /// Somebody (or some client's configuration) answered.
    Answered(Decision, DecidedBy),
    /// Nobody answered in time.
    TimedOut,
    /// The call was cancelled while waiting.
    Cancelled,
}

impl Resolution {
    /// The decision's wire name (`timeout`, `cancelled` when none was made).
    pub(crate) fn decision_name(&self) -> &'static str {
        match self {
            Resolution::Answered(d, _) => d.as_str(),
            Resolution::TimedOut => "timeout",
            Resolution::Cancelled => "cancelled",
        }
    }

    /// Who settled it.
    pub(crate) fn decided_by(&self) -> DecidedBy {
        match self {
            Resolution::Answered(_, by) => by.clone(),
            Resolution::TimedOut => DecidedBy::Timeout,
            Resolution::Cancelled => DecidedBy::Cancelled,
        }
    }

    /// The client that answered, or how it ended without one.
    pub(crate) fn resolved_by(&self) -> String {
        match self {
            Resolution::Answered(
                _,
                DecidedBy::User { client } | DecidedBy::Fallback { client, .. },
            ) => client.clone(),
            other => other.decision_name().to_string(),
        }
    }

    fn from_answer(answer: Option<(Answer, String)>) -> Resolution {
        match answer {
            Some((answer, client)) => {
                Resolution::Answered(answer.decision, DecidedBy::answered(answer, &client))
            }
            // The broker dropped the request without an answer: treat it as unanswered.
            None => Resolution::TimedOut,
        }
    }
}

/// A registered request, waiting for its first answer.
pub(crate) struct PendingConfirmation {
    broker: ConfirmationBroker,
    id: Arc<str>,
    rx: oneshot::Receiver<(Answer, String)>,
    confirmers: Vec<tokio::task::JoinHandle<()>>,
}

impl PendingConfirmation {
    /// Asks every wired-in client, and waits for the first answer, the timeout, or
    /// `cancelled`, whichever comes first. The clients' questions are withdrawn after.
    pub(crate) async fn wait(
        mut self,
        request: &ConfirmationRequest,
        confirmers: &[Arc<dyn Confirmer>],
        timeout: Duration,
        cancelled: impl Future<Output = ()>,
    ) -> Resolution {
        for c in confirmers {
            let answer = c.confirm(request.clone());
            let broker = self.broker.clone();
            let name = c.name().to_string();
            let id = self.id.clone();
            self.confirmers.push(tokio::spawn(async move {
                let answer = answer.await;
                broker.settle_first(&id, answer, &name).await;
            }));
        }
        let rx = &mut self.rx;
        tokio::select! {
            r = &mut *rx => Resolution::from_answer(r.ok()),
            _ = tokio::time::sleep(timeout) => {
                if self.broker.expire(&self.id, "timeout") {
                    Resolution::TimedOut
                } else {
                    Resolution::from_answer(rx.await.ok())
                }
            }
            _ = cancelled => {
                if self.broker.expire(&self.id, "cancelled") {
                    Resolution::Cancelled
                } else {
                    Resolution::from_answer(rx.await.ok())
                }
            }
        }
    }
}

impl Drop for PendingConfirmation {
    fn drop(&mut self) {
        // Withdraw the question from every client, and forget a request nobody answered.
        for asker in &self.confirmers {
            asker.abort();
        }
        self.broker.expire(&self.id, "cancelled");
        let published = self.broker.lock().published.remove(&self.id);
        if let (true, Some(store)) = (published, self.broker.shared()) {
            crate::first_answer::withdraw(store, &self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_is_the_tag_each_decider_is_serialized_with() {
        for decided in [
            DecidedBy::Policy { rule: "r".into() },
            DecidedBy::Hook { name: "h".into() },
            DecidedBy::Approval,
            DecidedBy::User { client: "c".into() },
            DecidedBy::Fallback {
                client: "c".into(),
                reason: Arc::from("why"),
            },
            DecidedBy::Timeout,
            DecidedBy::Cancelled,
        ] {
            let json = serde_json::to_value(&decided).unwrap_or_default();
            assert_eq!(json["by"], decided.by(), "{decided:?}");
        }
    }
}
