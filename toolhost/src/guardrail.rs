//! Guardrail services (`[[guardrails]]`): an HTTP endpoint of the user's that judges each
//! call before it runs and each result before the model gets it, as agentgateway's and
//! ContextForge's guardrails do. A pre-use and a post-use hook of the dispatcher.
//!
//! Toolhost POSTs JSON and reads JSON back:
//!
//! - before a call: `{"phase": "call", "tool", "tool_use_id", "session", "principal",
//!   "class", "input"}`, answered `{"decision": "allow"}`, `{"decision": "deny", "reason":
//!   "…"}` (the call is refused with the reason) or `{"decision": "ask", "reason": "…"}`
//!   (the user confirms it first);
//! - after it: the same with `"phase": "result"` and `"result": {"is_error", "content":
//!   [{"type": "text", "text"}, …]}`, answered `allow`, `deny` (the result is replaced by
//!   an error with the reason) or `{"decision": "modify", "content": [{"type": "text",
//!   "text"}], "is_error": false}` (the result's text is replaced).
//!
//! A service that does not answer in time, answers with a status other than 2xx, or
//! answers something else counts as an error: `on_error = "deny"` (the default: fail
//! closed) refuses the call or withholds the result, naming the service and the key;
//! `"allow"` lets it through (fail open) with a warning in the log.

use std::time::Duration;

use dispatcher_core::{
    HookCall, HookDecision, HookFuture, PostDecision, PostUseCall, PostUseHook, PreUseHook,
    glob_matches,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// The most bytes of a service's answer read.
const MAX_ANSWER: usize = 4 << 20;

/// One `[[guardrails]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardrailConfig {
    /// A name for messages and logs.
    pub name: String,
    /// The endpoint, `http://` or `https://`.
    pub url: String,
    /// What it judges: `call` (before it runs), `result` (before the model gets it), or
    /// both (the default).
    #[serde(default = "both")]
    pub on: Vec<Phase>,
    /// The tools it judges: names or globs (default: every tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// How long it may take, in milliseconds (default 2000).
    #[serde(default = "timeout_ms")]
    pub timeout_ms: u64,
    /// What an unanswered or unreadable judgement means: `deny` (the default) or `allow`.
    #[serde(default)]
    pub on_error: OnError,
    /// The environment variable holding a bearer token for it.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
}

/// When a guardrail judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Before the call runs.
    Call,
    /// After it, before the model gets the result.
    Result,
}

/// What a failed judgement means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Refuse the call, withhold the result (fail closed).
    #[default]
    Deny,
    /// Let it through, logged (fail open).
    Allow,
}

fn both() -> Vec<Phase> {
    vec![Phase::Call, Phase::Result]
}

fn timeout_ms() -> u64 {
    2000
}

impl GuardrailConfig {
    /// What is wrong with the entry, if anything (the `[[guardrails]]` check at load).
    pub fn problem(&self) -> Option<String> {
        if self.name.trim().is_empty() {
            return Some("name is empty".into());
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Some(format!("url {:?} is not http:// or https://", self.url));
        }
        if self.on.is_empty() {
            return Some("on is empty: say \"call\", \"result\" or both".into());
        }
        if self.timeout_ms == 0 {
            return Some("timeout_ms is 0".into());
        }
        None
    }
}

/// A guardrail service, as a dispatcher hook.
pub struct Guardrail {
    config: GuardrailConfig,
    client: reqwest::Client,
    token: Option<String>,
}

/// What a service answered.
#[derive(Debug, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
enum Answer {
    Allow,
    Deny {
        #[serde(default)]
        reason: String,
    },
    Ask {
        #[serde(default)]
        reason: String,
    },
    Modify {
        content: Vec<Block>,
        #[serde(default)]
        is_error: bool,
    },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Block {
    Text { text: String },
}

impl Guardrail {
    /// The service `config` names (its token read from the environment now).
    pub fn new(config: GuardrailConfig) -> Result<Guardrail, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("guardrail '{}': {e}", config.name))?;
        let token = match &config.bearer_token_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                format!(
                    "guardrail '{}': bearer_token_env names {var}, which is not set",
                    config.name
                )
            })?),
            None => None,
        };
        Ok(Guardrail {
            config,
            client,
            token,
        })
    }

    fn judges(&self, phase: Phase, tool: &str) -> bool {
        self.config.on.contains(&phase)
            && self
                .config
                .tools
                .as_ref()
                .is_none_or(|tools| tools.iter().any(|t| glob_matches(t, tool)))
    }

    /// POSTs `body`; the answer, or why there is none.
    async fn ask(&self, body: Value) -> Result<Answer, String> {
        let mut request = self.client.post(&self.config.url).json(&body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let mut response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                format!("no answer within {} ms", self.config.timeout_ms)
            } else {
                format!("unreachable ({e})")
            }
        })?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("its answer broke off ({e})"))?
        {
            if bytes.len() + chunk.len() > MAX_ANSWER {
                return Err(format!("it answered more than {MAX_ANSWER} bytes"));
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(format!("it answered {status}"));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            format!("its answer is not a decision ({e}); expected {{\"decision\": \"allow\" | \"deny\" | \"ask\" | \"modify\", …}}")
        })
    }

    /// Why a failed judgement let the call through or not, for the model and the log.
    fn failed(&self, why: &str, what: &str) -> Option<String> {
        let name = &self.config.name;
        match self.config.on_error {
            OnError::Allow => {
                tracing::warn!(guardrail = %name, "guardrail '{name}' failed ({why}); {what} let through (on_error = \"allow\")");
                None
            }
            OnError::Deny => Some(format!(
                "guardrail '{name}' could not judge it ({why}); {what} refused under on_error = \"deny\" in its [[guardrails]] entry (\"allow\" lets calls through when it fails)"
            )),
        }
    }
}

/// A service's reason, or a word that it gave none.
fn given(reason: String) -> String {
    if reason.trim().is_empty() {
        "it gave no reason".into()
    } else {
        reason
    }
}

fn call_body(phase: &str, call: &HookCall<'_>) -> Value {
    json!({
        "phase": phase,
        "tool": &*call.call.tool_name,
        "tool_use_id": &*call.call.tool_use_id,
        "session": &*call.call.session_id,
        "principal": &*call.call.principal,
        "class": call.side_effects,
        "input": call.input,
    })
}

impl PreUseHook for Guardrail {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn before_use<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, HookDecision> {
        Box::pin(async move {
            if !self.judges(Phase::Call, &call.call.tool_name) {
                return HookDecision::Continue;
            }
            match self.ask(call_body("call", call)).await {
                Ok(Answer::Allow) => HookDecision::Continue,
                Ok(Answer::Deny { reason }) => HookDecision::Deny(given(reason)),
                Ok(Answer::Ask { reason }) => HookDecision::Ask(given(reason)),
                Ok(Answer::Modify { .. }) => match self.failed(
                    "it answered \"modify\" to a call: only results are modified",
                    "the call",
                ) {
                    Some(why) => HookDecision::Deny(why),
                    None => HookDecision::Continue,
                },
                Err(why) => match self.failed(&why, "the call") {
                    Some(why) => HookDecision::Deny(why),
                    None => HookDecision::Continue,
                },
            }
        })
    }
}

impl PostUseHook for Guardrail {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn after_use<'a>(&'a self, call: &'a PostUseCall<'a>) -> HookFuture<'a, PostDecision> {
        Box::pin(async move {
            if !self.judges(Phase::Result, &call.call.call.tool_name) {
                return PostDecision::Keep;
            }
            let mut body = call_body("result", &call.call);
            // Text as it is; an image by its type alone (its bytes are not sent).
            let content: Vec<Value> = call
                .result
                .content
                .iter()
                .map(|c| match c {
                    tool_api::Content::Text { text } => json!({"type": "text", "text": text}),
                    tool_api::Content::Image { mime, .. } => json!({"type": "image", "mime": mime}),
                })
                .collect();
            body["result"] = json!({
                "is_error": call.result.is_error(),
                "content": content,
            });
            let withheld = |reason: String| PostDecision::Replace {
                text: format!(
                    "The result of '{}' was withheld by guardrail '{}': {reason}",
                    call.call.call.tool_name, self.config.name
                ),
                is_error: true,
            };
            match self.ask(body).await {
                Ok(Answer::Allow) => PostDecision::Keep,
                Ok(Answer::Deny { reason }) => withheld(given(reason)),
                Ok(Answer::Modify { content, is_error }) => PostDecision::Replace {
                    text: content
                        .into_iter()
                        .map(|Block::Text { text }| text)
                        .collect::<Vec<_>>()
                        .join("\n"),
                    is_error,
                },
                Ok(Answer::Ask { .. }) => {
                    match self.failed(
                        "it answered \"ask\" to a result: a result is allowed, denied or modified",
                        "the result",
                    ) {
                        Some(why) => withheld(why),
                        None => PostDecision::Keep,
                    }
                }
                Err(why) => match self.failed(&why, "the result") {
                    Some(why) => withheld(why),
                    None => PostDecision::Keep,
                },
            }
        })
    }
}
