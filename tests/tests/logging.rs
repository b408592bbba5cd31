//! Spec tests 11 and 12, which assert on what reaches the host's log.
//!
//! They run in their own test binary with one global `tracing` subscriber (scoped
//! subscribers race on callsite interest when tests run in parallel), one test at a time.
#![cfg(test)]
// The serializing lock is held across awaits on purpose: each test has its own runtime.
#![allow(clippy::await_holding_lock)]

mod common;

use std::sync::{Mutex, OnceLock};

use common::{Fixture, LogCapture, allow_all};
use dispatcher_core::{Dispatcher, ErrorClass, ToolUse};
use serde_json::{Value, json};
use tool_api::{
    DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput, factory,
};

/// Installs the global subscriber once; returns the capture and a lock serializing tests.
fn logs() -> (&'static LogCapture, std::sync::MutexGuard<'static, ()>) {
    static CAPTURE: OnceLock<LogCapture> = OnceLock::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    let capture = CAPTURE.get_or_init(|| {
        let capture = LogCapture::default();
        tracing_subscriber::fmt()
            .with_writer(capture.clone())
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_thread_ids(true)
            .init();
        capture
    });
    let guard = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    capture.0.lock().unwrap().clear();
    (capture, guard)
}

/// Panics with a secret in the message.
#[derive(Default)]
struct Exploding;

impl Tool for Exploding {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        panic!("database password is hunter2")
    }
}

impl DefinedTool for Exploding {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "exploding",
            "Panics.",
            SideEffect::None,
            json!({"type": "object"}),
        )
    }
}

/// Reads a path through the workspace API, then (test-only) the same path with raw I/O.
#[derive(Default)]
struct RawReader;

impl Tool for RawReader {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = input["path"].as_str().unwrap_or_default();
        let via_api = ctx.files().read(path);
        let raw = std::fs::read_to_string(path);
        ctx.log().warn(format_args!(
            "raw open() of '{path}' bypassed the workspace API"
        ));
        Ok(ToolOutput::text("").with_metadata(json!({
            "api_error": via_api.err().map(|e| e.to_string()),
            "raw_ok": raw.is_ok(),
        })))
    }
}

impl DefinedTool for RawReader {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "raw_reader",
            "Reads raw.",
            SideEffect::Execute,
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )
    }
}

#[tokio::test]
async fn unexpected_tool_failure_is_wrapped_with_redacted_message_and_logged() {
    let (capture, _serial) = logs();
    let d = Dispatcher::new();
    d.register(factory::<Exploding>()).unwrap();
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(ToolUse::new("tu_x", "exploding", json!({})), &fx.session)
        .await;
    let logs = capture.text();
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError));
    assert!(!r.text().contains("hunter2"), "{}", r.text());
    assert!(
        r.text().contains("failed unexpectedly") && r.text().contains("tu_x"),
        "{}",
        r.text()
    );
    assert!(logs.contains("hunter2") && logs.contains("ERROR"), "{logs}");
    assert!(
        logs.contains("backtrace") && logs.contains("Exploding"),
        "the log has the backtrace of where the tool panicked: {logs}"
    );
}

#[tokio::test]
async fn file_api_refuses_outside_paths_even_though_raw_io_is_not_sandboxed() {
    let (capture, _serial) = logs();
    let outside = tempfile::NamedTempFile::new().unwrap();
    let path = outside.path().to_str().unwrap().to_string();
    let d = Dispatcher::builder().policy(allow_all()).build();
    d.register(factory::<RawReader>()).unwrap();
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(
            ToolUse::new("tu", "raw_reader", json!({"path": path})),
            &fx.session,
        )
        .await;
    let logs = capture.text();
    assert!(!r.is_error(), "{}", r.text());
    let api_error = r.metadata["api_error"].as_str().unwrap();
    assert!(
        api_error.starts_with("permission denied")
            && api_error.contains("escapes workspace boundary"),
        "{api_error}"
    );
    assert_eq!(
        r.metadata["raw_ok"], true,
        "raw I/O is permitted: sandboxing is a non-goal"
    );
    assert!(logs.contains("bypassed the workspace API"), "{logs}");
    assert!(
        logs.contains("tool_call{tool=raw_reader"),
        "the tool's log is under the call's span: {logs}"
    );
}

#[tokio::test]
async fn call_slower_than_the_threshold_logs_a_warning() {
    let (capture, _serial) = logs();
    let d = Dispatcher::builder()
        .config(dispatcher_core::DispatcherConfig {
            timeouts: dispatcher_core::Timeouts {
                slow_call_warn: std::time::Duration::ZERO,
                ..dispatcher_core::Timeouts::default()
            },
            ..Default::default()
        })
        .build();
    for f in builtin_tools::factories() {
        d.register(f).unwrap();
    }
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(ToolUse::new("tu", "list_dir", json!({})), &fx.session)
        .await;
    assert!(!r.is_error());
    let logs = capture.text();
    assert!(
        logs.contains("WARN") && logs.contains("slow tool call: 'list_dir'"),
        "{logs}"
    );
}

#[tokio::test]
async fn plugin_logger_reaches_the_host_subscriber_under_the_call_span_with_level_filtering() {
    plugin_logging(plugin_host::Isolation::InProcess).await;
}

#[tokio::test]
async fn isolated_plugin_logger_reaches_the_host_subscriber_under_the_call_span_with_level_filtering()
 {
    plugin_logging(plugin_host::Isolation::Process).await;
}

/// The `good` fixture plugin loaded with `isolation`, and the result of one call of its
/// `log_levels`, with whether its worker ran before the call (isolated).
async fn call_log_levels(
    isolation: plugin_host::Isolation,
) -> (dispatcher_core::ToolResultBlock, bool) {
    let plugins = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    toolhost_tests::package_library(
        &toolhost_tests::fixtures().library("good"),
        plugins.path(),
        "good",
    );
    let d = Dispatcher::new();
    let report = common::plugin_host([plugins.path()], isolation)
        .cache_dir(cache.path())
        .load_into(&d);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let worker_ran = report
        .workers
        .first()
        .is_some_and(|w| w.status().pid.is_some());
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(ToolUse::new("tu_log", "log_levels", json!({})), &fx.session)
        .await;
    (r, worker_ran)
}

async fn plugin_logging(isolation: plugin_host::Isolation) {
    let (capture, _serial) = logs();
    let (r, _) = call_log_levels(isolation).await;
    assert_eq!(
        r.text(),
        "trace formatted: false",
        "trace is filtered out, so never formatted"
    );
    let logs = capture.text();
    assert!(logs.contains("plugin says hello at info"), "{logs}");
    assert!(
        logs.contains("tool_call{tool=log_levels tool_use_id=tu_log"),
        "{logs}"
    );
    assert!(!logs.contains("plugin trace detail"), "{logs}");
}

/// A call to an isolated plugin whose worker runs is a future on the caller's own thread,
/// woken by the worker's answer: no blocking thread between them (each hand-off is a
/// thread wake-up). The plugin's log line, recorded where the call runs, shows the thread.
#[tokio::test]
async fn an_isolated_call_to_a_running_worker_runs_on_the_callers_thread() {
    let (capture, _serial) = logs();
    let (r, worker_ran) = call_log_levels(plugin_host::Isolation::Process).await;
    assert!(worker_ran, "the worker runs before the call");
    assert_eq!(r.text(), "trace formatted: false", "{r:?}");
    let logs = capture.text();
    let line = logs
        .lines()
        .find(|l| l.contains("plugin says hello at info"))
        .unwrap_or_else(|| panic!("no plugin line in: {logs}"));
    // `ThreadId(2)` here, `ThreadId(02)` in the log.
    let number = |text: &str| -> Option<u64> {
        let rest = &text[text.find("ThreadId(")? + "ThreadId(".len()..];
        rest[..rest.find(')')?].parse().ok()
    };
    let here = format!("{:?}", std::thread::current().id());
    assert_eq!(number(line), number(&here), "not on {here}: {line}");
}
