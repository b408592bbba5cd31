//! The per-call pipeline: look up, validate, scope, hooks and policy, grant, execute,
//! report. Each step is a method of the [`Invocation`] it works on.
//!
//! A step that ends the call returns `Err(ToolResultBlock)`: that block *is* the call's
//! result, moved once to the caller, so it is not boxed (boxing would allocate on every
//! early end to save a copy of a few words).
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Semaphore, SemaphorePermit};
use tool_api::{Content, ToolError, ToolOutput};
use tracing::Instrument;

use crate::confirmation::DecidedBy;
use crate::error::ErrorClass;
use crate::events::EventKind;
use crate::hooks::{PostDecision, PostUseCall};
use crate::invocation::Invocation;
use crate::panics::Caught;
use crate::policy::{Mode, PolicyDecision};
use crate::registry::Registered;
use crate::result::{SideEffectRecord, ToolResultBlock};
use crate::spool;
use crate::workspace::Opened;
use secrets::ArgumentsAction;

mod authorize;
mod execute;

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
        _ = entry.cancelled_here() => None,
        p = sem.acquire() => p.ok(),
    }
}

impl Invocation {
    /// Takes the call through the whole pipeline. Never fails: every outcome, including an
    /// unknown tool, invalid input, a denial, a timeout or a panic, is a result block.
    ///
    /// The future owns the call (it borrows nothing), so it can be spawned. It is the
    /// pipeline's own future, not one wrapped around it (an audited call's entry is
    /// written at the pipeline's end): a call's state is moved as few times as the caller
    /// moves it, and is as large as the pipeline's.
    pub fn run(mut self) -> impl Future<Output = ToolResultBlock> + Send + 'static {
        let span = match &self.engine.settings.spans {
            Some(spans) => spans.open(&self.header, self.trace_parent.as_deref()),
            None => tracing::info_span!(
                "tool_call",
                tool = %self.header.tool_name,
                tool_use_id = %self.header.tool_use_id,
                session = %self.header.session_id,
            ),
        };
        if !self.engine.settings.audit.is_empty() || self.engine.settings.spans.is_some() {
            // Audited: what the entry needs is taken now (the input is the model's, before
            // a hook may rewrite it), and the rest while the call runs.
            let settings = &self.engine.settings;
            let called = crate::audit::Called {
                instance: self.engine.instance.clone(),
                principal: self.session.state.principal.clone(),
                header: self.header.clone(),
                arguments_sha256: if settings.audit.iter().any(|s| s.reads_digest()) {
                    crate::audit::digest(&self.input)
                } else {
                    String::new()
                },
                started: self.started,
                started_ms: self.wall_ms,
                trace_parent: self.trace_parent.take(),
            };
            self.audited = Some(Box::new(crate::audit::Audited {
                called,
                trail: crate::audit::Trail::default(),
            }));
        }
        self.pipeline().instrument(span)
    }

    /// The call's audit entry, to every audit sink and its trace span (an audited call's
    /// last step, inside the call's span).
    fn audit(&mut self, block: &ToolResultBlock) {
        let Some(audited) = self.audited.take() else {
            return;
        };
        let crate::audit::Audited { called, trail } = *audited;
        let entry = trail.entry(called, block);
        let settings = &self.engine.settings;
        for sink in &settings.audit {
            sink.record(&entry);
        }
        if let Some(spans) = &settings.spans {
            spans.close(&tracing::Span::current(), &entry);
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
        let (decision, rules) = self.policy_decision(&tool);
        let keep_open = rules.is_none() && self.may_keep_open(&tool, &decision);
        let opened = self.scope(&tool, &input, keep_open)?;
        // 3a. Rules over the whole call, which see the arguments as scoped.
        let decision = match rules {
            Some(rules) => self.ruled(&tool, &input, &*rules, decision),
            None => decision,
        };
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
            let block = 'steps: {
                let (tool, input, decision, mut opened) = match self.prepare() {
                    Ok(prepared) => prepared,
                    Err(block) => break 'steps block,
                };

                // 3b. The caller's rate limits (no store round trip when none applies).
                if !self.config.limits.is_empty()
                    && let Err(block) = Box::pin(self.within_limits(&tool)).await
                {
                    break 'steps block;
                }

                // 4. Hooks and confirmation policy (a hook may rewrite the input).
                // With no hooks to ask, a call the policy lets run is authorized at once; the rest
                // (hooks, a prompt, a denial) is boxed where it is awaited, so a call that never
                // waits does not carry the state of one that does.
                let (input, authorized_by) = {
                    let authorized = if self.engine.settings.hooks.is_empty()
                        && decision.mode == Mode::Auto
                        && self.config.secrets.settings().arguments == ArgumentsAction::Off
                    {
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
                        Err(block) => break 'steps block,
                    }
                };

                // 5. The runtime grant.
                let grant = match self.grant(&tool, &input) {
                    Ok(grant) => grant,
                    Err(block) => break 'steps block,
                };

                // 6. Per-tool cap, session cap (or the tool's own), then execute.
                // A call that finds a place at once was queued for no time (and reads no clock).
                let mut queued: Option<Instant> = None;
                let state = self.session.state.clone();
                let tool_permit = match per_tool(&state.tool_caps, &tool.name) {
                    Some(sem) => match acquire(sem, &mut self, &mut queued).await {
                        Some(p) => Some(p),
                        None => break 'steps self.not_started(),
                    },
                    None => None,
                };
                // A toolset's tool with a cap of its own (a mounted server's) takes its place
                // there, not among the calls that run in this process.
                let own_cap = match (&tool.own_cap, &tool.origin) {
                    (Some(calls), Some((toolset, _))) => Some(state.own_cap(toolset, *calls)),
                    _ => None,
                };
                let cap = own_cap.as_deref().unwrap_or(&state.semaphore);
                let Some(_permit) = acquire(cap, &mut self, &mut queued).await else {
                    break 'steps self.not_started();
                };
                let _tool_permit = tool_permit;
                if queued.is_some() {
                    // It waited for a place: the path is opened again when it runs, as it is then.
                    opened = None;
                }
                if self.is_cancelled() {
                    // Interrupted while it waited for a hook, a prompt or a place: it never starts.
                    break 'steps self.not_started();
                }
                if !tool.inline {
                    // Registered before `tool.called`, so a cancel that follows the event reaches it.
                    self.register();
                }
                let post_input =
                    (!self.engine.settings.post_hooks.is_empty()).then(|| input.clone());
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
                let slow = self.config.timeouts.slow_call_warn;
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
                // 7b. Secrets: redacted, or the result withheld, before it leaves.
                let (scanned, action, seen) = self.config.secrets.in_result(&tool.name, block);
                block = scanned;
                if !seen.is_empty() {
                    tracing::warn!(
                        tool = %tool.name,
                        action = %action,
                        "secrets found in the result: {}",
                        crate::redaction::summary(&seen)
                    );
                    self.emit(EventKind::SecretsFound {
                        action: action.to_string(),
                        secrets: seen,
                    });
                }
                spool::cap(
                    block,
                    grant.max_result_chars,
                    self.config.results.preview_chars,
                    &state.data_dir,
                    state.workspace.root(),
                )
            };
            self.audit(&block);
            block
        }
    }

    /// Step 3b: counts the call against its caller's rate limits.
    async fn within_limits(&self, tool: &Registered) -> Result<(), ToolResultBlock> {
        let state = &self.session.state;
        crate::limits::count(
            &self.config.limits,
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

    /// What the confirmation policy (the session's, else the dispatcher's) says of the
    /// tool, narrowed by its caller's access rule; and the rules over whole calls, if any.
    fn policy_decision(
        &self,
        tool: &Registered,
    ) -> (PolicyDecision, Option<Arc<dyn crate::rules::CallRules>>) {
        let state = &self.session.state;
        let live = self.engine.live();
        let policy = state.policy.as_ref().unwrap_or(&live.policy);
        let decision = policy.decide(&tool.name, tool.side_effects, state.workspace.root());
        let decision = match &state.access().narrowing {
            Some(narrowing) => narrowing.narrow(decision, &tool.name, tool.side_effects),
            None => decision,
        };
        (decision, live.rules.clone())
    }

    /// Step 3a: `decision` narrowed by the rules' verdict on the call. The verdict names
    /// the decision when it is as strict or stricter.
    fn ruled(
        &self,
        tool: &Registered,
        input: &Value,
        rules: &dyn crate::rules::CallRules,
        decision: PolicyDecision,
    ) -> PolicyDecision {
        if decision.mode == Mode::Deny {
            return decision;
        }
        let state = &self.session.state;
        let scoped =
            crate::rules::scoped_arguments(&tool.definition().path_params, input, |path| {
                let rel = state.workspace.resolve(path).ok()?;
                Some(rel.to_string_lossy().into_owned())
            });
        let call = crate::rules::RuleCall {
            caller: state.caller(),
            tool: tool.for_rules(),
            arguments: scoped.as_ref().unwrap_or(input),
            request: self.header.extensions.get::<crate::rules::RequestFacts>(),
        };
        let verdict = rules.decide(&call);
        if verdict.mode < decision.mode {
            return decision;
        }
        PolicyDecision {
            mode: verdict.mode,
            rule: verdict.rule.to_string().into(),
            explicit: true,
            from_rules: Some(verdict.advice),
        }
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
