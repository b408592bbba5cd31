//! Running the calls of one assistant message: the rules are on [`Batch`].

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;
use tool_api::SideEffect;

use crate::config::OnExecuteError;
use crate::engine::Engine;
use crate::error::{CancelReason, ErrorClass};
use crate::invocation::Invocation;
use crate::result::{ToolResultBlock, ToolUse};
use crate::session::{InFlight, Interruptible, Session};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Waiting,
    Running,
    Done,
}

struct Entry {
    /// The call, until it starts (or is cancelled before it could).
    call: Option<Invocation>,
    /// Whether it may run alongside other safe calls.
    safe: bool,
    /// Whether it is a call of an `execute` tool (whose failure may cancel its siblings).
    executes: bool,
    /// The tool's published name, for messages.
    tool_name: Arc<str>,
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
    call: Invocation,
}

struct Shared {
    engine: Arc<Engine>,
    session: Session,
    handle: tokio::runtime::Handle,
    state: Mutex<State>,
    changed: Notify,
}

/// Running the calls of one assistant message: a [`Batch`], fed as the model streams its
/// `tool_use` blocks, that starts each call as soon as the rules allow.
///
/// # The rules
///
/// - Each call is **concurrency-safe or not, judged per call** from its input
///   ([`tool_api::ToolFactory::is_concurrency_safe`]; by default `none` and `read` tools
///   are safe, the rest not). A call whose input fails validation counts as unsafe; a call
///   of an unknown tool counts as safe (it fails at once).
/// - Safe calls run in parallel; an unsafe call runs alone, and calls keep their relative
///   order around it: `[read, read, write, read]` runs both reads, then the write once both
///   are done, then the last read once the write is done. Two writes never race.
/// - Within that, the session's concurrency cap (default 4) and the per-tool caps
///   ([`crate::DispatcherConfig::tool_concurrency`]) bound how many execute at once.
/// - Results are always available in call order ([`Batch::finish`]), or one by one as they
///   complete ([`Batch::next_completed`]).
/// - When an `execute` call fails (`execution_error` or `timeout`) and the dispatcher is
///   configured with [`OnExecuteError::CancelSiblings`], every other unfinished call of the
///   batch is cancelled, and so is every call pushed after: their results say
///   `cancel_reason: sibling_error` and name the call that failed.
/// - [`Batch::abort`], or dropping the batch before [`Batch::finish`], cancels what has not
///   finished; calls that never started get synthetic `cancelled` results (`aborted`).
///   A user interrupt ([`crate::Dispatcher::cancel_session_tools`]) does the same with reason
///   `user`. A running call of an `interrupt = block` tool runs to completion either way.
///
/// ```
/// use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
/// use serde_json::json;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let dispatcher = Dispatcher::new();
/// # dispatcher.register(tool_api::factory::<Nop>()).unwrap();
/// let session = dispatcher.open_session(SessionSpec::new("s", std::env::temp_dir())).unwrap();
/// let batch = dispatcher.batch(&session);
/// // As the model streams its answer:
/// batch.push(ToolUse::new("tu_1", "nop", json!({})));
/// batch.push(ToolUse::new("tu_2", "nop", json!({})));
/// // Take results as they complete…
/// let first = batch.next_completed().await.unwrap();
/// # assert!(!first.is_error());
/// // …or all of them, in call order, at the end.
/// let all = batch.finish().await;
/// assert_eq!(all.iter().map(|r| r.tool_use_id.as_str()).collect::<Vec<_>>(), ["tu_1", "tu_2"]);
/// # });
/// # #[derive(Default)] struct Nop;
/// # impl tool_api::Tool for Nop { fn execute(&self, _: serde_json::Value, _: &tool_api::ToolContext) -> Result<tool_api::ToolOutput, tool_api::ToolError> { Ok(tool_api::ToolOutput::text("ok")) } }
/// # impl tool_api::DefinedTool for Nop { fn definition() -> tool_api::ToolDefinition { tool_api::ToolDefinition::new("nop", "No-op.", tool_api::SideEffect::None, json!({"type": "object"})).inline() } }
/// ```
///
/// The calls of one assistant message, added as the model streams them. See the
/// rules above for the rules. Made by [`crate::Dispatcher::batch`].
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
                    starts.push(Start { index, call });
                }
            }
            if e.status != Status::Done {
                all_before_done = false;
                unsafe_before_unfinished |= !e.safe;
            }
        }
        starts
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
                    e.result = Some(match e.call.take() {
                        Some(call) => call.never_started(reason, cause),
                        None => ToolResultBlock::error(
                            &e.control.tool_use_id,
                            ErrorClass::Cancelled,
                            format!("Tool '{}' was cancelled before it started.", e.tool_name),
                        )
                        .with_cancel_reason(Some(reason)),
                    });
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
            let failed_execute = e.executes
                && matches!(
                    result.error_class,
                    Some(ErrorClass::ExecutionError | ErrorClass::Timeout)
                );
            e.result = Some(result);
            e.status = Status::Done;
            st.completed.push_back(index);
            if failed_execute
                && st.sibling_failure.is_none()
                && self.engine.config().on_execute_error == OnExecuteError::CancelSiblings
            {
                let e = &st.entries[index];
                let cause = format!(
                    "call {} ({}) in the same batch failed",
                    e.control.tool_use_id, e.tool_name
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
        while let Some(Start { index, call }) = queue.pop_front() {
            let id = call.header.tool_use_id.clone();
            let mut fut: CallFuture = Box::pin(call.run());
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

impl Interruptible for Shared {
    /// A user interrupt of the session: everything unfinished is cancelled (reason `user`),
    /// and so is everything pushed later. Returns how many calls that had not started it
    /// cancelled (the running ones are in the session's in-flight list).
    fn interrupt(&self) -> usize {
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

impl Batch {
    /// A new, empty batch for the calls of one assistant message in `session`, on the
    /// current tokio runtime.
    pub(crate) fn new(engine: &Arc<Engine>, session: &Session) -> Batch {
        let shared = Arc::new(Shared {
            engine: engine.clone(),
            session: session.clone(),
            handle: tokio::runtime::Handle::current(),
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        });
        let weak: std::sync::Weak<dyn Interruptible> = Arc::downgrade(&shared) as _;
        session.state.on_interrupt(weak);
        Batch { shared }
    }

    /// Adds a call (as soon as the model has streamed it); it starts at once if the rules
    /// allow. After an abort, or a sibling failure under `cancel_siblings`, the call gets a
    /// `cancelled` result without running.
    pub fn push(&self, call: ToolUse) {
        let mut call = Invocation::new(&self.shared.engine, &self.shared.session, call);
        let safe = call.judge_safety();
        let control = Arc::new(InFlight::new(call.header.tool_use_id.clone()));
        call.controlled_by(control.clone());
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
                control,
                call: None,
                safe,
                executes: call.header.side_effects == Some(SideEffect::Execute),
                tool_name: call.header.tool_name.clone(),
                status: Status::Waiting,
                result: None,
            };
            if let Some((reason, cause)) = refused {
                entry.result = Some(call.never_started(reason, cause.as_deref()));
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
