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
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use dispatcher_core::confirmation::ConfirmFuture;
use dispatcher_core::{
    Answer, CallEvents, ConfirmationRequest, Confirmer, DecidedBy, Decision, Dispatcher, EventKind,
    Session, ToolResultBlock, ToolUse,
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

/// Answers confirmation requests through the MCP client (elicitation) or, when the client
/// cannot elicit, with the configured fallback (an [`Answer::fallback`]).
pub struct ElicitingConfirmer {
    peer: PeerSlot,
    fallback: PromptFallback,
}

impl ElicitingConfirmer {
    /// A confirmer over the peer slot.
    pub fn new(peer: PeerSlot, fallback: PromptFallback) -> Self {
        ElicitingConfirmer { peer, fallback }
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

    fn confirm(&self, request: ConfirmationRequest) -> ConfirmFuture {
        let peer = self
            .peer
            .get()
            .filter(|p| {
                p.supported_elicitation_modes()
                    .contains(&rmcp::service::ElicitationMode::Form)
            })
            .cloned();
        let fallback = self.fallback;
        Box::pin(async move {
            let (Some(peer), Some(schema)) = (peer, decision_schema()) else {
                return Answer::fallback(match fallback {
                    PromptFallback::Allow => Decision::Allow,
                    PromptFallback::Deny => Decision::Deny,
                });
            };
            let mut message = format!(
                "toolhost: '{}' ({}) asks to run.\nInput: {}",
                request.tool_name(),
                request.side_effects(),
                request.input_summary
            );
            for m in &request.projected_modifications {
                message.push_str(&format!("\n{m}"));
            }
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            };
            let decision = match peer.create_elicitation(params).await {
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
            };
            decision.into()
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
    fallback: PromptFallback,
    config_file: String,
}

impl McpServer {
    /// A server over a dispatcher (built with an [`ElicitingConfirmer`] on `peer`) and session.
    pub fn new(
        dispatcher: Dispatcher,
        session: Session,
        peer: PeerSlot,
        fallback: PromptFallback,
        config_file: String,
    ) -> Self {
        McpServer {
            dispatcher,
            session,
            peer,
            fallback,
            config_file,
        }
    }

    fn to_mcp(&self, block: ToolResultBlock, tool: &str, fell_back: bool) -> CallToolResult {
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
        if fell_back && block.is_error() && self.fallback == PromptFallback::Deny {
            content.push(ContentBlock::text(format!(
                "This MCP client cannot ask the user for confirmation (it does not support elicitation), so \
                 `mcp.prompt_fallback = \"deny\"` answered. To allow '{tool}', set `{tool} = \"auto\"` under \
                 [tool_confirmation.per_tool] in {}, or set `prompt_fallback = \"allow\"` under [mcp].",
                self.config_file
            )));
        }
        let mut result = if block.is_error() {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
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
}

/// What the call's own event stream told the server.
#[derive(Default)]
struct Watched {
    /// The confirmation was answered by `[mcp] prompt_fallback`, not by a user.
    fell_back: bool,
}

impl Watched {
    fn see(&mut self, kind: &EventKind) {
        if let EventKind::ConfirmationResolved {
            decided_by: DecidedBy::Fallback { .. },
            ..
        } = kind
        {
            self.fell_back = true;
        }
    }
}

/// Forwards a call's live output to the client as progress notifications, and notes what
/// the server must know of the call; once `done` fires, forwards what is already queued
/// and returns.
async fn watch_call(
    mut events: CallEvents,
    (token, peer): (ProgressToken, Peer<RoleServer>),
    mut done: tokio::sync::oneshot::Receiver<()>,
) -> Watched {
    let mut watched = Watched::default();
    let mut streamed = 0usize;
    let mut finishing = false;
    loop {
        let event = if finishing {
            match events.try_recv() {
                Some(e) => e,
                None => return watched,
            }
        } else {
            tokio::select! {
                e = events.recv() => match e {
                    Some(e) => e,
                    None => return watched,
                },
                _ = &mut done => {
                    finishing = true;
                    continue;
                }
            }
        };
        watched.see(&event.kind);
        if let EventKind::OutputDelta { chunk } = &event.kind {
            streamed += chunk.chars().count();
            let note = ProgressNotificationParam::new(token.clone(), streamed as f64)
                .with_message(chunk.clone());
            if peer.notify_progress(note).await.is_err() {
                tracing::debug!("the MCP client stopped taking progress notifications");
            }
        }
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
        let mut call = self
            .dispatcher
            .invocation(ToolUse::new(&tool_use_id, &name, input), &self.session);
        let mut events = Some(call.events());
        // Live output is forwarded as it comes only when the client asked for progress;
        // otherwise the call's events are read once it has ended.
        let watcher =
            context
                .meta
                .get_progress_token()
                .zip(events.take())
                .map(|(token, events)| {
                    let (done, finished) = tokio::sync::oneshot::channel();
                    let peer = context.peer.clone();
                    (
                        done,
                        tokio::spawn(watch_call(events, (token, peer), finished)),
                    )
                });
        let dispatch = call.run();
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
        let mut watched = Watched::default();
        if let Some((done, task)) = watcher {
            // Flush the last chunks before the result, so that they arrive first.
            let _ = done.send(());
            match tokio::time::timeout(std::time::Duration::from_secs(2), task).await {
                Ok(Ok(w)) => watched = w,
                _ => tracing::debug!("live output to the MCP client did not flush in time"),
            }
        }
        for event in events
            .iter_mut()
            .flat_map(|e| std::iter::from_fn(|| e.try_recv()))
        {
            watched.see(&event.kind);
        }
        Ok(self.to_mcp(block, &name, watched.fell_back).into())
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
