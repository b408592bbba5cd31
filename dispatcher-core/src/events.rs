//! The typed event stream ([`ToolEvent`]).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{broadcast, mpsc};

use crate::call::CallHeader;
use crate::confirmation::DecidedBy;
use crate::error::{CancelReason, ErrorClass};
use crate::result::SideEffectRecord;
use crate::schema::InputError;

/// How many events a subscriber may fall behind before it loses the oldest.
pub const EVENT_BUFFER: usize = 1024;

/// The typed event stream: every step of every call, per session or for all sessions.
///
/// Events serialize to JSON with a `type` of `tool.called`, `tool.completed`, `tool.failed`,
/// `tool.input_invalid`, `tool.confirmation_requested`, `tool.confirmation_resolved` or
/// `tool.output_delta` (live output of a running tool), and
/// the fields `session_id`, `turn_id`, `tool_use_id`, `tool_name`, `side_effects` (absent
/// when the tool was not found) and `timestamp_ms` (Unix time), plus the kind's own fields.
///
/// Subscribers get a [`tokio::sync::broadcast`] receiver: a subscriber that falls more than
/// [`EVENT_BUFFER`] events behind loses the oldest ones and is told how many
/// (`RecvError::Lagged`); dispatch never waits for a slow subscriber.
///
/// One event of one call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolEvent {
    /// What happened, with its own fields.
    #[serde(flatten)]
    pub kind: EventKind,
    /// Which call it happened to (shared by all events of the call).
    #[serde(flatten)]
    pub call: Arc<CallHeader>,
    /// When the event was emitted, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

/// The kinds of event, with their own fields.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The call passed validation, scoping and policy and is about to execute.
    #[serde(rename = "tool.called")]
    Called {
        /// Time spent waiting for a place under the session's concurrency cap.
        queued_ms: f64,
        /// What let the call run: the policy, a hook, an earlier approval, or an answer.
        authorized_by: DecidedBy,
    },
    /// The call completed normally.
    #[serde(rename = "tool.completed")]
    Completed {
        /// Execution time.
        duration_ms: f64,
        /// What the tool reports it did (`files_modified`, `command_executed`; absent when
        /// nothing).
        #[serde(flatten)]
        record: SideEffectRecord,
    },
    /// The call ended in an error result.
    #[serde(rename = "tool.failed")]
    Failed {
        /// The class of the error.
        error_class: ErrorClass,
        /// The message the model sees.
        message: String,
        /// Time from dispatch to failure.
        duration_ms: f64,
        /// Output the tool produced before it was stopped (cancellation).
        #[serde(skip_serializing_if = "Option::is_none")]
        partial_output: Option<String>,
        /// Why a `cancelled` call was cancelled (`user`, `sibling_error`, `aborted`).
        #[serde(skip_serializing_if = "Option::is_none")]
        cancel_reason: Option<CancelReason>,
    },
    /// A running tool streamed a chunk of live output (e.g. a command's stdout).
    #[serde(rename = "tool.output_delta")]
    OutputDelta {
        /// The chunk, as the tool sent it.
        chunk: String,
    },
    /// Secrets were found in the call's result (or its arguments): what was done
    /// (`redact`, `block`; `refuse` or `ask` for arguments), and each one's kind and
    /// place, never its value.
    #[serde(rename = "tool.secrets_found")]
    SecretsFound {
        /// What was done about them.
        action: String,
        /// Each one found.
        secrets: Vec<crate::SecretSeen>,
    },
    /// The input failed the tool's schema.
    #[serde(rename = "tool.input_invalid")]
    InputInvalid {
        /// Every violation, with its JSON pointer.
        errors: Vec<InputError>,
    },
    /// The call waits for a user's answer.
    #[serde(rename = "tool.confirmation_requested")]
    ConfirmationRequested {
        /// Id to answer with ([`crate::ConfirmationBroker::resolve`]).
        request_id: Arc<str>,
        /// A short rendering of the input.
        input_summary: String,
        /// What the call would change, e.g. `["will modify src/auth.ts"]`.
        projected_modifications: Vec<String>,
        /// Which rule asked for confirmation.
        reason: String,
    },
    /// The confirmation was answered, or timed out.
    #[serde(rename = "tool.confirmation_resolved")]
    ConfirmationResolved {
        /// The request.
        request_id: Arc<str>,
        /// `allow`, `deny`, `always_allow`, `timeout` or `cancelled`.
        decision: String,
        /// The client that answered (`timeout` or `cancelled` when none did).
        resolved_by: String,
        /// Who settled it: a user through a client, a client's configured fallback, the
        /// timeout, or a cancellation.
        decided_by: DecidedBy,
        /// How long the call waited.
        waited_ms: f64,
    },
}

impl EventKind {
    /// The wire name of the kind (`tool.called`, …).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Called { .. } => "tool.called",
            EventKind::Completed { .. } => "tool.completed",
            EventKind::Failed { .. } => "tool.failed",
            EventKind::InputInvalid { .. } => "tool.input_invalid",
            EventKind::ConfirmationRequested { .. } => "tool.confirmation_requested",
            EventKind::ConfirmationResolved { .. } => "tool.confirmation_resolved",
            EventKind::OutputDelta { .. } => "tool.output_delta",
            EventKind::SecretsFound { .. } => "tool.secrets_found",
        }
    }
}

impl ToolEvent {
    /// The event of `kind` for `call`, stamped now.
    pub fn new(call: Arc<CallHeader>, kind: EventKind) -> ToolEvent {
        ToolEvent {
            kind,
            call,
            timestamp_ms: now_ms(),
        }
    }

    /// The tool_use id of the call.
    pub fn tool_use_id(&self) -> &str {
        &self.call.tool_use_id
    }

    /// The event as a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A broadcast channel of events.
#[derive(Debug, Clone)]
pub(crate) struct EventChannel {
    tx: broadcast::Sender<Arc<ToolEvent>>,
    /// Whether anyone ever subscribed: until then a call takes no lock for its events
    /// (asking the channel how many receivers it has takes its lock).
    ever_subscribed: Arc<std::sync::atomic::AtomicBool>,
}

impl EventChannel {
    pub(crate) fn new() -> Self {
        EventChannel {
            tx: broadcast::channel(EVENT_BUFFER).0,
            ever_subscribed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<ToolEvent>> {
        self.ever_subscribed
            .store(true, std::sync::atomic::Ordering::Release);
        self.tx.subscribe()
    }

    /// Whether anyone ever subscribed (no lock).
    pub(crate) fn ever_subscribed(&self) -> bool {
        self.ever_subscribed
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn has_subscribers(&self) -> bool {
        self.ever_subscribed() && self.tx.receiver_count() > 0
    }

    pub(crate) fn send(&self, event: Arc<ToolEvent>) {
        let _ = self.tx.send(event);
    }
}

/// The events of one call, as they happen: what [`crate::Invocation::events`] returns.
///
/// Like a broadcast subscriber it never slows the call down: if it falls more than
/// [`EVENT_BUFFER`] events behind, later events are dropped until it catches up. The
/// stream ends after the call's last event.
#[derive(Debug)]
pub struct CallEvents {
    rx: mpsc::Receiver<Arc<ToolEvent>>,
}

impl CallEvents {
    /// The next event; `None` once the call has ended and every event was taken.
    pub async fn recv(&mut self) -> Option<Arc<ToolEvent>> {
        self.rx.recv().await
    }

    /// The next event if one is waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<ToolEvent>> {
        self.rx.try_recv().ok()
    }
}

/// A call's own event stream: the sending side (kept by the call) and [`CallEvents`].
pub(crate) fn observe() -> (mpsc::Sender<Arc<ToolEvent>>, CallEvents) {
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    (tx, CallEvents { rx })
}

/// Emits `kind` for `call` to the session's subscribers, the dispatcher's, and the call's
/// own observer; builds nothing when nobody listens.
///
/// `timestamp_ms` is the event's wall-clock time. A channel that ever had a subscriber is
/// sent to without asking how many it has now (asking takes the channel's lock, and so
/// does the send).
pub(crate) fn publish(
    session: &EventChannel,
    global: &EventChannel,
    observer: Option<&mpsc::Sender<Arc<ToolEvent>>>,
    call: &Arc<CallHeader>,
    kind: EventKind,
    timestamp_ms: u64,
) {
    let (to_session, to_global) = (session.ever_subscribed(), global.ever_subscribed());
    if observer.is_none() && !to_session && !to_global {
        return;
    }
    let event = Arc::new(ToolEvent {
        kind,
        call: call.clone(),
        timestamp_ms,
    });
    if let Some(observer) = observer {
        let _ = observer.try_send(event.clone());
    }
    if to_session {
        session.send(event.clone());
    }
    if to_global {
        global.send(event);
    }
}

/// Where the events of a call that runs on another thread go (its live output): owned
/// copies of what [`publish`] takes.
#[derive(Debug, Clone)]
pub(crate) struct EventSink {
    pub(crate) session: EventChannel,
    pub(crate) global: EventChannel,
    pub(crate) observer: Option<mpsc::Sender<Arc<ToolEvent>>>,
}

impl EventSink {
    /// Whether anybody listens.
    pub(crate) fn wanted(&self) -> bool {
        self.observer.is_some() || self.session.has_subscribers() || self.global.has_subscribers()
    }

    /// Emits `kind` for `call`.
    pub(crate) fn emit(&self, call: &Arc<CallHeader>, kind: EventKind) {
        publish(
            &self.session,
            &self.global,
            self.observer.as_ref(),
            call,
            kind,
            now_ms(),
        );
    }
}
