//! What goes in and out of the dispatcher: [`ToolUse`] blocks and [`ToolResultBlock`]s.

use base64::Engine;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tool_api::Content;

use crate::error::{CancelReason, ErrorClass};

/// A tool call from the model: `{id, name, input}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUse {
    /// The tool_use id, echoed in the result.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The parsed input.
    #[serde(default)]
    pub input: Value,
}

impl ToolUse {
    /// A tool call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }
    }
}

/// The canonical result the model sees. Always produced, whatever happened.
///
/// A result is an error exactly when it has an [`ErrorClass`]: [`ToolResultBlock::is_error`]
/// is derived from it, so the two can never disagree.
///
/// Serializes as an Anthropic-style `tool_result` block: `{"type": "tool_result",
/// "tool_use_id", "content": [{"type": "text", "text"} | {"type": "image", "source":
/// {"type": "base64", "media_type", "data"}}], "is_error"}`, plus `error_class` when
/// it is an error, and the host-side fields `cancel_reason`, `metadata`, `files_modified`
/// and `command_executed` when set (the provider renderings leave those out).
///
/// ```
/// use dispatcher_core::{ErrorClass, ToolResultBlock};
/// let ok = ToolResultBlock::success("tu_1", vec![tool_api::Content::text("42")], serde_json::Value::Null);
/// assert!(!ok.is_error());
/// let bad = ToolResultBlock::error("tu_2", ErrorClass::NotFound, "Tool 'x' not found.");
/// assert!(bad.is_error());
/// assert_eq!(bad.to_json()["is_error"], true);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultBlock {
    /// The id of the call.
    pub tool_use_id: String,
    /// Content blocks.
    pub content: Vec<Content>,
    /// The error class, for an error result (a handled tool failure is
    /// `execution_error`); `None` for a success.
    pub error_class: Option<ErrorClass>,
    /// Tool metadata (opaque), `null` for errors before execution.
    pub metadata: Value,
    /// For a `cancelled` result: why (a user interrupt, a failed sibling, an aborted batch).
    pub cancel_reason: Option<CancelReason>,
    /// What the tool reports it did, for the user (never sent to the model): the files it
    /// modified and the command it ran ([`tool_api::ToolOutput`]'s record).
    pub record: SideEffectRecord,
}

/// What a call reports it did: the files it modified, the command it ran. Empty for a call
/// that did neither, or never ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SideEffectRecord {
    /// Workspace paths the tool modified (as it named them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files_modified: Vec<String>,
    /// The command line it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_executed: Option<String>,
}

impl SideEffectRecord {
    /// The record of a tool's output.
    pub fn of(output: &tool_api::ToolOutput) -> SideEffectRecord {
        SideEffectRecord {
            files_modified: output.files_modified.clone().unwrap_or_default(),
            command_executed: output.command_executed.clone(),
        }
    }

    /// Whether it records nothing.
    pub fn is_empty(&self) -> bool {
        self.files_modified.is_empty() && self.command_executed.is_none()
    }
}

impl ToolResultBlock {
    /// A successful result with the tool's content and metadata.
    pub fn success(tool_use_id: &str, content: Vec<Content>, metadata: Value) -> Self {
        ToolResultBlock {
            tool_use_id: tool_use_id.to_string(),
            content,
            error_class: None,
            metadata,
            cancel_reason: None,
            record: SideEffectRecord::default(),
        }
    }

    /// The same result, with what the tool reports it did.
    pub fn with_record(mut self, record: SideEffectRecord) -> Self {
        self.record = record;
        self
    }

    /// A failure the tool reported itself (`execution_error`), with its own content.
    pub fn failure(tool_use_id: &str, content: Vec<Content>, metadata: Value) -> Self {
        ToolResultBlock {
            error_class: Some(ErrorClass::ExecutionError),
            ..ToolResultBlock::success(tool_use_id, content, metadata)
        }
    }

    /// An error of `class` with one text message.
    pub fn error(tool_use_id: &str, class: ErrorClass, message: impl Into<String>) -> Self {
        ToolResultBlock {
            error_class: Some(class),
            ..ToolResultBlock::success(tool_use_id, vec![Content::text(message)], Value::Null)
        }
    }

    /// The same result, saying why it was cancelled.
    pub fn with_cancel_reason(mut self, reason: Option<CancelReason>) -> Self {
        self.cancel_reason = reason;
        self
    }

    /// Whether this is an error result (it has an error class).
    pub fn is_error(&self) -> bool {
        self.error_class.is_some()
    }

    /// Replaces the content, as a success or an error: an error keeps its class (a former
    /// success becomes `execution_error`); a success drops class and cancel reason.
    pub fn replace_content(&mut self, content: Vec<Content>, is_error: bool) {
        self.content = content;
        if is_error {
            self.error_class = self.error_class.or(Some(ErrorClass::ExecutionError));
        } else {
            self.error_class = None;
            self.cancel_reason = None;
        }
    }

    /// All text content joined with newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self.content.iter().filter_map(Content::as_text).collect();
        texts.join("\n")
    }

    /// The block as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

struct ContentJson<'a>(&'a Content);

impl Serialize for ContentJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        match self.0 {
            Content::Text { text } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Content::Image { mime, data } => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry(
                    "source",
                    &serde_json::json!({
                        "type": "base64",
                        "media_type": mime,
                        "data": base64::engine::general_purpose::STANDARD.encode(data),
                    }),
                )?;
            }
        }
        map.end()
    }
}

impl Serialize for ToolResultBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", "tool_result")?;
        map.serialize_entry("tool_use_id", &self.tool_use_id)?;
        let content: Vec<ContentJson<'_>> = self.content.iter().map(ContentJson).collect();
        map.serialize_entry("content", &content)?;
        map.serialize_entry("is_error", &self.is_error())?;
        if let Some(class) = self.error_class {
            map.serialize_entry("error_class", &class)?;
        }
        if let Some(reason) = self.cancel_reason {
            map.serialize_entry("cancel_reason", &reason)?;
        }
        if !self.metadata.is_null() {
            map.serialize_entry("metadata", &self.metadata)?;
        }
        if !self.record.files_modified.is_empty() {
            map.serialize_entry("files_modified", &self.record.files_modified)?;
        }
        if let Some(command) = &self.record.command_executed {
            map.serialize_entry("command_executed", command)?;
        }
        map.end()
    }
}

/// The results of one assistant message as the **Anthropic Messages** API takes them: one
/// `user` message whose content is a `tool_result` block per call, in the order given, with
/// each call's `tool_use_id`. Only fields that API accepts are written (`error_class` and
/// `metadata` stay on the host side); `is_error` is set on errors.
///
/// ```
/// use dispatcher_core::{anthropic_user_message, ToolResultBlock};
/// # let ok = ToolResultBlock::success("toolu_1", vec![tool_api::Content::text("42")], serde_json::Value::Null);
/// let msg = anthropic_user_message(&[ok]);
/// assert_eq!(msg["role"], "user");
/// assert_eq!(msg["content"][0]["type"], "tool_result");
/// assert_eq!(msg["content"][0]["tool_use_id"], "toolu_1");
/// ```
pub fn anthropic_user_message(results: &[ToolResultBlock]) -> Value {
    let blocks: Vec<Value> = results
        .iter()
        .map(|r| {
            let content: Vec<Value> = r
                .content
                .iter()
                .map(|c| serde_json::to_value(ContentJson(c)).unwrap_or(Value::Null))
                .collect();
            let mut block = serde_json::json!({
                "type": "tool_result",
                "tool_use_id": r.tool_use_id,
                "content": content,
            });
            if r.is_error() {
                block["is_error"] = Value::Bool(true);
            }
            block
        })
        .collect();
    serde_json::json!({ "role": "user", "content": blocks })
}

/// The results of one assistant message as **OpenAI-style** chat APIs take them: one
/// `{"role": "tool", "tool_call_id", "content"}` message per call, in the order given.
/// Content is text (those APIs take no images in tool messages: an image becomes a
/// `[image: <mime>, <n> bytes]` note); an error's text already says it is one.
///
/// ```
/// use dispatcher_core::{openai_tool_messages, ToolResultBlock};
/// # let ok = ToolResultBlock::success("call_1", vec![tool_api::Content::text("42")], serde_json::Value::Null);
/// let msgs = openai_tool_messages(&[ok]);
/// assert_eq!(msgs[0]["role"], "tool");
/// assert_eq!(msgs[0]["tool_call_id"], "call_1");
/// assert_eq!(msgs[0]["content"], "42");
/// ```
pub fn openai_tool_messages(results: &[ToolResultBlock]) -> Vec<Value> {
    results
        .iter()
        .map(|r| {
            let parts: Vec<String> = r
                .content
                .iter()
                .map(|c| match c {
                    Content::Text { text } => text.clone(),
                    Content::Image { mime, data } => {
                        format!("[image: {mime}, {} bytes]", data.len())
                    }
                })
                .collect();
            serde_json::json!({
                "role": "tool",
                "tool_call_id": r.tool_use_id,
                "content": parts.join("\n"),
            })
        })
        .collect()
}
