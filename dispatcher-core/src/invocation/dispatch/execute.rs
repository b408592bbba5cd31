//! Steps 5 and 6 of the pipeline: the runtime grant, then the run: inline on the
//! polling thread, or under the timeout and cancellation as the tool's own future
//! ([`Tool::execute_async`]) or on a blocking thread.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde_json::Value;
use tool_api::{InterruptBehavior, SideEffect, Tool, ToolError, ToolOutput};
use tracing::Span;

use super::{Outcome, format_duration, ms, per_tool};
use crate::blocking;
use crate::error::ErrorClass;
use crate::events::EventKind;
use crate::host::CallHost;
use crate::invocation::{Invocation, cancel_message};
use crate::panics::{self, Caught};
use crate::registry::Registered;
use crate::result::{SideEffectRecord, ToolResultBlock};
use tool_api::SandboxMode;

use crate::runtime::Grant;
use crate::workspace::{InlineBudget, Opened};

impl Invocation {
    /// Step 5: the runtime grant (where and within which limits the call runs).
    pub(super) fn grant(&self, tool: &Registered, input: &Value) -> Result<Grant, ToolResultBlock> {
        let config = &self.config;
        let base = Grant {
            sandbox: crate::config::sandbox_mode(&config.sandbox, &tool.name),
            network: config.sandbox.network.enabled,
            timeout: self.timeout_for(tool),
            max_result_chars: per_tool(&config.results.per_tool, &tool.name)
                .copied()
                .unwrap_or(config.results.max_chars),
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

    /// The call's timeout: the operator's per-tool entry; else the tool's own declaration,
    /// no longer than `max_timeout` (a tool does not give itself more time than the
    /// operator allows); else its class's.
    fn timeout_for(&self, tool: &Registered) -> Duration {
        let config = &self.config;
        if let Some(t) = per_tool(&config.timeouts.per_tool, &tool.name) {
            return *t;
        }
        if let Some(ms) = tool.definition().timeout_ms {
            let declared = Duration::from_millis(ms);
            if declared > config.timeouts.max {
                tracing::debug!(tool = %tool.name, declared_ms = ms, max_secs = config.timeouts.max.as_secs(), "a tool's declared timeout is longer than [timeouts] max_secs: bounded");
            }
            return declared.min(config.timeouts.max);
        }
        match tool.side_effects {
            SideEffect::Execute | SideEffect::Network => config.timeouts.execute,
            _ => config.timeouts.default,
        }
    }

    fn interrupt_behavior(&self, tool: &Registered) -> InterruptBehavior {
        per_tool(&self.config.interrupt, &tool.name)
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
            live: None,
            budget: None,
            asker: None,
        }
    }

    /// Step 6 on this thread: an inline tool, or an attempt of an `inline_when_small` tool
    /// within the file budget. `Err` gives the input back: the call runs off-thread
    /// ([`Invocation::execute_off_thread`]), having done nothing here that counts (an
    /// attempt over the budget is discarded).
    pub(super) fn execute_here(
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
        let outcome = panics::contain(|| instance.execute_ref(&input, &ctx));
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
    pub(super) async fn execute_off_thread(
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
        host.live = self.config.secrets.live(&tool.name);
        let live = host.live.clone();
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
        let ctx = host.into_context();
        let quick = tool.run_times.usually_quick();
        let sent = Instant::now();
        // A tool that can be woken when it is answered runs as a future on this thread;
        // any other on a blocking thread.
        let asked = instance.clone();
        let mut running = match panics::contain(move || asked.execute_async(input, ctx)) {
            Err(caught) => return Outcome::Panicked(caught),
            Ok(Ok(future)) => Running::Task(future),
            Ok(Err((input, ctx))) => {
                let span = Span::current();
                // The blocking thread logs to the caller's subscriber, even a scoped one.
                let subscriber = tracing::dispatcher::get_default(Clone::clone);
                Running::Thread(blocking::spawn(
                    move || {
                        tracing::dispatcher::with_default(&subscriber, || {
                            let _entered = span.enter();
                            // Contained here, on the thread that panicked, where its
                            // backtrace is.
                            panics::contain(|| instance.execute(input, &ctx))
                        })
                    },
                    quick,
                ))
            }
        };
        // A tool whose calls usually end within the spin budget: take its result without
        // yielding (and so without a wake-up). A cancellation or a timeout that comes
        // meanwhile is seen when the spin ends, at most CALLER_SPIN later.
        let spun = match &mut running {
            Running::Thread(handle) if quick => handle.spin(blocking::CALLER_SPIN).map(ended),
            _ => None,
        };
        let outcome = if let Some(outcome) = spun {
            outcome
        } else {
            tokio::select! {
                biased;
                outcome = &mut running => outcome,
                _ = entry.cancelled_here() => {
                    let grace = self.config.timeouts.cancel_grace;
                    match tokio::time::timeout(grace, &mut running).await {
                        Ok(Outcome::Returned(Ok(out))) => Outcome::Cancelled(Some(out)),
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
        // What the live output held back (a line not ended), shown now that it has ended.
        if let Some(rest) = live.map(|l| l.finish()).filter(|r| !r.is_empty()) {
            let sink = self.sink();
            if sink.wanted() {
                sink.emit(&self.header, EventKind::OutputDelta { chunk: rest });
            }
        }
        outcome
    }

    /// The result of a call cancelled while it executed, with what it produced so far.
    pub(super) fn cancelled(
        &self,
        tool: &Registered,
        partial: Option<ToolOutput>,
    ) -> ToolResultBlock {
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
}

/// A call off the async thread: a job on a blocking thread, or the tool's own future
/// ([`Tool::execute_async`]) polled here.
enum Running {
    Thread(blocking::Handle<Result<Result<ToolOutput, ToolError>, Caught>>),
    Task(tool_api::ToolFuture),
}

impl Future for Running {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match self.get_mut() {
            Running::Thread(handle) => Pin::new(handle).poll(cx).map(ended),
            // A panic in a poll is contained as a blocking call's is; the future is not
            // polled again (its outcome is ready).
            Running::Task(future) => match panics::contain(|| future.as_mut().poll(cx)) {
                Ok(Poll::Ready(result)) => Poll::Ready(Outcome::Returned(result)),
                Ok(Poll::Pending) => Poll::Pending,
                Err(caught) => Poll::Ready(Outcome::Panicked(caught)),
            },
        }
    }
}

/// How a blocking call ended, as an outcome.
fn ended(e: blocking::Ended<Result<Result<ToolOutput, ToolError>, Caught>>) -> Outcome {
    match e {
        blocking::Ended::Returned(Ok(r)) => Outcome::Returned(r),
        blocking::Ended::Returned(Err(caught)) => Outcome::Panicked(caught),
        blocking::Ended::Panicked(payload) => Outcome::Panicked(Caught {
            message: tool_api::abi::panic_message(&*payload),
            backtrace: None,
        }),
        blocking::Ended::Lost => Outcome::Cancelled(None),
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
