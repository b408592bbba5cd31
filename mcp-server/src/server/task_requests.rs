//! The 2025-11-25 task requests (`tasks/get`, `tasks/list`, `tasks/cancel`,
//! `tasks/result`, and a task-augmented `tools/call`), which the stdio and HTTP transports
//! rename to custom requests ([`crate::tasks_2025`]) and the server answers from its task
//! store, each client seeing its own tasks.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, TaskPayload,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use super::McpServer;
use super::call::TaskMode;
use crate::caller::Caller;
use crate::sessions::principal;
use crate::tasks_2025;

/// How long `tasks/cancel` (2025-11-25) waits for the call to stop before it answers.
const CANCEL_SETTLES: std::time::Duration = std::time::Duration::from_secs(2);

/// How long `tasks/result` (2025-11-25) waits for the task's end in one request.
const RESULT_WAITS: std::time::Duration = std::time::Duration::from_secs(600);

impl McpServer {
    /// A 2025-11-25 task request the transport renamed ([`tasks_2025`]); `None` for any
    /// other custom request.
    pub(crate) async fn serve_task_2025(
        &self,
        request: &CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Option<Result<CustomResult, McpError>> {
        let kind = tasks_2025::Request::of(&request.method)?;
        let params = request.params.clone().unwrap_or(Value::Null);
        Some(
            self.task_2025(kind, params, context)
                .await
                .map(CustomResult),
        )
    }

    async fn task_2025(
        &self,
        kind: tasks_2025::Request,
        params: Value,
        context: RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        use tasks_2025::Request;
        let principal = principal(&context).id;
        let tasks = &self.shared.tasks;
        let method = kind.method();
        let task_id = || {
            params
                .get("taskId")
                .and_then(Value::as_str)
                .map(String::from)
                .ok_or_else(|| {
                    McpError::invalid_params(
                        format!("Invalid params for '{method}': taskId (a string) is required"),
                        None,
                    )
                })
        };
        match kind {
            Request::Call => {
                if !tasks.room_for(&principal) {
                    return Err(McpError::invalid_request(
                        format!(
                            "this client already has {} tasks running ([mcp.tasks] max_per_client); \
                             wait for one to end, cancel one, or call without params.task",
                            tasks.settings().max_per_client
                        ),
                        None,
                    ));
                }
                let ttl = tasks_2025::requested_ttl(&params);
                let call: CallToolRequestParams = serde_json::from_value(params).map_err(|e| {
                    McpError::invalid_params(format!("Invalid params for 'tools/call': {e}"), None)
                })?;
                match self
                    .call(
                        call,
                        Caller::of(context, &self.declared),
                        TaskMode::Now { ttl },
                    )
                    .await?
                {
                    CallToolResponse::Task(created) => {
                        Ok(json!({"task": tasks_2025::task(&created.task)}))
                    }
                    _ => Err(McpError::internal_error(
                        "the call could not be made a task (this client's tasks are all running); call it again without params.task",
                        None,
                    )),
                }
            }
            Request::Get => {
                let task = tasks.get_anywhere(&principal, &task_id()?).await?;
                Ok(tasks_2025::task(&task.task))
            }
            Request::List => {
                let listed: Vec<Value> = tasks
                    .list_anywhere(&principal)
                    .await
                    .iter()
                    .map(tasks_2025::task)
                    .collect();
                Ok(json!({"tasks": listed}))
            }
            Request::Cancel => {
                let id = task_id()?;
                tasks.cancel_anywhere(&principal, &id).await?;
                // The call stops cooperatively; the answer shows it ended when it does so
                // within a moment.
                let task = tasks
                    .ended_anywhere(&principal, &id, CANCEL_SETTLES)
                    .await?;
                Ok(tasks_2025::task(&task.task))
            }
            Request::Result => {
                let id = task_id()?;
                let task = tasks.ended_anywhere(&principal, &id, RESULT_WAITS).await?;
                match task.payload {
                    TaskPayload::Completed { mut result } => {
                        let meta = result
                            .entry("_meta")
                            .or_insert_with(|| Value::Object(Default::default()));
                        if let Some(meta) = meta.as_object_mut() {
                            meta.insert(
                                tasks_2025::RELATED_TASK_META.into(),
                                json!({"taskId": id}),
                            );
                        }
                        Ok(Value::Object(result))
                    }
                    TaskPayload::Failed { error } => Err(serde_json::from_value(Value::Object(
                        error,
                    ))
                    .unwrap_or_else(|e| {
                        McpError::internal_error(format!("task {id} failed ({e})"), None)
                    })),
                    TaskPayload::Cancelled => Err(McpError::invalid_request(
                        format!("task {id} was cancelled: it has no result"),
                        Some(json!({"taskId": id})),
                    )),
                    _ => Err(McpError::internal_error(
                        format!(
                            "task {id} is still running after {} s; ask tasks/result again",
                            RESULT_WAITS.as_secs()
                        ),
                        Some(json!({"taskId": id})),
                    )),
                }
            }
        }
    }
}
