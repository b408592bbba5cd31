//! Answering what a server asks the user while a call runs: a 2025-era server's
//! `elicitation/create` and `sampling/createMessage` requests, and the input requests of a
//! 2026-07-28 server's `input_required` result (whose answers become the `inputResponses`
//! of the retry).
//!
//! Each request goes first to the client that made the call, unchanged, when the host
//! relays to one that can take it ([`crate::ClientRelay`]), and its answer goes back
//! unchanged. Otherwise:
//!
//! | the server asks | toolhost answers |
//! |---|---|
//! | a form elicitation | the question goes to the user through the host's confirmation channel ([`ToolContext::ask_user`]); allowed: `accept` with the form filled from its defaults, an allow-like choice (`allow`, `accept`, `yes`, `approve`, `confirm`) for a required choice, `true` for a required flag; denied: `decline`; no answer: `cancel`. A form that needs typed input the user cannot give through a yes/no channel is declined, and the log says so. |
//! | a URL elicitation | the question (with the URL) goes to the user; allowed: `accept`, denied: `decline` |
//! | `roots/list` | the roots of the client that made the call, when it declared `roots`; else the session's workspace, as one `file://` root |
//! | sampling (`sampling/createMessage`) | nothing: the call fails, naming the server and saying that the client that made it cannot sample (toolhost runs tools, not models) |

#![allow(
    deprecated,
    reason = "sampling and logging are deprecated (SEP-2577), but servers still send them, and passing them through is this module's job"
)]

use std::sync::Arc;

use rmcp::model::{
    CreateMessageRequestParams, ElicitRequestParams, InputRequest, InputRequests, InputResponses,
};
use serde_json::{Map, Value, json};
use tool_api::{ToolContext, ToolError, UserAnswer};

use crate::relay::{ClientRelay, Relayed};
use crate::upstream::Upstream;

/// Who answers a server's requests to the user for one call: the client that made it,
/// through its relay when it can take them, else the host's broker ([`elicitation`]);
/// sampling has no broker.
pub(crate) struct Asking<'a> {
    /// The server that asks.
    pub(crate) server: &'a Upstream,
    /// The call it asks for.
    pub(crate) ctx: &'a ToolContext,
    /// The call's client, when the host relays to one.
    pub(crate) relay: Option<&'a Arc<dyn ClientRelay>>,
}

impl Asking<'_> {
    /// The server's id.
    fn id(&self) -> &str {
        &self.server.config.id
    }

    /// The answer of a 2025-era client that made the call, if the host relays to one.
    pub(crate) async fn relayed(
        &self,
        params: &ElicitRequestParams,
    ) -> Option<Result<Value, ToolError>> {
        match self.relay?.elicit(params.clone()).await {
            Relayed::Answered(result) => {
                Some(serde_json::to_value(result).map_err(|e| ToolError::failed(e.to_string())))
            }
            Relayed::Failed(why) => Some(Err(ToolError::failed(format!(
                "MCP server '{}' asked the user for input, and asking the client that made the call failed: {why}",
                self.id()
            )))),
            Relayed::CannotAsk => None,
        }
    }

    /// The host's broker's answer to an elicitation: the question waits for the user on a
    /// blocking thread of its own (the broker blocks), not on the call's.
    pub(crate) async fn broker(&self, params: ElicitRequestParams) -> Result<Value, ToolError> {
        let (id, ctx) = (self.id().to_string(), self.ctx.clone());
        tokio::task::spawn_blocking(move || elicitation(&id, params, &ctx))
            .await
            .unwrap_or_else(|e| {
                Err(ToolError::internal(format!(
                    "asking the user for the MCP server's question failed: {e}"
                )))
            })
    }

    /// An elicitation's answer (`{"action": …, "content": …}`): the client's, else the
    /// broker's.
    pub(crate) async fn elicit(&self, params: ElicitRequestParams) -> Result<Value, ToolError> {
        match self.relayed(&params).await {
            Some(answer) => answer,
            None => self.broker(params).await,
        }
    }

    /// A sampling request's answer; fails when nobody can sample.
    pub(crate) async fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<Value, ToolError> {
        let id = self.id();
        let relayed = match self.relay {
            Some(relay) => relay.sample(params).await,
            None => Relayed::CannotAsk,
        };
        match relayed {
            Relayed::Answered(result) => {
                serde_json::to_value(result).map_err(|e| ToolError::failed(e.to_string()))
            }
            Relayed::Failed(why) => Err(ToolError::failed(format!(
                "MCP server '{id}' asked to sample a model (sampling/createMessage), and the client that made the call failed to: {why}"
            ))),
            Relayed::CannotAsk => Err(ToolError::failed(format!(
                "MCP server '{id}' asked to sample a model (sampling/createMessage), and the client that made \
                 this call cannot sample (toolhost runs tools, not models), so the call cannot complete; \
                 call it from an MCP client that declares sampling"
            ))),
        }
    }

    /// The roots of the client that made the call when it declared them and answered,
    /// else the session's workspace.
    pub(crate) async fn roots(&self) -> rmcp::model::ListRootsResult {
        let relayed = match self.relay {
            Some(relay) => relay.roots().await,
            None => Relayed::CannotAsk,
        };
        let workspace = || {
            crate::upstream::client::workspace_roots(std::path::Path::new(
                self.ctx.workspace_root(),
            ))
        };
        match relayed {
            Relayed::Answered(roots) => roots,
            Relayed::Failed(why) => {
                tracing::debug!(server = %self.id(), "the client's roots could not be read ({why}); the workspace is answered");
                workspace()
            }
            Relayed::CannotAsk => workspace(),
        }
    }

    /// The responses to `requests`, asking the user as needed.
    pub(crate) async fn answer(
        &self,
        requests: InputRequests,
    ) -> Result<InputResponses, ToolError> {
        let mut responses = InputResponses::new();
        for (key, request) in requests {
            let response = match request {
                InputRequest::Elicitation(e) => self.elicit(e.params).await?,
                InputRequest::ListRoots(_) => {
                    serde_json::to_value(self.roots().await).unwrap_or_default()
                }
                InputRequest::CreateMessage(m) => self.sample(m.params).await?,
                _ => {
                    return Err(ToolError::failed(format!(
                        "MCP server '{}' asked for input toolhost does not know how to give",
                        self.id()
                    )));
                }
            };
            responses.insert(key, response);
        }
        Ok(responses)
    }
}

/// The broker's answer to an elicitation: the question goes to the user as a yes/no.
pub(crate) fn elicitation(
    server: &str,
    params: ElicitRequestParams,
    ctx: &ToolContext,
) -> Result<Value, ToolError> {
    let (question, form) = match &params {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => (
            format!("MCP server '{server}' asks: {message}"),
            Some(serde_json::to_value(requested_schema).unwrap_or(Value::Null)),
        ),
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => (
            format!("MCP server '{server}' asks you to open {url}: {message}"),
            None,
        ),
        _ => (format!("MCP server '{server}' asks for input"), None),
    };
    Ok(match ctx.ask_user(&question)? {
        UserAnswer::Allowed => match form {
            None => json!({"action": "accept"}),
            Some(schema) => match fill(&schema) {
                Some(content) => json!({"action": "accept", "content": content}),
                None => {
                    ctx.log().warn(format_args!(
                        "MCP server '{server}' asked for a form toolhost cannot fill from a yes/no answer; declined"
                    ));
                    json!({"action": "decline"})
                }
            },
        },
        UserAnswer::Denied => json!({"action": "decline"}),
        UserAnswer::NoAnswer => json!({"action": "cancel"}),
    })
}

/// The content of an accepted form: defaults, an allow-like choice for a required enum, and
/// `true` for a required boolean. `None` when a required field has none of these.
pub(crate) fn fill(schema: &Value) -> Option<Map<String, Value>> {
    const ALLOW: [&str; 5] = ["allow", "accept", "yes", "approve", "confirm"];
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    for (name, property) in properties.into_iter().flatten() {
        if let Some(default) = property.get("default") {
            content.insert(name.clone(), default.clone());
            continue;
        }
        if !required.contains(&name.as_str()) {
            continue;
        }
        let choices: Vec<&str> = property
            .get("enum")
            .and_then(Value::as_array)
            .map(|e| e.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(choice) = ALLOW.iter().find(|a| choices.contains(a)) {
            content.insert(name.clone(), json!(choice));
        } else if property.get("type").and_then(Value::as_str) == Some("boolean") {
            content.insert(name.clone(), json!(true));
        } else {
            return None;
        }
    }
    Some(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_filled_from_defaults_and_allow_like_choices() {
        let toolhost_form = json!({"type": "object", "required": ["decision"], "properties": {
            "decision": {"type": "string", "enum": ["allow", "deny", "always"]}}});
        assert_eq!(fill(&toolhost_form).unwrap()["decision"], "allow");
        let with_defaults = json!({"type": "object", "required": ["ok", "n"], "properties": {
            "ok": {"type": "boolean"}, "n": {"type": "integer", "default": 3},
            "note": {"type": "string"}}});
        let filled = fill(&with_defaults).unwrap();
        assert_eq!(
            (filled["ok"].clone(), filled["n"].clone()),
            (json!(true), json!(3))
        );
        assert!(!filled.contains_key("note"));
        let needs_text = json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}}});
        assert_eq!(fill(&needs_text), None);
    }
}
