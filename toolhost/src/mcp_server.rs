//! `toolhost serve --mcp`: the dispatcher as an MCP server over stdio.
//!
//! - `tools/list` lists the session's visible tools with their input schemas and annotations
//!   derived from side effects: `none`/`read` are read-only, `write`/`execute` destructive,
//!   `network` open-world.
//! - `tools/call` goes through [`Dispatcher::dispatch`]: unknown tools, invalid arguments,
//!   denials and tool failures come back as results with `isError: true` and the
//!   dispatcher's message; only protocol faults are JSON-RPC errors.
//! - A `prompt` policy decision asks the user through MCP elicitation when the client
//!   supports it (allow / deny / always for this session); otherwise `mcp.prompt_fallback`
//!   answers (default `deny`, with a message naming the keys that allow the tool).
//! - `notifications/cancelled` cancels the call (the shell's process group is stopped).
//! - A call whose request carries `_meta.progressToken` gets the tool's live output
//!   (`tool.output_delta`, e.g. a command's stdout as it prints) as
//!   `notifications/progress`: `progress` counts the characters streamed so far and
//!   `message` holds the chunk.
//! - Nothing but protocol frames is written to stdout; logs go to stderr.
//!
//! Server-to-client requests (elicitation) are forbidden from protocol 2026-07-28 on, so
//! this server negotiates at most 2025-11-25; clients speaking only newer versions get the
//! fallback answers.

use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use dispatcher_core::EventKind;
use dispatcher_core::{
    ConfirmationRequest, Confirmer, Decision, Dispatcher, Session, ToolResultBlock, ToolUse,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, Implementation, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tool_api::{Content, SideEffect};

/// What answers a `prompt` when the client cannot be asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptFallback {
    /// Deny the call (default).
    #[default]
    Deny,
    /// Allow the call.
    Allow,
}

/// The MCP client's peer, known once it has talked to us.
pub type PeerSlot = Arc<OnceLock<Peer<RoleServer>>>;

/// Answers confirmation requests through the MCP client (elicitation) or the fallback.
pub struct ElicitingConfirmer {
    peer: PeerSlot,
    fallback: PromptFallback,
    /// tool_use ids whose prompt was answered by the fallback (to explain the denial).
    pub fallback_used: Arc<Mutex<HashSet<String>>>,
}

impl ElicitingConfirmer {
    /// A confirmer over the peer slot.
    pub fn new(peer: PeerSlot, fallback: PromptFallback) -> Self {
        ElicitingConfirmer {
            peer,
            fallback,
            fallback_used: Arc::new(Mutex::new(HashSet::new())),
        }
    }
}

fn decision_schema() -> Option<rmcp::model::ElicitationSchema> {
    serde_json::from_value(serde_json::json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "description": "allow: run this call; deny: do not; always: allow this tool for the rest of the session",
                "enum": ["allow", "deny", "always"]
            }
        },
        "required": ["decision"]
    }))
    .ok()
}

impl Confirmer for ElicitingConfirmer {
    fn name(&self) -> &str {
        "mcp-client"
    }

    fn confirm(
        &self,
        request: ConfirmationRequest,
    ) -> Pin<Box<dyn Future<Output = Decision> + Send>> {
        let peer = self
            .peer
            .get()
            .filter(|p| {
                p.supported_elicitation_modes()
                    .contains(&rmcp::service::ElicitationMode::Form)
            })
            .cloned();
        let fallback = self.fallback;
        let used = self.fallback_used.clone();
        Box::pin(async move {
            let (Some(peer), Some(schema)) = (peer, decision_schema()) else {
                used.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(request.tool_use_id.to_string());
                return match fallback {
                    PromptFallback::Allow => Decision::Allow,
                    PromptFallback::Deny => Decision::Deny,
                };
            };
            let mut message = format!(
                "toolhost: '{}' ({}) asks to run.\nInput: {}",
                request.tool_name, request.side_effects, request.input_summary
            );
            for m in &request.projected_modifications {
                message.push_str(&format!("\n{m}"));
            }
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            };
            match peer.create_elicitation(params).await {
                Ok(result) if result.action == ElicitationAction::Accept => {
                    match result
                        .content
                        .as_ref()
                        .and_then(|c| c.get("decision"))
                        .and_then(Value::as_str)
                    {
                        Some("allow") => Decision::Allow,
                        Some("always") => Decision::AlwaysAllow,
                        _ => Decision::Deny,
                    }
                }
                Ok(_) => Decision::Deny,
                Err(e) => {
                    tracing::warn!("elicitation failed, denying: {e}");
                    Decision::Deny
                }
            }
        })
    }
}

/// MCP annotations for a side-effect class.
pub fn annotations(class: SideEffect) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(class <= SideEffect::Read)
        .destructive(matches!(class, SideEffect::Write | SideEffect::Execute))
        .open_world(class == SideEffect::Network)
}

/// The MCP server: one session over one connection.
pub struct McpServer {
    dispatcher: Dispatcher,
    session: Session,
    peer: PeerSlot,
    fallback_used: Arc<Mutex<HashSet<String>>>,
    fallback: PromptFallback,
    config_file: String,
}

impl McpServer {
    /// A server over a dispatcher (built with an [`ElicitingConfirmer`] on `peer`) and session.
    pub fn new(
        dispatcher: Dispatcher,
        session: Session,
        peer: PeerSlot,
        confirmer_state: Arc<Mutex<HashSet<String>>>,
        fallback: PromptFallback,
        config_file: String,
    ) -> Self {
        McpServer {
            dispatcher,
            session,
            peer,
            fallback_used: confirmer_state,
            fallback,
            config_file,
        }
    }

    fn to_mcp(&self, block: ToolResultBlock, tool: &str, tool_use_id: &str) -> CallToolResult {
        let mut content: Vec<ContentBlock> = block
            .content
            .iter()
            .map(|c| match c {
                Content::Text { text } => ContentBlock::text(text.clone()),
                Content::Image { mime, data } => {
                    use base64::Engine as _;
                    ContentBlock::image(
                        base64::engine::general_purpose::STANDARD.encode(data),
                        mime.clone(),
                    )
                }
            })
            .collect();
        let fell_back = self
            .fallback_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(tool_use_id);
        if fell_back && block.is_error && self.fallback == PromptFallback::Deny {
            content.push(ContentBlock::text(format!(
                "This MCP client cannot ask the user for confirmation (it does not support elicitation), so \
                 `mcp.prompt_fallback = \"deny\"` answered. To allow '{tool}', set `{tool} = \"auto\"` under \
                 [tool_confirmation.per_tool] in {}, or set `prompt_fallback = \"allow\"` under [mcp].",
                self.config_file
            )));
        }
        if block.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
    }

    /// Sends the call's live output to the client as progress notifications; once `done`
    /// fires, sends what is already queued and stops.
    fn forward_output(
        &self,
        token: ProgressToken,
        tool_use_id: &str,
        peer: Peer<RoleServer>,
        mut done: tokio::sync::oneshot::Receiver<()>,
    ) -> tokio::task::JoinHandle<()> {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        let mut events = self.session.subscribe();
        let id: Arc<str> = Arc::from(tool_use_id);
        tokio::spawn(async move {
            let mut streamed = 0usize;
            let mut finishing = false;
            loop {
                let event = if finishing {
                    match events.try_recv() {
                        Ok(e) => e,
                        Err(TryRecvError::Lagged(_)) => continue,
                        Err(_) => return,
                    }
                } else {
                    tokio::select! {
                        e = events.recv() => match e {
                            Ok(e) => e,
                            Err(RecvError::Lagged(n)) => {
                                tracing::debug!("live output to the MCP client skipped {n} events");
                                continue;
                            }
                            Err(_) => return,
                        },
                        _ = &mut done => {
                            finishing = true;
                            continue;
                        }
                    }
                };
                if event.tool_use_id != id {
                    continue;
                }
                if let EventKind::OutputDelta { chunk } = &event.kind {
                    streamed += chunk.chars().count();
                    let note = ProgressNotificationParam::new(token.clone(), streamed as f64)
                        .with_message(chunk.clone());
                    if peer.notify_progress(note).await.is_err() {
                        return;
                    }
                }
            }
        })
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "toolhost runs tools with input validation, workspace scoping and a confirmation policy. \
                 Errors come back as tool results with isError set; read them and adjust.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        const VERSIONS: &[ProtocolVersion] = &[
            ProtocolVersion::V_2024_11_05,
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_11_25,
        ];
        Cow::Borrowed(VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let _ = self.peer.set(context.peer.clone());
        let tools = self
            .dispatcher
            .definitions_for_session(&self.session)
            .into_iter()
            .map(|d| {
                let schema = match d.input_schema {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                Tool::new(d.name, d.description, Arc::new(schema))
                    .annotate(annotations(d.side_effects))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let _ = self.peer.set(context.peer.clone());
        let tool_use_id = format!("mcp-{}", context.id);
        let name = request.name.to_string();
        let input = Value::Object(request.arguments.unwrap_or_default());
        let call = ToolUse::new(&tool_use_id, &name, input);
        let progress = context.meta.get_progress_token().map(|token| {
            let (done, finished) = tokio::sync::oneshot::channel();
            let task = self.forward_output(token, &tool_use_id, context.peer.clone(), finished);
            (done, task)
        });
        let dispatch = self.dispatcher.dispatch(call, &self.session);
        tokio::pin!(dispatch);
        let block = tokio::select! {
            block = &mut dispatch => block,
            _ = context.ct.cancelled() => {
                tracing::info!(tool = %name, "client cancelled the call");
                // Signal only: this task drives the call and must keep polling it.
                self.dispatcher.request_cancel(self.session.id(), &tool_use_id);
                dispatch.await
            }
        };
        if let Some((done, task)) = progress {
            // Flush the last chunks before the result, so that they arrive first.
            let _ = done.send(());
            if tokio::time::timeout(std::time::Duration::from_secs(2), task)
                .await
                .is_err()
            {
                tracing::debug!("live output to the MCP client did not flush in time");
            }
        }
        Ok(self.to_mcp(block, &name, &tool_use_id).into())
    }
}

/// Stdin that reports end-of-file: when the client closes its end, running tools are
/// cancelled at once instead of after the protocol layer's drain period.
pub struct EofNotify<R> {
    inner: R,
    on_eof: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<R> EofNotify<R> {
    /// Wraps `inner`; `on_eof` fires once, at the first end-of-file or read error.
    pub fn new(inner: R, on_eof: tokio::sync::oneshot::Sender<()>) -> Self {
        EofNotify {
            inner,
            on_eof: Some(on_eof),
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EofNotify<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &poll {
            std::task::Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            std::task::Poll::Ready(Err(_)) => true,
            std::task::Poll::Pending => false,
        };
        if ended && let Some(tx) = self.on_eof.take() {
            let _ = tx.send(());
        }
        poll
    }
}
