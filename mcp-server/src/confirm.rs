//! How a `prompt` decision reaches the user of an MCP client: an `elicitation/create`
//! request (2025 era), an `input_required` round (2026-07-28), the answer of a verified
//! retry, a watching console, or `[mcp] prompt_fallback` when nobody can be asked. The
//! handler gives each call its route before the call starts (`crate::route`, carried by the
//! call); the [`McpConfirmer`] the dispatcher was built with follows it.
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
//!   result says that nobody could be asked and names the keys that allow the tool),
//!   unless a console watches the caller's calls ([`Consoles::watch`]): one that follows
//!   every caller's (the local user's, a static token's holder's), or that caller's own.
//!   Another caller's console changes nothing.

use dispatcher_core::shared::{WATCH_CHANNEL, WATCHING};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dispatcher_core::ConfirmFuture;
use dispatcher_core::{Answer, ConfirmationRequest, Confirmer, Decision};
use rmcp::model::{ElicitRequestParams, ElicitationAction};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::route::{Ask, CallRoute, Question};

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

/// Who answers a question no client can: a console watching the caller's calls (on this
/// instance, or on one that shares the store), else `[mcp] prompt_fallback`.
pub struct Consoles {
    fallback: PromptFallback,
    /// The config file, named in the fallback's advice.
    config_file: String,
    /// The consoles watching here: how many follow every caller's calls (`None`), and
    /// how many each caller's own.
    watchers: Mutex<HashMap<Option<String>, usize>>,
    /// The store shared with other instances, where consoles say they watch: a console on
    /// any instance answers a question no client can.
    shared: std::sync::OnceLock<Arc<dyn dispatcher_core::store::Store>>,
}

/// How long a console's word lasts without being renewed.
const WATCH_TTL: std::time::Duration = std::time::Duration::from_secs(15);

/// What a console's record in the shared store says it watches: every caller's calls, or
/// one caller's.
fn watching_record(caller: Option<&str>) -> String {
    match caller {
        None => "*".to_string(),
        Some(principal) => format!("caller:{principal}"),
    }
}

impl Consoles {
    /// No console yet; `fallback` answers when nobody can be asked, and its advice names
    /// `config_file`.
    pub fn new(fallback: PromptFallback, config_file: impl Into<String>) -> Arc<Self> {
        Arc::new(Consoles {
            fallback,
            config_file: config_file.into(),
            watchers: Mutex::default(),
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

    /// Whether a console watching `principal`'s calls is on any instance sharing the store
    /// (one round trip); no answer from the store means no.
    async fn watched_anywhere(&self, principal: &str) -> bool {
        let Some(store) = self.shared.get() else {
            return false;
        };
        let own = watching_record(Some(principal));
        store.scan(WATCHING).await.is_ok_and(|watching| {
            watching
                .iter()
                // `console`: an older toolhost's record of a console of every caller's calls.
                .any(|(_, record)| *record == own || record == "*" || record == "console")
        })
    }

    /// Marks a console as watching until the guard drops: every caller's calls
    /// (`caller: None`), or one caller's own. While one watches a caller's calls, a
    /// question no client can answer for that caller waits for the console (or the
    /// confirmation timeout) instead of taking `[mcp] prompt_fallback`.
    pub fn watch(self: &Arc<Self>, caller: Option<&str>) -> WatchGuard {
        let caller = caller.map(String::from);
        *self.lock().entry(caller.clone()).or_default() += 1;
        // Other instances learn of it while it watches.
        let heartbeat = match (self.shared.get(), tokio::runtime::Handle::try_current()) {
            (Some(store), Ok(runtime)) => {
                let store = store.clone();
                let key = format!("{WATCHING}{}", dispatcher_core::store::random_id());
                let record = watching_record(caller.as_deref());
                Some(runtime.spawn(async move {
                    let mut first = true;
                    loop {
                        if let Err(e) = store.put(&key, &record, WATCH_TTL).await {
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
            consoles: self.clone(),
            caller,
            heartbeat,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Option<String>, usize>> {
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a console here watches `principal`'s calls.
    fn watched(&self, principal: &str) -> bool {
        let watchers = self.lock();
        watchers.get(&None).is_some_and(|n| *n > 0)
            || watchers
                .get(&Some(principal.to_string()))
                .is_some_and(|n| *n > 0)
    }
}

/// A console watching ([`Consoles::watch`]).
pub struct WatchGuard {
    consoles: Arc<Consoles>,
    /// Whose calls it watches (`None`: every caller's).
    caller: Option<String>,
    /// Renews its word in the shared store.
    heartbeat: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        {
            let mut watchers = self.consoles.lock();
            if let Some(n) = watchers.get_mut(&self.caller) {
                *n -= 1;
                if *n == 0 {
                    watchers.remove(&self.caller);
                }
            }
        }
        // Its word expires at most WATCH_TTL after.
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.abort();
        }
    }
}

/// Answers the dispatcher's confirmation requests for calls that came from MCP clients,
/// each the way its client can be asked (the route the call carries), else through the
/// consoles watching its caller, else with the fallback.
pub struct McpConfirmer {
    consoles: Arc<Consoles>,
}

impl McpConfirmer {
    /// A confirmer that leaves what no client can answer to `consoles`.
    pub fn new(consoles: Arc<Consoles>) -> Self {
        McpConfirmer { consoles }
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
        call.extensions
            .get::<CallRoute>()
            .is_some_and(CallRoute::answers_at_once)
    }

    fn confirm(&self, request: ConfirmationRequest) -> ConfirmFuture {
        let consoles = self.consoles.clone();
        let fallback =
            move |tool: &str, why: &str| consoles.fallback.answer(tool, why, &consoles.config_file);
        let ask = match request.call.extensions.get::<CallRoute>() {
            None => Ask::Nobody,
            Some(route) => route.ask(request.mid_call),
        };
        match ask {
            Ask::Answered(decision) => Box::pin(std::future::ready(decision.into())),
            Ask::Defer(to) => {
                let (reply, answer) = tokio::sync::oneshot::channel();
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
            // A console is watching the caller's calls: it answers (first answer wins), or
            // the timeout does.
            Ask::Nobody if self.consoles.watched(&request.call.principal) => {
                Box::pin(std::future::pending())
            }
            // A console on another instance may be.
            Ask::Nobody if self.consoles.shared.get().is_some() => {
                let consoles = self.consoles.clone();
                Box::pin(async move {
                    if consoles.watched_anywhere(&request.call.principal).await {
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
