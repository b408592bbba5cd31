//! The typed event stream: every step of every call, per session or for all sessions.
//!
//! Events serialize to JSON with a `type` of `tool.called`, `tool.completed`, `tool.failed`,
//! `tool.input_invalid`, `tool.confirmation_requested`, `tool.confirmation_resolved` or
//! `tool.output_delta` (live output of a running tool), and
//! the fields `session_id`, `turn_id`, `tool_use_id`, `tool_name`, `side_effects` (absent
//! when the tool was not found) and `timestamp_ms` (Unix time), plus the kind's own fields.
//!
//! Subscribers get a [`tokio::sync::broadcast`] receiver: a subscriber that falls more than
//! [`EVENT_BUFFER`] events behind loses the oldest ones and is told how many
//! (`RecvError::Lagged`); dispatch never waits for a slow subscriber.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::broadcast;
use tool_api::SideEffect;

use crate::confirmation::Decision;
use crate::error::{CancelReason, ErrorClass};
use crate::schema::InputError;

/// How many events a subscriber may fall behind before it loses the oldest.
pub const EVENT_BUFFER: usize = 1024;

/// One event of one call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolEvent {
    /// What happened, with its own fields.
    #[serde(flatten)]
    pub kind: EventKind,
    /// The session.
    pub session_id: Arc<str>,
    /// The turn.
    pub turn_id: Arc<str>,
    /// The tool_use block.
    pub tool_use_id: Arc<str>,
    /// The tool name as called.
    pub tool_name: Arc<str>,
    /// The tool's declared class; absent when the tool was not found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side_effects: Option<SideEffect>,
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
    },
    /// The call completed normally.
    #[serde(rename = "tool.completed")]
    Completed {
        /// Execution time.
        duration_ms: f64,
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
        /// Who answered (`timeout` when nobody did).
        resolved_by: String,
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
        }
    }
}

impl ToolEvent {
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
}

impl EventChannel {
    pub(crate) fn new() -> Self {
        EventChannel {
            tx: broadcast::channel(EVENT_BUFFER).0,
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<ToolEvent>> {
        self.tx.subscribe()
    }

    pub(crate) fn has_subscribers(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    pub(crate) fn send(&self, event: Arc<ToolEvent>) {
        let _ = self.tx.send(event);
    }
}

/// Renders a decision as its event name.
pub(crate) fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
        Decision::AlwaysAllow => "always_allow",
    }
}
