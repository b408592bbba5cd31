//! A `tools/call` from an MCP client: its route (how its user is asked), its live output
//! and a mounted server's log messages, the dispatcher's run of it, and how it ends: a
//! result, an `input_required` round, or a task ([`crate::tasks`]) that goes on after the
//! request was answered.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use dispatcher_core::{ConfirmationRequest, ToolUse};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CreateTaskResult, ElicitRequest, ElicitRequestParams,
    InputRequest, InputRequests, InputRequiredResult, RequestId,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;
use tokio::sync::oneshot;

use super::{McpServer, takes_rounds};
use crate::answer::Finished;
use crate::caller::Caller;
use crate::confirm::{decision_of, decision_schema};
use crate::era::Era;
use crate::progress::watch_call;
use crate::request_state::Opened;
use crate::route::{CallRoute, Question, Route, asked_of};
use crate::sessions::Sessions;

/// How long a new task's handle waits for its record to reach the shared store.
const MIRRORED_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether a call may become a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskMode {
    /// When its client takes tasks (the tasks extension) and it runs long, asks its user,
    /// or a mounted server made a task of it.
    Auto,
    /// At once, kept `ttl` after it ends: a 2025-11-25 task-augmented request
    /// ([`crate::tasks_2025`]). Its user is asked as that era's client is (elicitation).
    Now {
        /// The retention the client asked for.
        ttl: Option<std::time::Duration>,
    },
}

impl McpServer {
    /// `tools/call`: becomes a task when its client takes tasks and it should.
    ///
    /// The call's own future, not one wrapped around it: every layer of future is a copy
    /// of the whole call's state (kilobytes) when it starts.
    pub(crate) fn serve_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + '_ {
        self.call(request, Caller::of(context, &self.declared), TaskMode::Auto)
    }

    /// A stateless (2026-07-28) `tools/call` from the HTTP transport's fast path, which
    /// hands over only requests that need nothing sent to their client before the answer
    /// (no progress token, no log level): see [`Caller::stateless`].
    pub(crate) fn call_stateless(
        &self,
        request: CallToolRequestParams,
        caller: Caller,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + '_ {
        self.call(request, caller, TaskMode::Auto)
    }

    /// A `tools/call` through the dispatcher, answered as its client's era and
    /// capabilities have it ([`TaskMode`]: whether it may, or must, become a task).
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn would keep its parameters (the request, the caller) twice in the call's state"
    )]
    pub(super) fn call(
        &self,
        request: CallToolRequestParams,
        caller: Caller,
        mode: TaskMode,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + '_ {
        async move {
            // What the answer needs, out of a block whose locals end with it: the call's
            // state while it waits for the answer holds these, not everything the call was
            // made from.
            let (call, run, deferred, ct, telling, takes_tasks) = {
                tracing::debug!(era = ?caller.era, principal = %caller.principal.id, "tools/call");
                let session = self.session(caller.era, &caller.principal)?;
                let mut request = match self.discovering(request, &caller, &session).await {
                    super::finding::Discovering::No(request)
                    | super::finding::Discovering::Call(request) => request,
                    super::finding::Discovering::Answered(answer) => return Ok(answer),
                };
                let takes_tasks = match mode {
                    TaskMode::Auto => {
                        self.shared.tasks.settings().enabled && caller.caps.supports_tasks()
                    }
                    TaskMode::Now { .. } => true,
                };
                let tool_use_id = match self.shared.sessions {
                    Sessions::One(_) if !takes_tasks => tool_use_id(None, &caller.id),
                    // Clients sharing a session may reuse JSON-RPC ids, and a task's call outlives
                    // its request's id.
                    _ => tool_use_id(
                        Some(self.shared.next_call.fetch_add(1, Ordering::Relaxed)),
                        &caller.id,
                    ),
                };
                let name = request.name.to_string();
                let arguments = Value::Object(request.arguments.take().unwrap_or_default());
                let (defer_tx, deferred) = oneshot::channel();
                let asked = asked_by(caller.era, &caller.caps, caller.declared.as_deref());
                let (route, resume) = self
                    .route(
                        &request,
                        &caller,
                        &name,
                        &arguments,
                        asked.as_deref(),
                        defer_tx,
                    )
                    .await?;
                let Caller {
                    era,
                    principal,
                    meta,
                    peer,
                    ct,
                    ..
                } = caller;
                // The arguments as called are sealed into a round's state, and only a 2026-07-28
                // request can be deferred into a round ([`Route::Defer`]): other calls hand theirs
                // to the dispatcher without a copy.
                let (arguments, kept) = match era {
                    Era::Stateless => (arguments.clone(), arguments),
                    Era::Session => (arguments, Value::Null),
                };
                let dispatcher = &self.shared.dispatcher;
                let mut call =
                    dispatcher.invocation(ToolUse::new(&*tool_use_id, &name, arguments), &session);
                // The client's trace context: the call's span is its child.
                if let Some(parent) = meta.get("traceparent").and_then(|v| v.as_str()) {
                    call.trace_parent(parent);
                }
                // Live output is forwarded as it comes when the client asked for progress.
                let watcher = watch(&meta, peer.as_ref(), &mut call);
                let logs = self.pass_logs(&meta, peer.clone(), &name).await;
                // The call's route, carried by the call until it ends; the client's connection goes
                // with it (2025 era). A mounted server's tool finds it in the call's origin, with
                // who calls and with which token.
                let client = peer.filter(|_| era == Era::Session);
                let route = CallRoute::new(route, client, asked, takes_tasks);
                if let Some(resume) = resume {
                    route.resume_with(resume);
                }
                self.equip(&mut call, era, &principal, &route);
                // What tells the request's client as the call runs: stopped when a task takes the
                // call over (its request has been answered).
                let telling: Vec<tokio::task::AbortHandle> = watcher
                    .iter()
                    .map(|(_, task)| task.abort_handle())
                    .chain(logs.iter().map(|(_, task)| task.abort_handle()))
                    .collect();
                // The call, to its result as the client gets it; its route stays set while it runs.
                // On the heap from the start: every later move (into the answering future, into a
                // task) is a pointer's, not the whole call's state.
                let ends = Ended(route.clone());
                let run = Box::pin(async move {
                    let _ends = ends;
                    let _logs = AbortOnDrop(logs.as_ref().map(|(_, task)| task.abort_handle()));
                    let block = call.run().await;
                    flush_telling(logs, watcher).await;
                    Finished::of(block)
                });
                let deferred = async {
                    match deferred.await {
                        Ok(question) => question,
                        Err(_) => std::future::pending().await,
                    }
                };
                let call = Running {
                    principal: principal.id,
                    name,
                    arguments: kept,
                    session,
                    tool_use_id,
                    route,
                };
                (call, run, deferred, ct, telling, takes_tasks)
            };
            if takes_tasks {
                self.answer_taking_tasks(&call, run, deferred, ct, mode, telling)
                    .await
            } else {
                self.answer_in_request(&call, run, deferred, ct).await
            }
        }
    }

    /// What the call carries to its tool: its route (how its user is asked), the facts
    /// of its request that rules read, and its origin (who calls, with which token, and
    /// the way its questions reach the client) for a mounted server's tool.
    fn equip(
        &self,
        call: &mut dispatcher_core::Invocation,
        era: Era,
        principal: &crate::sessions::Principal,
        route: &Arc<CallRoute>,
    ) {
        call.extend_shared(route.clone());
        if self.shared.dispatcher.has_rules() {
            call.extend(dispatcher_core::RequestFacts {
                era: match era {
                    Era::Session => "2025",
                    Era::Stateless => "2026",
                },
                transport: match self.shared.sessions {
                    Sessions::One(_) => "stdio",
                    Sessions::PerClient { .. } => "http",
                },
            });
        }
        call.extend(mcp_toolsets::Origin {
            caller: principal.token.as_ref().map(|token| {
                Arc::new(mcp_toolsets::CallerCredential {
                    principal: principal.id.clone(),
                    token: token.value.to_string(),
                    audiences: token.audiences.to_vec(),
                })
            }),
            exchange: self.shared.exchange.get().cloned(),
            relay: Some(route.clone()),
        });
    }

    /// How the call's user is asked ([`Route`]), and a mounted server's round the request
    /// resumes: from the request's sealed state and answers (2026-07-28), or what a
    /// session's client declared (2025 era); `asked`: what its client can be asked.
    async fn route(
        &self,
        request: &CallToolRequestParams,
        caller: &Caller,
        name: &str,
        arguments: &Value,
        asked: Option<&rmcp::model::ClientCapabilities>,
        defer_tx: oneshot::Sender<Question>,
    ) -> Result<(Route, Option<mcp_toolsets::Resume>), McpError> {
        let defer = |allowed| Route::Defer {
            to: defer_tx,
            caps: caller.caps.clone(),
            allowed,
        };
        Ok(match (caller.era, &request.request_state) {
            (Era::Stateless, Some(state)) => {
                let opened = self
                    .shared
                    .confirmations
                    .open(state, &caller.principal.id, name, arguments)
                    .await
                    .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
                match opened {
                    // A mounted server's round the client answered: its answers go to the
                    // server with the server's state, and a next round can end this one.
                    Opened::Relay { state } => {
                        let resume = mcp_toolsets::Resume {
                            responses: request.input_responses.clone().unwrap_or_default(),
                            state,
                        };
                        (defer(true), Some(resume))
                    }
                    Opened::Confirmation => {
                        let answer = request
                            .input_responses
                            .as_ref()
                            .and_then(|r| r.get("confirm"))
                            .ok_or_else(|| {
                                McpError::invalid_params(
                                    "inputResponses has no answer for 'confirm'; retry with the user's answer to the \
                                     confirmation form, or call again without requestState",
                                    None,
                                )
                            })?;
                        (Route::Answered(decision_of(answer)), None)
                    }
                }
            }
            (Era::Stateless, None) if asked.is_some_and(takes_rounds) => {
                // Answers given up front (no round asked for them) are the client's to give:
                // a mounted server gets them, as it would directly; toolhost's own question
                // is never answered by them.
                let resume =
                    request
                        .input_responses
                        .clone()
                        .map(|responses| mcp_toolsets::Resume {
                            responses,
                            state: None,
                        });
                (defer(false), resume)
            }
            (Era::Session, _)
                if caller.peer.is_some()
                    && caller.declared.as_ref().is_some_and(|d| d.elicits_form) =>
            {
                (Route::Elicit, None)
            }
            _ => (Route::Fallback, None),
        })
    }

    /// A mounted server's log messages during the call of tool `name`, passed to `peer`
    /// when the request asks for them (2026-07-28's `_meta` logLevel): the listener and
    /// what ends it.
    async fn pass_logs(
        &self,
        meta: &rmcp::model::RequestMetaObject,
        peer: Option<rmcp::service::Peer<RoleServer>>,
        name: &str,
    ) -> Option<Telling> {
        let least = meta.log_level()?;
        let peer = peer?;
        let server = self.shared.upstreams.server_of_tool(name)?;
        // Listening before the server is asked: nothing it sends after is missed.
        let (done, finished) = oneshot::channel();
        let told = tokio::spawn(crate::passthrough::tell_call(
            self.shared.upstreams.events(),
            server.clone(),
            least,
            peer,
            finished,
        ));
        // On the heap: its future is over 6 KB, which every call's future would carry (and
        // copy whole when its task is spawned) for the few that get here.
        Box::pin(self.shared.upstreams.lower_log_level(&server, least)).await;
        Some((done, told))
    }

    /// The answer of a call whose client takes no tasks: its result, a round's question,
    /// or, when the client gives up, the result of the call cancelled.
    async fn answer_in_request(
        &self,
        call: &Running,
        mut run: Pin<Box<impl Future<Output = Finished>>>,
        deferred: impl Future<Output = Question>,
        ct: tokio_util::sync::CancellationToken,
    ) -> Result<CallToolResponse, McpError> {
        tokio::pin!(deferred);
        tokio::select! {
            // A question first: a relayed round ends the call right after it hands the
            // round over, and its result is not the answer.
            biased;
            // This round ends here: the question goes to the client with a sealed state,
            // and the call (waiting for its answer) is dropped.
            question = &mut deferred => call.round(self, question).await,
            // The call runs in this future: a mounted server's round can be handed over
            // and the call end in one poll. The round still comes first.
            finished = &mut run => match futures_util::FutureExt::now_or_never(&mut deferred) {
                Some(question) => call.round(self, question).await,
                None => finished.answer(),
            },
            _ = ct.cancelled() => {
                tracing::info!(tool = %call.name, "client cancelled the call");
                // Signal only: this task drives the call and must keep polling it.
                self.shared.dispatcher.request_cancel(call.session.id(), &call.tool_use_id);
                run.await.answer()
            }
        }
    }

    /// The answer of a call whose client takes tasks. A call that ends in its first poll
    /// (a native tool that does not wait, mostly) is answered here: no task of its own, no
    /// timer for `after` (setting one costs the runtime a system call to wake its driver
    /// when no other timer is set), and none of the task's way put on the heap. A call the
    /// client asked to make a task of is one whatever it takes.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one call, each used once"
    )]
    async fn answer_taking_tasks(
        &self,
        call: &Running,
        mut run: Pin<Box<impl Future<Output = Finished> + Send + 'static>>,
        deferred: impl Future<Output = Question>,
        ct: tokio_util::sync::CancellationToken,
        mode: TaskMode,
        telling: Vec<tokio::task::AbortHandle>,
    ) -> Result<CallToolResponse, McpError> {
        if mode == TaskMode::Auto
            && let Some(finished) = futures_util::FutureExt::now_or_never(&mut run)
        {
            call.route.decide(false);
            let mut deferred = std::pin::pin!(deferred);
            // A mounted server's round handed over as the call ended still comes first.
            return match futures_util::FutureExt::now_or_never(&mut deferred) {
                Some(question) => call.round(self, question).await,
                None => finished.answer(),
            };
        }
        // Boxed: the rarer way is the larger, and a call's state is as large as its
        // largest await.
        Box::pin(self.answer_as_task(call, run, deferred, ct, mode, telling)).await
    }

    /// The answer of a call whose client takes tasks and that did not end in its first
    /// poll: the call runs on its own, and becomes a task when it runs past
    /// `[mcp.tasks] after`, when a mounted server made a task of it, or when it has to ask
    /// its user (the question waits in the task).
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one call, each used once"
    )]
    async fn answer_as_task(
        &self,
        call: &Running,
        run: Pin<Box<impl Future<Output = Finished> + Send + 'static>>,
        deferred: impl Future<Output = Question>,
        ct: tokio_util::sync::CancellationToken,
        mode: TaskMode,
        telling: Vec<tokio::task::AbortHandle>,
    ) -> Result<CallToolResponse, McpError> {
        let dispatcher = &self.shared.dispatcher;
        tokio::pin!(deferred);
        let promotion = call.route.promotion();
        let mut running = tokio::spawn(run);
        let after = tokio::time::sleep(self.shared.tasks.settings().after);
        tokio::pin!(after);
        let ttl = match mode {
            TaskMode::Now { ttl } => ttl,
            TaskMode::Auto => None,
        };
        let asking = if mode != TaskMode::Auto {
            None
        } else {
            tokio::select! {
            biased;
            question = &mut deferred => match question {
                Question::Confirm(request, reply) => Some((request, reply)),
                // A mounted server's round: its call upstream has ended, and so does this
                // round.
                relayed @ Question::Relay(_) => {
                    running.abort();
                    call.route.decide(false);
                    return call.round(self, relayed).await;
                }
            },
            finished = &mut running => {
                call.route.decide(false);
                return Finished::joined(finished).answer();
            }
            () = promotion.asked.notified() => None,
            () = &mut after => None,
            _ = ct.cancelled() => {
                tracing::info!(tool = %call.name, "client cancelled the call");
                dispatcher.request_cancel(call.session.id(), &call.tool_use_id);
                call.route.decide(false);
                return Finished::joined(running.await).answer();
            }
            }
        };
        let cancel: crate::tasks::Canceller = {
            let (dispatcher, session, id) = (
                dispatcher.clone(),
                call.session.id().to_string(),
                call.tool_use_id.to_string(),
            );
            Box::new(move || {
                dispatcher.request_cancel(&session, &id);
            })
        };
        let task = self
            .shared
            .tasks
            .create(&call.principal, call.session.id(), cancel, ttl)
            .filter(|(_, handle)| {
                // A 2025-11-25 task's user is asked as that era's clients are.
                if mode != TaskMode::Auto {
                    return true;
                }
                let became = call.route.to_task(handle.clone(), asking.is_some());
                if !became {
                    self.shared.tasks.forget(handle.id());
                }
                became
            });
        call.route.decide(task.is_some());
        let Some((task, handle)) = task else {
            // No task (this client's tasks are all running, or a question ended the round
            // first): the call answers in its request, as without tasks.
            if let Some((request, reply)) = asking {
                running.abort();
                return call.round(self, Question::Confirm(request, reply)).await;
            }
            return tokio::select! {
                biased;
                question = &mut deferred => {
                    running.abort();
                    call.round(self, question).await
                }
                finished = &mut running => Finished::joined(finished).answer(),
            };
        };
        for task in telling {
            task.abort();
        }
        tracing::debug!(tool = %call.name, task = %handle.id(), "the call became a task");
        if let Some((request, reply)) = asking {
            let asked_in = handle.clone();
            tokio::spawn(async move {
                let _ = reply.send(crate::confirm::asked_in_task(asked_in, request).await);
            });
        }
        tokio::spawn(async move {
            handle.finish(Finished::joined(running.await).outcome());
        });
        // Over a shared store the handle goes out once the task's record is there: the
        // client's next request may reach another instance.
        self.shared
            .tasks
            .mirrored(&task.task_id, MIRRORED_WITHIN)
            .await;
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }
}

/// What tells a call's client as it runs (live output, a mounted server's logs): what
/// ends it, and its task.
type Telling = (oneshot::Sender<()>, tokio::task::JoinHandle<()>);

/// One call as its answers name it: what the call's state keeps while it waits for its
/// answer.
struct Running {
    principal: String,
    name: String,
    /// The arguments as called (a 2026-07-28 request's, sealed into a round's state;
    /// `Null` for a session's).
    arguments: Value,
    session: dispatcher_core::Session,
    tool_use_id: Arc<str>,
    /// Its way to its user.
    route: Arc<CallRoute>,
}

impl Running {
    /// The round that ends this request with `question`. On the heap: a call that ends
    /// without a round (most) does not carry a round's state in its own.
    fn round<'s>(
        &'s self,
        server: &'s McpServer,
        question: Question,
    ) -> Pin<Box<impl Future<Output = Result<CallToolResponse, McpError>> + 's>> {
        Box::pin(server.round(question, &self.principal, &self.name, &self.arguments))
    }
}

/// What the client can be asked: a 2026 client declares it with the request; a 2025
/// client declared it at `initialize`.
fn asked_by(
    era: Era,
    caps: &rmcp::model::ClientCapabilities,
    declared: Option<&crate::caller::Declared>,
) -> Option<Arc<rmcp::model::ClientCapabilities>> {
    match era {
        Era::Stateless => Some(Arc::new(asked_of(caps))),
        Era::Session => declared.map(|d| d.asked.clone()),
    }
}

/// The call's live output, forwarded to its client as it comes when the request asked
/// for progress (and the client can be reached).
fn watch(
    meta: &rmcp::model::RequestMetaObject,
    peer: Option<&rmcp::service::Peer<RoleServer>>,
    call: &mut dispatcher_core::Invocation,
) -> Option<Telling> {
    let token = meta.get_progress_token()?;
    let peer = peer?.clone();
    let (done, finished) = oneshot::channel();
    let task = tokio::spawn(watch_call(call.events(), (token, peer), finished));
    Some((done, task))
}

/// Ends what tells the client once the call has its result: the log messages that came
/// before the answer go first, then the last chunks of live output, so that they arrive
/// before the result.
async fn flush_telling(logs: Option<Telling>, watcher: Option<Telling>) {
    if let Some((done, task)) = logs {
        let _ = done.send(());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
    }
    if let Some((done, task)) = watcher
        && {
            let _ = done.send(());
            tokio::time::timeout(std::time::Duration::from_secs(2), task)
                .await
                .is_err()
        }
    {
        tracing::debug!("live output to the MCP client did not flush in time");
    }
}

/// Ends a call's route when the call ends ([`CallRoute::ended`]), whoever still holds
/// the route (an event kept in a buffer, a question still on its way).
struct Ended(Arc<CallRoute>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.ended();
    }
}

/// Stops a task when dropped.
struct AbortOnDrop(Option<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl McpServer {
    /// The `input_required` result that ends a round with `question`: toolhost's own
    /// confirmation, or a mounted server's round whole, its state inside toolhost's. An
    /// error when the state cannot be sealed (the shared store is unreachable).
    async fn round(
        &self,
        question: Question,
        principal: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<CallToolResponse, McpError> {
        Ok(match question {
            Question::Confirm(question, _) => self
                .input_required(&question, principal, tool, arguments)
                .await?
                .into(),
            Question::Relay(asked) => {
                let state = self
                    .shared
                    .confirmations
                    .seal_relay(principal, tool, arguments, asked.request_state)
                    .await
                    .map_err(unsealed)?;
                InputRequiredResult::new(asked.input_requests, Some(state)).into()
            }
        })
    }

    /// The `input_required` result asking `question`, with a state sealed for the retry.
    async fn input_required(
        &self,
        question: &ConfirmationRequest,
        principal: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<InputRequiredResult, McpError> {
        let mut requests = InputRequests::new();
        if let Some(schema) = decision_schema() {
            requests.insert(
                "confirm".to_string(),
                InputRequest::Elicitation(ElicitRequest::new(
                    ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message: crate::confirm::question(question),
                        requested_schema: schema,
                    },
                )),
            );
        }
        let state = self
            .shared
            .confirmations
            .seal(principal, tool, arguments)
            .await
            .map_err(unsealed)?;
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }
}

/// The error of a round whose state could not be sealed: nothing ran, nothing was asked.
pub(super) fn unsealed(e: dispatcher_core::store::StoreError) -> McpError {
    McpError::internal_error(
        format!(
            "cannot ask for confirmation: {e}. Nothing ran; call the tool again once the store is back"
        ),
        None,
    )
}

/// A call's `tool_use_id`: `mcp-ID` of its request's id, or `mcp-N-ID` with the server's
/// call number `n` where ids can repeat. Written straight into the text: through the
/// formatter it took about 450 instructions a call (counted with callgrind).
fn tool_use_id(n: Option<u64>, id: &RequestId) -> Arc<str> {
    let mut text = String::with_capacity(40);
    text.push_str("mcp-");
    let mut digits = itoa::Buffer::new();
    if let Some(n) = n {
        text.push_str(digits.format(n));
        text.push('-');
    }
    match id {
        RequestId::Number(number) => text.push_str(digits.format(*number)),
        RequestId::String(id) => text.push_str(id),
    }
    Arc::from(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_tool_use_id_names_its_request_and_its_number_where_ids_can_repeat() {
        let cases = [
            (None, RequestId::Number(7), "mcp-7"),
            (None, RequestId::Number(-3), "mcp--3"),
            (None, RequestId::String("a-b".into()), "mcp-a-b"),
            (Some(12), RequestId::Number(7), "mcp-12-7"),
            (Some(0), RequestId::String("x".into()), "mcp-0-x"),
        ];
        for (n, id, expected) in cases {
            assert_eq!(&*tool_use_id(n, &id), expected, "{n:?} {id:?}");
            let formatted = match n {
                None => format!("mcp-{id}"),
                Some(n) => format!("mcp-{n}-{id}"),
            };
            assert_eq!(
                &*tool_use_id(n, &id),
                formatted,
                "as the formatter wrote it"
            );
        }
    }
}
