//! One call's way to its user ([`CallRoute`]), made by the `tools/call` handler before the
//! call starts and carried by the call itself (its invocation's extensions): the
//! [`crate::McpConfirmer`] reads it from the confirmation request, and a mounted server's
//! tool from its context, as the call's [`mcp_toolsets::ClientRelay`]. Nothing keeps it
//! by the call's id: it lives as long as the call that holds it.

use std::sync::{Arc, Mutex, PoisonError};

use dispatcher_core::{Answer, ConfirmationRequest, Decision};
use rmcp::model::{ClientCapabilities, ElicitRequestParams, InputRequiredResult};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::oneshot;

use crate::tasks::TaskHandle;

/// What ends a 2026-07-28 client's round with `input_required`.
pub(crate) enum Question {
    /// toolhost's own confirmation question, and where its answer goes when the handler
    /// keeps the call going (as a task) instead of ending the round.
    Confirm(ConfirmationRequest, oneshot::Sender<Answer>),
    /// A mounted server's `input_required` round, relayed whole.
    Relay(InputRequiredResult),
}

/// How one running call's confirmation is answered: set by the handler before the call
/// starts, read by the [`crate::McpConfirmer`] when the dispatcher asks.
pub(crate) enum Route {
    /// Ask through an `elicitation/create` request to the call's client (2025-11-25 and
    /// older).
    Elicit,
    /// End this round with `input_required` (2026-07-28): hand the question to the handler.
    Defer {
        to: oneshot::Sender<Question>,
        /// Which of a mounted server's requests the client can answer.
        caps: Arc<ClientCapabilities>,
        /// The retry of a relayed round: the call was allowed in an earlier round, and only
        /// a mounted server's next round ends this one.
        allowed: bool,
    },
    /// The user already answered, in a verified retry (2026-07-28).
    Answered(Decision),
    /// The call became a task: its questions wait in the task's `inputRequests`.
    Task(TaskHandle),
    /// A question ended this round (a [`Route::Defer`] was taken): the call is on its way
    /// out, and a further question falls back.
    Asked,
    /// Nobody can be asked: a watching console, else `[mcp] prompt_fallback`.
    Fallback,
}

/// Who answers one confirmation request, as the call's route says.
pub(crate) enum Ask {
    /// Decided already: a verified retry's answer, or the allowance of the round before.
    Answered(Decision),
    /// The handler, which ends the round with the question (2026-07-28).
    Defer(oneshot::Sender<Question>),
    /// The call's client, through `elicitation/create` (2025 era).
    Elicit(Peer<RoleServer>),
    /// The task the call became.
    Task(TaskHandle),
    /// No client: a watching console, else `[mcp] prompt_fallback`.
    Nobody,
}

/// A call whose client takes tasks and did not end at once: whether it became one, asked
/// for by a mounted server that made a task of it ([`CallRoute::became_task`]) and decided
/// by the handler. Made only when one of them waits for the other: most calls end in their
/// first poll and are decided in their route, without it.
pub(crate) struct Promotion {
    /// A mounted server made a task of the call.
    pub(crate) asked: tokio::sync::Notify,
    /// Whether the call became a task of toolhost's: unset until decided.
    decided: std::sync::OnceLock<bool>,
    /// Told once it is decided. A `Notify`, not a `watch` channel: every call of a client
    /// that takes tasks is decided, and a watch's send wakes its eight lists of waiters
    /// (a thousand instructions a call to toolhost mounted in a gateway), where a call
    /// that has nobody waiting for its decision takes one lock.
    told: tokio::sync::Notify,
}

impl Promotion {
    fn new() -> Promotion {
        Promotion {
            asked: tokio::sync::Notify::new(),
            decided: std::sync::OnceLock::new(),
            told: tokio::sync::Notify::new(),
        }
    }

    /// Says whether the call became a task (once; later words change nothing).
    pub(crate) fn decide(&self, became: bool) {
        if self.decided.set(became).is_ok() {
            self.told.notify_waiters();
        }
    }

    /// Whether the call became a task, once decided.
    async fn decision(&self) -> bool {
        loop {
            let told = self.told.notified();
            tokio::pin!(told);
            // Registered before the look, so a decision between the two is not missed.
            told.as_mut().enable();
            if let Some(became) = self.decided.get() {
                return *became;
            }
            told.await;
        }
    }
}

/// What one call's route holds while the call runs.
struct Entry {
    route: Route,
    /// The connection of the call's client, when that takes requests while the call runs
    /// (2025 era), for what mounted servers ask ([`crate::relay`]) and for
    /// [`Route::Elicit`].
    client: Option<Peer<RoleServer>>,
    /// What the call's client can be asked while the call runs ([`asked_of`]).
    caps: Option<Arc<ClientCapabilities>>,
    /// The answers a 2026 client's retry brought for a mounted server's relayed round.
    resume: Option<mcp_toolsets::Resume>,
    /// The call's client takes tasks: the call may become one.
    takes_tasks: bool,
    /// Whether the call became a task, once decided.
    decided: Option<bool>,
    /// Shared by the handler and a mounted server's task waiting for the decision, once
    /// either needs it; taken when the call is decided.
    promotion: Option<Arc<Promotion>>,
    /// The call has ended ([`CallRoute::ended`]).
    ended: bool,
    /// The way to the handler of a question never asked, kept from the call's end until the
    /// route goes ([`CallRoute::ended`]).
    unasked: Option<oneshot::Sender<Question>>,
}

impl Entry {
    /// Records the decision if none was made: the promotion a waiter shares, to be told.
    fn decide(&mut self, became: bool) -> Option<Arc<Promotion>> {
        if self.decided.is_some() {
            return None;
        }
        self.decided = Some(became);
        self.promotion.take()
    }

    /// The promotion the handler and a mounted server's task share, made when first
    /// needed.
    fn promotion(&mut self) -> &Arc<Promotion> {
        self.promotion
            .get_or_insert_with(|| Arc::new(Promotion::new()))
    }
}

/// One call's way to its user, carried by the call. Held by the call's handler, its
/// confirmation requests and the context of its tool; [`CallRoute::ended`] lets go of the
/// client's connection when the call ends, whoever still holds the route.
pub(crate) struct CallRoute {
    entry: Mutex<Entry>,
}

impl CallRoute {
    /// A call's route: how its confirmation is answered, the connection of its client if
    /// that takes requests while the call runs, what that client can be asked, and whether
    /// it takes tasks (the call may become one).
    pub(crate) fn new(
        route: Route,
        client: Option<Peer<RoleServer>>,
        caps: Option<Arc<ClientCapabilities>>,
        takes_tasks: bool,
    ) -> Arc<CallRoute> {
        Arc::new(CallRoute {
            entry: Mutex::new(Entry {
                route,
                client,
                caps,
                resume: None,
                takes_tasks,
                decided: None,
                promotion: None,
                ended: false,
                unasked: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entry> {
        self.entry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The call ended: a question that still comes falls back, the client's connection is
    /// let go, and a call that was never decided did not become a task.
    pub(crate) fn ended(&self) {
        let (client, promotion) = {
            let mut entry = self.lock();
            // A question's way not taken is kept, not dropped: its drop would wake the
            // handler, whose task is the connection's and has the call's answer already,
            // for one more poll of the connection (a gateway's every call: callgrind).
            // Nothing waits on it: the handler reads a dropped way as no question ever.
            if let Route::Defer { to, .. } = std::mem::replace(&mut entry.route, Route::Asked) {
                entry.unasked = Some(to);
            }
            entry.ended = true;
            (entry.client.take(), entry.decide(false))
        };
        // Dropped outside the lock (a client's connection among it).
        drop(client);
        if let Some(promotion) = promotion {
            promotion.decide(false);
        }
    }

    /// Says whether the call became a task (once; later words change nothing), to a
    /// mounted server's task waiting for it if there is one.
    pub(crate) fn decide(&self, became: bool) {
        let promotion = self.lock().decide(became);
        if let Some(promotion) = promotion {
            promotion.decide(became);
        }
    }

    /// What the handler waits on for a mounted server's word (the call became its task),
    /// shared with that server's task.
    pub(crate) fn promotion(&self) -> Arc<Promotion> {
        self.lock().promotion().clone()
    }

    /// The connection of the client that made the call, if it takes requests while the
    /// call runs.
    pub(crate) fn client(&self) -> Option<Peer<RoleServer>> {
        self.lock().client.clone()
    }

    /// Gives the call the answers its retry brought.
    pub(crate) fn resume_with(&self, resume: mcp_toolsets::Resume) {
        self.lock().resume = Some(resume);
    }

    /// The answers the retry brought, taken.
    pub(crate) fn take_resume(&self) -> Option<mcp_toolsets::Resume> {
        self.lock().resume.take()
    }

    /// What the client that made the call can be asked while it runs (its declared
    /// elicitation, sampling and roots); `None` for a call no MCP client made.
    pub(crate) fn client_capabilities(&self) -> Option<ClientCapabilities> {
        self.lock().caps.as_deref().cloned()
    }

    /// Hands a mounted server's `input_required` round to the 2026 client that made the
    /// call, if it can answer every request in it; `false` otherwise.
    pub(crate) fn defer_round(&self, asked: &InputRequiredResult) -> bool {
        let mut entry = self.lock();
        let Route::Defer { caps, .. } = &entry.route else {
            return false;
        };
        if !answers_all(caps, asked) {
            return false;
        }
        let Route::Defer { to, .. } = std::mem::replace(&mut entry.route, Route::Asked) else {
            return false;
        };
        to.send(Question::Relay(asked.clone())).is_ok()
    }

    /// Makes the call a task: its questions go to `task` from now on. `false` when a
    /// question already ended its round ([`Route::Asked`]), unless `asked` says the
    /// handler holds that question itself, and when the call has ended.
    pub(crate) fn to_task(&self, task: TaskHandle, asked: bool) -> bool {
        let mut entry = self.lock();
        if entry.ended || (matches!(entry.route, Route::Asked) && !asked) {
            return false;
        }
        entry.route = Route::Task(task);
        true
    }

    /// The task the call became, if it did.
    pub(crate) fn task_of(&self) -> Option<TaskHandle> {
        match &self.lock().route {
            Route::Task(task) => Some(task.clone()),
            _ => None,
        }
    }

    /// A mounted server made a task of the call: asks the handler to make it a task of
    /// toolhost's too, and says whether it did (`false` at once for a call whose client
    /// does not take tasks).
    pub(crate) fn became_task(&self) -> mcp_toolsets::RelayFuture<bool> {
        let promotion = {
            let mut entry = self.lock();
            match entry.decided {
                _ if !entry.takes_tasks => Err(false),
                Some(became) => Err(became),
                None => Ok(entry.promotion().clone()),
            }
        };
        Box::pin(async move {
            let promotion = match promotion {
                Ok(promotion) => promotion,
                Err(decided) => return mcp_toolsets::Relayed::Answered(decided),
            };
            promotion.asked.notify_one();
            mcp_toolsets::Relayed::Answered(promotion.decision().await)
        })
    }

    /// Whether the user's answer is already known: a verified retry carries it (or, for a
    /// relayed round, the allowance of the round before).
    pub(crate) fn answers_at_once(&self) -> bool {
        matches!(
            self.lock().route,
            Route::Answered(_) | Route::Defer { allowed: true, .. }
        )
    }

    /// Who answers a confirmation request of the call (`mid_call`: asked by the tool while
    /// it runs).
    pub(crate) fn ask(&self, mid_call: bool) -> Ask {
        let mut entry = self.lock();
        match &entry.route {
            // A question asked while the call runs cannot end the round (the call is
            // running), and the retry's answer was for the call, not for it: such a
            // question goes to a console or the fallback.
            Route::Defer { allowed: true, .. } => Ask::Answered(Decision::Allow),
            // A client that takes relayed rounds but cannot be asked toolhost's form.
            Route::Defer { caps, .. } if !elicits_form(caps) => Ask::Nobody,
            Route::Defer { .. } | Route::Answered(_) if mid_call => Ask::Nobody,
            // The sender goes to the first question; a second one (none is expected) falls
            // back.
            Route::Defer { .. } => match std::mem::replace(&mut entry.route, Route::Asked) {
                Route::Defer { to, .. } => Ask::Defer(to),
                _ => Ask::Nobody,
            },
            Route::Elicit => entry.client.clone().map_or(Ask::Nobody, Ask::Elicit),
            Route::Answered(d) => Ask::Answered(*d),
            Route::Task(task) => Ask::Task(task.clone()),
            Route::Asked | Route::Fallback => Ask::Nobody,
        }
    }
}

/// What of `declared` a mounted server may ask of the client while a call runs:
/// elicitation, sampling, and roots (always: toolhost answers with the session's
/// workspace for a client that declared none); and whether the client takes tasks
/// (toolhost follows a server's task for it, and makes the call a task of its own).
pub(crate) fn asked_of(declared: &ClientCapabilities) -> ClientCapabilities {
    let mut asked = ClientCapabilities::default();
    if declared.supports_tasks() {
        asked
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                rmcp::model::TASKS_EXTENSION_ID.to_string(),
                Default::default(),
            );
    }
    asked.elicitation = declared.elicitation.clone();
    #[allow(deprecated, reason = "clients still declare sampling and roots")]
    {
        asked.sampling = declared.sampling.clone();
        asked.roots = Some(declared.roots.clone().unwrap_or_default());
    }
    asked
}

/// Whether a client with `caps` can answer every request of a server's round: form
/// elicitation (an empty `elicitation` counts), URL elicitation, sampling, `roots/list`.
pub(crate) fn answers_all(caps: &ClientCapabilities, asked: &InputRequiredResult) -> bool {
    use rmcp::model::InputRequest;
    let elicitation = caps.elicitation.as_ref();
    asked
        .input_requests
        .iter()
        .flatten()
        .all(|(_, request)| match request {
            InputRequest::Elicitation(e) => match &e.params {
                ElicitRequestParams::UrlElicitationParams { .. } => {
                    elicitation.is_some_and(|e| e.url.is_some())
                }
                _ => elicitation.is_some_and(|e| e.form.is_some() || e.url.is_none()),
            },
            #[allow(
                deprecated,
                reason = "2026 clients may still declare sampling and roots"
            )]
            InputRequest::CreateMessage(_) => caps.sampling.is_some(),
            #[allow(
                deprecated,
                reason = "2026 clients may still declare sampling and roots"
            )]
            InputRequest::ListRoots(_) => caps.roots.is_some(),
            _ => false,
        })
}

/// Whether a client declared form elicitation (an empty `elicitation` object counts).
pub(crate) fn elicits_form(caps: &ClientCapabilities) -> bool {
    caps.elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Context;

    use super::*;
    use crate::wake_count::counting;

    /// A 2026-07-28 call's route, whose questions would end the round, and the handler's
    /// end of the way they come by.
    fn deferred() -> (Arc<CallRoute>, oneshot::Receiver<Question>) {
        let (to, asked) = oneshot::channel();
        let route = Route::Defer {
            to,
            caps: Arc::new(ClientCapabilities::default()),
            allowed: false,
        };
        (CallRoute::new(route, None, None, false), asked)
    }

    #[test]
    fn the_end_of_a_call_does_not_wake_its_handler_and_later_questions_fall_back() {
        let (route, mut asked) = deferred();
        let (wakes, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut asked).poll(&mut cx).is_pending());

        route.ended();
        assert_eq!(wakes.get(), 0, "the handler was woken");
        assert!(matches!(route.ask(false), Ask::Nobody));

        // The way goes with the route; a handler still waiting then sees no question ever.
        drop(route);
        assert_eq!(wakes.get(), 1);
        assert!(Pin::new(&mut asked).poll(&mut cx).is_ready());
    }
}
