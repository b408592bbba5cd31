//! toolhost's own log messages, passed to the MCP clients that asked for log messages
//! (`[mcp] client_logs = true`; off by default: the log names paths and commands of every
//! client of the server). A 2025-era client that sent `logging/setLevel` gets them beside
//! the mounted servers' messages, at its level and above, with `logger` = `toolhost`; only
//! `info`, `warning` and `error` are ever passed (never the protocol library's own).
//!
//! A tracing layer ([`layer`]) hands each message to a broadcast the servers' connections
//! read (`subscribe`); until [`switch_on`] it does nothing but one atomic load per
//! message that reaches it.

#![allow(
    deprecated,
    reason = "logging is deprecated (SEP-2577), but 2025-era clients still ask for it"
)]

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Filter, Layer};

/// Whether messages are passed on.
static ON: AtomicBool = AtomicBool::new(false);

/// Where they go.
fn sink() -> &'static broadcast::Sender<LoggingMessageNotificationParam> {
    static SINK: OnceLock<broadcast::Sender<LoggingMessageNotificationParam>> = OnceLock::new();
    SINK.get_or_init(|| broadcast::channel(256).0)
}

/// Passes toolhost's messages on from now.
pub fn switch_on() {
    ON.store(true, Ordering::Release);
}

/// The messages, from now; `None` while they are not passed on.
pub(crate) fn subscribe() -> Option<broadcast::Receiver<LoggingMessageNotificationParam>> {
    ON.load(Ordering::Acquire).then(|| sink().subscribe())
}

/// The layer that takes toolhost's messages (`info` and above, not the protocol
/// library's), for the process's subscriber.
pub fn layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    OwnLogs.with_filter(Passed)
}

struct OwnLogs;

/// Lets through what may be passed on, when it is.
struct Passed;

impl<S> Filter<S> for Passed {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        ON.load(Ordering::Relaxed) && passed(meta)
    }

    fn callsite_enabled(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if passed(meta) {
            // Switched on at run time: asked each time.
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    /// `info` at most. Without a hint the process's subscriber would take every level as
    /// wanted, and so would the `log` bridge it sets up: every `log::trace!` of a
    /// dependency (wasmtime's compiler logs per instruction) would be built and dispatched,
    /// which made compiling a WebAssembly component ten times slower (14 s → 2 min 16 s in a
    /// debug build).
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::INFO)
    }
}

fn passed(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_event() && *meta.level() <= tracing::Level::INFO && !meta.target().starts_with("rmcp")
}

/// An event's message and fields as one line.
#[derive(Default)]
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let mut message = format!("{value:?}");
            std::mem::swap(&mut self.0, &mut message);
            self.0.push_str(&message);
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for OwnLogs {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => LoggingLevel::Error,
            tracing::Level::WARN => LoggingLevel::Warning,
            _ => LoggingLevel::Info,
        };
        let mut line = Line::default();
        event.record(&mut line);
        let mut message = LoggingMessageNotificationParam::new(level, line.0.trim().into());
        message.logger = Some("toolhost".into());
        // Nobody listening is fine.
        let _ = sink().send(message);
    }
}
