//! How a `prompt` decision reaches the user of an MCP client: an `elicitation/create`
//! request (2025 era), an `input_required` round (2026-07-28), the answer of a verified
//! retry, a watching console, or `[mcp] prompt_fallback` when nobody can be asked. The
//! handler sets each call's `Route` before the call starts; the [`McpConfirmer`] the
//! dispatcher was built with follows it.
//!
//! ## Asking the user (a `prompt` policy decision)
//!
//! - A client of protocol 2025-11-25 or older with form elicitation is asked with an
//!   `elicitation/create` request (allow / deny / always for this session).
//! - A client of protocol 2026-07-28, which no longer takes requests from servers, gets an
//!   `input_required` result instead: a form elicitation under the key `confirm` with the
//!   same question, and a sealed `requestState` ([`super::request_state`]) bound to the
//!   principal, the tool, the arguments and an expiry (the confirmation timeout). Its retry
//!   with `inputResponses.confirm` and that state runs the call once, on allow. "Always"
//!   from such a client approves the tool in the principal's session on this instance (on
//!   stdio: the one session, as today). A question a tool asks while it runs
//!   (`ToolContext::ask_user`) cannot wait for a 2026 client's next round: it goes to a
//!   watching console, else to the fallback.
//! - A call that became a task ([`super::tasks`]) asks in its task: the same form waits
//!   in the task's `inputRequests` under `confirm` until `tasks/update` answers it. A
//!   question asked while the call runs goes there too.
//! - A client that cannot be asked gets `[mcp] prompt_fallback` (default `deny`; the
//!   result says that nobody could be asked and names the keys that allow the tool).

use dispatcher_core::shared::{WATCH_CHANNEL, WATCHING};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use dispatcher_core::ConfirmFuture;
use dispatcher_core::{Answer, ConfirmationRequest, Confirmer, Decision};
use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::service::{Peer, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

/// What answers a `prompt` when the client cannot be asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptFallback {
    /// Deny the call (default).
    #[default]
    Deny,
    /// Allow the call.
    Allow,
}

impl PromptFallback {
    /// The answer for `tool` when nobody can be asked (`why`: why not), with the advice
    /// the model and the user read, naming `config_file`.
    fn answer(self, tool: &str, why: &str, config_file: &str) -> Answer {
        match self {
            PromptFallback::Allow => Answer::fallback(
                Decision::Allow,
                format!(
                    "{why}; `prompt_fallback = \"allow\"` under [mcp] in {config_file} allowed it."
                ),
            ),
            PromptFallback::Deny => Answer::fallback(
                Decision::Deny,
                format!(
                    "{why}, and `prompt_fallback = \"deny\"` under [mcp] answered. To allow '{tool}', \
                     set `{tool} = \"auto\"` under [tool_confirmation.per_tool] in {config_file}, or set \
                     `prompt_fallback = \"allow\"` under [mcp]."
                ),
            ),
        }
    }
}

/// Why nobody was asked when the client cannot elicit.
const CANNOT_ELICIT: &str =
    "This MCP client cannot ask its user for confirmation (it does not support elicitation)";

/// What ends a 2026-07-28 client's round with `input_required`.
pub(crate) enum Question {
    /// toolhost's own confirmation question, and where its answer goes when the handler
    /// keeps the call going (as a task) instead of ending the round.
    Confirm(ConfirmationRequest, oneshot::Sender<Answer>),
    /// A mounted server's `input_required` round, relayed whole.
    Relay(rmcp::model::InputRequiredResult),
}

/// How one running call's confirmation is answered: set by the handler before the call
/// starts, read by the [`McpConfirmer`] when the dispatcher asks.
pub(crate) enum Route {
    /// Ask through an `elicitation/create` request to the call's client, entered with it
    /// (2025-11-25 and older).
    Elicit,
    /// End this round with `input_required` (2026-07-28): hand the question to the handler.
    Defer {
        to: oneshot::Sender<Question>,
        /// Which of a mounted server's requests the client can answer.
        caps: Arc<rmcp::model::ClientCapabilities>,
        /// The retry of a relayed round: the call was allowed in an earlier round, and only
        /// a mounted server's next round ends this one.
        allowed: bool,
    },
    /// The user already answered, in a verified retry (2026-07-28).
    Answered(Decision),
    /// The call became a task: its questions wait in the task's `inputRequests`.
    Task(super::tasks::TaskHandle),
    /// A question ended this round (a [`Route::Defer`] was taken): the call is on its way
    /// out, and a further question falls back.
    Asked,
    /// Nobody can be asked: `[mcp] prompt_fallback`.
    Fallback,
}

/// A call whose client takes tasks: whether it became one, asked for by a mounted server
/// that made a task of it ([`Routes::became_task`]) and decided by the handler.
pub(crate) struct Promotion {
    /// A mounted server made a task of the call.
    pub(crate) asked: tokio::sync::Notify,
    /// Whether the call became a task of toolhost's: `None` until decided.
    decided: tokio::sync::watch::Sender<Option<bool>>,
}

impl Promotion {
    /// Says whether the call became a task (once; later words change nothing).
    pub(crate) fn decide(&self, became: bool) {
        self.decided.send_if_modified(|d| {
            let first = d.is_none();
            if first {
                *d = Some(became);
            }
            first
        });
    }
}

/// One call in flight, as its handler entered it ([`Routes::enter`]).
struct Entry {
    route: Route,
    /// The connection of the call's client, when that takes requests while the call runs
    /// (2025 era), for what mounted servers ask ([`super::relay`]) and for
    /// [`Route::Elicit`].
    client: Option<Peer<RoleServer>>,
    /// What the call's client can be asked while the call runs.
    caps: Option<Arc<rmcp::model::ClientCapabilities>>,
    /// The answers a 2026 client's retry brought for a mounted server's relayed round.
    resume: Option<mcp_toolsets::Resume>,
    /// Set when the call's client takes tasks: whether the call became one.
    promotion: Option<Arc<Promotion>>,
}

/// The routes of the calls in flight, by tool-use id (ids a client's JSON-RPC ids make:
/// foldhash's per-map random seed).
type Calls = HashMap<Arc<str>, Entry, foldhash::fast::RandomState>;

/// The calls in flight, by tool-use id: one entry each, set and removed under one lock.
pub struct Routes {
    calls: Mutex<Calls>,
    fallback: PromptFallback,
    /// The config file, named in the fallback's advice.
    config_file: String,
    /// Consoles following the event stream ([`Routes::watch`]).
    watchers: std::sync::atomic::AtomicUsize,
    /// The store shared with other instances, where consoles say they watch: a console on
    /// any instance answers a question no client can.
    shared: std::sync::OnceLock<Arc<dyn dispatcher_core::store::Store>>,
}

/// How long a console's word lasts without being renewed.
const WATCH_TTL: std::time::Duration = std::time::Duration::from_secs(15);

impl Routes {
    /// No calls yet; `fallback` answers when nobody can be asked, and its advice names
    /// `config_file`.
    pub fn new(fallback: PromptFallback, config_file: impl Into<String>) -> Arc<Self> {
        Arc::new(Routes {
            calls: Mutex::new(HashMap::default()),
            fallback,
            config_file: config_file.into(),
            watchers: std::sync::atomic::AtomicUsize::new(0),
            shared: std::sync::OnceLock::new(),
        })
    }

    /// Consoles on other instances sharing `store` count as watching, and the consoles
    /// here tell them (over a store of this process only: nothing to share).
    pub fn share_watchers_through(&self, store: Arc<dyn dispatcher_core::store::Store>) {
        if store.shared() {
            let _ = self.shared.set(store);
        }
    }

    /// Whether a console watches on any instance sharing the store (one round trip); no
    /// answer from the store means no.
    async fn watched_anywhere(&self) -> bool {
        match self.shared.get() {
            Some(store) => store
                .scan(WATCHING)
                .await
                .is_ok_and(|watching| !watching.is_empty()),
            None => false,
        }
    }

    /// Marks a console as watching until the guard drops: while one is, a question no
    /// client can answer waits for the console (or the confirmation timeout) instead of
    /// taking `[mcp] prompt_fallback`.
    pub fn watch(self: &Arc<Self>) -> WatchGuard {
        self.watchers.fetch_add(1, Ordering::AcqRel);
        // Other instances learn of it while it watches.
        let heartbeat = match (self.shared.get(), tokio::runtime::Handle::try_current()) {
            (Some(store), Ok(runtime)) => {
                let store = store.clone();
                let key = format!("{WATCHING}{}", dispatcher_core::store::random_id());
                Some(runtime.spawn(async move {
                    let mut first = true;
                    loop {
                        if let Err(e) = store.put(&key, "console", WATCH_TTL).await {
                            tracing::debug!("other instances do not see this console: {e}");
                        } else if first {
                            // They start sharing their events now, not at their next look.
                            let _ = store.publish(WATCH_CHANNEL, "watching").await;
                            first = false;
                        }
                        tokio::time::sleep(WATCH_TTL / 3).await;
                    }
                }))
            }
            _ => None,
        };
        WatchGuard {
            routes: self.clone(),
            heartbeat,
        }
    }

    fn watched(&self) -> bool {
        self.watchers.load(Ordering::Acquire) > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection of the client that made the call `id`, if it takes requests while
    /// the call runs.
    pub(crate) fn client(&self, id: &str) -> Option<Peer<RoleServer>> {
        self.lock().get(id).and_then(|e| e.client.clone())
    }

    /// Gives the call `id` (entered, until its guard drops) the answers its retry brought.
    pub(crate) fn resume_with(&self, id: &str, resume: mcp_toolsets::Resume) {
        if let Some(entry) = self.lock().get_mut(id) {
            entry.resume = Some(resume);
        }
    }

    /// The answers the retry of `id` brought, taken.
    pub(crate) fn take_resume(&self, id: &str) -> Option<mcp_toolsets::Resume> {
        self.lock().get_mut(id).and_then(|e| e.resume.take())
    }

    /// What the client that made the call `id` can be asked while it runs (its declared
    /// elicitation, sampling and roots, as entered with the call); `None` for a call no MCP
    /// client made.
    pub(crate) fn client_capabilities(&self, id: &str) -> Option<rmcp::model::ClientCapabilities> {
        self.lock().get(id).and_then(|e| e.caps.as_deref().cloned())
    }

    /// Hands a mounted server's `input_required` round to the 2026 client that made the
    /// call `id`, if it can answer every request in it; `false` otherwise.
    pub(crate) fn defer_round(&self, id: &str, asked: &rmcp::model::InputRequiredResult) -> bool {
        let mut calls = self.lock();
        let Some(entry) = calls.get_mut(id) else {
            return false;
        };
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

    /// Marks the call `id` (entered) as one that may become a task, until its guard drops.
    pub(crate) fn offer_task(&self, id: &str) -> Arc<Promotion> {
        let promotion = Arc::new(Promotion {
            asked: tokio::sync::Notify::new(),
            decided: tokio::sync::watch::channel(None).0,
        });
        if let Some(entry) = self.lock().get_mut(id) {
            entry.promotion = Some(promotion.clone());
        }
        promotion
    }

    /// Makes the call `id` a task: its questions go to `task` from now on. `false` when a
    /// question already ended its round ([`Route::Asked`]), unless `asked` says the
    /// handler holds that question itself.
    pub(crate) fn to_task(&self, id: &str, task: super::tasks::TaskHandle, asked: bool) -> bool {
        let mut calls = self.lock();
        match calls.get_mut(id).map(|e| &mut e.route) {
            Some(Route::Asked) if !asked => false,
            None => false,
            Some(route) => {
                *route = Route::Task(task);
                true
            }
        }
    }

    /// The task the call `id` became, if it did.
    pub(crate) fn task_of(&self, id: &str) -> Option<super::tasks::TaskHandle> {
        match self.lock().get(id).map(|e| &e.route) {
            Some(Route::Task(task)) => Some(task.clone()),
            _ => None,
        }
    }

    /// A mounted server made a task of the call `id`: asks the handler to make it a task of
    /// toolhost's too, and says whether it did (`false` at once for a call whose client
    /// does not take tasks).
    pub(crate) fn became_task(&self, id: &str) -> mcp_toolsets::RelayFuture<bool> {
        let promotion = self.lock().get(id).and_then(|e| e.promotion.clone());
        Box::pin(async move {
            let Some(promotion) = promotion else {
                return mcp_toolsets::Relayed::Answered(false);
            };
            promotion.asked.notify_one();
            let mut decided = promotion.decided.subscribe();
            match decided.wait_for(Option::is_some).await {
                Ok(became) => mcp_toolsets::Relayed::Answered(became.unwrap_or(false)),
                Err(_) => mcp_toolsets::Relayed::Answered(false),
            }
        })
    }

    /// Sets a call's route, the connection of its client if that takes requests while the
    /// call runs, and what that client can be asked ([`asked_of`]), until the guard drops.
    pub(crate) fn enter(
        self: &Arc<Self>,
        id: Arc<str>,
        route: Route,
        client: Option<Peer<RoleServer>>,
        caps: Option<Arc<rmcp::model::ClientCapabilities>>,
    ) -> RouteGuard {
        let entry = Entry {
            route,
            client,
            caps,
            resume: None,
            promotion: None,
        };
        self.lock().insert(id.clone(), entry);
        RouteGuard {
            routes: self.clone(),
            id,
        }
    }
}

/// What of `declared` a mounted server may ask of the client while a call runs:
/// elicitation, sampling, and roots (always: toolhost answers with the session's
/// workspace for a client that declared none); and whether the client takes tasks (toolhost follows
/// a server's task for it, and makes the call a task of its own).
pub(crate) fn asked_of(
    declared: &rmcp::model::ClientCapabilities,
) -> rmcp::model::ClientCapabilities {
    let mut asked = rmcp::model::ClientCapabilities::default();
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
pub(crate) fn answers_all(
    caps: &rmcp::model::ClientCapabilities,
    asked: &rmcp::model::InputRequiredResult,
) -> bool {
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
pub(crate) fn elicits_form(caps: &rmcp::model::ClientCapabilities) -> bool {
    caps.elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// A console watching ([`Routes::watch`]).
pub struct WatchGuard {
    routes: Arc<Routes>,
    /// Renews its word in the shared store.
    heartbeat: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.routes.watchers.fetch_sub(1, Ordering::AcqRel);
        // Its word expires at most WATCH_TTL after.
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.abort();
        }
    }
}

/// A call's route, removed when dropped.
pub(crate) struct RouteGuard {
    routes: Arc<Routes>,
    id: Arc<str>,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let entry = self.routes.lock().remove(&self.id);
        // Dropped outside the lock (a client's connection among it).
        if let Some(promotion) = entry.and_then(|e| e.promotion) {
            // A call that ends before it was decided did not become a task.
            promotion.decide(false);
        }
    }
}

/// Who answers one confirmation request, as the call's entry says.
enum Ask {
    /// Decided already: a verified retry's answer, or the allowance of the round before.
    Answered(Decision),
    /// The handler, which ends the round with the question (2026-07-28).
    Defer(oneshot::Sender<Question>),
    /// The call's client, through `elicitation/create` (2025 era).
    Elicit(Peer<RoleServer>),
    /// The task the call became.
    Task(super::tasks::TaskHandle),
    /// No client: a watching console, else `[mcp] prompt_fallback`.
    Nobody,
}

/// Answers the dispatcher's confirmation requests for calls that came from MCP clients,
/// each the way its client can be asked (`Route`).
pub struct McpConfirmer {
    routes: Arc<Routes>,
}

impl McpConfirmer {
    /// A confirmer over the routes the handlers set.
    pub fn new(routes: Arc<Routes>) -> Self {
        McpConfirmer { routes }
    }
}

pub(crate) fn decision_schema() -> Option<rmcp::model::ElicitationSchema> {
    serde_json::from_value(serde_json::json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "description": "allow: run this call; deny: do not; always: allow this tool for the rest of the session",
                "enum": ["allow", "deny", "always"]
            }
        },
        "required": ["decision"]
    }))
    .ok()
}

/// The question, as every client is asked it.
pub(crate) fn question(request: &ConfirmationRequest) -> String {
    let mut message = format!(
        "toolhost: '{}' ({}) asks to run.\nInput: {}",
        request.tool_name(),
        request.side_effects(),
        request.input_summary
    );
    for m in &request.projected_modifications {
        message.push_str(&format!("\n{m}"));
    }
    message
}

/// The answer to `request` asked in `task`: the confirmation form waits in its
/// `inputRequests` under `confirm` until `tasks/update` answers it.
pub(crate) async fn asked_in_task(
    task: super::tasks::TaskHandle,
    request: ConfirmationRequest,
) -> Answer {
    let cancelled = || {
        Answer::fallback(
            Decision::Deny,
            "The task was cancelled or expired before its user answered, so the call was denied.",
        )
    };
    let Some(schema) = decision_schema() else {
        return cancelled();
    };
    let form = rmcp::model::InputRequest::Elicitation(rmcp::model::ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: question(&request),
            requested_schema: schema,
        },
    ));
    match task.ask("confirm", form).await {
        Some(answer) => decision_of(&answer).into(),
        None => cancelled(),
    }
}

/// A form elicitation's answer (`{"action": "accept", "content": {"decision": …}}`) as a
/// decision; anything but an accepted allow or always is a deny.
pub(crate) fn decision_of(result: &Value) -> Decision {
    if result.get("action").and_then(Value::as_str) != Some("accept") {
        return Decision::Deny;
    }
    match result
        .get("content")
        .and_then(|c| c.get("decision"))
        .and_then(Value::as_str)
    {
        Some("allow") => Decision::Allow,
        Some("always") => Decision::AlwaysAllow,
        _ => Decision::Deny,
    }
}

impl Confirmer for McpConfirmer {
    fn name(&self) -> &str {
        "mcp-client"
    }

    fn answers_at_once(&self, call: &dispatcher_core::CallHeader) -> bool {
        // A verified retry carries the user's answer (or, for a relayed round, the
        // allowance of the round before).
        matches!(
            self.routes.lock().get(&call.tool_use_id).map(|e| &e.route),
            Some(Route::Answered(_) | Route::Defer { allowed: true, .. })
        )
    }

    fn confirm(&self, request: ConfirmationRequest) -> ConfirmFuture {
        let routes = self.routes.clone();
        let fallback =
            move |tool: &str, why: &str| routes.fallback.answer(tool, why, &routes.config_file);
        let ask = {
            let mut calls = self.routes.lock();
            match calls.get_mut(&request.call.tool_use_id) {
                None => Ask::Nobody,
                Some(entry) => match &entry.route {
                    // A question asked while the call runs cannot end the round (the call
                    // is running), and the retry's answer was for the call, not for it:
                    // such a question goes to a console or the fallback.
                    Route::Defer { allowed: true, .. } => Ask::Answered(Decision::Allow),
                    // A client that takes relayed rounds but cannot be asked toolhost's form.
                    Route::Defer { caps, .. } if !elicits_form(caps) => Ask::Nobody,
                    Route::Defer { .. } | Route::Answered(_) if request.mid_call => Ask::Nobody,
                    // The sender goes to the first question; a second one (none is expected)
                    // falls back.
                    Route::Defer { .. } => {
                        match std::mem::replace(&mut entry.route, Route::Asked) {
                            Route::Defer { to, .. } => Ask::Defer(to),
                            _ => Ask::Nobody,
                        }
                    }
                    Route::Elicit => entry.client.clone().map_or(Ask::Nobody, Ask::Elicit),
                    Route::Answered(d) => Ask::Answered(*d),
                    Route::Task(task) => Ask::Task(task.clone()),
                    Route::Asked | Route::Fallback => Ask::Nobody,
                },
            }
        };
        match ask {
            Ask::Answered(decision) => Box::pin(std::future::ready(decision.into())),
            Ask::Defer(to) => {
                let (reply, answer) = oneshot::channel();
                let _ = to.send(Question::Confirm(request, reply));
                // The handler ends the round (the question is withdrawn with the call), or
                // makes the call a task and asks there.
                Box::pin(async move {
                    match answer.await {
                        Ok(answer) => answer,
                        Err(_) => std::future::pending().await,
                    }
                })
            }
            Ask::Elicit(peer) => Box::pin(async move {
                let Some(schema) = decision_schema() else {
                    return fallback(request.tool_name(), CANNOT_ELICIT);
                };
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: question(&request),
                    requested_schema: schema,
                };
                match peer.create_elicitation(params).await {
                    Ok(result) => {
                        let accepted = result.action == ElicitationAction::Accept;
                        let content = result.content.unwrap_or(Value::Null);
                        decision_of(&serde_json::json!({
                            "action": if accepted { "accept" } else { "decline" },
                            "content": content,
                        }))
                        .into()
                    }
                    Err(e) => {
                        tracing::warn!("elicitation failed, denying: {e}");
                        Answer::fallback(
                            Decision::Deny,
                            format!(
                                "Asking the MCP client's user failed ({e}), so the call was denied."
                            ),
                        )
                    }
                }
            }),
            Ask::Task(task) => Box::pin(asked_in_task(task, request)),
            // A console is watching: it answers (first answer wins), or the timeout does.
            Ask::Nobody if self.routes.watched() => Box::pin(std::future::pending()),
            // A console on another instance may be.
            Ask::Nobody if self.routes.shared.get().is_some() => {
                let routes = self.routes.clone();
                Box::pin(async move {
                    if routes.watched_anywhere().await {
                        std::future::pending().await
                    } else {
                        fallback(request.tool_name(), CANNOT_ELICIT)
                    }
                })
            }
            Ask::Nobody => Box::pin(std::future::ready(fallback(
                request.tool_name(),
                CANNOT_ELICIT,
            ))),
        }
    }
}
