//! One call of an isolated tool: an `Execute` frame out, the tool's callbacks answered
//! through the call's own context, frames routed back until `Done`.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abi_stable::std_types::{RResult, RStr};
use dispatcher_core::RunTimes;
use serde_json::Value;
use tool_api::abi::{AbiError, OP_CONCURRENCY_SAFE};
use tool_api::{
    Level, Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolFuture, ToolOutput,
};

use super::process::Process;
use super::waiter::{Event, Inbox, Waiter};
use super::{PluginWorker, QUESTION_TIMEOUT, lock};
use crate::protocol::{CallIdentity, FromWorker, HostAnswer, HostOp, ToWorker, WireError};

/// Makes instances of one isolated plugin tool.
pub(crate) struct IsolatedToolFactory {
    pub(crate) worker: Arc<PluginWorker>,
    /// The plugin's definition, never `inline`: a call waits on the worker, so it runs
    /// where timeouts and cancellation reach it.
    pub(crate) definition: ToolDefinition,
    pub(crate) source: String,
    /// The plugin's version.
    pub(crate) version: String,
    pub(crate) per_call_safety: bool,
    /// How soon the worker has been answering this tool's calls run as futures.
    pub(crate) answer_times: Arc<RunTimes>,
}

impl ToolFactory for IsolatedToolFactory {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(IsolatedTool {
            worker: self.worker.clone(),
            name: self.definition.name.clone(),
            running: Mutex::new(Running::default()),
            answer_times: self.answer_times.clone(),
        }))
    }

    fn source(&self) -> &str {
        &self.source
    }

    fn version(&self) -> Option<&str> {
        Some(&self.version)
    }

    fn placement(&self) -> tool_api::Placement {
        self.worker.placement()
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        // Asked on the host's async thread: only a running worker is asked (a restart
        // belongs to the call, on its own thread); without one the definition decides.
        crate::adapter::judge_concurrency(&self.definition, self.per_call_safety, input, |p| {
            let process = self.worker.running()?;
            process.ask_plugin(OP_CONCURRENCY_SAFE, p, QUESTION_TIMEOUT)
        })
    }
}

#[derive(Default)]
struct Running {
    call: Option<(Arc<Process>, u64, Waiter)>,
    cancelled: bool,
}

/// One isolated call.
struct IsolatedTool {
    worker: Arc<PluginWorker>,
    name: String,
    running: Mutex<Running>,
    answer_times: Arc<RunTimes>,
}

fn tool_error(e: WireError) -> ToolError {
    AbiError {
        code: e.code,
        message: e.message.into(),
    }
    .into()
}

fn answer(ctx: &ToolContext, op: HostOp) -> Result<HostAnswer, WireError> {
    fn done<T>(
        r: RResult<T, AbiError>,
        f: impl FnOnce(T) -> HostAnswer,
    ) -> Result<HostAnswer, WireError> {
        match r {
            RResult::ROk(v) => Ok(f(v)),
            RResult::RErr(e) => Err(WireError {
                code: e.code,
                message: e.message.into_string(),
            }),
        }
    }
    let host = ctx.host();
    match op {
        HostOp::Read { path } => done(host.fs_read(path.as_str().into()), |t| {
            HostAnswer::Text(t.into_string())
        }),
        HostOp::ReadBytes { path } => done(host.fs_read_bytes(path.as_str().into()), |b| {
            HostAnswer::Bytes(b.into_vec())
        }),
        HostOp::Write { path, data } => done(
            host.fs_write(path.as_str().into(), data.as_slice().into()),
            |()| HostAnswer::Unit,
        ),
        HostOp::Append { path, data } => done(
            host.fs_append(path.as_str().into(), data.as_slice().into()),
            |()| HostAnswer::Unit,
        ),
        HostOp::Exists { path } => done(host.fs_exists(path.as_str().into()), HostAnswer::Bool),
        HostOp::List { path } => done(host.fs_list(path.as_str().into()), |n| {
            HostAnswer::Names(n.into_iter().map(|s| s.into_string()).collect())
        }),
        HostOp::Delete { path } => {
            done(host.fs_delete(path.as_str().into()), |()| HostAnswer::Unit)
        }
        HostOp::Patch { path, old, new } => done(
            host.fs_patch(
                path.as_str().into(),
                old.as_str().into(),
                new.as_str().into(),
            ),
            |()| HostAnswer::Unit,
        ),
        HostOp::Extension { name, payload } => done(
            host.extension(RStr::from(name.as_str()), RStr::from(payload.as_str())),
            |t| HostAnswer::Text(t.into_string()),
        ),
    }
}

/// How long a call's thread looks for the worker's first answer before it sleeps until it
/// comes: a little over a quick tool's round trip on the CI machine (50 µs for a raw one
/// between two processes). A slower tool costs this much spinning once per call.
const LOOK_FOR_ANSWER: Duration = Duration::from_micros(60);

/// The worker's first message, if `next` has it within [`LOOK_FOR_ANSWER`]: `Ok(None)`
/// while nothing came, `Err(())` once nothing can come (the channel is closed).
fn look_for_answer(mut next: impl FnMut() -> Result<Option<Event>, ()>) -> Option<Event> {
    let started = Instant::now();
    loop {
        match next() {
            Ok(Some(event)) => return Some(event),
            Err(()) => return None,
            Ok(None) if started.elapsed() > LOOK_FOR_ANSWER => return None,
            Ok(None) => std::hint::spin_loop(),
        }
    }
}

impl IsolatedTool {
    /// The frame that starts `call`.
    fn execute_frame(&self, call: u64, input: Value, ctx: &ToolContext) -> ToWorker {
        let log_level = (1..=5u8)
            .rev()
            .find(|&l| ctx.log().enabled(Level::from_code(l)))
            .unwrap_or(0);
        ToWorker::Execute {
            call,
            tool: self.name.clone(),
            input,
            identity: CallIdentity {
                session_id: ctx.session_id().into(),
                turn_id: ctx.turn_id().into(),
                tool_use_id: ctx.tool_use_id().into(),
                workspace_root: ctx.workspace_root().into(),
            },
            log_level,
        }
    }

    /// Waits on this thread for the end of `call`, answering the tool's callbacks through
    /// `ctx`; with `deadline`, the call was cancelled and the worker is killed if it has not
    /// stopped by then.
    fn wait(
        &self,
        process: &Process,
        call: u64,
        rx: &mpsc::Receiver<Event>,
        ctx: &ToolContext,
        mut first: Option<Event>,
        mut deadline: Option<Instant>,
    ) -> Result<ToolOutput, ToolError> {
        let grace = self.worker.settings.cancel_grace;
        loop {
            let event = match (first.take(), deadline) {
                (Some(event), _) => Ok(event),
                (None, None) => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                (None, Some(d)) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            match event {
                Ok(Event::Frame(FromWorker::Host { request, op, .. })) => {
                    let result = answer(ctx, op);
                    let _ = process.send(&ToWorker::HostReply {
                        call,
                        request,
                        result,
                    });
                }
                Ok(Event::Frame(FromWorker::Log { level, message, .. })) => {
                    ctx.host().log(level, message.as_str().into());
                }
                Ok(Event::Frame(FromWorker::Output { chunk, .. })) => ctx.output(&chunk),
                Ok(Event::Frame(FromWorker::Done { result, .. })) => {
                    self.worker.call_finished();
                    return result.map_err(tool_error);
                }
                Ok(Event::Frame(_)) => {}
                Ok(Event::Died(cause)) => return Err(ToolError::failed(cause)),
                Ok(Event::Cancel) => {
                    if deadline.is_none() {
                        let _ = process.send(&ToWorker::Cancel { call });
                        deadline = Some(Instant::now() + grace);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    deadline = None;
                    process.kill(format!(
                        "tool '{}' did not stop within {} ms of being cancelled",
                        self.name,
                        grace.as_millis()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ToolError::failed(process.cause()));
                }
            }
        }
    }
}

impl Tool for IsolatedTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let process = self.worker.process().map_err(ToolError::failed)?;
        let call = process.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        if !process.register(call, Waiter::Thread(tx.clone())) {
            return Err(ToolError::failed(process.cause()));
        }
        let cancelled = {
            let mut running = lock(&self.running);
            running.call = Some((process.clone(), call, Waiter::Thread(tx)));
            running.cancelled
        };
        let _unregister = Unregister(&process, call);
        let execute = self.execute_frame(call, input, ctx);
        if let Err(e) = process.send(&execute) {
            // The reader notices the death and explains it; wait for that.
            tracing::debug!(plugin = %process.plugin, "cannot send a call to the worker: {e}");
        }
        if cancelled {
            let _ = process.send(&ToWorker::Cancel { call });
        }
        let deadline = cancelled.then(|| Instant::now() + self.worker.settings.cancel_grace);
        // The first answer of a quick tool comes within a round trip: looked for before
        // this thread sleeps, it costs no wake-up.
        let first = look_for_answer(|| match rx.try_recv() {
            Ok(event) => Ok(Some(event)),
            Err(mpsc::TryRecvError::Empty) => Ok(None),
            Err(mpsc::TryRecvError::Disconnected) => Err(()),
        });
        self.wait(&process, call, &rx, ctx, first, deadline)
    }

    /// A call to a running worker, not yet cancelled, whose frame the socket takes at once:
    /// sent from the host's async thread, its answer wakes that thread (the worker's reader
    /// thread routes it), with no blocking thread in between. Otherwise (the worker must
    /// start first, the frame is large, the worker has not read what it was sent) the call
    /// takes [`Tool::execute`] on a blocking thread.
    fn execute_async(
        self: Arc<Self>,
        input: Value,
        ctx: ToolContext,
    ) -> Result<ToolFuture, (Value, ToolContext)> {
        let Some(process) = self.worker.running() else {
            return Err((input, ctx));
        };
        let call = process.next.fetch_add(1, Ordering::Relaxed);
        let inbox = Arc::new(Inbox::default());
        {
            let mut running = lock(&self.running);
            if running.cancelled || !process.register(call, Waiter::Task(inbox.clone())) {
                return Err((input, ctx));
            }
            running.call = Some((process.clone(), call, Waiter::Task(inbox.clone())));
        }
        let mut execute = self.execute_frame(call, input, &ctx);
        match process.send_now(&execute) {
            Ok(true) => {}
            Ok(false) => {
                process.unregister(call);
                lock(&self.running).call = None;
                let input = match &mut execute {
                    ToWorker::Execute { input, .. } => std::mem::take(input),
                    _ => Value::Null,
                };
                return Err((input, ctx));
            }
            // The reader notices the death and explains it (`Died`); wait for that.
            Err(e) => {
                tracing::debug!(plugin = %process.plugin, "cannot send a call to the worker: {e}");
            }
        }
        let call = AsyncCall {
            tool: self,
            process,
            call,
            inbox,
            ctx,
            finished: false,
            cancelled_at: None,
        };
        Ok(Box::pin(call.run()))
    }

    /// Only wakes the call's own thread (or task), which tells the worker: `cancel` is
    /// called from the host's async threads and must never wait on the socket.
    fn cancel(&self) -> bool {
        let mut running = lock(&self.running);
        running.cancelled = true;
        if let Some((_, _, waiter)) = &running.call {
            waiter.send(Event::Cancel);
        }
        true
    }
}

/// A call run as a future: it is woken by the worker's reader thread for each frame.
struct AsyncCall {
    tool: Arc<IsolatedTool>,
    process: Arc<Process>,
    call: u64,
    inbox: Arc<Inbox>,
    ctx: ToolContext,
    /// It has its outcome (the worker is done with the call, or gone).
    finished: bool,
    /// When it was told to stop.
    cancelled_at: Option<Instant>,
}

impl AsyncCall {
    async fn run(mut self) -> Result<ToolOutput, ToolError> {
        let sent = Instant::now();
        let answer_times = self.tool.answer_times.clone();
        // The first answer of a tool whose worker usually answers within a round trip is
        // looked for before this task yields: taken then, it costs no wake-up of this
        // thread, which on a VM is most of a round trip. This holds the async thread for
        // at most LOOK_FOR_ANSWER, and only for such a tool (as a quick blocking call's
        // caller looks for its result).
        let mut first = if answer_times.usually_within(LOOK_FOR_ANSWER) {
            look_for_answer(|| Ok(self.inbox.try_next()))
        } else {
            None
        };
        let mut timed = false;
        loop {
            let event = match first.take() {
                Some(event) => event,
                None => std::future::poll_fn(|cx| self.inbox.poll_next(cx)).await,
            };
            if !timed {
                timed = true;
                // When the answer came, not when this task took it: a task that slept
                // takes it a wake-up later, and would then never look again.
                let came = self.inbox.first_came().unwrap_or_else(Instant::now);
                answer_times.record(came.saturating_duration_since(sent));
            }
            match event {
                Event::Frame(FromWorker::Host { request, op, .. }) => {
                    // A callback may wait (a file, the user's approval of a write): answered
                    // on a blocking thread, as a blocking call answers it on its own.
                    let (ctx, process, call) = (self.ctx.clone(), self.process.clone(), self.call);
                    // That thread logs to this call's subscriber and span, even scoped ones.
                    let subscriber = tracing::dispatcher::get_default(Clone::clone);
                    let span = tracing::Span::current();
                    let replied = tokio::task::spawn_blocking(move || {
                        tracing::dispatcher::with_default(&subscriber, || {
                            let _entered = span.enter();
                            let result = answer(&ctx, op);
                            let _ = process.send(&ToWorker::HostReply {
                                call,
                                request,
                                result,
                            });
                        })
                    })
                    .await;
                    if let Err(e) = replied
                        && e.is_panic()
                    {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
                Event::Frame(FromWorker::Log { level, message, .. }) => {
                    self.ctx.host().log(level, message.as_str().into());
                }
                Event::Frame(FromWorker::Output { chunk, .. }) => self.ctx.output(&chunk),
                Event::Frame(FromWorker::Done { result, .. }) => {
                    self.finished = true;
                    self.tool.worker.call_finished();
                    return result.map_err(tool_error);
                }
                Event::Frame(_) => {}
                Event::Died(cause) => {
                    self.finished = true;
                    return Err(ToolError::failed(cause));
                }
                Event::Cancel => {
                    if self.cancelled_at.is_none() {
                        self.cancelled_at = Some(Instant::now());
                        self.tell_worker_to_stop();
                    }
                }
            }
        }
    }

    /// Sends `Cancel`, from a thread of its own if the socket cannot take it at once.
    fn tell_worker_to_stop(&self) {
        let cancel = ToWorker::Cancel { call: self.call };
        if !matches!(self.process.send_now(&cancel), Ok(true)) {
            let process = self.process.clone();
            let _ = std::thread::Builder::new()
                .name("plugin-cancel".into())
                .spawn(move || process.send(&cancel));
        }
    }
}

impl Drop for AsyncCall {
    /// Abandoned before its end (its timeout, a cancellation the host stopped waiting for,
    /// a caller gone): a thread of its own tells the worker to stop and kills it if it has
    /// not stopped within the grace period, as a blocking call's thread does.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let (tx, rx) = mpsc::channel();
        if !self.process.register(self.call, Waiter::Thread(tx.clone())) {
            return;
        }
        // From here the reader sends to the thread; what it sent before (the call's end,
        // a callback the worker waits on) goes there first, in order.
        for event in self.inbox.drain() {
            let _ = tx.send(event);
        }
        {
            let mut running = lock(&self.tool.running);
            running.cancelled = true;
            running.call = Some((self.process.clone(), self.call, Waiter::Thread(tx)));
        }
        let grace = self.tool.worker.settings.cancel_grace;
        let deadline = self.cancelled_at.unwrap_or_else(Instant::now) + grace;
        let tell = self.cancelled_at.is_none();
        let (tool, process, call, ctx) = (
            self.tool.clone(),
            self.process.clone(),
            self.call,
            self.ctx.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("plugin-stop-{}", process.plugin))
            .spawn(move || {
                let _unregister = Unregister(&process, call);
                // A worker whose socket cannot take the frame is not reading: it could not
                // see it, and is killed at the deadline unless it ends the call first.
                if tell {
                    let _ = process.send_now(&ToWorker::Cancel { call });
                }
                let _ = tool.wait(&process, call, &rx, &ctx, None, Some(deadline));
            });
        if spawned.is_err() {
            self.process.kill(format!(
                "tool '{}' was abandoned and no thread could wait for it to stop",
                self.tool.name
            ));
            self.process.unregister(self.call);
        }
    }
}

struct Unregister<'a>(&'a Process, u64);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0.unregister(self.1);
    }
}
