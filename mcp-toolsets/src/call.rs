//! A server's tool as a toolhost tool: its factory ([`McpToolFactory`]), and a call
//! ([`McpTool`]) that answers `input_required` rounds through the host and turns the
//! server's result into a tool output.

#![allow(
    deprecated,
    reason = "sampling and logging are deprecated (SEP-2577), but servers still send them, and passing them through is this module's job"
)]

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, ElicitRequestParams};
use serde_json::Value;
use tool_api::{Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolFuture, ToolOutput};

use crate::cancel::Cancel;
use crate::input::Asking;
use crate::relay::{ClientRelay, FromServer, Origin};
use crate::task::Followed;
use crate::upstream::parked::{InFlight, PARKED, Parked, ParkedCalls, QUESTION_KEY};
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
    /// Its definition is its pinned one.
    pub(crate) pinned: bool,
    /// The server's version when it was listed.
    pub(crate) version: Option<Arc<str>>,
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
    fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
    fn pinned(&self) -> bool {
        self.pinned
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
    cancel: Cancel,
}

impl McpTool {
    /// A call of the server's tool `name`.
    pub(crate) fn new(server: Arc<Upstream>, name: &str) -> McpTool {
        McpTool {
            server,
            name: name.to_string(),
            cancel: Cancel::default(),
        }
    }
}

/// A server's call result as a tool output: its text and images as content (an image that
/// is not valid base64 said, not dropped), and what an output cannot hold (audio,
/// embedded resources, resource links, structured content) kept whole in its metadata.
fn output_of(result: rmcp::model::CallToolResult, id: &str) -> ToolOutput {
    let mut out = ToolOutput::text("");
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
    // Taken, not copied: a text block's text becomes the output's as it is.
    out.content = result
        .content
        .into_iter()
        .filter_map(|c| match c {
            rmcp::model::ContentBlock::Text(t) => Some(tool_api::Content::text(t.text)),
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
            other => serde_json::to_string(&other)
                .ok()
                .map(tool_api::Content::text),
        })
        .collect();
    out
}

impl Tool for McpTool {
    /// For a host that runs each call on a thread of its own: the call's future, driven to
    /// its end on that thread. The dispatcher polls [`Tool::execute_async`] instead, on its
    /// async threads, and never gets here.
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.server.runtime.block_on(self.run(input, ctx))
    }

    /// The call as a future from start to end: it holds no thread while the server works,
    /// only the question a host's broker asks the user waits on a blocking thread.
    fn execute_async(
        self: Arc<Self>,
        input: Value,
        ctx: ToolContext,
    ) -> Result<ToolFuture, (Value, ToolContext)> {
        Ok(Box::pin(async move { self.run(input, &ctx).await }))
    }

    fn cancel(&self) -> bool {
        self.cancel.cancel();
        true
    }
}

impl McpTool {
    /// Runs the call: through the caller's own connection when the server takes its
    /// caller's credentials, its questions to the calling client when the call's origin
    /// says how to reach it ([`Origin`]).
    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let origin = ctx.extension::<Origin>();
        // Held to the call's end: a caller's own connection is busy meanwhile.
        let routed = self.server.for_caller(origin).await?;
        let Value::Object(args) = input else {
            return Err(ToolError::invalid_input(
                "MCP tool arguments must be a JSON object",
            ));
        };
        let call = Call {
            server: &routed.connection,
            name: &self.name,
            cancel: &self.cancel,
            ctx,
            relay: origin.and_then(|o| o.relay.as_ref()),
        };
        call.run(args).await
    }
}

/// One call of a server's tool, on the connection it goes through.
struct Call<'a> {
    server: &'a Arc<Upstream>,
    name: &'a str,
    /// The call's cancellation ([`Tool::cancel`]).
    cancel: &'a Cancel,
    ctx: &'a ToolContext,
    /// The client that made the call, when the host relays to it.
    relay: Option<&'a Arc<dyn ClientRelay>>,
}

impl Call<'_> {
    /// Who answers what the server asks for this call.
    fn asking(&self) -> Asking<'_> {
        Asking {
            server: self.server,
            ctx: self.ctx,
            relay: self.relay,
        }
    }

    /// The call's rounds, to the server's result.
    async fn run(&self, args: serde_json::Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let id = &self.server.config.id;
        let mut params = CallToolRequestParams::new(self.name.to_string()).with_arguments(args);
        // The retry of a round the calling client answered itself: its answers go on, to a
        // call parked here or to the server's next round.
        let mut parked = None;
        if let Some(resume) = self.relay.and_then(|r| r.resume()) {
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
        // Shared with each round's request, not copied into it: most calls take one round,
        // and a later one changes what the last left (copied only if it is still held).
        let mut params = Arc::new(params);
        let mut rounds = 0;
        let asking = self.asking();
        let result = loop {
            let call = match parked.take() {
                Some((call, responses)) => resume_parked(call, &responses),
                None => self.start(params.clone()),
            };
            match self.round(call, &asking).await? {
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
                        .insert(self.name.to_string());
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
                    let followed = Box::pin(crate::task::follow(
                        self.server,
                        self.cancel,
                        created,
                        self.ctx,
                        &asking,
                    ))
                    .await?;
                    match followed {
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
                Called::InputRequired(asked) if self.relay.is_some_and(|r| r.defer(&asked)) => {
                    return Err(ToolError::failed(format!(
                        "MCP server '{id}' asked for input; the question went to the client that made the call"
                    )));
                }
                Called::InputRequired(asked) => {
                    rounds += 1;
                    let requests = asked.input_requests.unwrap_or_default();
                    let responses = Box::pin(asking.answer(requests)).await?;
                    let next = Arc::make_mut(&mut params);
                    next.input_responses = Some(responses);
                    next.request_state = asked.request_state;
                }
            }
        };
        Ok(output_of(result, id))
    }
}

/// A parked call, its server's question answered by the client's retry: it goes on.
fn resume_parked(call: Parked, responses: &rmcp::model::InputResponses) -> InFlight {
    let answer = responses
        .get(QUESTION_KEY)
        .cloned()
        .and_then(|v| serde_json::from_value::<rmcp::model::ElicitResult>(v).ok())
        .ok_or_else(|| {
            rmcp::ErrorData::invalid_params("the client gave no answer to the question", None)
        });
    let _ = call.reply.send(answer);
    call.call
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
#[allow(
    clippy::large_enum_variant,
    reason = "one value per turn of the loop, on its stack: boxing the call's end would allocate per call"
)]
enum Step {
    From(FromServer),
    Done(Result<Called, ToolError>),
    Cancel,
}

impl Call<'_> {
    /// Starts a `tools/call` upstream: its future, polled by this call, and given a task of
    /// its own if it must wait, parked, for a question's answer beyond this call
    /// ([`crate::upstream::parked`]).
    fn start(&self, params: Arc<CallToolRequestParams>) -> InFlight {
        let (tx, from_server) = crate::mailbox::channel();
        let cancel = Arc::new(Cancel::default());
        let caller = Caller {
            session: self.ctx.session_id().to_string(),
            relay: self.relay.cloned(),
            progress: self.ctx.output_wanted(),
        };
        let (server, stop) = (self.server.clone(), cancel.clone());
        let as_task_2025 = self
            .server
            .tasks_2025
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(self.name);
        // Each way's future boxed as it is made: no block around them to hold (and copy)
        // the larger.
        let call: crate::upstream::parked::CallFuture = if as_task_2025 {
            Box::pin(crate::task::call_2025(server, params, stop, caller, tx))
        } else {
            Box::pin(server.call(params, stop, caller, tx))
        };
        InFlight::new(call, from_server, cancel, self.server.runtime.clone())
    }

    /// One `tools/call` round: the server's progress is the call's live output as it comes,
    /// and its requests to the user are answered (`asking`) while the call waits. A
    /// sampling request nobody could take fails the call, whatever the server then answers.
    /// A question only a 2026 client can answer parks the call and ends this one.
    async fn round(&self, mut call: InFlight, asking: &Asking<'_>) -> Result<Called, ToolError> {
        let ctx = self.ctx;
        let mut refused: Option<ToolError> = None;
        loop {
            // The call goes on when polled again, after a question is answered (it waits
            // for that answer meanwhile).
            let step = tokio::select! {
                biased;
                from = call.from_server.recv() => Step::From(from),
                outcome = &mut call.outcome => Step::Done(outcome),
                () = self.cancel.cancelled(), if !call.cancel.is_cancelled() => Step::Cancel,
            };
            match step {
                Step::Cancel => call.cancel.cancel(),
                Step::From(FromServer::Progress(chunk)) => ctx.output(&chunk),
                Step::From(FromServer::Elicit(params, reply)) => {
                    // The questions a server asks are rare: their futures are on the heap,
                    // not in every call's state.
                    let answer = match Box::pin(asking.relayed(&params)).await {
                        Some(answer) => answer,
                        None => match self.park(call, (*params).clone(), reply) {
                            Ok(()) => {
                                return Err(ToolError::failed(format!(
                                    "MCP server '{}' asked a question; it went to the client that made the call",
                                    self.server.config.id
                                )));
                            }
                            Err((back, reply)) => {
                                call = back;
                                let answer = Box::pin(asking.broker(*params)).await;
                                let _ = reply.send(to_reply(answer));
                                continue;
                            }
                        },
                    };
                    let _ = reply.send(to_reply(answer));
                }
                Step::From(FromServer::Roots(reply)) => {
                    let _ = reply.send(Box::pin(asking.roots()).await);
                }
                Step::From(FromServer::Sample(params, reply)) => {
                    let answer = Box::pin(asking.sample(*params)).await.and_then(|v| {
                        serde_json::from_value(v).map_err(|e| ToolError::failed(e.to_string()))
                    });
                    let _ = reply.send(answer.map_err(|e| {
                        let message = format!("toolhost: {e}");
                        refused = Some(e);
                        rmcp::ErrorData::internal_error(message, None)
                    }));
                }
                Step::Done(called) => {
                    while let Some(FromServer::Progress(chunk)) = call.from_server.try_recv() {
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
    ) -> Result<(), (InFlight, Reply)> {
        let Some(relay) = self.relay else {
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
        if relay.defer(&round) {
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
