//! The shapes the provider SDKs use: tool definitions to put in a request, the tool calls
//! a model answers with, and the results to send back.
//!
//! | shape | a tool call | its result |
//! |---|---|---|
//! | Anthropic Messages | `{"type": "tool_use", "id", "name", "input"}` | `{"type": "tool_result", "tool_use_id", "content": [...], "is_error"?}` |
//! | OpenAI Chat Completions | `{"type": "function", "id", "function": {"name", "arguments": "<JSON text>"}}` | `{"role": "tool", "tool_call_id", "content"}` |
//! | OpenAI Responses | `{"type": "function_call", "call_id", "name", "arguments": "<JSON text>"}` | `{"type": "function_call_output", "call_id", "output"}` |
//!
//! A block that is none of these, or whose arguments are not a JSON object, becomes an
//! error result saying what was wrong, in the shape it seems to have (Anthropic's when it
//! has none): the model reads it, and the other calls of the message run.
//!
//! ```
//! use dispatcher_core::provider::{parse, refused, Shape};
//! use serde_json::json;
//!
//! let call = json!({"type": "function", "id": "call_1",
//!     "function": {"name": "read_file", "arguments": "{\"path\": \"README.md\"}"}});
//! let parsed = parse(&call, 0);
//! assert_eq!(parsed.shape, Shape::OpenAiChat);
//! assert_eq!(parsed.call.unwrap().input["path"], "README.md");
//! let bad = parse(&json!({"type": "text"}), 1);
//! let answer = refused(bad.shape, &bad.id, &bad.call.unwrap_err());
//! assert_eq!(answer["is_error"], true);
//! ```

use crate::result::{anthropic_user_message, openai_tool_messages};
use crate::{ToolListing, ToolResultBlock, ToolUse};
use serde_json::{Value, json};
use tool_api::SideEffect;

/// The shape a tool call came in, which its result keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions.
    OpenAiChat,
    /// OpenAI Responses.
    OpenAiResponses,
}

/// One block of a batch: the call to make, or why it cannot be made.
pub struct Parsed {
    /// Its shape.
    pub shape: Shape,
    /// Its id (the one its result must carry).
    pub id: String,
    /// The call, or what is wrong with the block.
    pub call: Result<ToolUse, String>,
}

fn text<'a>(block: &'a Value, key: &str) -> Option<&'a str> {
    block.get(key).and_then(Value::as_str)
}

/// Arguments as OpenAI's APIs give them: JSON text of an object (empty: no arguments).
fn arguments(raw: Option<&Value>, name: &str) -> Result<Value, String> {
    match raw {
        None | Some(Value::Null) => Ok(json!({})),
        Some(Value::Object(_)) => Ok(raw.cloned().unwrap_or_default()),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(json!({})),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(other) => Err(format!(
                "the arguments of '{name}' are not a JSON object (found {other}); call it again with an object"
            )),
            Err(e) => Err(format!(
                "the arguments of '{name}' are not valid JSON ({e}); call it again with a JSON object"
            )),
        },
        Some(other) => Err(format!(
            "the arguments of '{name}' are {other}, not a JSON object or its text"
        )),
    }
}

/// The types of content a model answers with beside its tool calls (text, reasoning, the
/// provider's own server-side tools): not calls, and not errors either.
pub const NOT_CALLS: [&str; 9] = [
    "text",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "image",
    "message",
    "reasoning",
    "output_text",
];

/// Whether block is content beside the tool calls ([`NOT_CALLS`]), which a batch skips, so
/// that a whole response's content can be handed over.
pub fn is_other_content(block: &Value) -> bool {
    text(block, "type").is_some_and(|t| NOT_CALLS.contains(&t))
}

/// Reads block `index` of a batch.
pub fn parse(block: &Value, index: usize) -> Parsed {
    let fallback_id = || format!("block-{index}");
    let kind = text(block, "type");
    match kind {
        Some("tool_use") => {
            let id = text(block, "id").map_or_else(fallback_id, String::from);
            let call = match (text(block, "name"), block.get("input")) {
                (None, _) => Err(format!("block {index} (tool_use) has no name")),
                (Some(name), None | Some(Value::Null)) => Ok(ToolUse::new(&id, name, json!({}))),
                (Some(name), Some(input @ Value::Object(_))) => {
                    Ok(ToolUse::new(&id, name, input.clone()))
                }
                (Some(name), Some(other)) => Err(format!(
                    "the input of '{name}' is {other}, not a JSON object; call it again with an object"
                )),
            };
            Parsed {
                shape: Shape::Anthropic,
                id,
                call,
            }
        }
        Some("function") => {
            let id = text(block, "id").map_or_else(fallback_id, String::from);
            let function = block.get("function");
            let call = match function.and_then(|f| text(f, "name")) {
                None => Err(format!("block {index} (function) has no function.name")),
                Some(name) => arguments(function.and_then(|f| f.get("arguments")), name)
                    .map(|args| ToolUse::new(&id, name, args)),
            };
            Parsed {
                shape: Shape::OpenAiChat,
                id,
                call,
            }
        }
        Some("function_call") => {
            let id = text(block, "call_id")
                .or_else(|| text(block, "id"))
                .map_or_else(fallback_id, String::from);
            let call = match text(block, "name") {
                None => Err(format!("block {index} (function_call) has no name")),
                Some(name) => arguments(block.get("arguments"), name)
                    .map(|args| ToolUse::new(&id, name, args)),
            };
            Parsed {
                shape: Shape::OpenAiResponses,
                id,
                call,
            }
        }
        other => {
            let found = match other {
                Some(t) => format!("type {t:?}"),
                None if block.is_object() => "no type".to_string(),
                None => format!("{block}"),
            };
            Parsed {
                shape: Shape::Anthropic,
                id: text(block, "id").map_or_else(fallback_id, String::from),
                call: Err(format!(
                    "block {index} is not a tool call: expected type \"tool_use\" (Anthropic), \
                     \"function\" (OpenAI Chat Completions) or \"function_call\" (OpenAI Responses), found {found}"
                )),
            }
        }
    }
}

/// A result block in `shape`.
pub fn result(shape: Shape, block: &ToolResultBlock) -> Value {
    let one = std::slice::from_ref(block);
    match shape {
        Shape::Anthropic => anthropic_user_message(one)["content"][0].take(),
        Shape::OpenAiChat => openai_tool_messages(one).pop().unwrap_or_default(),
        Shape::OpenAiResponses => {
            let mut message = openai_tool_messages(one).pop().unwrap_or_default();
            json!({
                "type": "function_call_output",
                "call_id": block.tool_use_id,
                "output": message["content"].take(),
            })
        }
    }
}

/// The error result of a block that could not be called.
pub fn refused(shape: Shape, id: &str, problem: &str) -> Value {
    match shape {
        Shape::Anthropic => json!({
            "type": "tool_result",
            "tool_use_id": id,
            "content": [{"type": "text", "text": problem}],
            "is_error": true,
        }),
        Shape::OpenAiChat => json!({"role": "tool", "tool_call_id": id, "content": problem}),
        Shape::OpenAiResponses => {
            json!({"type": "function_call_output", "call_id": id, "output": problem})
        }
    }
}

/// The formats tool definitions can be given in.
pub const FORMATS: [&str; 4] = ["anthropic", "openai", "openai_responses", "mcp"];

/// A tool's definition as `format` has it (one of [`FORMATS`]).
pub fn definition(format: &str, listing: &ToolListing) -> Option<Value> {
    let d = &listing.definition;
    Some(match format {
        "anthropic" => json!({
            "name": d.name, "description": d.description, "input_schema": d.input_schema,
        }),
        "openai" => json!({"type": "function", "function": {
            "name": d.name, "description": d.description, "parameters": d.input_schema,
        }}),
        "openai_responses" => json!({
            "type": "function", "name": d.name, "description": d.description,
            "parameters": d.input_schema,
        }),
        "mcp" => json!({
            "name": d.name, "description": d.description, "inputSchema": d.input_schema,
            "annotations": {
                "readOnlyHint": d.side_effects <= SideEffect::Read,
                "destructiveHint": matches!(d.side_effects, SideEffect::Write | SideEffect::Execute),
                "openWorldHint": d.side_effects == SideEffect::Network,
            },
        }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shape_is_read_and_its_result_keeps_it() {
        let cases = [
            (
                json!({"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}}),
                Shape::Anthropic,
            ),
            (
                json!({"type": "function", "id": "c1", "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}),
                Shape::OpenAiChat,
            ),
            (
                json!({"type": "function_call", "call_id": "r1", "id": "fc_1", "name": "read_file", "arguments": "{\"path\": \"a\"}"}),
                Shape::OpenAiResponses,
            ),
        ];
        for (block, shape) in cases {
            let parsed = parse(&block, 0);
            assert_eq!(parsed.shape, shape);
            let call = parsed.call.as_ref().map_err(Clone::clone);
            assert!(call.is_ok(), "{block}: {call:?}");
        }
        assert_eq!(parse(&cases_id(), 0).id, "r1");
    }

    fn cases_id() -> Value {
        json!({"type": "function_call", "call_id": "r1", "id": "fc", "name": "x", "arguments": ""})
    }

    #[test]
    fn text_and_reasoning_beside_the_calls_are_other_content() {
        for kind in ["text", "thinking", "message", "reasoning"] {
            assert!(is_other_content(&json!({"type": kind})), "{kind}");
        }
        assert!(!is_other_content(&json!({"type": "tool_use"})));
        assert!(!is_other_content(&json!({"no": "type"})));
    }

    #[test]
    fn a_malformed_block_says_what_is_wrong() {
        let table = [
            (json!({"type": "tool_result"}), "found type \"tool_result\""),
            (json!("tool_use"), "is not a tool call"),
            (json!({"type": "tool_use", "id": "t"}), "has no name"),
            (
                json!({"type": "tool_use", "id": "t", "name": "x", "input": [1]}),
                "not a JSON object",
            ),
            (
                json!({"type": "function", "id": "c", "function": {"name": "x", "arguments": "{oops"}}),
                "not valid JSON",
            ),
        ];
        for (block, said) in table {
            let problem = parse(&block, 3).call.err().unwrap_or_default();
            assert!(problem.contains(said), "{block}: {problem}");
        }
    }
}
