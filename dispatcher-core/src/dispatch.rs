//! The per-call pipeline: look up, validate, scope, policy, execute, report.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use tool_api::{Content, SideEffect, Tool, ToolError, ToolOutput};
use tracing::{Instrument, Span};

use crate::Dispatcher;
use crate::confirmation::{ConfirmationRequest, Decision};
use crate::error::ErrorClass;
use crate::events::{EventKind, ToolEvent, decision_name, now_ms};
use crate::host::CallHost;
use crate::policy::{HookCall, HookDecision, Mode};
use crate::registry::Registered;
use crate::result::{ToolResultBlock, ToolUse};
use crate::session::{CallGuard, InFlight, Session, SessionState};

/// Identity of one call, shared by its events.
pub(crate) struct CallInfo {
    session_id: Arc<str>,
    turn_id: Arc<str>,
    tool_use_id: Arc<str>,
    tool_name: Arc<str>,
    side_effects: Option<SideEffect>,
    started: Instant,
}

impl CallInfo {
    fn elapsed_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }
}

/// How a confirmation request ended.
enum Answer {
    /// A client answered (decision, client name).
    Given(Decision, String),
    /// Nobody answered in time.
    TimedOut,
    /// The call was cancelled while waiting.
    Cancelled,
}

impl From<Option<(Decision, String)>> for Answer {
    fn from(answer: Option<(Decision, String)>) -> Self {
        match answer {
            Some((decision, by)) => Answer::Given(decision, by),
            // The broker dropped the request without an answer: treat it as unanswered.
            None => Answer::TimedOut,
        }
    }
}

/// How an execution ended, before classification.
enum Outcome {
    Returned(Result<ToolOutput, ToolError>),
    Panicked(String),
    TimedOut(Duration),
    Cancelled(Option<ToolOutput>),
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn format_duration(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A short, single-line rendering of an input for confirmation prompts.
fn summarize(input: &Value) -> String {
    const MAX: usize = 200;
    let text = input.to_string();
    if text.chars().count() <= MAX {
        text
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    }
}

/// The string values of the declared path parameters of an input.
fn path_args<'a>(def_params: &'a [String], input: &'a Value) -> impl Iterator<Item = &'a str> + 'a {
    def_params.iter().flat_map(move |param| {
        let values: Vec<&str> = match input.get(param) {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        values
    })
}

/// The call's cancellation registration, made on first need.
fn tracked<'a>(
    guard: &'a mut Option<CallGuard>,
    state: &Arc<SessionState>,
    tool_use_id: &Arc<str>,
) -> &'a CallGuard {
    guard.get_or_insert_with(|| state.track(tool_use_id))
}

impl Dispatcher {
    fn emit(&self, session: &SessionState, info: &CallInfo, kind: EventKind) {
        let global = &self.inner.events;
        if !session.events.has_subscribers() && !global.has_subscribers() {
            return;
        }
        let event = Arc::new(ToolEvent {
            kind,
            session_id: info.session_id.clone(),
            turn_id: info.turn_id.clone(),
            tool_use_id: info.tool_use_id.clone(),
            tool_name: info.tool_name.clone(),
            side_effects: info.side_effects,
            timestamp_ms: now_ms(),
        });
        session.events.send(event.clone());
        global.send(event);
    }

    fn fail(
        &self,
        session: &SessionState,
        info: &CallInfo,
        class: ErrorClass,
        message: String,
        partial_output: Option<String>,
    ) -> ToolResultBlock {
        tracing::debug!(error_class = %class, "{message}");
        self.emit(
            session,
            info,
            EventKind::Failed {
                error_class: class,
                message: message.clone(),
                duration_ms: info.elapsed_ms(),
                partial_output,
            },
        );
        ToolResultBlock::error(&info.tool_use_id, class, message)
    }

    /// Runs one call through the whole pipeline. Never fails: every outcome, including
    /// an unknown tool, invalid input, a denial, a timeout or a panic, is a result block.
    pub async fn dispatch(&self, call: ToolUse, session: &Session) -> ToolResultBlock {
        let span = tracing::info_span!(
            "tool_call",
            tool = %call.name,
            tool_use_id = %call.id,
            session = %session.state.id,
        );
        self.dispatch_in(call, session).instrument(span).await
    }

    async fn dispatch_in(&self, call: ToolUse, session: &Session) -> ToolResultBlock {
        let state = &session.state;
        let ToolUse { id, name, input } = call;
        let mut info = CallInfo {
            session_id: state.id.clone(),
            turn_id: session.turn_id.clone(),
            tool_use_id: Arc::from(id.as_str()),
            tool_name: Arc::from(""),
            side_effects: None,
            started: Instant::now(),
        };
        // Registered for cancellation at the first point where the call can wait; an inline
        // call that never waits cannot be interrupted and is never registered.
        let mut guard: Option<CallGuard> = None;

        // 1. Look up.
        let Some(reg) = self.lookup(&name, state) else {
            info.tool_name = Arc::from(name.as_str());
            let mut names: Vec<String> = self
                .listing_for_session(session)
                .into_iter()
                .map(|l| l.definition.name)
                .collect();
            names.truncate(50);
            let available = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            let message = match self.route_hint(&name, state) {
                Some(hint) => format!("{hint} Available: {available}"),
                None => format!("Tool '{name}' not found. Available: {available}"),
            };
            return self.fail(state, &info, ErrorClass::NotFound, message, None);
        };
        info.tool_name = reg.name.clone();
        info.side_effects = Some(reg.side_effects);

        // 2. Validate.
        let errors = reg.validator.validate(&input);
        if !errors.is_empty() {
            let mut message = format!(
                "Invalid input for tool '{}' ({} error{}):",
                reg.name,
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            for e in &errors {
                let at = if e.pointer.is_empty() {
                    "(root)"
                } else {
                    &e.pointer
                };
                message.push_str(&format!("\n- at {at}: {}", e.message));
            }
            tracing::debug!("{message}");
            self.emit(state, &info, EventKind::InputInvalid { errors });
            return ToolResultBlock::error(&id, ErrorClass::ValidationError, message);
        }

        // 3. Workspace scoping of path arguments.
        let def = reg.definition();
        for path in path_args(&def.path_params, &input) {
            if let Err(e) = state.workspace.check(path) {
                let class = if e.is_permission_denied() {
                    ErrorClass::PermissionDenied
                } else {
                    ErrorClass::ValidationError
                };
                return self.fail(state, &info, class, e.to_string(), None);
            }
        }

        // 4. Hooks and confirmation policy.
        if let Err(block) = self
            .authorize(&reg, &input, session, &info, &mut guard)
            .await
        {
            return block;
        }

        // 5. Concurrency cap, then execute.
        let queued = Instant::now();
        let permit = match state.semaphore.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                let entry = tracked(&mut guard, state, &info.tool_use_id).entry.clone();
                tokio::select! {
                    biased;
                    _ = entry.cancelled() => None,
                    p = state.semaphore.acquire() => p.ok(),
                }
            }
        };
        let Some(_permit) = permit else {
            let message = format!("Tool '{}' was cancelled before it started.", reg.name);
            return self.fail(state, &info, ErrorClass::Cancelled, message, None);
        };
        if !reg.inline {
            // Registered before `tool.called`, so a cancel that follows the event reaches it.
            tracked(&mut guard, state, &info.tool_use_id);
        }
        self.emit(
            state,
            &info,
            EventKind::Called {
                queued_ms: ms(queued.elapsed()),
            },
        );
        let exec_started = Instant::now();
        let outcome = self.execute(&reg, input, &info, state, &mut guard).await;
        let elapsed = exec_started.elapsed();
        if elapsed >= self.inner.config.slow_call_threshold {
            tracing::warn!(
                elapsed_ms = ms(elapsed),
                threshold_ms = ms(self.inner.config.slow_call_threshold),
                "slow tool call: '{}' took {:.1}s",
                reg.name,
                elapsed.as_secs_f64()
            );
        }
        let cancel_requested = guard.as_ref().is_some_and(|g| g.entry.is_cancelled());
        let mut block = self.report(state, &info, &reg, outcome, elapsed, cancel_requested);
        block.tool_use_id = id;
        block
    }

    /// Step 4: hooks, policy, session grants and, if needed, the confirmation round trip.
    async fn authorize(
        &self,
        reg: &Registered,
        input: &Value,
        session: &Session,
        info: &CallInfo,
        guard: &mut Option<CallGuard>,
    ) -> Result<(), ToolResultBlock> {
        let state = &session.state;
        let workspace = state.workspace.root();
        let mut decision = self
            .inner
            .policy
            .decide(&reg.name, reg.side_effects, workspace);
        for hook in &self.inner.hooks {
            let hook_call = HookCall {
                session_id: &state.id,
                tool_name: &reg.name,
                side_effects: reg.side_effects,
                input,
                workspace,
            };
            match hook.before_use(&hook_call) {
                HookDecision::Continue => {}
                HookDecision::Ask(reason) => {
                    if decision.mode == Mode::Auto {
                        decision.mode = Mode::Prompt;
                        decision.rule = format!("pre-use hook: {reason}");
                    }
                }
                HookDecision::Deny(reason) => {
                    let message =
                        format!("Tool '{}' was denied by a pre-use hook: {reason}", reg.name);
                    return Err(self.fail(state, info, ErrorClass::UserDenied, message, None));
                }
            }
        }
        match decision.mode {
            Mode::Auto => Ok(()),
            Mode::Deny => {
                let message = format!(
                    "Tool '{}' is denied by policy ({} = \"deny\"); change that setting to allow it.",
                    reg.name, decision.rule
                );
                Err(self.fail(state, info, ErrorClass::UserDenied, message, None))
            }
            Mode::Prompt if state.is_granted(&reg.name) => Ok(()),
            Mode::Prompt => {
                let entry = tracked(guard, state, &info.tool_use_id).entry.clone();
                self.confirm(reg, input, session, info, &entry, decision.rule)
                    .await
            }
        }
    }

    fn projected_modifications(
        &self,
        reg: &Registered,
        input: &Value,
        state: &SessionState,
    ) -> Vec<String> {
        if reg.side_effects != SideEffect::Write {
            return Vec::new();
        }
        path_args(&reg.definition().path_params, input)
            .map(|p| match state.workspace.exists(p) {
                Ok(true) => format!("will modify {p}"),
                _ => format!("will create {p}"),
            })
            .collect()
    }

    async fn confirm(
        &self,
        reg: &Registered,
        input: &Value,
        session: &Session,
        info: &CallInfo,
        entry: &InFlight,
        rule: String,
    ) -> Result<(), ToolResultBlock> {
        let state = &session.state;
        let n = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let request_id: Arc<str> = Arc::from(format!("cr_{n:012}"));
        let projected = self.projected_modifications(reg, input, state);
        let request = ConfirmationRequest {
            request_id: request_id.clone(),
            session_id: state.id.clone(),
            turn_id: session.turn_id.clone(),
            tool_use_id: info.tool_use_id.clone(),
            tool_name: reg.name.clone(),
            side_effects: reg.side_effects,
            input_summary: summarize(input),
            projected_modifications: projected.clone(),
            reason: rule.clone(),
        };
        let mut rx = self.inner.broker.register(request.clone());
        self.emit(
            state,
            info,
            EventKind::ConfirmationRequested {
                request_id: request_id.clone(),
                input_summary: request.input_summary.clone(),
                projected_modifications: projected,
                reason: rule,
            },
        );
        let askers: Vec<tokio::task::JoinHandle<()>> = self
            .inner
            .confirmers
            .iter()
            .map(|c| {
                let answer = c.confirm(request.clone());
                let broker = self.inner.broker.clone();
                let name = c.name().to_string();
                let id = request_id.clone();
                tokio::spawn(async move {
                    let decision = answer.await;
                    let _ = broker.resolve(&id, decision, &name);
                })
            })
            .collect();
        let waited = Instant::now();
        let timeout = self.inner.config.confirmation_timeout;
        let answer = tokio::select! {
            r = &mut rx => Answer::from(r.ok()),
            _ = tokio::time::sleep(timeout) => {
                if self.inner.broker.expire(&request_id, "timeout") {
                    Answer::TimedOut
                } else {
                    Answer::from((&mut rx).await.ok())
                }
            }
            _ = entry.cancelled() => {
                if self.inner.broker.expire(&request_id, "cancelled") {
                    Answer::Cancelled
                } else {
                    Answer::from((&mut rx).await.ok())
                }
            }
        };
        for asker in askers {
            asker.abort();
        }
        let (decision, by) = match &answer {
            Answer::Given(d, by) => (decision_name(*d).to_string(), by.clone()),
            Answer::TimedOut => ("timeout".to_string(), "timeout".to_string()),
            Answer::Cancelled => ("cancelled".to_string(), "cancelled".to_string()),
        };
        self.emit(
            state,
            info,
            EventKind::ConfirmationResolved {
                request_id,
                decision,
                resolved_by: by,
                waited_ms: ms(waited.elapsed()),
            },
        );
        match answer {
            Answer::Given(Decision::Allow, _) => Ok(()),
            Answer::Given(Decision::AlwaysAllow, _) => {
                state.grant(&reg.name);
                Ok(())
            }
            Answer::Given(Decision::Deny, _) => Err(self.fail(
                state,
                info,
                ErrorClass::UserDenied,
                "User denied this operation.".to_string(),
                None,
            )),
            Answer::Cancelled => {
                let message = format!(
                    "Tool '{}' was cancelled while waiting for confirmation.",
                    reg.name
                );
                Err(self.fail(state, info, ErrorClass::Cancelled, message, None))
            }
            Answer::TimedOut => {
                let message = format!(
                    "Nobody answered the confirmation request for tool '{}' within {}; the call was not run.",
                    reg.name,
                    format_duration(timeout)
                );
                Err(self.fail(state, info, ErrorClass::ConfirmationTimeout, message, None))
            }
        }
    }

    fn timeout_for(&self, reg: &Registered) -> Duration {
        let config = &self.inner.config;
        if let Some(t) = config.tool_timeouts.get(&*reg.name) {
            return *t;
        }
        if let Some(ms) = reg.definition().timeout_ms {
            return Duration::from_millis(ms);
        }
        match reg.side_effects {
            SideEffect::Execute | SideEffect::Network => config.execute_timeout,
            _ => config.default_timeout,
        }
    }

    /// Step 5: a fresh instance, executed inline or on a blocking thread under the timeout.
    async fn execute(
        &self,
        reg: &Registered,
        input: Value,
        info: &CallInfo,
        state: &Arc<SessionState>,
        guard: &mut Option<CallGuard>,
    ) -> Outcome {
        let tool = match catch_unwind(AssertUnwindSafe(|| reg.factory.create())) {
            Ok(Ok(tool)) => tool,
            Ok(Err(e)) => return Outcome::Returned(Err(e)),
            Err(p) => {
                return Outcome::Panicked(format!(
                    "factory panicked: {}",
                    tool_api::abi::panic_message(&*p)
                ));
            }
        };
        let mut host = CallHost {
            session_id: info.session_id.clone(),
            turn_id: info.turn_id.clone(),
            tool_use_id: info.tool_use_id.clone(),
            workspace: state.workspace.clone(),
            inflight: guard.as_ref().map(|g| g.entry.clone()),
            span: Span::none(),
        };
        if reg.inline {
            // Runs on this thread, already inside the call's span.
            let ctx = host.into_context();
            return match catch_unwind(AssertUnwindSafe(|| tool.execute(input, &ctx))) {
                Ok(r) => Outcome::Returned(r),
                Err(p) => Outcome::Panicked(tool_api::abi::panic_message(&*p)),
            };
        }
        let entry = tracked(guard, state, &info.tool_use_id).entry.clone();
        host.inflight = Some(entry.clone());
        host.span = Span::current();
        if entry.is_cancelled() {
            return Outcome::Cancelled(None);
        }
        let tool: Arc<dyn Tool> = Arc::from(tool);
        entry.set_tool(tool.clone());
        if entry.is_cancelled() {
            // Cancelled between the check above and `set_tool`: tell the tool itself.
            let _ = catch_unwind(AssertUnwindSafe(|| tool.cancel()));
        }
        let runner = tool.clone();
        let span = Span::current();
        // The blocking thread logs to the caller's subscriber, even a scoped one.
        let subscriber = tracing::dispatcher::get_default(Clone::clone);
        let mut handle = tokio::task::spawn_blocking(move || {
            tracing::dispatcher::with_default(&subscriber, || {
                let _entered = span.enter();
                let ctx = host.into_context();
                runner.execute(input, &ctx)
            })
        });
        let timeout = self.timeout_for(reg);
        let joined = |r: Result<Result<ToolOutput, ToolError>, tokio::task::JoinError>| match r {
            Ok(r) => Outcome::Returned(r),
            Err(e) if e.is_panic() => {
                Outcome::Panicked(tool_api::abi::panic_message(&*e.into_panic()))
            }
            Err(_) => Outcome::Cancelled(None),
        };
        tokio::select! {
            biased;
            r = &mut handle => joined(r),
            _ = entry.cancelled() => {
                let grace = self.inner.config.cancel_grace;
                match tokio::time::timeout(grace, &mut handle).await {
                    Ok(Ok(Ok(out))) => Outcome::Cancelled(Some(out)),
                    Ok(_) => Outcome::Cancelled(None),
                    Err(_) => {
                        tracing::warn!(
                            grace_ms = ms(grace),
                            "tool '{}' did not stop within {} of being cancelled; abandoning it (its cleanup may still finish)",
                            reg.name,
                            format_duration(grace)
                        );
                        Outcome::Cancelled(None)
                    }
                }
            }
            _ = tokio::time::sleep(timeout) => {
                entry.cancel();
                Outcome::TimedOut(timeout)
            }
        }
    }

    /// Step 5, end: classify the outcome, emit the final event, build the block.
    fn report(
        &self,
        state: &SessionState,
        info: &CallInfo,
        reg: &Registered,
        outcome: Outcome,
        elapsed: Duration,
        cancel_requested: bool,
    ) -> ToolResultBlock {
        let name = &reg.name;
        let redacted = |detail: &str| {
            tracing::error!(detail, "tool '{name}' failed unexpectedly");
            format!(
                "Tool '{name}' failed unexpectedly; the details are in the host log (tool_use_id {}).",
                info.tool_use_id
            )
        };
        match outcome {
            Outcome::Returned(Ok(out)) if out.success => {
                self.emit(
                    state,
                    info,
                    EventKind::Completed {
                        duration_ms: ms(elapsed),
                    },
                );
                self.block(info, out, false)
            }
            Outcome::Returned(Ok(out)) if cancel_requested => {
                self.cancelled(state, info, name, Some(out))
            }
            Outcome::Returned(Ok(out)) => {
                let message = out.text_content();
                self.emit(
                    state,
                    info,
                    EventKind::Failed {
                        error_class: ErrorClass::ExecutionError,
                        message,
                        duration_ms: info.elapsed_ms(),
                        partial_output: None,
                    },
                );
                self.block(info, out, true)
            }
            Outcome::Returned(Err(ToolError::Cancelled(_))) | Outcome::Cancelled(None) => {
                self.cancelled(state, info, name, None)
            }
            Outcome::Cancelled(Some(out)) => self.cancelled(state, info, name, Some(out)),
            Outcome::Returned(Err(ToolError::Internal(detail))) => {
                let message = redacted(&detail);
                self.fail(state, info, ErrorClass::ExecutionError, message, None)
            }
            Outcome::Returned(Err(e)) => {
                let class = ErrorClass::of(&e);
                self.fail(state, info, class, e.to_string(), None)
            }
            Outcome::Panicked(detail) => {
                let message = redacted(&format!("panic: {detail}"));
                self.fail(state, info, ErrorClass::ExecutionError, message, None)
            }
            Outcome::TimedOut(limit) => {
                let message = format!(
                    "Tool '{name}' exceeded its {} time limit and was stopped.",
                    format_duration(limit)
                );
                self.fail(state, info, ErrorClass::Timeout, message, None)
            }
        }
    }

    fn cancelled(
        &self,
        state: &SessionState,
        info: &CallInfo,
        name: &str,
        partial: Option<ToolOutput>,
    ) -> ToolResultBlock {
        let partial_text = partial
            .as_ref()
            .map(ToolOutput::text_content)
            .filter(|t| !t.is_empty());
        let mut message = format!("Tool '{name}' was cancelled.");
        if let Some(p) = &partial_text {
            message.push_str("\nPartial output:\n");
            message.push_str(p);
        }
        let mut block = self.fail(state, info, ErrorClass::Cancelled, message, partial_text);
        if let Some(out) = partial {
            block.metadata = out.metadata;
        }
        block
    }

    fn block(&self, info: &CallInfo, out: ToolOutput, is_error: bool) -> ToolResultBlock {
        let max = self.inner.config.max_result_chars;
        let mut content = out.content;
        let mut budget = max;
        let mut cut = 0usize;
        for block in &mut content {
            if let Content::Text { text } = block {
                let len = text.chars().count();
                if len <= budget {
                    budget -= len;
                } else {
                    let keep: String = text.chars().take(budget).collect();
                    cut += len - budget;
                    *text = keep;
                    budget = 0;
                }
            }
        }
        if cut > 0 {
            content.push(Content::text(format!(
                "[output truncated: {cut} more characters over the {max}-character limit]"
            )));
        }
        ToolResultBlock {
            tool_use_id: info.tool_use_id.to_string(),
            content,
            is_error,
            error_class: is_error.then_some(ErrorClass::ExecutionError),
            metadata: out.metadata,
        }
    }
}
