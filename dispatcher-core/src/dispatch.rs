//! The per-call pipeline: look up, validate, scope, hooks and policy, grant, execute,
//! report. Each step is a method of the [`Invocation`] it works on.
//!
//! A step that ends the call returns `Err(ToolResultBlock)`: that block *is* the call's
//! result, moved once to the caller, so it is not boxed (boxing would allocate on every
//! early end to save a copy of a few words).
#![allow(clippy::result_large_err)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::Either;
use serde_json::Value;
use tokio::sync::{Semaphore, SemaphorePermit};
use tool_api::{Content, InterruptBehavior, SideEffect, Tool, ToolError, ToolOutput};
use tracing::{Instrument, Span};

use crate::blocking;
use crate::confirmation::{DecidedBy, Decision, Resolution};
use crate::error::ErrorClass;
use crate::events::EventKind;
use crate::hooks::{HookDecision, PostDecision, PostUseCall};
use crate::host::CallHost;
use crate::invocation::{Invocation, cancel_message};
use crate::panics::{self, Caught};
use crate::policy::{Mode, PolicyDecision};
use crate::registry::Registered;
use crate::result::{SideEffectRecord, ToolResultBlock};
use crate::runtime::{Grant, SandboxMode};
use crate::spool;
use crate::workspace::{InlineBudget, Opened};

/// How an execution ended, before classification.
enum Outcome {
    Returned(Result<ToolOutput, ToolError>),
    Panicked(Caught),
    TimedOut(Duration),
    Cancelled(Option<ToolOutput>),
}

/// A per-tool setting; an empty map (the usual case) costs no hashing.
fn per_tool<'m, V>(map: &'m std::collections::HashMap<String, V>, tool: &str) -> Option<&'m V> {
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

/// A place under a cap: at once when one is free, else waited for unless the call is
/// cancelled first.
///
/// `waited` is set to when the call first had to wait (left alone when a place was free).
/// The wait is boxed: a call that finds a place carries none of its state.
async fn acquire<'s>(
    sem: &'s Semaphore,
    call: &mut Invocation,
    waited: &mut Option<Instant>,
) -> Option<SemaphorePermit<'s>> {
    match sem.try_acquire() {
        Ok(permit) => Some(permit),
        Err(_) => Box::pin(wait_for_place(sem, call, waited)).await,
    }
}

/// [`acquire`] when no place was free.
async fn wait_for_place<'s>(
    sem: &'s Semaphore,
    call: &mut Invocation,
    waited: &mut Option<Instant>,
) -> Option<SemaphorePermit<'s>> {
    waited.get_or_insert_with(Instant::now);
    let entry = call.register().clone();
    tokio::select! {
        biased;
        _ = entry.cancelled() => None,
        p = sem.acquire() => p.ok(),
    }
}

impl Invocation {
    /// Takes the call through the whole pipeline. Never fails: every outcome, including an
    /// unknown tool, invalid input, a denial, a timeout or a panic, is a result block.
    ///
    /// The future owns the call (it borrows nothing), so it can be spawned. It is the
    /// pipeline's own future, not one wrapped around it: a call's state is moved as few
    /// times as the caller moves it.
    pub fn run(mut self) -> impl Future<Output = ToolResultBlock> + Send + 'static {
        let span = tracing::info_span!(
            "tool_call",
            tool = %self.header.tool_name,
            tool_use_id = %self.header.tool_use_id,
            session = %self.header.session_id,
        );
        if self.engine.settings.audit.is_empty() {
            return Either::Left(self.pipeline().instrument(span));
        }
        let engine = self.engine.clone();
        // Audited: what the entry needs is taken now (the input is the model's, before a
        // hook may rewrite it), and the rest while the call runs.
        let trail = crate::audit::Trail::new();
        self.trail = Some(trail.clone());
        let called = crate::audit::Called {
            instance: self.engine.instance.clone(),
            principal: self.session.state.principal.clone(),
            header: self.header.clone(),
            arguments_sha256: if engine.settings.audit.iter().any(|s| s.reads_digest()) {
                crate::audit::digest(&self.input)
            } else {
                String::new()
            },
            started: self.started,
            started_ms: self.wall_ms,
            trace_parent: self.trace_parent.take(),
        };
        let pipeline = self.pipeline();
        Either::Right(
            async move {
                let block = pipeline.await;
                let entry = trail.entry(called, &block);
                for sink in &engine.settings.audit {
                    sink.record(&entry);
                }
                block
            }
            .instrument(span),
        )
    }

    /// Records a decision that no event reports (a denial), for the audit entry.
    fn audit_decided(&self, decision: &str, by: impl FnOnce() -> DecidedBy) {
        if let Some(trail) = &self.trail {
            trail.decided(decision, by());
        }
    }

    /// Steps 1 to 3, which never wait: the tool, the input taken out of the call, what the
    /// policy says, and the path a small read may keep open.
    fn prepare(
        &mut self,
    ) -> Result<(Arc<Registered>, Value, PolicyDecision, Option<Opened>), ToolResultBlock> {
        // 1. Look up (done when the call was made).
        let Some(tool) = self.tool.clone() else {
            let message = self
                .engine
                .not_found_message(&self.header.tool_name, &self.session.state);
            return Err(self.fail(ErrorClass::NotFound, message));
        };
        let input = std::mem::take(&mut self.input);

        // 2. Validate (unless the batch already found the input valid).
        if !self.validated {
            self.validate(&tool, &input, None)?;
        }

        // 3. Workspace scoping of path arguments (a path a small read will use at once may
        // stay open for it: the policy decision, needed again in step 4, tells).
        let decision = self.policy_decision(&tool);
        let keep_open = self.may_keep_open(&tool, &decision);
        let opened = self.scope(&tool, &input, keep_open)?;
        if self.is_cancelled() {
            return Err(self.not_started());
        }
        Ok((tool, input, decision, opened))
    }

    /// The steps in order. The future holds only what lives across its waits: the call
    /// itself (captured, not copied into a local as an `async fn` parameter would be),
    /// and each step's values only until the step ends.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn would copy `self`, the whole call, into a second slot of the state"
    )]
    fn pipeline(mut self) -> impl Future<Output = ToolResultBlock> + Send + 'static {
        async move {
            let (tool, input, decision, mut opened) = match self.prepare() {
                Ok(prepared) => prepared,
                Err(block) => return block,
            };

            // 3b. The caller's rate limits (no store round trip when none applies).
            if !self.engine.settings.config.limits.is_empty()
                && let Err(block) = Box::pin(self.within_limits(&tool)).await
            {
                return block;
            }

            // 4. Hooks and confirmation policy (a hook may rewrite the input).
            // With no hooks to ask, a call the policy lets run is authorized at once; the rest
            // (hooks, a prompt, a denial) is boxed where it is awaited, so a call that never
            // waits does not carry the state of one that does.
            let (input, authorized_by) = {
                let authorized =
                    if self.engine.settings.hooks.is_empty() && decision.mode == Mode::Auto {
                        Ok((
                            input,
                            DecidedBy::Policy {
                                rule: decision.rule,
                            },
                        ))
                    } else {
                        Box::pin(self.authorize(&tool, input, decision)).await
                    };
                match authorized {
                    Ok(authorized) => authorized,
                    Err(block) => return block,
                }
            };

            // 5. The runtime grant.
            let grant = match self.grant(&tool, &input) {
                Ok(grant) => grant,
                Err(block) => return block,
            };

            // 6. Per-tool cap, session cap, then execute.
            // A call that finds a place at once was queued for no time (and reads no clock).
            let mut queued: Option<Instant> = None;
            let state = self.session.state.clone();
            let tool_permit = match per_tool(&state.tool_caps, &tool.name) {
                Some(sem) => match acquire(sem, &mut self, &mut queued).await {
                    Some(p) => Some(p),
                    None => return self.not_started(),
                },
                None => None,
            };
            let Some(_permit) = acquire(&state.semaphore, &mut self, &mut queued).await else {
                return self.not_started();
            };
            let _tool_permit = tool_permit;
            if queued.is_some() {
                // It waited for a place: the path is opened again when it runs, as it is then.
                opened = None;
            }
            if self.is_cancelled() {
                // Interrupted while it waited for a hook, a prompt or a place: it never starts.
                return self.not_started();
            }
            if !tool.inline {
                // Registered before `tool.called`, so a cancel that follows the event reaches it.
                self.register();
            }
            let post_input = (!self.engine.settings.post_hooks.is_empty()).then(|| input.clone());
            let exec_started = Instant::now();
            self.emit_at(
                EventKind::Called {
                    queued_ms: queued
                        .map_or(0.0, |q| ms(exec_started.saturating_duration_since(q))),
                    authorized_by,
                },
                exec_started,
            );
            let outcome = match self.execute_here(&tool, input, opened, &grant) {
                Ok(outcome) => outcome,
                Err(input) => Box::pin(self.execute_off_thread(&tool, input, &grant)).await,
            };
            let ended = Instant::now();
            let elapsed = ended.saturating_duration_since(exec_started);
            self.ended = Some(ended);
            let slow = self.engine.settings.config.slow_call_threshold;
            if elapsed >= slow {
                tracing::warn!(
                    elapsed_ms = ms(elapsed),
                    threshold_ms = ms(slow),
                    "slow tool call: '{}' took {:.1}s",
                    tool.name,
                    elapsed.as_secs_f64()
                );
            }
            let given_id = std::mem::take(&mut self.given_id);
            let mut block = self.report(&tool, outcome, elapsed, given_id);
            // Later events (a post-use hook's) are stamped when they happen.
            self.ended = None;
            if let Some(input) = post_input {
                block = Box::pin(self.post_use(&tool, &input, block)).await;
            }
            spool::cap(
                block,
                grant.max_result_chars,
                self.engine.settings.config.result_preview_chars,
                &state.data_dir,
                state.workspace.root(),
            )
        }
    }

    /// Step 3b: counts the call against its caller's rate limits.
    async fn within_limits(&self, tool: &Registered) -> Result<(), ToolResultBlock> {
        let state = &self.session.state;
        crate::limits::count(
            &self.engine.settings.config.limits,
            &self.engine.store,
            &state.principal,
            &tool.name,
            std::time::SystemTime::now(),
        )
        .await
        .map_err(|limited| {
            self.fail(
                ErrorClass::RateLimited,
                crate::limits::check_message(&limited),
            )
        })
    }

    /// Step 2: the input against the compiled schema.
    fn validate(
        &self,
        tool: &Registered,
        input: &Value,
        rewritten_by: Option<&str>,
    ) -> Result<(), ToolResultBlock> {
        let errors = tool.validator.validate(input);
        if errors.is_empty() {
            return Ok(());
        }
        let mut message = format!(
            "Invalid input for tool '{}'{} ({} error{}):",
            tool.name,
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
        self.emit(EventKind::InputInvalid { errors });
        Err(ToolResultBlock::error(
            &self.header.tool_use_id,
            ErrorClass::ValidationError,
            message,
        ))
    }

    /// Whether the scope check may keep the path it checks open for the call's own read: a
    /// tool that reads small files inline, on a local filesystem, that nothing stands
    /// between the check and its run (no pre-use hook, and the policy lets it run without
    /// asking), so the handle is used moments after the check, as the path is then.
    fn may_keep_open(&self, tool: &Registered, decision: &PolicyDecision) -> bool {
        tool.inline_when_small
            && !tool.inline
            && self.session.state.workspace.allows_inline()
            && self.engine.settings.hooks.is_empty()
            && decision.mode == Mode::Auto
    }

    /// What the confirmation policy (the session's, else the dispatcher's) says of the tool.
    fn policy_decision(&self, tool: &Registered) -> PolicyDecision {
        let state = &self.session.state;
        state
            .policy
            .as_ref()
            .unwrap_or(&self.engine.settings.policy)
            .decide(&tool.name, tool.side_effects, state.workspace.root())
    }

    /// Step 3: the path arguments against the workspace. With `keep_open` and a single
    /// path, that path is checked by opening it for reading, and the handle returned
    /// ([`crate::workspace::Workspace::check_opening`]).
    fn scope(
        &self,
        tool: &Registered,
        input: &Value,
        keep_open: bool,
    ) -> Result<Option<Opened>, ToolResultBlock> {
        let workspace = &self.session.state.workspace;
        let mut paths = path_args(&tool.definition().path_params, input).peekable();
        let mut opened = None;
        let mut first = true;
        while let Some(path) = paths.next() {
            let only = std::mem::take(&mut first) && paths.peek().is_none();
            let checked = if keep_open && only {
                workspace.check_opening(path).map(|o| opened = o)
            } else {
                workspace.check(path).map(|_| ())
            };
            if let Err(e) = checked {
                let class = if e.is_permission_denied() {
                    ErrorClass::PermissionDenied
                } else {
                    ErrorClass::ValidationError
                };
                return Err(self.fail(class, e.to_string()));
            }
        }
        Ok(opened)
    }

    /// Step 4: hooks, policy (its `decision` for this tool), session approvals and, if
    /// needed, the confirmation round trip. Returns the input the call runs with (a hook
    /// may have rewritten it) and what let it run.
    async fn authorize(
        &mut self,
        tool: &Registered,
        mut input: Value,
        mut decision: PolicyDecision,
    ) -> Result<(Value, DecidedBy), ToolResultBlock> {
        let engine = self.engine.clone();
        let state = self.session.state.clone();
        let policy_denied = |call: &Self, rule: &str| {
            call.audit_decided("deny", || DecidedBy::Policy {
                rule: rule.to_string().into(),
            });
            let message = format!(
                "Tool '{}' is denied by policy ({rule} = \"deny\"); change that setting to allow it.",
                tool.name
            );
            call.fail(ErrorClass::UserDenied, message)
        };
        if decision.mode == Mode::Deny {
            // Nothing a hook or an approval says can let it run: the hooks are not asked.
            return Err(policy_denied(self, &decision.rule));
        }
        let mut allowed_by: Option<String> = None;
        let mut asked: Option<String> = None;
        // A hook may take a while (an external command): the call can be cancelled meanwhile.
        let entry = (!engine.settings.hooks.is_empty()).then(|| self.register().clone());
        for hook in &engine.settings.hooks {
            let verdict = {
                let view = self.view(tool, &input);
                let judged = hook.before_use(&view);
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
                return Err(self.not_started());
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
                    self.audit_decided("deny", || DecidedBy::Hook {
                        name: hook.name().to_string(),
                    });
                    let message = format!(
                        "Tool '{}' was denied by pre-use hook '{}': {reason}",
                        tool.name,
                        hook.name()
                    );
                    return Err(self.fail(ErrorClass::UserDenied, message));
                }
                HookDecision::Rewrite(new_input) => {
                    self.validate(tool, &new_input, Some(hook.name()))?;
                    self.scope(tool, &new_input, false)?;
                    tracing::debug!(hook = hook.name(), "pre-use hook rewrote the input");
                    input = new_input;
                }
            }
        }
        let hook_asked = asked.is_some();
        if let Some(reason) = asked {
            decision.mode = Mode::Prompt;
            decision.rule = reason.into();
        } else if let (Some(hook), Mode::Prompt) = (allowed_by, decision.mode) {
            if !decision.explicit {
                tracing::debug!(hook = %hook, rule = %decision.rule, "a pre-use hook allowed the call without a prompt");
                return Ok((input, DecidedBy::Hook { name: hook }));
            }
            // The user asked to be asked about exactly this tool: a hook does not answer
            // for them.
            tracing::debug!(hook = %hook, rule = %decision.rule, "a pre-use hook allowed the call, but a per-tool rule asks for a prompt");
        }
        match decision.mode {
            Mode::Auto => Ok((
                input,
                DecidedBy::Policy {
                    rule: decision.rule,
                },
            )),
            Mode::Deny => Err(policy_denied(self, &decision.rule)),
            Mode::Prompt
                if !hook_asked
                    && !engine
                        .settings
                        .confirmers
                        .iter()
                        .any(|c| c.answers_at_once(&self.header))
                    && crate::session::granted(&engine.store, &state, &tool.name).await =>
            {
                Ok((input, DecidedBy::Approval))
            }
            Mode::Prompt => {
                let by = self
                    .confirm(tool, &input, decision.rule.into_owned())
                    .await?;
                Ok((input, by))
            }
        }
    }

    /// What a write call would change, for the prompt.
    fn projected_modifications(&self, tool: &Registered, input: &Value) -> Vec<String> {
        if tool.side_effects != SideEffect::Write {
            return Vec::new();
        }
        let workspace = &self.session.state.workspace;
        path_args(&tool.definition().path_params, input)
            .map(|p| match workspace.exists(p) {
                Ok(true) => format!("will modify {p}"),
                _ => format!("will create {p}"),
            })
            .collect()
    }

    /// Step 4, end: asks the user through the broker and the wired-in confirmers.
    async fn confirm(
        &mut self,
        tool: &Registered,
        input: &Value,
        rule: String,
    ) -> Result<DecidedBy, ToolResultBlock> {
        let engine = self.engine.clone();
        let question = (
            summarize(input),
            self.projected_modifications(tool, input),
            rule,
        );
        let entry = self.register().clone();
        let timeout = engine.settings.config.confirmation_timeout;
        let resolution = crate::engine::ask(
            &engine,
            &self.header,
            &|kind| self.emit(kind),
            question,
            false,
            entry.cancelled(),
        )
        .await;
        match resolution {
            Resolution::Answered(Decision::Allow, by) => Ok(by),
            Resolution::Answered(Decision::AlwaysAllow, by) => {
                crate::session::grant(&engine.store, &self.session.state, &tool.name).await;
                Ok(by)
            }
            Resolution::Answered(Decision::Deny, DecidedBy::Fallback { reason, .. }) => {
                let message = format!(
                    "Tool '{}' was not run: nobody could be asked to confirm it. {reason}",
                    tool.name
                );
                Err(self.fail(ErrorClass::UserDenied, message))
            }
            Resolution::Answered(Decision::Deny, _) => Err(self.fail(
                ErrorClass::UserDenied,
                "User denied this operation.".to_string(),
            )),
            Resolution::Cancelled => {
                let message = format!(
                    "Tool '{}' was cancelled while waiting for confirmation.",
                    tool.name
                );
                Err(self.fail(ErrorClass::Cancelled, message))
            }
            Resolution::TimedOut => {
                let message = format!(
                    "Nobody answered the confirmation request for tool '{}' within {}; the call was not run.",
                    tool.name,
                    format_duration(timeout)
                );
                Err(self.fail(ErrorClass::ConfirmationTimeout, message))
            }
        }
    }

    /// Step 5: the runtime grant (where and within which limits the call runs).
    fn grant(&self, tool: &Registered, input: &Value) -> Result<Grant, ToolResultBlock> {
        let config = &self.engine.settings.config;
        let base = Grant {
            sandbox: config.sandbox.mode_of(&tool.name),
            network: config.sandbox.network,
            timeout: self.timeout_for(tool),
            max_result_chars: per_tool(&config.tool_result_chars, &tool.name)
                .copied()
                .unwrap_or(config.max_result_chars),
        };
        let grant = match &self.engine.settings.runtime {
            None => base,
            Some(policy) => policy
                .grant(&self.view(tool, input), base)
                .map_err(|reason| {
                    let message =
                        format!("The runtime policy refused tool '{}': {reason}", tool.name);
                    self.fail(ErrorClass::PermissionDenied, message)
                })?,
        };
        crate::runtime::check_granted(grant.sandbox, self.engine.settings.remote.is_some())
            .map_err(|m| {
                let message = format!("Tool '{}' was not run: {m}.", tool.name);
                self.fail(ErrorClass::PermissionDenied, message)
            })?;
        Ok(grant)
    }

    fn timeout_for(&self, tool: &Registered) -> Duration {
        let config = &self.engine.settings.config;
        if let Some(t) = per_tool(&config.tool_timeouts, &tool.name) {
            return *t;
        }
        if let Some(ms) = tool.definition().timeout_ms {
            return Duration::from_millis(ms);
        }
        match tool.side_effects {
            SideEffect::Execute | SideEffect::Network => config.execute_timeout,
            _ => config.default_timeout,
        }
    }

    fn interrupt_behavior(&self, tool: &Registered) -> InterruptBehavior {
        per_tool(&self.engine.settings.config.interrupt, &tool.name)
            .copied()
            .unwrap_or(tool.definition().interrupt)
    }

    /// A new instance for one execution: from the tool's factory, or from the remote host
    /// for a call granted `remote`.
    fn fresh_instance(&self, tool: &Registered, grant: &Grant) -> Result<Box<dyn Tool>, Outcome> {
        match (&self.engine.settings.remote, grant.sandbox) {
            (Some(remote), SandboxMode::Remote) => {
                match panics::contain(|| remote.instance(&tool.name)) {
                    Ok(Ok(instance)) => Ok(instance),
                    Ok(Err(e)) => Err(Outcome::Returned(Err(e))),
                    Err(mut caught) => {
                        caught.message = format!("the remote host panicked: {}", caught.message);
                        Err(Outcome::Panicked(caught))
                    }
                }
            }
            _ => fresh_instance(tool),
        }
    }

    /// The call's host, as a tool running on this thread gets it.
    fn host(&self, grant: &Grant) -> CallHost {
        CallHost {
            call: self.header.clone(),
            workspace: self.session.state.workspace.clone(),
            sandbox: grant.sandbox,
            network: grant.network,
            inflight: self.entry().cloned(),
            span: Span::none(),
            output: None,
            budget: None,
            asker: None,
        }
    }

    /// Step 6 on this thread: an inline tool, or an attempt of an `inline_when_small` tool
    /// within the file budget. `Err` gives the input back: the call runs off-thread
    /// ([`Invocation::execute_off_thread`]), having done nothing here that counts (an
    /// attempt over the budget is discarded).
    fn execute_here(
        &mut self,
        tool: &Registered,
        input: Value,
        opened: Option<Opened>,
        grant: &Grant,
    ) -> Result<Outcome, Value> {
        // A call that runs on the remote host waits on the network: never on this thread.
        let attempt = grant.sandbox != SandboxMode::Remote
            && (tool.inline
                || (tool.inline_when_small
                    && self.session.state.workspace.allows_inline()
                    && !self.entry().is_some_and(|e| e.is_cancelled())));
        if !attempt {
            return Err(input);
        }
        let instance = match self.fresh_instance(tool, grant) {
            Ok(instance) => instance,
            Err(outcome) => return Ok(outcome),
        };
        let mut host = self.host(grant);
        if tool.inline {
            // Runs on this thread, already inside the call's span.
            let ctx = host.into_context();
            return Ok(match panics::contain(|| instance.execute(input, &ctx)) {
                Ok(r) => Outcome::Returned(r),
                Err(caught) => Outcome::Panicked(caught),
            });
        }
        // Over the budget, the attempt is discarded and the call runs again on a blocking
        // thread, with a fresh instance.
        let budget = Arc::new(InlineBudget::with_opened(opened));
        host.budget = Some(budget.clone());
        let ctx = host.into_context();
        let outcome = panics::contain(|| instance.execute(input.clone(), &ctx));
        if budget.exceeded() {
            return Err(input);
        }
        Ok(match outcome {
            Ok(r) => Outcome::Returned(r),
            Err(caught) => Outcome::Panicked(caught),
        })
    }

    /// Step 6 off this thread: a fresh instance on a blocking thread, under the timeout and
    /// the call's cancellation. Boxed where it is awaited: the state it keeps across its
    /// waits is most of a call's, and an inline call never needs it.
    async fn execute_off_thread(
        &mut self,
        tool: &Registered,
        input: Value,
        grant: &Grant,
    ) -> Outcome {
        let timeout = grant.timeout;
        let instance = match self.fresh_instance(tool, grant) {
            Ok(instance) => instance,
            Err(outcome) => return outcome,
        };
        let mut host = self.host(grant);
        let entry = self.register().clone();
        host.inflight = Some(entry.clone());
        host.span = Span::current();
        host.output = Some(self.sink());
        host.asker = Some(self.engine.clone());
        if entry.is_cancelled() {
            return Outcome::Cancelled(None);
        }
        if self.interrupt_behavior(tool) == InterruptBehavior::Block && !entry.shield() {
            // An interrupt came just before it started: it never starts.
            return Outcome::Cancelled(None);
        }
        let instance: Arc<dyn Tool> = Arc::from(instance);
        entry.set_tool(instance.clone());
        if entry.is_cancelled() {
            // Cancelled between the check above and `set_tool`: tell the tool itself.
            let _ = catch_unwind(AssertUnwindSafe(|| instance.cancel()));
        }
        let runner = instance.clone();
        let span = Span::current();
        // The blocking thread logs to the caller's subscriber, even a scoped one.
        let subscriber = tracing::dispatcher::get_default(Clone::clone);
        let quick = tool.run_times.usually_quick();
        let sent = Instant::now();
        let mut handle = blocking::spawn(
            move || {
                tracing::dispatcher::with_default(&subscriber, || {
                    let _entered = span.enter();
                    let ctx = host.into_context();
                    // Contained here, on the thread that panicked, where its backtrace is.
                    panics::contain(|| runner.execute(input, &ctx))
                })
            },
            quick,
        );
        let ended = |e: blocking::Ended<Result<Result<ToolOutput, ToolError>, Caught>>| match e {
            blocking::Ended::Returned(Ok(r)) => Outcome::Returned(r),
            blocking::Ended::Returned(Err(caught)) => Outcome::Panicked(caught),
            blocking::Ended::Panicked(payload) => Outcome::Panicked(Caught {
                message: tool_api::abi::panic_message(&*payload),
                backtrace: None,
            }),
            blocking::Ended::Lost => Outcome::Cancelled(None),
        };
        // A tool whose calls usually end within the spin budget: take its result without
        // yielding (and so without a wake-up). A cancellation or a timeout that comes
        // meanwhile is seen when the spin ends, at most CALLER_SPIN later.
        let outcome = if quick && let Some(e) = handle.spin(blocking::CALLER_SPIN) {
            ended(e)
        } else {
            tokio::select! {
                biased;
                e = &mut handle => ended(e),
                _ = entry.cancelled() => {
                    let grace = self.engine.settings.config.cancel_grace;
                    match tokio::time::timeout(grace, &mut handle).await {
                        Ok(blocking::Ended::Returned(Ok(Ok(out)))) => {
                            Outcome::Cancelled(Some(out))
                        }
                        Ok(_) => Outcome::Cancelled(None),
                        Err(_) => {
                            tracing::warn!(
                                grace_ms = ms(grace),
                                "tool '{}' did not stop within {} of being cancelled; abandoning it (its cleanup may still finish)",
                                tool.name,
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
        };
        // How long this tool takes off the async threads decides its next call's path.
        tool.run_times.record(sent.elapsed());
        outcome
    }

    /// Step 6, end: classify the outcome, emit the final event, build the block.
    /// `given_id` is the tool_use id as the caller gave it: a successful result takes it
    /// as it is (the other results, rarer, copy the header's).
    fn report(
        &self,
        tool: &Registered,
        outcome: Outcome,
        elapsed: Duration,
        given_id: String,
    ) -> ToolResultBlock {
        let name = &tool.name;
        let cancel_requested = self.is_cancelled();
        let redacted = |detail: &str, backtrace: Option<&str>| {
            match backtrace {
                Some(backtrace) => {
                    tracing::error!(detail, backtrace, "tool '{name}' failed unexpectedly")
                }
                None => tracing::error!(detail, "tool '{name}' failed unexpectedly"),
            }
            format!(
                "Tool '{name}' failed unexpectedly; the details are in the host log (tool_use_id {}).",
                self.header.tool_use_id
            )
        };
        match outcome {
            Outcome::Returned(Ok(out)) if out.success => {
                let record = SideEffectRecord::of(&out);
                self.emit(EventKind::Completed {
                    duration_ms: ms(elapsed),
                    record: record.clone(),
                });
                let mut block = ToolResultBlock::success("", out.content, out.metadata);
                block.tool_use_id = given_id;
                block.with_record(record)
            }
            Outcome::Returned(Ok(out)) if cancel_requested => self.cancelled(tool, Some(out)),
            Outcome::Returned(Ok(out)) => {
                self.emit(EventKind::Failed {
                    error_class: ErrorClass::ExecutionError,
                    message: out.text_content(),
                    duration_ms: self.elapsed_ms(),
                    partial_output: None,
                    cancel_reason: None,
                });
                let record = SideEffectRecord::of(&out);
                ToolResultBlock::failure(&self.header.tool_use_id, out.content, out.metadata)
                    .with_record(record)
            }
            Outcome::Returned(Err(ToolError::Cancelled(_))) | Outcome::Cancelled(None) => {
                self.cancelled(tool, None)
            }
            Outcome::Cancelled(Some(out)) => self.cancelled(tool, Some(out)),
            Outcome::Returned(Err(ToolError::Internal(detail))) => {
                self.fail(ErrorClass::ExecutionError, redacted(&detail, None))
            }
            Outcome::Returned(Err(e)) => self.fail(ErrorClass::of(&e), e.to_string()),
            Outcome::Panicked(caught) => self.fail(
                ErrorClass::ExecutionError,
                redacted(
                    &format!("panic: {}", caught.message),
                    caught.backtrace.as_deref(),
                ),
            ),
            Outcome::TimedOut(limit) => {
                let message = format!(
                    "Tool '{name}' exceeded its {} time limit and was stopped.",
                    format_duration(limit)
                );
                self.fail(ErrorClass::Timeout, message)
            }
        }
    }

    /// The result of a call cancelled while it executed, with what it produced so far.
    fn cancelled(&self, tool: &Registered, partial: Option<ToolOutput>) -> ToolResultBlock {
        let partial_text = partial
            .as_ref()
            .map(ToolOutput::text_content)
            .filter(|t| !t.is_empty());
        let entry = self.entry();
        let reason = entry.and_then(|e| e.reason());
        let mut message = cancel_message(&tool.name, reason, entry.and_then(|e| e.cause()), true);
        if let Some(p) = &partial_text {
            message.push_str("\nPartial output:\n");
            message.push_str(p);
        }
        let mut block = self.fail_with(ErrorClass::Cancelled, message, partial_text, reason);
        if let Some(out) = partial {
            block.record = SideEffectRecord::of(&out);
            block.metadata = out.metadata;
        }
        block
    }

    /// Step 7: post-use hooks, in order, each seeing the result as the ones before left it.
    async fn post_use(
        &self,
        tool: &Registered,
        input: &Value,
        mut block: ToolResultBlock,
    ) -> ToolResultBlock {
        for hook in &self.engine.settings.post_hooks {
            let decision = {
                let call = PostUseCall {
                    call: self.view(tool, input),
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
                    block.replace_content(vec![Content::text(text)], is_error);
                }
            }
        }
        block
    }
}

/// A new instance of the tool for one execution; a factory error or panic is the outcome.
fn fresh_instance(tool: &Registered) -> Result<Box<dyn Tool>, Outcome> {
    match panics::contain(|| tool.factory.create()) {
        Ok(Ok(instance)) => Ok(instance),
        Ok(Err(e)) => Err(Outcome::Returned(Err(e))),
        Err(mut caught) => {
            caught.message = format!("factory panicked: {}", caught.message);
            Err(Outcome::Panicked(caught))
        }
    }
}
