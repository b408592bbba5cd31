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
use crate::task::Followed;
use crate::upstream::parked::{InFlight, PARKED, ParkedCalls, QUESTION_KEY};
use crate::upstream::{Called, Caller, Upstream};

/// The key of a mounted tool's output metadata that holds the server's result whole
/// (`{"content": [...], "structuredContent": ...}`), when the output's content blocks
/// cannot hold all of it: audio, embedded resources and resource links (which the model
/// reads as their JSON), or structured content. A host that passes results on to its own
/// MCP clients sends that instead.
pub const RESULT_META: &str = "mcp_result";

/// The key of a mounted tool's output metadata that holds the server's JSON-RPC error when
/// it refused the call for a capability the calling client did not declare (`-32021`,
/// with `data.requiredCapabilities`), or when the task it made of the call failed: a host
/// that passes calls on answers its client with that error, as the server would have.
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
        Ok(Box::new(McpTool::new(
            self.server.clone(),
            &self.definition.name,
        )))
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

pub(crate) struct McpTool {
    server: Arc<Upstream>,
    name: String,
    cancel: Arc<tokio::sync::Notify>,
}

impl McpTool {
    /// A call of the server's tool `name`.
    pub(crate) fn new(server: Arc<Upstream>, name: &str) -> McpTool {
        McpTool {
            server,
            name: name.to_string(),
            cancel: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

/// A server's call result as a tool output: its text and images as content (an image that
/// is not valid base64 said, not dropped), and what an output cannot hold (audio,
/// embedded resources, resource links, structured content) kept whole in its metadata.
fn output_of(result: &rmcp::model::CallToolResult, id: &str) -> ToolOutput {
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
    out
}

impl Tool for McpTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        // A server that takes its caller's credentials: the call goes through the caller's
        // own connection.
        let routed = self
            .server
            .runtime
            .block_on(self.server.for_caller(ctx.session_id()))?;
        if !Arc::ptr_eq(&routed, &self.server) {
            let own = McpTool {
                server: routed,
                name: self.name.clone(),
                cancel: self.cancel.clone(),
            };
            return own.execute(input, ctx);
        }
        let Value::Object(args) = input else {
            return Err(ToolError::invalid_input(
                "MCP tool arguments must be a JSON object",
            ));
        };
        let id = &self.server.config.id;
        let mut params = CallToolRequestParams::new(self.name.clone()).with_arguments(args);
        let relay = self.server.relay.get();
        // The retry of a round the calling client answered itself: its answers go on, to a
        // call parked here or to the server's next round.
        let mut parked = None;
        if let Some(resume) = relay.and_then(|r| r.resume(ctx.tool_use_id())) {
            match resume.state.as_deref().and_then(|s| s.strip_prefix(PARKED)) {
                Some(key) => {
                    let call = self.server.parked.take(key).ok_or_else(|| {
                        ToolError::failed(format!(
                            "the call to MCP server '{id}' this answer was for is no longer waiting \
                             (it ended, waited too long, or waits on another toolhost instance); call the tool again"
                        ))
                    })?;
                    parked = Some((call, resume.responses));
                }
                None => {
                    params.input_responses = Some(resume.responses);
                    params.request_state = resume.state;
                }
            }
        }
        let mut rounds = 0;
        let answers = Asking { tool: self, ctx };
        let result = loop {
            let call = match parked.take() {
                Some((call, responses)) => {
                    // The server's question, answered by the client's retry.
                    let answer = responses
                        .get(QUESTION_KEY)
                        .cloned()
                        .and_then(|v| serde_json::from_value::<rmcp::model::ElicitResult>(v).ok())
                        .ok_or_else(|| {
                            rmcp::ErrorData::invalid_params(
                                "the client gave no answer to the question",
                                None,
                            )
                        });
                    let _ = call.reply.send(answer);
                    call.call
                }
                None => self.start(params.clone(), ctx),
            };
            match self.round(call, &answers)? {
                Called::Complete(result) => break result,
                Called::NeedsCapability(refused) => {
                    return Ok(protocol_error(
                        format!(
                            "MCP server '{id}' refused the call: {} (the calling client did not declare a capability the tool needs)",
                            refused.message
                        ),
                        refused,
                    ));
                }
                Called::NeedsTask2025 => {
                    let learnt = self
                        .server
                        .tasks_2025
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(self.name.clone());
                    if !learnt {
                        return Err(ToolError::failed(format!(
                            "MCP server '{id}' refused tools/call for '{}' as an unknown method, even as a task",
                            self.name
                        )));
                    }
                    tracing::info!(server = %id, tool = %self.name, "the tool runs only as a 2025-11-25 task; calling it as one");
                }
                Called::Failed(error) => {
                    return Ok(protocol_error(
                        format!("MCP server '{id}' failed the call: {}", error.message),
                        error,
                    ));
                }
                Called::Task(created) => {
                    match crate::task::follow(&self.server, &self.cancel, created, ctx, &answers)? {
                        Followed::Result(result) => break result,
                        Followed::Failed(error) => {
                            return Ok(protocol_error(
                                format!("MCP server '{id}' failed the call: {}", error.message),
                                error,
                            ));
                        }
                    }
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
                    params.input_responses = Some(input::answer(id, requests, &answers)?);
                    params.request_state = asked.request_state;
                }
            }
        };
        Ok(output_of(&result, id))
    }

    fn cancel(&self) -> bool {
        self.cancel.notify_one();
        true
    }
}

/// A call that ended in the server's protocol error: a failed output whose metadata holds
/// the error ([`ERROR_META`]) for a host that passes it on.
fn protocol_error(text: String, error: rmcp::ErrorData) -> ToolOutput {
    let mut out = ToolOutput::text(text);
    out.success = false;
    out.metadata = serde_json::json!({ ERROR_META: error });
    out
}

/// What one `tools/call` round waits for next.
enum Step {
    From(FromServer),
    Done(Result<Called, ToolError>),
    Cancel,
}

impl McpTool {
    /// Starts a `tools/call` upstream, in a task of its own (so that it can wait, parked,
    /// for a question's answer beyond this call: [`crate::upstream::parked`]).
    fn start(&self, params: CallToolRequestParams, ctx: &ToolContext) -> InFlight {
        let (tx, from_server) = tokio::sync::mpsc::unbounded_channel();
        let cancel = Arc::new(tokio::sync::Notify::new());
        let caller = Caller {
            session: ctx.session_id().to_string(),
            capabilities: self
                .server
                .relay
                .get()
                .and_then(|r| r.capabilities(ctx.tool_use_id())),
        };
        let (server, stop) = (self.server.clone(), cancel.clone());
        let as_task_2025 = self
            .server
            .tasks_2025
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&self.name);
        let outcome = self.server.runtime.spawn(async move {
            if as_task_2025 {
                crate::task::call_2025(&server, params, stop, caller, tx).await
            } else {
                server.call(params, stop, caller, tx).await
            }
        });
        InFlight {
            from_server,
            outcome,
            cancel,
        }
    }

    /// One `tools/call` round: the server's progress is the call's live output as it comes,
    /// and its requests to the user are answered ([`Asking`]) while the call waits. A
    /// sampling request nobody could take fails the call, whatever the server then answers.
    /// A question only a 2026 client can answer parks the call and ends this one.
    fn round(&self, mut call: InFlight, answers: &Asking<'_>) -> Result<Called, ToolError> {
        let ctx = answers.ctx;
        let mut refused: Option<ToolError> = None;
        loop {
            // The question is answered outside the runtime (the broker may block), and the
            // call, in its own task, goes on meanwhile.
            let step = self.server.runtime.block_on(async {
                tokio::select! {
                    biased;
                    Some(from) = call.from_server.recv() => Step::From(from),
                    outcome = &mut call.outcome => Step::Done(outcome.unwrap_or_else(|e| {
                        Err(ToolError::failed(format!("the call to the MCP server stopped: {e}")))
                    })),
                    () = self.cancel.notified() => Step::Cancel,
                }
            });
            match step {
                Step::Cancel => call.cancel.notify_one(),
                Step::From(FromServer::Progress(chunk)) => ctx.output(&chunk),
                Step::From(FromServer::Elicit(params, reply)) => {
                    let answer = match answers.relayed(&params) {
                        Some(answer) => answer,
                        None => match self.park(call, params.clone(), reply, ctx) {
                            Ok(()) => {
                                return Err(ToolError::failed(format!(
                                    "MCP server '{}' asked a question; it went to the client that made the call",
                                    self.server.config.id
                                )));
                            }
                            Err((back, reply)) => {
                                call = back;
                                let answer =
                                    input::elicitation(&self.server.config.id, params, ctx);
                                let _ = reply.send(to_reply(answer));
                                continue;
                            }
                        },
                    };
                    let _ = reply.send(to_reply(answer));
                }
                Step::From(FromServer::Roots(reply)) => {
                    let _ = reply.send(answers.roots());
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
                    while let Ok(FromServer::Progress(chunk)) = call.from_server.try_recv() {
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

    /// Parks `call` and hands its server's question to the 2026 client that made it, in a
    /// round of its own; gives the call back when that client cannot take it.
    #[allow(
        clippy::result_large_err,
        reason = "the call is given back, not an error"
    )]
    fn park(
        &self,
        call: InFlight,
        question: ElicitRequestParams,
        reply: Reply,
        ctx: &ToolContext,
    ) -> Result<(), (InFlight, Reply)> {
        let Some(relay) = self.server.relay.get() else {
            return Err((call, reply));
        };
        let key = ParkedCalls::new_id();
        let mut requests = rmcp::model::InputRequests::new();
        requests.insert(
            QUESTION_KEY.to_string(),
            rmcp::model::InputRequest::Elicitation(rmcp::model::ElicitRequest::new(question)),
        );
        let round =
            rmcp::model::InputRequiredResult::new(Some(requests), Some(format!("{PARKED}{key}")));
        // Parked first: the client's retry may come as soon as the round is handed over.
        self.server.parked.park(&key, call, reply);
        if relay.defer(ctx.tool_use_id(), &round) {
            return Ok(());
        }
        match self.server.parked.take(&key) {
            Some(parked) => Err((parked.call, parked.reply)),
            // Unreachable: only this call knows the key.
            None => Ok(()),
        }
    }
}

/// The answer to a server's `elicitation/create`.
type Reply = tokio::sync::oneshot::Sender<Result<rmcp::model::ElicitResult, rmcp::ErrorData>>;

/// An answer as the server gets it.
fn to_reply(
    answer: Result<Value, ToolError>,
) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
    answer
        .and_then(|v| serde_json::from_value(v).map_err(|e| ToolError::failed(e.to_string())))
        .map_err(|e| rmcp::ErrorData::internal_error(format!("toolhost: {e}"), None))
}

/// The server's requests to the user for one call: to the client that made the call
/// through the host's relay when it can take them, else to the host's broker
/// ([`input::elicitation`]); sampling has no broker.
struct Asking<'a> {
    tool: &'a McpTool,
    ctx: &'a ToolContext,
}

impl Asking<'_> {
    /// The answer of a 2025-era client that made the call, if the host relays to one.
    fn relayed(&self, params: &ElicitRequestParams) -> Option<Result<Value, ToolError>> {
        let server = &self.tool.server;
        let relay = server.relay.get()?;
        match server
            .runtime
            .block_on(relay.elicit(self.ctx.tool_use_id(), params.clone()))
        {
            Relayed::Answered(result) => {
                Some(serde_json::to_value(result).map_err(|e| ToolError::failed(e.to_string())))
            }
            Relayed::Failed(why) => Some(Err(ToolError::failed(format!(
                "MCP server '{}' asked the user for input, and asking the client that made the call failed: {why}",
                server.config.id
            )))),
            Relayed::CannotAsk => None,
        }
    }
}

impl Asking<'_> {
    /// The roots of the client that made the call when it declared them and answered,
    /// else the session's workspace.
    fn roots(&self) -> rmcp::model::ListRootsResult {
        let server = &self.tool.server;
        let relayed = match server.relay.get() {
            Some(relay) => server.runtime.block_on(relay.roots(self.ctx.tool_use_id())),
            None => Relayed::CannotAsk,
        };
        match relayed {
            Relayed::Answered(roots) => roots,
            Relayed::Failed(why) => {
                tracing::debug!(server = %server.config.id, "the client's roots could not be read ({why}); the workspace is answered");
                crate::upstream::client::workspace_roots(std::path::Path::new(
                    self.ctx.workspace_root(),
                ))
            }
            Relayed::CannotAsk => crate::upstream::client::workspace_roots(std::path::Path::new(
                self.ctx.workspace_root(),
            )),
        }
    }
}

impl input::Answers for Asking<'_> {
    fn roots(&self) -> Value {
        serde_json::to_value(Asking::roots(self)).unwrap_or_default()
    }

    fn elicit(&self, params: ElicitRequestParams) -> Result<Value, ToolError> {
        match self.relayed(&params) {
            Some(answer) => answer,
            None => input::elicitation(&self.tool.server.config.id, params, self.ctx),
        }
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
