//! Answering a 2026-07-28 server's `input_required` result: each input request goes to the
//! user through the host's confirmation channel ([`ToolContext::ask_user`]), and its answer
//! becomes the `inputResponses` entry of the retry.
//!
//! | the server asks | toolhost answers |
//! |---|---|
//! | a form elicitation | the question goes to the user; allowed: `accept` with the form filled from its defaults, an allow-like choice (`allow`, `accept`, `yes`, `approve`, `confirm`) for a required choice, `true` for a required flag; denied: `decline`; no answer: `cancel`. A form that needs typed input the user cannot give through a yes/no channel is declined, and the log says so. |
//! | a URL elicitation | the question (with the URL) goes to the user; allowed: `accept`, denied: `decline` |
//! | `roots/list` | the session's workspace, as one `file://` root |
//! | sampling (`sampling/createMessage`) | nothing: the call fails, naming the server (toolhost runs tools, not models) |

use rmcp::model::{ElicitRequestParams, InputRequest, InputRequests, InputResponses};
use serde_json::{Map, Value, json};
use tool_api::{ToolContext, ToolError, UserAnswer};

/// The responses to `requests`, asking the user as needed.
pub(crate) fn answer(
    server: &str,
    requests: InputRequests,
    ctx: &ToolContext,
) -> Result<InputResponses, ToolError> {
    let mut responses = InputResponses::new();
    for (key, request) in requests {
        let response = match request {
            InputRequest::Elicitation(e) => elicitation(server, e.params, ctx)?,
            InputRequest::ListRoots(_) => json!({"roots": [{
                "uri": format!("file://{}", ctx.workspace_root()),
                "name": "workspace",
            }]}),
            InputRequest::CreateMessage(_) => {
                return Err(ToolError::failed(format!(
                    "MCP server '{server}' asked toolhost to sample a model (sampling/createMessage); \
                     toolhost runs tools, not models, so this call cannot complete"
                )));
            }
            _ => {
                return Err(ToolError::failed(format!(
                    "MCP server '{server}' asked for input toolhost does not know how to give"
                )));
            }
        };
        responses.insert(key, response);
    }
    Ok(responses)
}

fn elicitation(
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
#[allow(clippy::unwrap_used)]
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
