//! How a `tools/call` ended, as its client gets it: the dispatcher's result block as an MCP
//! result (or a mounted server's protocol error as that error), and as a task's outcome.

use dispatcher_core::ToolResultBlock;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use tool_api::Content;

/// How a call ended, as its client gets it.
pub(super) struct Finished {
    result: Result<CallToolResult, McpError>,
    cancelled: bool,
}

impl Finished {
    /// The result block as an MCP result; a mounted server's protocol error (a capability
    /// the client did not declare, a task of its that failed) as that error, as the
    /// client would have had it directly.
    pub(super) fn of(block: ToolResultBlock) -> Finished {
        let cancelled = block.error_class == Some(dispatcher_core::ErrorClass::Cancelled);
        let refused = block
            .metadata
            .get(mcp_toolsets::ERROR_META)
            .and_then(|e| serde_json::from_value::<McpError>(e.clone()).ok());
        let result = match refused {
            Some(error) => Err(error),
            None => Ok(to_mcp(block)),
        };
        Finished { result, cancelled }
    }

    /// A call that ran on its own: a panic in it is an internal error.
    pub(super) fn joined(joined: Result<Finished, tokio::task::JoinError>) -> Finished {
        joined.unwrap_or_else(|e| Finished {
            result: Err(McpError::internal_error(
                format!("the call stopped unexpectedly: {e}"),
                None,
            )),
            cancelled: e.is_cancelled(),
        })
    }

    pub(super) fn answer(self) -> Result<CallToolResponse, McpError> {
        self.result.map(Into::into)
    }

    pub(super) fn outcome(self) -> super::tasks::Outcome {
        use super::tasks::Outcome;
        match self.result {
            _ if self.cancelled => Outcome::Cancelled,
            Ok(result) => Outcome::Completed(result),
            Err(error) => Outcome::Failed(error),
        }
    }
}

/// A result block as an MCP result.
fn to_mcp(mut block: ToolResultBlock) -> CallToolResult {
    // The text moves into the answer: a file read is not copied once more.
    let content: Vec<ContentBlock> = std::mem::take(&mut block.content)
        .into_iter()
        .map(|c| match c {
            Content::Text { text } => ContentBlock::text(text),
            Content::Image { mime, data } => {
                use base64::Engine as _;
                ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(data), mime)
            }
        })
        .collect();
    let mut result = if block.is_error() {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    // A mounted server's result, whole (audio, embedded resources, structured content),
    // unless toolhost cut it for size.
    if let Some(whole) = block.metadata.get(mcp_toolsets::RESULT_META)
        && block.metadata.get("spooled_output").is_none()
    {
        if let Some(content) = whole
            .get("content")
            .and_then(|c| serde_json::from_value::<Vec<ContentBlock>>(c.clone()).ok())
        {
            result.content = content;
        }
        result.structured_content = whole
            .get("structuredContent")
            .filter(|v| !v.is_null())
            .cloned();
    }
    if !block.record.is_empty() {
        // What the tool did, for the client and its user (never part of the content the
        // model reads): `_meta` is the protocol's place for it.
        let mut meta = rmcp::model::MetaObject::new();
        if !block.record.files_modified.is_empty() {
            meta.0.insert(
                "toolhost/files_modified".into(),
                serde_json::json!(block.record.files_modified),
            );
        }
        if let Some(command) = &block.record.command_executed {
            meta.0.insert(
                "toolhost/command_executed".into(),
                serde_json::json!(command),
            );
        }
        result.meta = Some(meta);
    }
    result
}
