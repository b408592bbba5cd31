//! Running the calls of one assistant message: a [`Batch`], fed as the model streams its
//! `tool_use` blocks, that starts each call as soon as the rules allow.
//!
//! # The rules
//!
//! - Each call is **concurrency-safe or not, judged per call** from its input
//!   ([`tool_api::ToolFactory::is_concurrency_safe`]; by default `none` and `read` tools
//!   are safe, the rest not). A call whose input fails validation counts as unsafe; a call
//!   of an unknown tool counts as safe (it fails at once).
//! - Safe calls run in parallel; an unsafe call runs alone, and calls keep their relative
//!   order around it: `[read, read, write, read]` runs both reads, then the write once both
//!   are done, then the last read once the write is done. Two writes never race.
//! - Within that, the session's concurrency cap (default 4) and the per-tool caps
//!   ([`crate::DispatcherConfig::tool_concurrency`]) bound how many execute at once.
//! - Results are always available in call order ([`Batch::finish`]), or one by one as they
//!   complete ([`Batch::next_completed`]).
//! - When an `execute` call fails (`execution_error` or `timeout`) and the dispatcher is
//!   configured with [`OnExecuteError::CancelSiblings`], every other unfinished call of the
//!   batch is cancelled, and so is every call pushed after: their results say
//!   `cancel_reason: sibling_error` and name the call that failed.
//! - [`Batch::abort`], or dropping the batch before [`Batch::finish`], cancels what has not
//!   finished; calls that never started get synthetic `cancelled` results (`aborted`).
//!   A user interrupt ([`Dispatcher::cancel_session_tools`]) does the same with reason
//!   `user`. A running call of an `interrupt = block` tool runs to completion either way.
//!
//! ```
//! use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dispatcher = Dispatcher::new();
//! # dispatcher.register(tool_api::factory::<Nop>()).unwrap();
//! let session = dispatcher.open_session(SessionSpec::new("s", std::env::temp_dir())).unwrap();
//! let batch = dispatcher.batch(&session);
//! // As the model streams its answer:
//! batch.push(ToolUse::new("tu_1", "nop", json!({})));
//! batch.push(ToolUse::new("tu_2", "nop", json!({})));
//! // Take results as they complete…
//! let first = batch.next_completed().await.unwrap();
//! # assert!(!first.is_error);
//! // …or all of them, in call order, at the end.
//! let all = batch.finish().await;
//! assert_eq!(all.iter().map(|r| r.tool_use_id.as_str()).collect::<Vec<_>>(), ["tu_1", "tu_2"]);
//! # });
//! # #[derive(Default)] struct Nop;
//! # impl tool_api::Tool for Nop { fn execute(&self, _: serde_json::Value, _: &tool_api::ToolContext) -> Result<tool_api::ToolOutput, tool_api::ToolError> { Ok(tool_api::ToolOutput::text("ok")) } }
//! # impl tool_api::DefinedTool for Nop { fn definition() -> tool_api::ToolDefinition { tool_api::ToolDefinition::new("nop", "No-op.", tool_api::SideEffect::None, json!({"type": "object"})).inline() } }
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tool_api::SideEffect;

use crate::Dispatcher;
use crate::dispatch::Resolved;
use crate::error::{CancelReason, ErrorClass};
use crate::result::{ToolResultBlock, ToolUse};
use crate::session::{InFlight, Session};

/// What a failed `execute` call does to the other calls of its batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExecuteError {
    /// Nothing: the other calls go on (the default).
    #[default]
    Continue,
    /// Cancel every other unfinished call of the batch (reason `sibling_error`).
    CancelSiblings,
}

impl OnExecuteError {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExecuteError::Continue => "continue",
            OnExecuteError::CancelSiblings => "cancel_siblings",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Waiting,
    Running,
    Done,
}

struct Entry {
    call: Option<ToolUse>,
    /// The tool as resolved at push time, and whether the input was valid (`None`: not
    /// found).
    resolved: Option<Resolved>,
    safe: bool,
    control: Arc<InFlight>,
    status: Status,
    result: Option<ToolResultBlock>,
}

#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    /// Every entry before this index is done (where scheduling starts looking).
    done_prefix: usize,
    /// Indexes of finished calls not yet handed out by `next_completed`.
    completed: VecDeque<usize>,
    /// Set once an `execute` call failed under `cancel_siblings`: what failed.
    sibling_failure: Option<String>,
    /// Set once the batch was aborted or dropped (`aborted`), or its session interrupted
    /// by the user (`user`): calls pushed later do not run either.
    interrupted: Option<CancelReason>,
    /// Set once `finish` or `abort` took the results.
    closed: bool,
}

type CallFuture = Pin<Box<dyn Future<Output = ToolResultBlock> + Send>>;

struct Start {
    index: usize,
    call: ToolUse,
    control: Arc<InFlight>,
    resolved: Option<Resolved>,
}

pub(crate) struct Shared {
    dispatcher: Dispatcher,
    session: Session,
    handle: tokio::runtime::Handle,
    state: Mutex<State>,
    changed: Notify,
}

/// The calls of one assistant message, added as the model streams them. See the
/// [module docs](self) for the rules. Made by [`Dispatcher::batch`].
///
/// Dropping a batch before [`Batch::finish`] aborts it (see [`Batch::abort`]).
pub struct Batch {
    shared: Arc<Shared>,
}

// An agent loop moves its batch between tasks.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Batch>();
};

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Batch")
            .field("session", &self.shared.session.id())
            .field("calls", &st.entries.len())
            .field(
                "finished",
                &st.entries
                    .iter()
                    .filter(|e| e.status == Status::Done)
                    .count(),
            )
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls that may start now, marked running.
    fn schedule(&self, st: &mut State) -> Vec<Start> {
        let mut starts = Vec::new();
        while st
            .entries
            .get(st.done_prefix)
            .is_some_and(|e| e.status == Status::Done)
        {
            st.done_prefix += 1;
        }
        let mut all_before_done = true;
        let mut unsafe_before_unfinished = false;
        let first = st.done_prefix;
        for (index, e) in st.entries.iter_mut().enumerate().skip(first) {
            if e.status == Status::Waiting {
                let may_start = if e.safe {
                    !unsafe_before_unfinished
                } else {
                    all_before_done
                };
                if !may_start {
                    // Nothing after a call that must wait can overtake it.
                    break;
                }
                if let Some(call) = e.call.take() {
                    e.status = Status::Running;
                    starts.push(Start {
                        index,
                        call,
                        control: e.control.clone(),
                        resolved: e.resolved.clone(),
                    });
                }
            }
            if e.status != Status::Done {
                all_before_done = false;
                unsafe_before_unfinished |= !e.safe;
            }
        }
        starts
    }

    /// A user interrupt of the session: everything unfinished is cancelled (reason `user`),
    /// and so is everything pushed later. Returns how many calls that had not started it
    /// cancelled (the running ones are in the session's in-flight list).
    pub(crate) fn interrupt(&self) -> usize {
        let n = {
            let mut st = self.lock();
            if st.closed || st.interrupted.is_some() {
                return 0;
            }
            st.interrupted = Some(CancelReason::User);
            let n = st
                .entries
                .iter()
                .filter(|e| e.status == Status::Waiting)
                .count();
            self.cancel_unfinished(&mut st, CancelReason::User, None);
            n
        };
        self.changed.notify_waiters();
        n
    }

    /// Cancels every unfinished call: those waiting get a synthetic result at once, those
    /// running are interrupted.
    fn cancel_unfinished(&self, st: &mut State, reason: CancelReason, cause: Option<&str>) {
        for index in 0..st.entries.len() {
            let e = &mut st.entries[index];
            match e.status {
                Status::Done => {}
                Status::Running => e.control.interrupt(reason, cause),
                Status::Waiting => {
                    let call = e.call.take().unwrap_or_else(|| {
                        ToolUse::new(&*e.control.tool_use_id, "", serde_json::Value::Null)
                    });
                    e.result =
                        Some(
                            self.dispatcher
                                .never_started(&call, &self.session, reason, cause),
                        );
                    e.status = Status::Done;
                    st.completed.push_back(index);
                }
            }
        }
    }

    /// Records a finished call, applies `cancel_siblings`, and returns what may start now.
    fn complete(&self, index: usize, result: ToolResultBlock) -> Vec<Start> {
        let starts = {
            let mut st = self.lock();
            let e = &mut st.entries[index];
            let failed_execute = e
                .resolved
                .as_ref()
                .is_some_and(|r| r.reg.side_effects == SideEffect::Execute)
                && result.is_error
                && matches!(
                    result.error_class,
                    Some(ErrorClass::ExecutionError | ErrorClass::Timeout)
                );
            e.result = Some(result);
            e.status = Status::Done;
            st.completed.push_back(index);
            if failed_execute
                && st.sibling_failure.is_none()
                && self.dispatcher.inner.config.on_execute_error == OnExecuteError::CancelSiblings
            {
                let e = &st.entries[index];
                let cause = format!(
                    "call {} ({}) in the same batch failed",
                    e.control.tool_use_id,
                    e.resolved.as_ref().map_or("?", |r| &*r.reg.name)
                );
                st.sibling_failure = Some(cause.clone());
                self.cancel_unfinished(&mut st, CancelReason::SiblingError, Some(&cause));
            }
            self.schedule(&mut st)
        };
        self.changed.notify_waiters();
        starts
    }

    /// Starts calls: each is polled once right here (an inline tool finishes without a
    /// task), and only a call that has to wait becomes a task of its own.
    fn launch(self: &Arc<Self>, starts: Vec<Start>) {
        let mut queue: VecDeque<Start> = starts.into();
        let _entered = self.handle.enter();
        while let Some(Start {
            index,
            call,
            control,
            resolved,
        }) = queue.pop_front()
        {
            let dispatcher = self.dispatcher.clone();
            let session = self.session.clone();
            let id = control.tool_use_id.clone();
            let mut fut: CallFuture = Box::pin(async move {
                dispatcher
                    .dispatch_controlled(call, &session, Some(control), resolved)
                    .await
            });
            match poll_call(&mut fut, &mut Context::from_waker(Waker::noop()), &id) {
                Poll::Ready(result) => queue.extend(self.complete(index, result)),
                Poll::Pending => {
                    let shared = self.clone();
                    self.handle.spawn(async move {
                        let result = std::future::poll_fn(|cx| poll_call(&mut fut, cx, &id)).await;
                        let more = shared.complete(index, result);
                        shared.launch(more);
                    });
                }
            }
        }
    }
}

/// Polls a call; a panic in the pipeline (a bug, never a tool's: those are contained
/// deeper) ends the call with an `execution_error` instead of leaving its batch waiting.
fn poll_call(fut: &mut CallFuture, cx: &mut Context<'_>, id: &str) -> Poll<ToolResultBlock> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
        Ok(poll) => poll,
        Err(payload) => {
            tracing::error!(
                tool_use_id = id,
                panic = %tool_api::abi::panic_message(&*payload),
                "the dispatcher panicked while running a call"
            );
            Poll::Ready(ToolResultBlock::error(
                id,
                ErrorClass::ExecutionError,
                format!(
                    "The call {id} failed unexpectedly inside the host; the details are in the host log."
                ),
            ))
        }
    }
}

impl Dispatcher {
    /// A new, empty batch for the calls of one assistant message in `session`.
    /// Must be called inside a tokio runtime; its calls run on that runtime.
    pub fn batch(&self, session: &Session) -> Batch {
        let shared = Arc::new(Shared {
            dispatcher: self.clone(),
            session: session.clone(),
            handle: tokio::runtime::Handle::current(),
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        });
        session.state.add_batch(&shared);
        Batch { shared }
    }

    /// Resolves a call's tool and judges whether it is concurrency-safe.
    fn classify(&self, call: &ToolUse, session: &Session) -> (Option<Resolved>, bool) {
        match self.lookup(&call.name, &session.state) {
            // An unknown tool fails at once, so it can run with anything.
            None => (None, true),
            Some(reg) => {
                let valid = reg.validator.is_valid(&call.input);
                // A tool that panics while judging counts as unsafe.
                let safe = valid
                    && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        reg.factory.is_concurrency_safe(&call.input)
                    }))
                    .unwrap_or(false);
                (Some(Resolved { reg, valid }), safe)
            }
        }
    }

    /// Runs the calls of one assistant message and returns their results in call order:
    /// a [`Batch`] with every call pushed at once.
    pub async fn dispatch_batch(
        &self,
        calls: Vec<ToolUse>,
        session: &Session,
    ) -> Vec<ToolResultBlock> {
        let batch = self.batch(session);
        for call in calls {
            batch.push(call);
        }
        batch.finish().await
    }
}

impl Batch {
    /// Adds a call (as soon as the model has streamed it); it starts at once if the rules
    /// allow. After an abort, or a sibling failure under `cancel_siblings`, the call gets a
    /// `cancelled` result without running.
    pub fn push(&self, call: ToolUse) {
        let (resolved, safe) = self.shared.dispatcher.classify(&call, &self.shared.session);
        let starts = {
            let mut st = self.shared.lock();
            let index = st.entries.len();
            let refused = if let Some(reason) = st.interrupted {
                Some((reason, None))
            } else {
                st.sibling_failure
                    .clone()
                    .map(|cause| (CancelReason::SiblingError, Some(cause)))
            };
            let mut entry = Entry {
                control: Arc::new(InFlight::new(Arc::from(call.id.as_str()))),
                call: None,
                resolved,
                safe,
                status: Status::Waiting,
                result: None,
            };
            if let Some((reason, cause)) = refused {
                entry.result = Some(self.shared.dispatcher.never_started(
                    &call,
                    &self.shared.session,
                    reason,
                    cause.as_deref(),
                ));
                entry.status = Status::Done;
                st.entries.push(entry);
                st.completed.push_back(index);
                Vec::new()
            } else {
                entry.call = Some(call);
                st.entries.push(entry);
                self.shared.schedule(&mut st)
            }
        };
        self.shared.changed.notify_waiters();
        self.shared.launch(starts);
    }

    /// How many calls were pushed.
    pub fn len(&self) -> usize {
        self.shared.lock().entries.len()
    }

    /// Whether no call was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next result to complete that was not handed out yet, in completion order;
    /// `None` once every pushed call's result was handed out. Results handed out here are
    /// still part of [`Batch::finish`]'s list.
    pub async fn next_completed(&self) -> Option<ToolResultBlock> {
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.shared.lock();
                if let Some(index) = st.completed.pop_front() {
                    return st.entries[index].result.clone();
                }
                if st.entries.iter().all(|e| e.status == Status::Done) {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Waits for every call and returns all results in call order.
    pub async fn finish(self) -> Vec<ToolResultBlock> {
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.shared.lock();
                if st.entries.iter().all(|e| e.status == Status::Done) {
                    st.closed = true;
                    return st
                        .entries
                        .iter_mut()
                        .map(|e| {
                            e.result.take().unwrap_or_else(|| {
                                ToolResultBlock::error(
                                    &e.control.tool_use_id,
                                    ErrorClass::ExecutionError,
                                    "the result of this call was lost",
                                )
                            })
                        })
                        .collect();
                }
            }
            notified.await;
        }
    }

    /// Cancels every unfinished call (reason `aborted`), waits until each has reported,
    /// and returns all results in call order. Calls that never started get synthetic
    /// `cancelled` results; a running `interrupt = block` call runs to completion.
    pub async fn abort(self) -> Vec<ToolResultBlock> {
        self.abort_now();
        self.finish().await
    }

    fn abort_now(&self) {
        {
            let mut st = self.shared.lock();
            if st.closed || st.interrupted == Some(CancelReason::Aborted) {
                return;
            }
            st.interrupted = Some(CancelReason::Aborted);
            self.shared
                .cancel_unfinished(&mut st, CancelReason::Aborted, None);
        }
        self.shared.changed.notify_waiters();
    }
}

impl Drop for Batch {
    /// Aborts what has not finished (without waiting): nothing keeps running unseen.
    fn drop(&mut self) {
        self.abort_now();
    }
}
