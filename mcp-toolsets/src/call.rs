//! A server's tool as a toolhost tool: its factory ([`McpToolFactory`]), and a call
//! ([`McpTool`]) that answers `input_required` rounds through the host and turns the
//! server's result into a tool output.

use std::sync::Arc;

use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use tool_api::{Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput};

use crate::input;
use crate::upstream::{Called, Upstream};

/// How many `input_required` rounds one call may take before toolhost gives up.
pub const MAX_INPUT_ROUNDS: usize = 10;

pub(crate) struct McpToolFactory {
    pub(crate) server: Arc<Upstream>,
    pub(crate) definition: ToolDefinition,
    pub(crate) source: String,
}

impl ToolFactory for McpToolFactory {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(McpTool {
            server: self.server.clone(),
            name: self.definition.name.clone(),
            cancel: Arc::new(tokio::sync::Notify::new()),
        }))
    }
    fn source(&self) -> &str {
        &self.source
    }
    fn placement(&self) -> tool_api::Placement {
        match &self.server.config.url {
            Some(url) => tool_api::Placement::Remote { url: url.clone() },
            None => tool_api::Placement::Server {
                sandbox: self.server.confinement(),
            },
        }
    }
}

struct McpTool {
    server: Arc<Upstream>,
    name: String,
    cancel: Arc<tokio::sync::Notify>,
}

impl Tool for McpTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Value::Object(args) = input else {
            return Err(ToolError::invalid_input(
                "MCP tool arguments must be a JSON object",
            ));
        };
        let id = &self.server.config.id;
        let mut params = CallToolRequestParams::new(self.name.clone()).with_arguments(args);
        let mut rounds = 0;
        let result = loop {
            // The server's progress is the call's live output, as it comes.
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let called = self.server.runtime.block_on(async {
                let call = self.server.call(params.clone(), self.cancel.clone(), tx);
                tokio::pin!(call);
                loop {
                    tokio::select! {
                        biased;
                        Some(chunk) = rx.recv() => ctx.output(&chunk),
                        called = &mut call => {
                            while let Ok(chunk) = rx.try_recv() {
                                ctx.output(&chunk);
                            }
                            break called;
                        }
                    }
                }
            })?;
            match called {
                Called::Complete(result) => break result,
                Called::InputRequired(_) if rounds == MAX_INPUT_ROUNDS => {
                    return Err(ToolError::failed(format!(
                        "MCP server '{id}' still asked for input after {MAX_INPUT_ROUNDS} rounds; the call was abandoned"
                    )));
                }
                Called::InputRequired(asked) => {
                    rounds += 1;
                    let requests = asked.input_requests.unwrap_or_default();
                    params.input_responses = Some(input::answer(id, requests, ctx)?);
                    params.request_state = asked.request_state;
                }
            }
        };
        let mut out = ToolOutput::text("");
        out.content = result
            .content
            .iter()
            .filter_map(|c| match c {
                rmcp::model::ContentBlock::Text(t) => Some(tool_api::Content::text(t.text.clone())),
                rmcp::model::ContentBlock::Image(i) => {
                    use base64::Engine as _;
                    Some(
                        match base64::engine::general_purpose::STANDARD.decode(&i.data) {
                            Ok(data) => tool_api::Content::Image {
                                mime: i.mime_type.clone(),
                                data,
                            },
                            // Said, not dropped: the model learns an image was there.
                            Err(e) => tool_api::Content::text(format!(
                                "[an image ({}) from MCP server '{id}' was not valid base64 ({e}) and is left out]",
                                i.mime_type
                            )),
                        },
                    )
                }
                other => serde_json::to_string(other)
                    .ok()
                    .map(tool_api::Content::text),
            })
            .collect();
        out.success = result.is_error != Some(true);
        if let Some(structured) = result.structured_content {
            out.metadata = structured;
        }
        Ok(out)
    }

    fn cancel(&self) -> bool {
        self.cancel.notify_one();
        true
    }
}
