//! A server's tool as a toolhost tool: its factory ([`McpToolFactory`]), and a call
//! ([`McpTool`]) that answers `input_required` rounds through the host and turns the
//! server's result into a tool output.

#![allow(
    deprecated,
    reason = "sampling and logging are deprecated (SEP-2577), but servers still send them, and passing them through is this module's job"
)]

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CreateMessageRequestParams, ElicitRequestParams};
use serde_json::Value;
use tool_api::{Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput};

use crate::input::{self, Answers as _};
use crate::relay::{FromServer, Relayed};
use crate::upstream::{Called, Caller, Upstream};

/// The key of a mounted tool's output metadata that holds the server's result whole
/// (`{"content": [...], "structuredContent": ...}`), when the output's content blocks
/// cannot hold all of it: audio, embedded resources and resource links (which the model
/// reads as their JSON), or structured content. A host that passes results on to its own
/// MCP clients sends that instead.
pub const RESULT_META: &str = "mcp_result";

/// The key of a mounted tool's output metadata that holds the server's JSON-RPC error when
/// it refused the call for a capability the calling client did not declare (`-32021`,
/// with `data.requiredCapabilities`): a host that passes calls on answers its client with
/// that error, as the server would have.
pub const ERROR_META: &str = "mcp_error";

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
    fn schema_as_given(&self) -> bool {
        self.server.config.input_schemas == crate::config::InputSchemas::AsGiven
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
        let relay = self.server.relay.get();
        // The retry of a round the calling client answered itself: its answers go on.
        if let Some(resume) = relay.and_then(|r| r.resume(ctx.tool_use_id())) {
            params.input_responses = Some(resume.responses);
            params.request_state = resume.state;
        }
        let mut rounds = 0;
        let answers = Asking { tool: self, ctx };
        let result = loop {
            match self.round(params.clone(), &answers)? {
                Called::Complete(result) => break result,
                Called::NeedsCapability(refused) => {
                    let mut out = ToolOutput::text(format!(
                        "MCP server '{id}' refused the call: {} (the calling client did not declare a capability the tool needs)",
                        refused.message
                    ));
                    out.success = false;
                    out.metadata = serde_json::json!({ ERROR_META: refused });
                    return Ok(out);
                }
                Called::InputRequired(_) if rounds == MAX_INPUT_ROUNDS => {
                    return Err(ToolError::failed(format!(
                        "MCP server '{id}' still asked for input after {MAX_INPUT_ROUNDS} rounds; the call was abandoned"
                    )));
                }
                // A client of the server's era answers the round itself: this call ends
                // here (its client's round ends with the same requests), and the client's
                // retry resumes it.
                Called::InputRequired(asked)
                    if relay.is_some_and(|r| r.defer(ctx.tool_use_id(), &asked)) =>
                {
                    return Err(ToolError::failed(format!(
                        "MCP server '{id}' asked for input; the question went to the client that made the call"
                    )));
                }
                Called::InputRequired(asked) => {
                    rounds += 1;
                    let requests = asked.input_requests.unwrap_or_default();
                    params.input_responses = Some(input::answer(id, requests, ctx, &answers)?);
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
        // What a tool output cannot hold (audio, embedded resources, resource links,
        // structured content) is kept whole for a host that passes results on.
        let whole = result.structured_content.is_some()
            || result.content.iter().any(|c| {
                !matches!(
                    c,
                    rmcp::model::ContentBlock::Text(_) | rmcp::model::ContentBlock::Image(_)
                )
            });
        if whole {
            out.metadata = serde_json::json!({ RESULT_META: {
                "content": result.content,
                "structuredContent": result.structured_content,
            }});
        }
        Ok(out)
    }

    fn cancel(&self) -> bool {
        self.cancel.notify_one();
        true
    }
}

/// What one `tools/call` round waits for next.
enum Step {
    From(FromServer),
    Done(Result<Called, ToolError>),
}

impl McpTool {
    /// One `tools/call` round: the server's progress is the call's live output as it comes,
    /// and its requests to the user are answered ([`Asking`]) while the call waits. A
    /// sampling request nobody could take fails the call, whatever the server then answers.
    fn round(
        &self,
        params: CallToolRequestParams,
        answers: &Asking<'_>,
    ) -> Result<Called, ToolError> {
        let ctx = answers.ctx;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let session = ctx.session_id().to_string();
        let caller = Caller {
            session: &session,
            capabilities: self
                .server
                .relay
                .get()
                .and_then(|r| r.capabilities(ctx.tool_use_id())),
        };
        let mut call = Box::pin(self.server.call(params, self.cancel.clone(), caller, tx));
        let mut refused: Option<ToolError> = None;
        loop {
            // The question is answered outside the runtime (the broker may block), and the
            // call, pinned here, is polled again after it.
            let step = self.server.runtime.block_on(async {
                tokio::select! {
                    biased;
                    Some(from) = rx.recv() => Step::From(from),
                    called = &mut call => Step::Done(called),
                }
            });
            match step {
                Step::From(FromServer::Progress(chunk)) => ctx.output(&chunk),
                Step::From(FromServer::Elicit(params, reply)) => {
                    let answer = answers.elicit(params).and_then(|v| {
                        serde_json::from_value(v).map_err(|e| ToolError::failed(e.to_string()))
                    });
                    let _ = reply.send(answer.map_err(|e| {
                        rmcp::ErrorData::internal_error(format!("toolhost: {e}"), None)
                    }));
                }
                Step::From(FromServer::Sample(params, reply)) => {
                    let answer = answers.sample(*params).and_then(|v| {
                        serde_json::from_value(v).map_err(|e| ToolError::failed(e.to_string()))
                    });
                    let _ = reply.send(answer.map_err(|e| {
                        let message = format!("toolhost: {e}");
                        refused = Some(e);
                        rmcp::ErrorData::internal_error(message, None)
                    }));
                }
                Step::Done(called) => {
                    while let Ok(FromServer::Progress(chunk)) = rx.try_recv() {
                        ctx.output(&chunk);
                    }
                    return match refused {
                        Some(e) => Err(e),
                        None => called,
                    };
                }
            }
        }
    }
}

/// The server's requests to the user for one call: to the client that made the call
/// through the host's relay when it can take them, else to the host's broker
/// ([`input::elicitation`]); sampling has no broker.
struct Asking<'a> {
    tool: &'a McpTool,
    ctx: &'a ToolContext,
}

impl input::Answers for Asking<'_> {
    fn elicit(&self, params: ElicitRequestParams) -> Result<Value, ToolError> {
        let server = &self.tool.server;
        let id = &server.config.id;
        if let Some(relay) = server.relay.get() {
            let relayed = server
                .runtime
                .block_on(relay.elicit(self.ctx.tool_use_id(), params.clone()));
            match relayed {
                Relayed::Answered(result) => {
                    return serde_json::to_value(result)
                        .map_err(|e| ToolError::failed(e.to_string()));
                }
                Relayed::Failed(why) => {
                    return Err(ToolError::failed(format!(
                        "MCP server '{id}' asked the user for input, and asking the client that made the call failed: {why}"
                    )));
                }
                Relayed::CannotAsk => {}
            }
        }
        input::elicitation(id, params, self.ctx)
    }

    fn sample(&self, params: CreateMessageRequestParams) -> Result<Value, ToolError> {
        let server = &self.tool.server;
        let id = &server.config.id;
        let relayed = match server.relay.get() {
            Some(relay) => server
                .runtime
                .block_on(relay.sample(self.ctx.tool_use_id(), params)),
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
}
