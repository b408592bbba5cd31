//! What a tool returns: [`ToolOutput`] on completion, [`ToolError`] on failure.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One block of tool output shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, with its MIME type (`image/png`, …) and raw bytes.
    Image {
        /// MIME type of `data`.
        mime: String,
        /// The encoded image.
        data: Vec<u8>,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text { text: text.into() }
    }

    /// The text of a text block, `None` for an image.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Content::Text { text } => Some(text),
            Content::Image { .. } => None,
        }
    }
}

/// The result of a completed execution.
///
/// `success: false` is a *handled* failure (a command that exited non-zero, a search that hit
/// a limit): the model sees the content with `is_error: true`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Content blocks, usually one text block.
    pub content: Vec<Content>,
    /// `true` for normal completion.
    pub success: bool,
    /// Tool-specific data, opaque to the host (it is reported, not interpreted).
    #[serde(default)]
    pub metadata: Value,
    /// Files the call modified, relative to the workspace root (write tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_modified: Option<Vec<String>>,
    /// The command the call ran (execute tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_executed: Option<String>,
}

impl ToolOutput {
    /// A successful output with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            content: vec![Content::text(text)],
            success: true,
            metadata: Value::Null,
            files_modified: None,
            command_executed: None,
        }
    }

    /// A handled failure with one text block.
    pub fn failure(text: impl Into<String>) -> Self {
        ToolOutput {
            success: false,
            ..ToolOutput::text(text)
        }
    }

    /// Sets the metadata.
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// Records the files the call modified.
    pub fn with_files_modified(mut self, files: Vec<String>) -> Self {
        self.files_modified = Some(files);
        self
    }

    /// Records the command the call ran.
    pub fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command_executed = Some(command.into());
        self
    }

    /// All text blocks joined with newlines.
    pub fn text_content(&self) -> String {
        let texts: Vec<&str> = self.content.iter().filter_map(Content::as_text).collect();
        texts.join("\n")
    }
}

/// Why an execution failed. Every variant maps to one of the host's error classes.
///
/// The message of every variant except [`ToolError::Internal`] is shown to the model as is,
/// so write it for the model: say what was wrong and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The tool tried and failed (`execution_error`), e.g. "File 'a.txt' not found".
    Failed(String),
    /// The input passed the schema but the tool cannot use it (`validation_error`).
    InvalidInput(String),
    /// The workspace file API refused a path (`permission_denied`).
    PermissionDenied(String),
    /// The tool stopped because cancellation was requested (`cancelled`).
    Cancelled(String),
    /// An unexpected failure (`execution_error`): the detail is logged by the host at ERROR
    /// and the model sees a redacted message.
    Internal(String),
}

impl ToolError {
    /// A [`ToolError::Failed`] with the given message.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed(message.into())
    }

    /// A [`ToolError::InvalidInput`] with the given message.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        ToolError::InvalidInput(message.into())
    }

    /// A [`ToolError::Internal`] carrying detail for the host log only.
    pub fn internal(detail: impl Into<String>) -> Self {
        ToolError::Internal(detail.into())
    }

    /// The message (for `Internal`, the unredacted detail).
    pub fn message(&self) -> &str {
        match self {
            ToolError::Failed(m)
            | ToolError::InvalidInput(m)
            | ToolError::PermissionDenied(m)
            | ToolError::Cancelled(m)
            | ToolError::Internal(m) => m,
        }
    }

    /// A stable numeric code used across the ABI.
    pub(crate) fn code(&self) -> u8 {
        match self {
            ToolError::Failed(_) => 0,
            ToolError::InvalidInput(_) => 1,
            ToolError::PermissionDenied(_) => 2,
            ToolError::Cancelled(_) => 3,
            ToolError::Internal(_) => 4,
        }
    }

    /// The inverse of [`ToolError::code`]; an unknown code (from a newer plugin) is `Failed`.
    pub(crate) fn from_code(code: u8, message: String) -> Self {
        match code {
            1 => ToolError::InvalidInput(message),
            2 => ToolError::PermissionDenied(message),
            3 => ToolError::Cancelled(message),
            4 => ToolError::Internal(message),
            _ => ToolError::Failed(message),
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Failed(m) => write!(f, "{m}"),
            ToolError::InvalidInput(m) => write!(f, "invalid input: {m}"),
            ToolError::PermissionDenied(m) => write!(f, "permission denied: {m}"),
            ToolError::Cancelled(m) => write!(f, "cancelled: {m}"),
            ToolError::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

impl std::error::Error for ToolError {}

impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> Self {
        ToolError::InvalidInput(e.to_string())
    }
}
