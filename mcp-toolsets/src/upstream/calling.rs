//! A `tools/call` to the server ([`Upstream::call`]): sent directly on a stdio
//! connection ([`super::outbox`]), or through rmcp's requests to a server over HTTP, and
//! what it got, read the same way whichever way it went.
//!
//! None of the ways keeps a timer of its own: a mounted tool declares the server's
//! `call_timeout_secs` as its timeout, and the dispatcher races every call against its
//! timeout (that one, or the operator's `[timeouts]` entry for the tool) and drops it when
//! the time is up, which tells the server the call was cancelled (see
//! [`super::parked`]). A second timer a call cost about a thousand instructions, and told
//! the caller nothing the dispatcher's did not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use tool_api::ToolError;

use super::lines::envelope::Answered;
use super::outbox::Direct;
use super::posting::{NotPosted, Posts};
use super::{Called, Caller, Child, Conn, Upstream, Way, exit_status};
use crate::cancel::Cancel;
use crate::relay::FromServer;

/// How a call sent to the server ended, short of being cancelled.
type Outcome = Result<Answered, rmcp::ServiceError>;

/// Whether a 2025-era server's tool result is its refusal to run the tool but as a task:
/// the TypeScript SDK (the usual home of the 2025-11-25 tasks) answers a plain call of a
/// tool with `execution.taskSupport: "required"` with an error result reading "MCP error
/// -32601: Tool … requires task augmentation …" rather than a JSON-RPC error.
fn needs_task_2025(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
        && matches!(result.content.as_slice(), [rmcp::model::ContentBlock::Text(t)]
            if t.text.starts_with("MCP error -32601:") && t.text.contains("task"))
}

impl Upstream {
    /// Calls a tool for a call in the host session of `caller`; what the server sends for
    /// the call while it runs (its progress, its requests to the user) goes to `to`.
    pub(crate) async fn call(
        self: Arc<Self>,
        params: Arc<CallToolRequestParams>,
        cancel: Arc<Cancel>,
        caller: Caller,
        to: crate::mailbox::Sender<FromServer>,
    ) -> Result<Called, ToolError> {
        self.subscriptions.settled().await;
        let (peer, child, way) = self.live().await?;
        // A 2026-07-28 server reads the client's capabilities from each request: it is told
        // what the calling client can be asked, not what toolhost could relay to anyone.
        let stateless = peer
            .peer_info()
            .is_some_and(|i| i.protocol_version >= rmcp::model::ProtocolVersion::V_2026_07_28);
        // Each way's future is on the heap but the direct one's: a call's state, which its
        // task's start copies whole, is the size of the largest way it might take (an HTTP
        // client's request, rmcp's), not of the one it takes.
        let outcome = match way {
            Way::Written(direct) if !stateless => {
                self.sent_directly(&direct, &params, &cancel, &caller, to)
                    .await
            }
            Way::Posted(posts) if !self.has_param_headers(&params.name) => {
                Box::pin(self.posted(&posts, &peer, params, &cancel, caller, to, stateless)).await
            }
            _ => {
                let params = Arc::unwrap_or_clone(params);
                Box::pin(self.sent_through_rmcp(&peer, params, &cancel, caller, to, stateless))
                    .await
            }
        };
        let Some(outcome) = outcome else {
            return Err(ToolError::Cancelled(format!(
                "call to MCP server '{}' cancelled",
                self.config.id
            )));
        };
        match self.called(outcome, stateless) {
            Ok(called) => called,
            // A failure is rare: its future (a look at the process, a lock) is on the heap,
            // not in every call's state.
            Err(e) => Box::pin(self.failed(e, child)).await,
        }
    }

    /// The call sent on the connection by toolhost itself: written with the calls made
    /// with it, its answer handed back by the transport that reads it. `None`: it was
    /// cancelled (and the server told).
    async fn sent_directly(
        &self,
        direct: &Arc<Direct>,
        params: &CallToolRequestParams,
        cancel: &Cancel,
        caller: &Caller,
        to: crate::mailbox::Sender<FromServer>,
    ) -> Option<Outcome> {
        let mut sent = match direct.send(params, caller.progress) {
            Ok(sent) => sent,
            Err(_) => return Some(Err(rmcp::ServiceError::TransportClosed)),
        };
        // Routed before it goes out: what the server sends for it (progress, a question)
        // finds it from the first line.
        let _route = self.calls.route(sent.token.clone(), &caller.session, to);
        direct.flush_soon();
        tokio::select! {
            // The answer first: one that came with the cancellation is the call's result
            // (and the branches are polled in order, not from a random draw per poll).
            biased;
            answered = &mut sent.answer => Some(match answered {
                Ok(answer) => answer.map_err(rmcp::ServiceError::McpError),
                // The server's output ended before it answered.
                Err(_) => Err(rmcp::ServiceError::TransportClosed),
            }),
            () = cancel.cancelled() => {
                direct.cancel(&sent.id, "cancelled by toolhost").await;
                None
            }
        }
    }

    /// Whether the tool's calls carry `Mcp-Param-*` headers, which rmcp's requests write.
    fn has_param_headers(&self, tool: &str) -> bool {
        let headed = self
            .param_headers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !headed.is_empty() && headed.contains(tool)
    }

    /// The call posted to a server over HTTP by toolhost itself ([`Posts`]); through
    /// rmcp's requests when its tool's name needs encoding, or when the server no longer
    /// knows the session (rmcp's connection opens a new one and sends it there). `None`: it
    /// was cancelled (and the server told).
    #[allow(
        clippy::too_many_arguments,
        reason = "the call's parts, as sent_through_rmcp takes them, and the way it goes"
    )]
    async fn posted(
        &self,
        posts: &Posts,
        peer: &Peer<RoleClient>,
        params: Arc<CallToolRequestParams>,
        cancel: &Cancel,
        caller: Caller,
        to: crate::mailbox::Sender<FromServer>,
        stateless: bool,
    ) -> Option<Outcome> {
        let capabilities = if stateless {
            caller.capabilities()
        } else {
            None
        };
        let Some((posting, body)) = posts.prepare(&params, caller.progress, capabilities.as_ref())
        else {
            let params = Arc::unwrap_or_clone(params);
            return self
                .sent_through_rmcp(peer, params, cancel, caller, to, stateless)
                .await;
        };
        let route = self
            .calls
            .route(posting.token.clone(), &caller.session, to.clone());
        let answered = tokio::select! {
            answered = posts.post(&posting, body, &self.calls) => answered,
            () = cancel.cancelled() => {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(posting.id.clone()),
                        Some("cancelled by toolhost".into()),
                    ))
                    .await;
                return None;
            }
        };
        Some(match answered {
            Ok(answer) => answer.map_err(rmcp::ServiceError::McpError),
            Err(NotPosted::SessionExpired) => {
                drop(route);
                tracing::debug!(server = %self.config.id, "the server no longer knows the session; the call goes through the connection, which opens a new one");
                let params = Arc::unwrap_or_clone(params);
                return self
                    .sent_through_rmcp(peer, params, cancel, caller, to, stateless)
                    .await;
            }
            Err(not) => Err(not.into_service_error()),
        })
    }

    /// The call sent through rmcp's requests (a server over HTTP, or one of the 2026-07-28
    /// era, which takes the calling client's capabilities with each request). `None`: it
    /// was cancelled (and the server told).
    async fn sent_through_rmcp(
        &self,
        peer: &Peer<RoleClient>,
        params: CallToolRequestParams,
        cancel: &Cancel,
        caller: Caller,
        to: crate::mailbox::Sender<FromServer>,
        stateless: bool,
    ) -> Option<Outcome> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut options = PeerRequestOptions::no_options();
        if stateless && let Some(caps) = caller.capabilities() {
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.set_client_capabilities(caps);
            options.meta = Some(meta);
        }
        if !caller.progress {
            options
                .meta
                .get_or_insert_with(rmcp::model::RequestMetaObject::new)
                .insert(super::client::NO_PROGRESS.into(), true.into());
        }
        let handle = match peer.send_cancellable_request(request, options).await {
            Ok(handle) => handle,
            Err(e) => return Some(Err(e)),
        };
        let request_id = handle.id.clone();
        // rmcp gives every request a progress token; a notification that came before this
        // line (none is expected so soon) is not shown.
        let _route = self
            .calls
            .route(handle.progress_token.clone(), &caller.session, to);
        tokio::select! {
            // The progress the server sent before its answer reached the call as it was
            // read (`ProgressFirst`), before the answer.
            r = handle.await_response() => Some(r.map(Answered::from)),
            () = cancel.cancelled() => {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(request_id),
                        Some("cancelled by toolhost".into()),
                    ))
                    .await;
                None
            }
        }
    }

    /// What the call got, as the tool takes it; `Err`: the call failed, which
    /// `failed` tells.
    #[allow(
        clippy::result_large_err,
        reason = "the failure is handed on to be told, not returned to the call"
    )]
    fn called(
        &self,
        outcome: Outcome,
        stateless: bool,
    ) -> Result<Result<Called, ToolError>, rmcp::ServiceError> {
        let id = &self.config.id;
        match outcome {
            Ok(Answered::Tool(result)) if !stateless && needs_task_2025(&result) => {
                Ok(Ok(Called::NeedsTask2025))
            }
            Ok(Answered::Tool(result)) => Ok(Ok(Called::Complete(result))),
            Ok(Answered::Other(other)) => Ok(match *other {
                ServerResult::InputRequiredResult(asked) => Ok(Called::InputRequired(asked)),
                ServerResult::CreateTaskResult(created) => Ok(Called::Task(created)),
                _ => Err(ToolError::failed(format!(
                    "MCP server '{id}' answered tools/call with something else"
                ))),
            }),
            Err(rmcp::ServiceError::McpError(e))
                if e.code == rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY =>
            {
                Ok(Ok(Called::NeedsCapability(e)))
            }
            // `tools/call` exists: a 2025-era server says so of a tool that must run as a
            // task (`execution.taskSupport: "required"`, which the listing does not show).
            Err(rmcp::ServiceError::McpError(e))
                if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND && !stateless =>
            {
                tracing::debug!(server = %id, "tools/call answered -32601: {}", e.message);
                Ok(Ok(Called::NeedsTask2025))
            }
            Err(e) => Err(e),
        }
    }

    /// A call that failed: when the failure is the server dying, it is marked down, to be
    /// restarted on the next call.
    async fn failed(&self, e: rmcp::ServiceError, child: Child) -> Result<Called, ToolError> {
        let id = &self.config.id;
        let status = exit_status(child.as_deref()).await;
        let reason = format!("exited with {status}");
        let died = !status.starts_with("still running");
        if died {
            let mut conn = self.conn.lock().await;
            // The process the call went to, not one another call started since.
            let same = match (&*conn, &child) {
                (Conn::Up(live), Some(ours)) => {
                    live.child.as_ref().is_some_and(|c| Arc::ptr_eq(c, ours))
                }
                (Conn::Up(_), None) => true,
                (Conn::Down { .. }, _) => false,
            };
            if same {
                // Its last lines are logged before the call's error is told: a
                // caller that stops on the error (`toolhost call`) keeps them.
                if let Conn::Up(live) = &*conn
                    && let Some(stderr) = &live.stderr
                {
                    stderr.drained().await;
                }
                *conn = Conn::Down {
                    since: Instant::now(),
                    backoff: Duration::ZERO,
                    reason: reason.clone(),
                };
            }
            Err(ToolError::failed(format!(
                "MCP server '{id}' {reason} during the call; it will be restarted on the next call"
            )))
        } else {
            Err(ToolError::failed(format!("MCP server '{id}': {e}")))
        }
    }
}
