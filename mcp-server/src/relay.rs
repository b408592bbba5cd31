//! What a mounted MCP server asks the user while one of its tools runs, put to the MCP
//! client that made the call, and its answer back unchanged:
//!
//! - to a 2025-era client, a 2025-era server's `elicitation/create` (with the server's own
//!   message and schema) when the client can elicit in the form's mode, its
//!   `sampling/createMessage` when the client declared sampling, its `roots/list` when
//!   the client declared roots (else the server is given the session's workspace);
//! - to a 2026-07-28 client, a 2026-07-28 server's `input_required` round whole, when the
//!   client can answer every request in it: the client's round ends with the server's
//!   requests, toolhost's sealed `requestState` carries the server's, and the retry's
//!   `inputResponses` go to the server with it.
//!
//! - to a 2026-07-28 client, a 2025-era server's `elicitation/create` too, in a round of
//!   the client's own while the server's call waits, parked (`mcp_toolsets`' `parked`).
//!
//! - to a client whose call became a task ([`super::tasks`]), every request, in the task's
//!   `inputRequests`: a 2025-era server's under `elicitation` or `sampling`, the requests a
//!   server's own task waits on under the server's keys; `tasks/update` brings the answer.
//!
//! A client that cannot take the request (it did not declare the capability) leaves it to
//! the confirmation broker (elicitation) or fails the call, naming the server (sampling).

#![allow(
    deprecated,
    reason = "sampling is deprecated (SEP-2577), but 2025-era servers and clients still use it"
)]

use mcp_toolsets::{ClientRelay, RelayFuture, Relayed, Resume};
use rmcp::model::{
    CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest,
    ElicitRequestParams, ElicitResult, InputRequest, InputRequiredResult,
};
use rmcp::service::ElicitationMode;
use serde_json::Value;

use super::route::CallRoute;
use super::tasks::TaskHandle;

/// Asks `request` in `task` under `key`; the answer as the server takes it.
fn in_task<T: serde::de::DeserializeOwned + Send + 'static>(
    task: TaskHandle,
    key: String,
    request: InputRequest,
) -> RelayFuture<T> {
    Box::pin(async move {
        match task.ask(&key, request).await {
            Some(answer) => match serde_json::from_value(answer) {
                Ok(answer) => Relayed::Answered(answer),
                Err(e) => Relayed::Failed(format!(
                    "the answer given through tasks/update for '{key}' is not of the kind asked: {e}"
                )),
            },
            None => Relayed::Failed(format!(
                "task {} was cancelled or expired before '{key}' was answered",
                task.id()
            )),
        }
    })
}

/// A relayed answer as the JSON it is.
fn as_value<T: serde::Serialize + Send + 'static>(asking: RelayFuture<T>) -> RelayFuture<Value> {
    Box::pin(async move {
        match asking.await {
            Relayed::Answered(answer) => match serde_json::to_value(answer) {
                Ok(answer) => Relayed::Answered(answer),
                Err(e) => Relayed::Failed(e.to_string()),
            },
            Relayed::Failed(why) => Relayed::Failed(why),
            Relayed::CannotAsk => Relayed::CannotAsk,
        }
    })
}

impl ClientRelay for CallRoute {
    fn elicit(&self, params: ElicitRequestParams) -> RelayFuture<ElicitResult> {
        if let Some(task) = self.task_of() {
            let request = InputRequest::Elicitation(ElicitRequest::new(params));
            return in_task(task, "elicitation".into(), request);
        }
        let mode = match &params {
            ElicitRequestParams::UrlElicitationParams { .. } => ElicitationMode::Url,
            _ => ElicitationMode::Form,
        };
        let client = self
            .client()
            .filter(|peer| peer.supported_elicitation_modes().contains(&mode));
        Box::pin(async move {
            let Some(peer) = client else {
                return Relayed::CannotAsk;
            };
            match peer.create_elicitation(params).await {
                Ok(result) => Relayed::Answered(result),
                Err(e) => Relayed::Failed(e.to_string()),
            }
        })
    }

    fn sample(&self, params: CreateMessageRequestParams) -> RelayFuture<CreateMessageResult> {
        if let Some(task) = self.task_of() {
            let request = InputRequest::CreateMessage(CreateMessageRequest::new(params));
            return in_task(task, "sampling".into(), request);
        }
        let client = self.client().filter(|peer| {
            peer.peer_info()
                .is_some_and(|info| info.capabilities.sampling.is_some())
        });
        Box::pin(async move {
            let Some(peer) = client else {
                return Relayed::CannotAsk;
            };
            match peer.create_message(params).await {
                Ok(result) => Relayed::Answered(result),
                Err(e) => Relayed::Failed(e.to_string()),
            }
        })
    }

    fn roots(&self) -> RelayFuture<rmcp::model::ListRootsResult> {
        let client = self.client().filter(|peer| {
            peer.peer_info()
                .is_some_and(|info| info.capabilities.roots.is_some())
        });
        Box::pin(async move {
            let Some(peer) = client else {
                return Relayed::CannotAsk;
            };
            match peer.list_roots().await {
                Ok(roots) => Relayed::Answered(roots),
                Err(e) => Relayed::Failed(e.to_string()),
            }
        })
    }

    fn defer(&self, asked: &InputRequiredResult) -> bool {
        self.defer_round(asked)
    }

    fn resume(&self) -> Option<Resume> {
        self.take_resume()
    }

    fn capabilities(&self) -> Option<rmcp::model::ClientCapabilities> {
        self.client_capabilities()
    }

    fn became_task(&self) -> RelayFuture<bool> {
        CallRoute::became_task(self)
    }

    fn task_input(&self, key: &str, request: InputRequest) -> RelayFuture<Value> {
        if let Some(task) = self.task_of() {
            return in_task(task, key.to_string(), request);
        }
        // A call that is no task of toolhost's (a 2025-11-25 task): its 2025-era client is
        // asked as for any call.
        let asking: RelayFuture<Value> = match request {
            InputRequest::Elicitation(e) => as_value(self.elicit(e.params)),
            InputRequest::CreateMessage(m) => as_value(self.sample(m.params)),
            _ => Box::pin(std::future::ready(Relayed::CannotAsk)),
        };
        asking
    }
}
