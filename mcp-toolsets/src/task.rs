//! A call the server made a task of (the `io.modelcontextprotocol/tasks` extension,
//! SEP-2663): toolhost follows it to its end, so that a mounted tool keeps the shape of a
//! call (its result, or its error) whichever way the server chose to run it.
//!
//! - The server's `CreateTaskResult` is told to the host first ([`ClientRelay::became_task`]),
//!   which may make the call a task of its own for its client.
//! - Then `tasks/get` is polled, as often as the server suggests (`pollIntervalMs`, kept
//!   between 50 ms and 5 s); a changed `statusMessage` is a line of the call's live output.
//! - What the task waits on (`inputRequests`) is asked once per key: through the host's
//!   task, under the server's own key, when the host made one ([`ClientRelay::task_input`];
//!   the client's answer goes back unchanged), else as any request a server makes
//!   ([`crate::input`]: the host's broker). Each answer goes to the server by
//!   `tasks/update`.
//! - Cancelling the call sends `tasks/cancel` and waits, at most [`CANCEL_WAIT`], for the
//!   task to end.
//! - The task's end is the call's: `completed` gives its result (a tool error stays one),
//!   `failed` its JSON-RPC error, `cancelled` a cancelled call.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolResult, CancelTaskParams, CancelTaskRequest, ClientRequest, CreateTaskResult,
    GetTaskParams, GetTaskRequest, InputRequest, InputRequests, ServerResult, TaskPayload,
    UpdateTaskParams, UpdateTaskRequest,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tool_api::{ToolContext, ToolError};

use crate::cancel::Cancel;
use crate::input::Asking;
use crate::relay::Relayed;
use crate::upstream::Upstream;

/// The longest a cancelled call waits for the server's task to end.
pub(crate) const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The longest one `tasks/*` request to the server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How a followed task ended, short of being cancelled.
pub(crate) enum Followed {
    /// `completed`: the call's result.
    Result(CallToolResult),
    /// `failed`: the server's JSON-RPC error.
    Failed(rmcp::ErrorData),
}

enum Step {
    Poll,
    Cancel,
    Answered(String, Result<Value, ToolError>),
}

/// Sends one `tasks/*` request to the server.
async fn request(
    server: &Arc<Upstream>,
    request: ClientRequest,
) -> Result<ServerResult, ToolError> {
    let id = &server.config.id;
    let (peer, _) = server.live_peer().await?;
    match tokio::time::timeout(REQUEST_TIMEOUT, peer.send_request(request)).await {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(e)) => Err(ToolError::failed(format!(
            "MCP server '{id}' made a task of the call, and following it failed: {e}"
        ))),
        Err(_) => Err(ToolError::failed(format!(
            "MCP server '{id}' made a task of the call, and did not answer about it within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

/// Follows the server's task `created` for the call of `ctx` to its end. `cancel` is the
/// call's cancellation; `asking` answers what the task asks when the host's client
/// cannot.
pub(crate) async fn follow(
    server: &Arc<Upstream>,
    cancel: &Cancel,
    created: CreateTaskResult,
    ctx: &ToolContext,
    asking: &Asking<'_>,
) -> Result<Followed, ToolError> {
    let id = &server.config.id;
    let relay = asking.relay;
    let task_id = created.task.task_id;
    // Told before the first poll: the host's client may take the task's questions.
    let hosted = match relay {
        Some(r) => matches!(r.became_task().await, Relayed::Answered(true)),
        None => false,
    };
    tracing::debug!(server = %id, task = %task_id, hosted, "following the server's task");
    let poll = Duration::from_millis(created.task.poll_interval_ms.unwrap_or(500))
        .clamp(Duration::from_millis(50), Duration::from_secs(5));
    let (answered, mut answers_in) =
        mpsc::unbounded_channel::<(String, Result<Value, ToolError>)>();
    let mut asked: HashSet<String> = HashSet::new();
    let mut cancelled_at: Option<Instant> = None;
    let mut message = created.task.status_message;
    let mut first = true;
    loop {
        let step = if first {
            first = false;
            Step::Poll
        } else {
            tokio::select! {
                biased;
                Some((key, answer)) = answers_in.recv() => Step::Answered(key, answer),
                () = cancel.cancelled(), if cancelled_at.is_none() => Step::Cancel,
                () = tokio::time::sleep(poll) => Step::Poll,
            }
        };
        match step {
            Step::Cancel => {
                cancelled_at = Some(Instant::now());
                let stop = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                    CancelTaskParams::new(task_id.clone()),
                ));
                if let Err(e) = request(server, stop).await {
                    tracing::debug!(server = %id, task = %task_id, "tasks/cancel: {e}");
                }
            }
            Step::Answered(key, Ok(answer)) => {
                let responses = BTreeMap::from([(key, answer)]);
                let update = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
                    UpdateTaskParams::new(task_id.clone(), responses),
                ));
                request(server, update).await?;
            }
            Step::Answered(_, Err(e)) => {
                // The question could not be answered: the task cannot go on.
                let stop = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                    CancelTaskParams::new(task_id.clone()),
                ));
                let _ = request(server, stop).await;
                return Err(e);
            }
            Step::Poll => {
                if cancelled_at.is_some_and(|at| at.elapsed() >= CANCEL_WAIT) {
                    return Err(ToolError::Cancelled(format!(
                        "call to MCP server '{id}' cancelled (its task {task_id} had not ended {} s later)",
                        CANCEL_WAIT.as_secs()
                    )));
                }
                let get = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(
                    task_id.clone(),
                )));
                let detailed = match request(server, get).await? {
                    ServerResult::GetTaskResult(got) => got.task,
                    _ => {
                        return Err(ToolError::failed(format!(
                            "MCP server '{id}' answered tasks/get with something else than its task"
                        )));
                    }
                };
                if detailed.task.status_message != message {
                    message = detailed.task.status_message.clone();
                    if let Some(line) = &message {
                        ctx.output(&format!("{line}\n"));
                    }
                }
                match detailed.payload {
                    TaskPayload::Working => {}
                    TaskPayload::InputRequired { input_requests } => {
                        let new: InputRequests = input_requests
                            .into_iter()
                            .filter(|(key, _)| asked.insert(key.clone()))
                            .collect();
                        for (key, request) in new {
                            let through = relay.filter(|_| hosted);
                            ask(server, through, key, request, asking, &answered).await;
                        }
                    }
                    TaskPayload::Completed { result } => {
                        return serde_json::from_value(Value::Object(result))
                            .map(Followed::Result)
                            .map_err(|e| {
                                ToolError::failed(format!(
                                    "MCP server '{id}' ended its task with a result that is not a tool result: {e}"
                                ))
                            });
                    }
                    TaskPayload::Failed { error } => {
                        let error = serde_json::from_value(Value::Object(error.clone()))
                            .unwrap_or_else(|_| {
                                rmcp::ErrorData::internal_error(
                                    format!("the task failed: {}", Value::Object(error)),
                                    None,
                                )
                            });
                        return Ok(Followed::Failed(error));
                    }
                    TaskPayload::Cancelled => {
                        return Err(ToolError::Cancelled(format!(
                            "MCP server '{id}' cancelled its task for the call"
                        )));
                    }
                    other => {
                        return Err(ToolError::failed(format!(
                            "MCP server '{id}' reported its task as {:?}, which toolhost does not know",
                            other.status()
                        )));
                    }
                }
            }
        }
    }
}

/// Asks what the task waits on under `key`: through the host's task when there is one
/// (the answer comes back through `answered` when the client gives it), else through
/// `asking` now.
async fn ask(
    server: &Arc<Upstream>,
    relay: Option<&Arc<dyn crate::ClientRelay>>,
    key: String,
    request: InputRequest,
    asking: &Asking<'_>,
    answered: &mpsc::UnboundedSender<(String, Result<Value, ToolError>)>,
) {
    let id = server.config.id.clone();
    if let Some(relay) = relay {
        let relayed = relay.task_input(&key, request.clone());
        let answered = answered.clone();
        let broker = request;
        tokio::spawn(async move {
            let answer = match relayed.await {
                Relayed::Answered(answer) => Ok(answer),
                Relayed::Failed(why) => Err(ToolError::failed(format!(
                    "MCP server '{id}' asked in its task, and asking the client that made the call failed: {why}"
                ))),
                Relayed::CannotAsk => Err(ToolError::failed(format!(
                    "MCP server '{id}' asked in its task for input ({}), and nobody could be asked",
                    method_of(&broker)
                ))),
            };
            let _ = answered.send((key, answer));
        });
        return;
    }
    let requests = InputRequests::from([(key.clone(), request)]);
    let answer = asking.answer(requests).await.and_then(|mut responses| {
        responses
            .remove(&key)
            .ok_or_else(|| ToolError::failed(format!("MCP server '{id}': no answer was made")))
    });
    let _ = answered.send((key, answer));
}

fn method_of(request: &InputRequest) -> String {
    serde_json::to_value(request)
        .ok()
        .and_then(|v| v.get("method").and_then(Value::as_str).map(String::from))
        .unwrap_or_else(|| "a request".to_string())
}

/// The `ttl` asked for a 2025-11-25 task: as long as the call may take.
fn ttl_2025(server: &Upstream) -> u64 {
    u64::try_from(server.config.call_timeout().as_millis()).unwrap_or(u64::MAX)
}

/// A JSON-RPC result, whichever shape the protocol library took it for, as its JSON.
fn as_json(result: &ServerResult) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}

/// A call of a tool that runs only as a 2025-11-25 task (a 2025-era server answered its
/// plain `tools/call` with `-32601`): a task-augmented `tools/call`, then `tasks/result`,
/// which waits for the task's end; what the server asks meanwhile (it names no call) goes
/// to this call, as for any call in flight, and cancelling it sends `tasks/cancel`.
///
/// rmcp knows only the 2026 extension's tasks, so these requests go as custom ones and
/// their answers are read as JSON.
pub(crate) async fn call_2025(
    server: Arc<Upstream>,
    params: Arc<rmcp::model::CallToolRequestParams>,
    cancel: Arc<Cancel>,
    caller: crate::upstream::Caller,
    to: crate::mailbox::Sender<crate::relay::FromServer>,
) -> Result<crate::upstream::Called, ToolError> {
    use crate::upstream::Called;
    use rmcp::model::CustomRequest;
    let id = &server.config.id;
    let (peer, _) = server.live_peer().await?;
    let mut call = serde_json::to_value(&*params)
        .map_err(|e| ToolError::failed(format!("cannot send the call: {e}")))?;
    call["task"] = serde_json::json!({"ttl": ttl_2025(&server)});
    let created = tokio::time::timeout(
        REQUEST_TIMEOUT,
        peer.send_request(ClientRequest::CustomRequest(CustomRequest::new(
            "tools/call",
            Some(call),
        ))),
    )
    .await;
    let created = match created {
        Ok(Ok(result)) => as_json(&result),
        Ok(Err(rmcp::ServiceError::McpError(e))) => return Ok(Called::Failed(e)),
        Ok(Err(e)) => {
            return Err(ToolError::failed(format!(
                "MCP server '{id}' runs this tool only as a task, and asking for one failed: {e}"
            )));
        }
        Err(_) => {
            return Err(ToolError::failed(format!(
                "MCP server '{id}' did not answer a task-augmented tools/call within {} s",
                REQUEST_TIMEOUT.as_secs()
            )));
        }
    };
    let Some(task_id) = created["task"]["taskId"].as_str().map(String::from) else {
        return Err(ToolError::failed(format!(
            "MCP server '{id}' answered a task-augmented tools/call without a task: {created}"
        )));
    };
    tracing::debug!(server = %id, task = %task_id, "following the server's 2025-11-25 task");
    let task = serde_json::json!({"taskId": task_id});
    let result =
        ClientRequest::CustomRequest(CustomRequest::new("tasks/result", Some(task.clone())));
    let mut options = rmcp::service::PeerRequestOptions::with_timeout(server.config.call_timeout());
    if !caller.progress {
        let mut meta = rmcp::model::RequestMetaObject::new();
        meta.insert(crate::upstream::client::NO_PROGRESS.into(), true.into());
        options.meta = Some(meta);
    }
    let handle = peer
        .send_cancellable_request(result, options)
        .await
        .map_err(|e| ToolError::failed(format!("MCP server '{id}': tasks/result: {e}")))?;
    let _route = server
        .calls
        .route(handle.progress_token.clone(), &caller.session, to);
    let answer = tokio::select! {
        answer = handle.await_response() => answer,
        () = cancel.cancelled() => {
            let stop = ClientRequest::CustomRequest(CustomRequest::new("tasks/cancel", Some(task)));
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, peer.send_request(stop)).await;
            return Err(ToolError::Cancelled(format!(
                "call to MCP server '{id}' cancelled (its task {task_id} too)"
            )));
        }
    };
    match answer {
        Ok(result) => serde_json::from_value(as_json(&result))
            .map(Called::Complete)
            .map_err(|e| {
                ToolError::failed(format!(
                    "MCP server '{id}' ended its task with a result that is not a tool result: {e}"
                ))
            }),
        Err(rmcp::ServiceError::McpError(e)) => Ok(Called::Failed(e)),
        Err(e) => Err(ToolError::failed(format!(
            "MCP server '{id}': tasks/result for task {task_id}: {e}"
        ))),
    }
}
