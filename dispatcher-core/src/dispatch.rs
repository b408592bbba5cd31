//! The per-call pipeline: look up, validate, scope, policy, execute, report.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use tool_api::{Content, SideEffect, Tool, ToolError, ToolOutput};
use tracing::{Instrument, Span};

use tokio::sync::{Semaphore, SemaphorePermit};
use tool_api::InterruptBehavior;

use crate::Dispatcher;
use crate::confirmation::{ConfirmationRequest, Decision};
use crate::error::{CancelReason, ErrorClass};
use crate::events::{EventKind, ToolEvent, decision_name, now_ms};
use crate::hooks::{HookCall, HookDecision, PostDecision, PostUseCall};
use crate::host::{CallHost, OutputSink};
use crate::policy::Mode;
use crate::registry::Registered;
use crate::result::{ToolResultBlock, ToolUse};
use crate::runtime::{Grant, GrantRequest};
use crate::session::{CallGuard, InFlight, Session, SessionState};
use crate::spool;

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

/// A per-tool setting; an empty map (the usual case) costs no hashing.
fn lookup<'m, V>(map: &'m std::collections::HashMap<String, V>, tool: &str) -> Option<&'m V> {
    if map.is_empty() { None } else { map.get(tool) }
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

/// The tool a batch resolved for a call when it was pushed, and whether its input was valid.
#[derive(Clone)]
pub(crate) struct Resolved {
    pub(crate) reg: Arc<Registered>,
    pub(crate) valid: bool,
}

/// A call's cancellation registration, made on first need (with the entry its batch made
/// for it, if any).
struct Tracker<'a> {
    guard: Option<CallGuard>,
    state: &'a Arc<SessionState>,
    tool_use_id: Arc<str>,
    preset: Option<Arc<InFlight>>,
}

impl Tracker<'_> {
    fn entry(&mut self) -> &Arc<InFlight> {
        let (state, id, preset) = (self.state, &self.tool_use_id, self.preset.as_ref());
        &self
            .guard
            .get_or_insert_with(|| state.track(id, preset))
            .entry
    }

    /// The entry, if the call was registered or its batch made one.
    fn existing(&self) -> Option<&Arc<InFlight>> {
        self.guard
            .as_ref()
            .map(|g| &g.entry)
            .or(self.preset.as_ref())
    }

    fn is_cancelled(&self) -> bool {
        self.existing().is_some_and(|e| e.is_cancelled())
    }
}

/// Waits for a place under a cap, unless the call is cancelled first.
async fn acquire<'s>(sem: &'s Semaphore, tracker: &mut Tracker<'_>) -> Option<SemaphorePermit<'s>> {
    if let Ok(permit) = sem.try_acquire() {
        return Some(permit);
    }
    let entry = tracker.entry().clone();
    tokio::select! {
        biased;
        _ = entry.cancelled() => None,
        p = sem.acquire() => p.ok(),
    }
}

/// The message of a call cancelled for `reason` (`started`: it was executing).
pub(crate) fn cancel_message(
    tool: &str,
    reason: Option<CancelReason>,
    cause: Option<&str>,
    started: bool,
) -> String {
    match (reason, started) {
        (Some(CancelReason::SiblingError), _) => format!(
            "Tool '{tool}' was {} because {}; this call did not fail itself.",
            if started { "cancelled" } else { "not run" },
            cause.unwrap_or("another call in the same batch failed")
        ),
        (Some(CancelReason::Aborted), true) => {
            format!("Tool '{tool}' was cancelled: the host aborted its batch.")
        }
        (Some(CancelReason::Aborted), false) => {
            format!("Tool '{tool}' was not run: the host aborted its batch before it started.")
        }
        (_, true) => format!("Tool '{tool}' was cancelled."),
        (_, false) => format!("Tool '{tool}' was cancelled before it started."),
    }
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
        self.fail_with(session, info, class, message, partial_output, None)
    }

    fn fail_with(
        &self,
        session: &SessionState,
        info: &CallInfo,
        class: ErrorClass,
        message: String,
        partial_output: Option<String>,
        cancel_reason: Option<CancelReason>,
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
                cancel_reason,
            },
        );
        let mut block = ToolResultBlock::error(&info.tool_use_id, class, message);
        block.cancel_reason = cancel_reason;
        block
    }

    /// The result of a call that was cancelled before it started executing.
    fn not_started(
        &self,
        state: &SessionState,
        info: &CallInfo,
        tracker: &Tracker<'_>,
    ) -> ToolResultBlock {
        let entry = tracker.existing();
        let reason = entry.and_then(|e| e.reason()).or(Some(CancelReason::User));
        let message = cancel_message(
            &info.tool_name,
            reason,
            entry.and_then(|e| e.cause()),
            false,
        );
        self.fail_with(state, info, ErrorClass::Cancelled, message, None, reason)
    }

    /// A synthetic `cancelled` result for a call of a batch that never reached the pipeline
    /// (the batch was aborted, or a sibling failed, before its turn). Emits `tool.failed`.
    pub(crate) fn never_started(
        &self,
        call: &ToolUse,
        session: &Session,
        reason: CancelReason,
        cause: Option<&str>,
    ) -> ToolResultBlock {
        let reg = self.lookup(&call.name, &session.state);
        let info = CallInfo {
            session_id: session.state.id.clone(),
            turn_id: session.turn_id.clone(),
            tool_use_id: Arc::from(call.id.as_str()),
            tool_name: reg
                .as_ref()
                .map_or_else(|| Arc::from(call.name.as_str()), |r| r.name.clone()),
            side_effects: reg.as_ref().map(|r| r.side_effects),
            started: Instant::now(),
        };
        let message = cancel_message(&info.tool_name, Some(reason), cause, false);
        self.fail_with(
            &session.state,
            &info,
            ErrorClass::Cancelled,
            message,
            None,
            Some(reason),
        )
    }

    /// Runs one call through the whole pipeline. Never fails: every outcome, including
    /// an unknown tool, invalid input, a denial, a timeout or a panic, is a result block.
    pub async fn dispatch(&self, call: ToolUse, session: &Session) -> ToolResultBlock {
        self.dispatch_controlled(call, session, None, None).await
    }

    /// [`Dispatcher::dispatch`] with the cancellation entry a batch made for the call, and
    /// the tool it resolved when the call was pushed.
    pub(crate) async fn dispatch_controlled(
        &self,
        call: ToolUse,
        session: &Session,
        preset: Option<Arc<InFlight>>,
        resolved: Option<Resolved>,
    ) -> ToolResultBlock {
        let span = tracing::info_span!(
            "tool_call",
            tool = %call.name,
            tool_use_id = %call.id,
            session = %session.state.id,
        );
        self.dispatch_in(call, session, preset, resolved)
            .instrument(span)
            .await
    }

    /// Step 2: the input against the compiled schema.
    fn validate(
        &self,
        reg: &Registered,
        input: &Value,
        state: &SessionState,
        info: &CallInfo,
        rewritten_by: Option<&str>,
    ) -> Result<(), ToolResultBlock> {
        let errors = reg.validator.validate(input);
        if errors.is_empty() {
            return Ok(());
        }
        let mut message = format!(
            "Invalid input for tool '{}'{} ({} error{}):",
            reg.name,
            rewritten_by
                .map(|h| format!(" as rewritten by pre-use hook '{h}'"))
                .unwrap_or_default(),
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
        self.emit(state, info, EventKind::InputInvalid { errors });
        Err(ToolResultBlock::error(
            &info.tool_use_id,
            ErrorClass::ValidationError,
            message,
        ))
    }

    /// Step 3: the path arguments against the workspace.
    fn scope(
        &self,
        reg: &Registered,
        input: &Value,
        state: &SessionState,
        info: &CallInfo,
    ) -> Result<(), ToolResultBlock> {
        for path in path_args(&reg.definition().path_params, input) {
            if let Err(e) = state.workspace.check(path) {
                let class = if e.is_permission_denied() {
                    ErrorClass::PermissionDenied
                } else {
                    ErrorClass::ValidationError
                };
                return Err(self.fail(state, info, class, e.to_string(), None));
            }
        }
        Ok(())
    }

    /// Step 5: the runtime grant (where and within which limits the call runs).
    fn grant(
        &self,
        reg: &Registered,
        input: &Value,
        state: &SessionState,
        info: &CallInfo,
    ) -> Result<Grant, ToolResultBlock> {
        let config = &self.inner.config;
        let base = Grant {
            sandbox: config.sandbox,
            timeout: self.timeout_for(reg),
            max_result_chars: lookup(&config.tool_result_chars, &reg.name)
                .copied()
                .unwrap_or(config.max_result_chars),
        };
        let grant = match &self.inner.runtime {
            None => base,
            Some(policy) => {
                let request = GrantRequest {
                    session_id: &state.id,
                    tool_use_id: &info.tool_use_id,
                    tool_name: &reg.name,
                    side_effects: reg.side_effects,
                    input,
                };
                policy.grant(&request, base).map_err(|reason| {
                    let message =
                        format!("The runtime policy refused tool '{}': {reason}", reg.name);
                    self.fail(state, info, ErrorClass::PermissionDenied, message, None)
                })?
            }
        };
        grant.sandbox.check_supported().map_err(|m| {
            let message = format!("Tool '{}' was not run: {m}.", reg.name);
            self.fail(state, info, ErrorClass::PermissionDenied, message, None)
        })?;
        Ok(grant)
    }

    fn interrupt_behavior(&self, reg: &Registered) -> InterruptBehavior {
        lookup(&self.inner.config.interrupt, &reg.name)
            .copied()
            .unwrap_or(reg.definition().interrupt)
    }

    async fn dispatch_in(
        &self,
        call: ToolUse,
        session: &Session,
        preset: Option<Arc<InFlight>>,
        resolved: Option<Resolved>,
    ) -> ToolResultBlock {
        let state = &session.state;
        let ToolUse { id, name, input } = call;
        let (resolved, valid) = match resolved {
            Some(r) => (Some(r.reg), r.valid),
            None => (None, false),
        };
        let mut info = CallInfo {
            session_id: state.id.clone(),
            turn_id: session.turn_id.clone(),
            tool_use_id: preset
                .as_ref()
                .map_or_else(|| Arc::from(id.as_str()), |p| p.tool_use_id.clone()),
            tool_name: Arc::from(""),
            side_effects: None,
            started: Instant::now(),
        };
        // Registered for cancellation at the first point where the call can wait; an inline
        // call that never waits cannot be interrupted and is never registered.
        let mut tracker = Tracker {
            guard: None,
            state,
            tool_use_id: info.tool_use_id.clone(),
            preset,
        };

        // 1. Look up.
        let Some(reg) = resolved.or_else(|| self.lookup(&name, state)) else {
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

        // 2. Validate (unless the batch already found the input valid).
        if !valid && let Err(block) = self.validate(&reg, &input, state, &info, None) {
            return block;
        }

        // 3. Workspace scoping of path arguments.
        if let Err(block) = self.scope(&reg, &input, state, &info) {
            return block;
        }
        if tracker.is_cancelled() {
            return self.not_started(state, &info, &tracker);
        }

        // 4. Hooks and confirmation policy (a hook may rewrite the input).
        let input = match self
            .authorize(&reg, input, session, &info, &mut tracker)
            .await
        {
            Ok(input) => input,
            Err(block) => return block,
        };

        // 5. The runtime grant.
        let grant = match self.grant(&reg, &input, state, &info) {
            Ok(grant) => grant,
            Err(block) => return block,
        };

        // 6. Per-tool cap, session cap, then execute.
        let queued = Instant::now();
        let tool_cap = lookup(&state.tool_caps, &reg.name);
        let tool_permit = match tool_cap {
            Some(sem) => match acquire(sem, &mut tracker).await {
                Some(p) => Some(p),
                None => return self.not_started(state, &info, &tracker),
            },
            None => None,
        };
        let Some(_permit) = acquire(&state.semaphore, &mut tracker).await else {
            return self.not_started(state, &info, &tracker);
        };
        let _tool_permit = tool_permit;
        if tracker.is_cancelled() {
            // Interrupted while it waited for a hook, a prompt or a place: it never starts.
            return self.not_started(state, &info, &tracker);
        }
        if !reg.inline {
            // Registered before `tool.called`, so a cancel that follows the event reaches it.
            tracker.entry();
        }
        self.emit(
            state,
            &info,
            EventKind::Called {
                queued_ms: ms(queued.elapsed()),
            },
        );
        let post_input = (!self.inner.post_hooks.is_empty()).then(|| input.clone());
        let exec_started = Instant::now();
        let outcome = self
            .execute(&reg, input, &info, state, &mut tracker, grant.timeout)
            .await;
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
        let mut block = self.report(state, &info, &reg, outcome, elapsed, tracker.existing());
        if let Some(input) = post_input {
            block = self.post_use(&reg, &input, state, &info, block).await;
        }
        block.tool_use_id = id;
        spool::cap(
            block,
            grant.max_result_chars,
            self.inner.config.result_preview_chars,
            &state.data_dir,
            state.workspace.root(),
        )
    }

    /// Post-use hooks, in order, each seeing the result as the ones before left it.
    async fn post_use(
        &self,
        reg: &Registered,
        input: &Value,
        state: &SessionState,
        info: &CallInfo,
        mut block: ToolResultBlock,
    ) -> ToolResultBlock {
        for hook in &self.inner.post_hooks {
            let decision = {
                let call = PostUseCall {
                    call: HookCall {
                        session_id: &state.id,
                        tool_use_id: &info.tool_use_id,
                        tool_name: &reg.name,
                        side_effects: reg.side_effects,
                        input,
                        workspace: state.workspace.root(),
                    },
                    result: &block,
                };
                hook.after_use(&call).await
            };
            match decision {
                PostDecision::Keep => {}
                PostDecision::Annotate(note) => {
                    block.content.push(Content::text(format!(
                        "Note from hook '{}': {note}",
                        hook.name()
                    )));
                }
                PostDecision::Replace { text, is_error } => {
                    tracing::debug!(hook = hook.name(), "post-use hook replaced the result");
                    block.content = vec![Content::text(text)];
                    block.is_error = is_error;
                    block.error_class = if is_error {
                        block.error_class.or(Some(ErrorClass::ExecutionError))
                    } else {
                        None
                    };
                    if !is_error {
                        block.cancel_reason = None;
                    }
                }
            }
        }
        block
    }

    /// Step 4: hooks, policy, session approvals and, if needed, the confirmation round
    /// trip. Returns the input the call runs with (a hook may have rewritten it).
    async fn authorize(
        &self,
        reg: &Registered,
        mut input: Value,
        session: &Session,
        info: &CallInfo,
        tracker: &mut Tracker<'_>,
    ) -> Result<Value, ToolResultBlock> {
        let state = &session.state;
        let workspace = state.workspace.root();
        let mut decision = self
            .inner
            .policy
            .decide(&reg.name, reg.side_effects, workspace);
        let policy_denied = |rule: &str| {
            let message = format!(
                "Tool '{}' is denied by policy ({rule} = \"deny\"); change that setting to allow it.",
                reg.name
            );
            self.fail(state, info, ErrorClass::UserDenied, message, None)
        };
        if decision.mode == Mode::Deny {
            // Nothing a hook or an approval says can let it run: the hooks are not asked.
            return Err(policy_denied(&decision.rule));
        }
        let mut allowed_by: Option<String> = None;
        let mut asked: Option<String> = None;
        // A hook may take a while (an external command): the call can be cancelled meanwhile.
        let entry = (!self.inner.hooks.is_empty()).then(|| tracker.entry().clone());
        for hook in &self.inner.hooks {
            let verdict = {
                let hook_call = HookCall {
                    session_id: &state.id,
                    tool_use_id: &info.tool_use_id,
                    tool_name: &reg.name,
                    side_effects: reg.side_effects,
                    input: &input,
                    workspace,
                };
                let judged = hook.before_use(&hook_call);
                match &entry {
                    Some(entry) => tokio::select! {
                        biased;
                        _ = entry.cancelled() => None,
                        v = judged => Some(v),
                    },
                    None => Some(judged.await),
                }
            };
            let Some(verdict) = verdict else {
                return Err(self.not_started(state, info, tracker));
            };
            match verdict {
                HookDecision::Continue => {}
                HookDecision::Allow => {
                    allowed_by.get_or_insert_with(|| hook.name().to_string());
                }
                HookDecision::Ask(reason) => {
                    asked
                        .get_or_insert_with(|| format!("pre-use hook '{}': {reason}", hook.name()));
                }
                HookDecision::Deny(reason) => {
                    let message = format!(
                        "Tool '{}' was denied by pre-use hook '{}': {reason}",
                        reg.name,
                        hook.name()
                    );
                    return Err(self.fail(state, info, ErrorClass::UserDenied, message, None));
                }
                HookDecision::Rewrite(new_input) => {
                    self.validate(reg, &new_input, state, info, Some(hook.name()))?;
                    self.scope(reg, &new_input, state, info)?;
                    tracing::debug!(hook = hook.name(), "pre-use hook rewrote the input");
                    input = new_input;
                }
            }
        }
        let hook_asked = asked.is_some();
        if let Some(reason) = asked {
            decision.mode = Mode::Prompt;
            decision.rule = reason;
        } else if let (Some(hook), Mode::Prompt) = (&allowed_by, decision.mode) {
            tracing::debug!(hook = %hook, rule = %decision.rule, "a pre-use hook allowed the call without a prompt");
            decision.mode = Mode::Auto;
        }
        match decision.mode {
            Mode::Auto => Ok(input),
            Mode::Prompt if !hook_asked && state.is_granted(&reg.name) => Ok(input),
            Mode::Deny => Err(policy_denied(&decision.rule)),
            Mode::Prompt => {
                let entry = tracker.entry().clone();
                self.confirm(reg, &input, session, info, &entry, decision.rule)
                    .await
                    .map(|()| input)
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
        if let Some(t) = lookup(&config.tool_timeouts, &reg.name) {
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

    /// Step 6: a fresh instance, executed inline or on a blocking thread under the timeout.
    async fn execute(
        &self,
        reg: &Registered,
        input: Value,
        info: &CallInfo,
        state: &Arc<SessionState>,
        tracker: &mut Tracker<'_>,
        timeout: Duration,
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
            inflight: tracker.existing().cloned(),
            span: Span::none(),
            output: None,
        };
        if reg.inline {
            // Runs on this thread, already inside the call's span.
            let ctx = host.into_context();
            return match catch_unwind(AssertUnwindSafe(|| tool.execute(input, &ctx))) {
                Ok(r) => Outcome::Returned(r),
                Err(p) => Outcome::Panicked(tool_api::abi::panic_message(&*p)),
            };
        }
        let entry = tracker.entry().clone();
        host.inflight = Some(entry.clone());
        host.span = Span::current();
        host.output = Some(Arc::new(OutputSink {
            session: state.events.clone(),
            global: self.inner.events.clone(),
            template: ToolEvent {
                kind: EventKind::OutputDelta {
                    chunk: String::new(),
                },
                session_id: info.session_id.clone(),
                turn_id: info.turn_id.clone(),
                tool_use_id: info.tool_use_id.clone(),
                tool_name: info.tool_name.clone(),
                side_effects: info.side_effects,
                timestamp_ms: 0,
            },
        }));
        if entry.is_cancelled() {
            return Outcome::Cancelled(None);
        }
        if self.interrupt_behavior(reg) == InterruptBehavior::Block && !entry.shield() {
            // An interrupt came just before it started: it never starts.
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
        entry: Option<&Arc<InFlight>>,
    ) -> ToolResultBlock {
        let name = &reg.name;
        let cancel_requested = entry.is_some_and(|e| e.is_cancelled());
        let cancelled =
            |partial: Option<ToolOutput>| self.cancelled(state, info, name, partial, entry);
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
            Outcome::Returned(Ok(out)) if cancel_requested => cancelled(Some(out)),
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
                        cancel_reason: None,
                    },
                );
                self.block(info, out, true)
            }
            Outcome::Returned(Err(ToolError::Cancelled(_))) | Outcome::Cancelled(None) => {
                cancelled(None)
            }
            Outcome::Cancelled(Some(out)) => cancelled(Some(out)),
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
        entry: Option<&Arc<InFlight>>,
    ) -> ToolResultBlock {
        let partial_text = partial
            .as_ref()
            .map(ToolOutput::text_content)
            .filter(|t| !t.is_empty());
        let reason = entry.and_then(|e| e.reason());
        let mut message = cancel_message(name, reason, entry.and_then(|e| e.cause()), true);
        if let Some(p) = &partial_text {
            message.push_str("\nPartial output:\n");
            message.push_str(p);
        }
        let mut block = self.fail_with(
            state,
            info,
            ErrorClass::Cancelled,
            message,
            partial_text,
            reason,
        );
        if let Some(out) = partial {
            block.metadata = out.metadata;
        }
        block
    }

    fn block(&self, info: &CallInfo, out: ToolOutput, is_error: bool) -> ToolResultBlock {
        ToolResultBlock {
            tool_use_id: info.tool_use_id.to_string(),
            content: out.content,
            is_error,
            error_class: is_error.then_some(ErrorClass::ExecutionError),
            metadata: out.metadata,
            cancel_reason: None,
        }
    }
}
