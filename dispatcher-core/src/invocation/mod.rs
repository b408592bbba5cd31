//! One call, from the moment it enters the dispatcher until its result ([`Invocation`]).

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::call::{CallHeader, CallView};
use crate::engine::Engine;
use crate::error::{CancelReason, ErrorClass};
use crate::events::{self, CallEvents, EventKind, EventSink, ToolEvent};
use crate::registry::Registered;
use crate::result::{ToolResultBlock, ToolUse};
use crate::session::{CallGuard, InFlight, Session};

mod dispatch;

/// [`Invocation`]: one call, from the moment it enters the dispatcher until its result.
///
/// The value is made once per call, the same way for [`crate::Dispatcher::dispatch`] and
/// for a call pushed to a [`crate::Batch`]: it looks the tool up, fixes the call's identity
/// ([`CallHeader`]), and from then on carries everything the pipeline's steps need (the
/// session, the resolved tool, the input, the cancellation registration, the call's own
/// event stream). The steps are its methods (in the `dispatch` module); hooks, grants,
/// confirmation requests, the tool's context and every event borrow from it.
///
/// One call on its way through the dispatcher. Made by [`crate::Dispatcher::invocation`];
/// [`Invocation::run`] takes it through the pipeline to its result.
///
/// ```
/// use dispatcher_core::{Dispatcher, EventKind, SessionSpec, ToolUse};
/// use serde_json::json;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let dispatcher = Dispatcher::new();
/// let session = dispatcher.open_session(SessionSpec::new("s", std::env::temp_dir())).unwrap();
/// let mut call = dispatcher.invocation(ToolUse::new("tu_1", "nope", json!({})), &session);
/// // This call's events only (live output, confirmations, the end), whatever else runs.
/// let mut events = call.events();
/// let result = call.run().await;
/// assert!(result.is_error());
/// let event = events.recv().await.unwrap();
/// assert!(matches!(event.kind, EventKind::Failed { .. }));
/// # });
/// ```
pub struct Invocation {
    pub(crate) engine: Arc<Engine>,
    /// The dispatcher's configuration as it was when the call was made, read once: a
    /// reload while the call runs applies from the next call on.
    pub(crate) config: Arc<crate::config::DispatcherConfig>,
    pub(crate) session: Session,
    /// Who called which tool: shared by every event of the call.
    pub(crate) header: Arc<CallHeader>,
    /// The tool_use id as the caller gave it, kept for the result block (the header has
    /// its own shared copy): a call that succeeds moves it there instead of copying.
    pub(crate) given_id: String,
    /// The tool the name resolved to; `None`: not found.
    pub(crate) tool: Option<Arc<Registered>>,
    pub(crate) input: Value,
    /// The input was already found valid (a batch checks it when the call is pushed).
    pub(crate) validated: bool,
    pub(crate) started: Instant,
    /// The wall-clock time at `started`, in milliseconds since the epoch: events are
    /// stamped from it and the monotonic clock (one wall-clock read per call).
    pub(crate) wall_ms: u64,
    /// When the tool's execution ended, once it has: the final event's time.
    pub(crate) ended: Option<Instant>,
    observer: Option<mpsc::Sender<Arc<ToolEvent>>>,
    /// The cancellation entry a batch made for the call, before it started.
    control: Option<Arc<InFlight>>,
    /// The call's registration in its session, made at the first point it can wait.
    guard: Option<CallGuard>,
    /// What its audit entry needs: the call as it began, and what it learns while it
    /// runs; `None` without an audit sink or trace spans (boxed: a call moves whole, a
    /// few times).
    pub(crate) audited: Option<Box<crate::audit::Audited>>,
    /// The caller's W3C trace context, for the audit sinks ([`Invocation::trace_parent`]).
    pub(crate) trace_parent: Option<Arc<str>>,
}

impl std::fmt::Debug for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("call", &self.header)
            .finish_non_exhaustive()
    }
}

impl Invocation {
    /// The call `call` in `session`, its tool looked up among those the session sees.
    pub(crate) fn new(engine: &Arc<Engine>, session: &Session, call: ToolUse) -> Invocation {
        let ToolUse { id, name, input } = call;
        let tool = engine.lookup(&name, &session.state);
        let header = Arc::new(CallHeader {
            session_id: session.state.id.clone(),
            principal: session.state.principal.clone(),
            turn_id: session.turn_id.clone(),
            tool_use_id: Arc::from(id.as_str()),
            tool_name: tool
                .as_ref()
                .map_or_else(|| Arc::from(name), |t| t.name.clone()),
            side_effects: tool.as_ref().map(|t| t.side_effects),
            extensions: tool_api::Extensions::new(),
        });
        Invocation {
            engine: engine.clone(),
            config: engine.config(),
            session: session.clone(),
            header,
            given_id: id,
            tool,
            input,
            validated: false,
            started: Instant::now(),
            wall_ms: events::now_ms(),
            ended: None,
            observer: None,
            control: None,
            guard: None,
            audited: None,
            trace_parent: None,
        }
    }

    /// The W3C `traceparent` of the request this call came in (an MCP request's `_meta`,
    /// say): the call's trace span becomes its child ([`crate::audit::AuditEntry::trace_parent`]).
    /// A malformed one is ignored.
    pub fn trace_parent(&mut self, traceparent: &str) {
        if crate::audit::TraceParent::parse(traceparent).is_some() {
            self.trace_parent = Some(traceparent.into());
        }
    }

    /// Attaches `value` to the call, in place of a value of its type attached before: its
    /// tool reads it from its context ([`tool_api::ToolContext::extension`]), a
    /// [`crate::Confirmer`] from its request's header ([`CallHeader::extensions`]). For what
    /// belongs to this call alone and must reach the tool that runs it: who the caller is
    /// and with which credentials, how its client is asked. Call it before
    /// [`Invocation::run`].
    ///
    /// ```
    /// use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
    /// struct Caller(&'static str);
    /// let dispatcher = Dispatcher::new();
    /// let session = dispatcher.open_session(SessionSpec::new("s", std::env::temp_dir())).unwrap();
    /// let mut call = dispatcher.invocation(ToolUse::new("tu_1", "nope", serde_json::json!({})), &session);
    /// call.extend(Caller("alice"));
    /// assert_eq!(call.header().extensions.get::<Caller>().map(|c| c.0), Some("alice"));
    /// ```
    pub fn extend<T: std::any::Any + Send + Sync>(&mut self, value: T) {
        self.extend_shared(Arc::new(value));
    }

    /// [`Invocation::extend`] with a value already shared.
    pub fn extend_shared<T: std::any::Any + Send + Sync>(&mut self, value: Arc<T>) {
        let header = Arc::make_mut(&mut self.header);
        header.extensions = std::mem::take(&mut header.extensions).with_shared(value);
    }

    /// The call's identity.
    pub fn header(&self) -> &CallHeader {
        &self.header
    }

    /// The tool_use id.
    pub fn tool_use_id(&self) -> &str {
        &self.header.tool_use_id
    }

    /// The events of this call only, as they happen (the same events session subscribers
    /// get, live output included). Call it before [`Invocation::run`]; a second call
    /// replaces the first stream, which then ends.
    pub fn events(&mut self) -> CallEvents {
        let (tx, rx) = events::observe();
        self.observer = Some(tx);
        rx
    }

    /// The call as hooks and the runtime policy see it, with `input`.
    pub(crate) fn view<'a>(&'a self, tool: &Registered, input: &'a Value) -> CallView<'a> {
        CallView {
            call: &self.header,
            side_effects: tool.side_effects,
            input,
            workspace: self.session.state.workspace.root(),
        }
    }

    /// Emits one of the call's events, stamped now (or when execution ended).
    pub(crate) fn emit(&self, kind: EventKind) {
        self.emit_at(kind, self.now());
    }

    /// Emits one of the call's events, stamped `at`.
    pub(crate) fn emit_at(&self, kind: EventKind, at: Instant) {
        // A failure's message and partial output are the tool's text: redacted as its
        // result will be.
        let kind = match kind {
            EventKind::Failed {
                error_class,
                message,
                duration_ms,
                partial_output,
                cancel_reason,
            } => {
                let secrets = &self.config.secrets;
                let tool = &self.header.tool_name;
                EventKind::Failed {
                    error_class,
                    message: secrets.redacted_text(tool, message),
                    duration_ms,
                    partial_output: partial_output.map(|p| secrets.redacted_text(tool, p)),
                    cancel_reason,
                }
            }
            other => other,
        };
        if let Some(audited) = &self.audited {
            audited.trail.observe(&kind);
        }
        let since = at.saturating_duration_since(self.started).as_millis();
        events::publish(
            &self.session.state.events,
            &self.engine.events,
            self.observer.as_ref(),
            &self.header,
            kind,
            self.wall_ms
                .saturating_add(u64::try_from(since).unwrap_or(u64::MAX)),
        );
    }

    /// Now, or when the tool's execution ended (the moment the final event reports).
    pub(crate) fn now(&self) -> Instant {
        self.ended.unwrap_or_else(Instant::now)
    }

    /// Where the call's live output goes when its tool runs on another thread.
    pub(crate) fn sink(&self) -> EventSink {
        EventSink {
            session: self.session.state.events.clone(),
            global: self.engine.events.clone(),
            observer: self.observer.clone(),
        }
    }

    pub(crate) fn elapsed_ms(&self) -> f64 {
        self.now()
            .saturating_duration_since(self.started)
            .as_secs_f64()
            * 1000.0
    }

    /// Makes the call part of a batch, which cancels it through `control`.
    pub(crate) fn controlled_by(&mut self, control: Arc<InFlight>) {
        self.control = Some(control);
    }

    /// Registers the call for cancellation (once) and returns its entry.
    pub(crate) fn register(&mut self) -> &Arc<InFlight> {
        let (state, id, control) = (
            &self.session.state,
            &self.header.tool_use_id,
            self.control.as_ref(),
        );
        &self
            .guard
            .get_or_insert_with(|| state.track(id, control))
            .entry
    }

    /// The call's cancellation entry, if it was registered or its batch made one.
    pub(crate) fn entry(&self) -> Option<&Arc<InFlight>> {
        self.guard
            .as_ref()
            .map(|g| &g.entry)
            .or(self.control.as_ref())
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.entry().is_some_and(|e| e.is_cancelled())
    }

    /// Ends the call with an error of `class`: emits `tool.failed` and returns the block.
    pub(crate) fn fail(&self, class: ErrorClass, message: String) -> ToolResultBlock {
        self.fail_with(class, message, None, None)
    }

    /// [`Invocation::fail`] with the output the tool produced before it was stopped, and
    /// why it was cancelled.
    pub(crate) fn fail_with(
        &self,
        class: ErrorClass,
        message: String,
        partial_output: Option<String>,
        cancel_reason: Option<CancelReason>,
    ) -> ToolResultBlock {
        tracing::debug!(
            error_class = %class,
            "{}",
            self.config
                .secrets
                .redacted_text(&self.header.tool_name, message.clone())
        );
        let block = ToolResultBlock::error(&self.header.tool_use_id, class, message.clone())
            .with_cancel_reason(cancel_reason);
        self.emit(EventKind::Failed {
            error_class: class,
            message,
            duration_ms: self.elapsed_ms(),
            partial_output,
            cancel_reason,
        });
        block
    }

    /// Ends a call that was cancelled before it started executing.
    pub(crate) fn not_started(&self) -> ToolResultBlock {
        let entry = self.entry();
        let reason = entry.and_then(|e| e.reason()).or(Some(CancelReason::User));
        let message = cancel_message(
            &self.header.tool_name,
            reason,
            entry.and_then(|e| e.cause()),
            false,
        );
        self.fail_with(ErrorClass::Cancelled, message, None, reason)
    }

    /// Ends a call of a batch that never reached the pipeline (the batch was aborted, or a
    /// sibling failed, before its turn).
    pub(crate) fn never_started(
        self,
        reason: CancelReason,
        cause: Option<&str>,
    ) -> ToolResultBlock {
        let message = cancel_message(&self.header.tool_name, Some(reason), cause, false);
        self.fail_with(ErrorClass::Cancelled, message, None, Some(reason))
    }
}

impl Invocation {
    /// Judges, when the call is pushed, whether it is concurrency-safe, and validates its
    /// input (once: the pipeline does not validate it again). An unknown tool fails at
    /// once, so it is safe; invalid input, or a tool that panics while judging, is not.
    pub(crate) fn judge_safety(&mut self) -> bool {
        let Some(tool) = &self.tool else {
            return true;
        };
        self.validated = tool.validator.is_valid(&self.input);
        self.validated
            && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                tool.factory.is_concurrency_safe(&self.input)
            }))
            .unwrap_or(false)
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
