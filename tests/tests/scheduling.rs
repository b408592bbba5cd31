//! Scheduling: per-call concurrency safety, ordering around unsafe calls, streamed
//! batches, per-tool caps, sibling cancellation and interrupt behaviour.
#![cfg(test)]

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::next_of;
use dispatcher_core::ClassModes;
use dispatcher_core::{
    Batch, CancelReason, ConfirmationPolicy, Dispatcher, DispatcherConfig, ErrorClass,
    InterruptBehavior, OnExecuteError, Session, SessionSpec, ToolUse,
};
use serde_json::{Value, json};
use tool_api::{
    DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput, factory,
};

/// `(session, "start tag" | "end tag")`, in the order things happened.
static LOG: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn record(ctx: &ToolContext, what: &str, input: &Value) {
    let tag = input["tag"].as_str().unwrap_or("?");
    LOG.lock()
        .unwrap()
        .push((ctx.session_id().to_string(), format!("{what} {tag}")));
}

fn log_of(session: &Session) -> Vec<String> {
    LOG.lock()
        .unwrap()
        .iter()
        .filter(|(s, _)| s == session.id())
        .map(|(_, e)| e.clone())
        .collect()
}

fn pos(log: &[String], entry: &str) -> usize {
    log.iter()
        .position(|e| e == entry)
        .unwrap_or_else(|| panic!("'{entry}' not in {log:?}"))
}

/// Sleeps `ms` (polling cancellation unless `stubborn`), then succeeds or, with `fail`, fails.
fn probe(input: &Value, ctx: &ToolContext, stubborn: bool) -> Result<ToolOutput, ToolError> {
    record(ctx, "start", input);
    let ms = input["ms"].as_u64().unwrap_or(0);
    let deadline = std::time::Instant::now() + Duration::from_millis(ms);
    while std::time::Instant::now() < deadline {
        if !stubborn && ctx.is_cancelled() {
            record(ctx, "cancelled", input);
            return Err(ToolError::Cancelled("stopped".into()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    record(ctx, "end", input);
    if input["fail"].as_bool() == Some(true) {
        return Ok(ToolOutput::failure("exit code 1"));
    }
    Ok(ToolOutput::text(format!(
        "done {}",
        input["tag"].as_str().unwrap_or("?")
    )))
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "tag": {"type": "string"},
            "ms": {"type": "integer"},
            "fail": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["read", "write"]}
        },
        "required": ["tag"]
    })
}

macro_rules! probe_tool {
    ($ty:ident, $name:literal, $class:expr, $stubborn:expr, $def:expr) => {
        #[derive(Default)]
        struct $ty;
        impl Tool for $ty {
            fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
                probe(&input, ctx, $stubborn)
            }
        }
        impl DefinedTool for $ty {
            fn definition() -> ToolDefinition {
                let def: fn(ToolDefinition) -> ToolDefinition = $def;
                def(ToolDefinition::new($name, "Probe.", $class, schema()))
            }
        }
    };
}

probe_tool!(ProbeRead, "probe_read", SideEffect::Read, false, |d| d);
probe_tool!(ProbeWrite, "probe_write", SideEffect::Write, false, |d| d);
probe_tool!(ProbeExec, "probe_exec", SideEffect::Execute, false, |d| d
    .concurrency_safe(true));
probe_tool!(ProbeBlock, "probe_block", SideEffect::Write, true, |d| d
    .interrupt(InterruptBehavior::Block));
probe_tool!(
    ProbeStubborn,
    "probe_stubborn",
    SideEffect::Write,
    true,
    |d| d
);

/// A `write` tool whose calls with `mode: "read"` only read.
#[derive(Default)]
struct ProbeMixed;
impl Tool for ProbeMixed {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        probe(&input, ctx, false)
    }
}
impl DefinedTool for ProbeMixed {
    fn definition() -> ToolDefinition {
        ToolDefinition::new("probe_mixed", "Probe.", SideEffect::Write, schema())
    }
    fn is_concurrency_safe(input: &Value) -> Option<bool> {
        Some(input["mode"] == "read")
    }
}

fn dispatcher(config: DispatcherConfig) -> Dispatcher {
    let d = Dispatcher::builder()
        .config(config)
        .policy(ConfirmationPolicy {
            default: ClassModes::all_auto(),
            ..ConfirmationPolicy::default()
        })
        .build();
    for f in [
        factory::<ProbeRead>(),
        factory::<ProbeWrite>(),
        factory::<ProbeExec>(),
        factory::<ProbeBlock>(),
        factory::<ProbeStubborn>(),
        factory::<ProbeMixed>(),
    ] {
        d.register(f).unwrap();
    }
    d
}

struct Scheduling {
    _dir: tempfile::TempDir,
    d: Dispatcher,
    session: Session,
}

fn env(config: DispatcherConfig) -> Scheduling {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = tempfile::tempdir().unwrap();
    let d = dispatcher(config);
    let id = format!("sched-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let session = d.open_session(SessionSpec::new(id, dir.path())).unwrap();
    Scheduling {
        _dir: dir,
        d,
        session,
    }
}

fn call(id: &str, tool: &str, input: Value) -> ToolUse {
    ToolUse::new(id, tool, input)
}

fn ids(results: &[dispatcher_core::ToolResultBlock]) -> Vec<&str> {
    results.iter().map(|r| r.tool_use_id.as_str()).collect()
}

#[tokio::test]
async fn write_waits_for_reads_before_it_and_reads_after_it_wait_for_the_write() {
    let e = env(DispatcherConfig::default());
    let results =
        e.d.dispatch_batch(
            vec![
                call("1", "probe_read", json!({"tag": "r1", "ms": 150})),
                call("2", "probe_read", json!({"tag": "r2", "ms": 150})),
                call("3", "probe_write", json!({"tag": "w", "ms": 50})),
                call("4", "probe_read", json!({"tag": "r3", "ms": 10})),
            ],
            &e.session,
        )
        .await;
    assert_eq!(ids(&results), ["1", "2", "3", "4"]);
    assert!(results.iter().all(|r| !r.is_error()), "{results:?}");
    let log = log_of(&e.session);
    // Both reads run together…
    assert!(pos(&log, "start r2") < pos(&log, "end r1"), "{log:?}");
    assert!(pos(&log, "start r1") < pos(&log, "end r2"), "{log:?}");
    // …the write waits for both, and the last read waits for the write.
    assert!(pos(&log, "start w") > pos(&log, "end r1"), "{log:?}");
    assert!(pos(&log, "start w") > pos(&log, "end r2"), "{log:?}");
    assert!(pos(&log, "start r3") > pos(&log, "end w"), "{log:?}");
}

#[tokio::test]
async fn results_come_back_in_call_order_even_when_later_calls_finish_first() {
    let e = env(DispatcherConfig::default());
    let results =
        e.d.dispatch_batch(
            vec![
                call("slow", "probe_read", json!({"tag": "slow", "ms": 200})),
                call("fast", "probe_read", json!({"tag": "fast", "ms": 1})),
            ],
            &e.session,
        )
        .await;
    assert_eq!(ids(&results), ["slow", "fast"]);
    let log = log_of(&e.session);
    assert!(pos(&log, "end fast") < pos(&log, "end slow"), "{log:?}");
}

#[tokio::test]
async fn concurrency_safety_is_decided_per_call_from_the_input() {
    let e = env(DispatcherConfig::default());
    e.d.dispatch_batch(
        vec![
            call(
                "1",
                "probe_mixed",
                json!({"tag": "a", "ms": 120, "mode": "read"}),
            ),
            call(
                "2",
                "probe_mixed",
                json!({"tag": "b", "ms": 120, "mode": "read"}),
            ),
            call(
                "3",
                "probe_mixed",
                json!({"tag": "c", "ms": 60, "mode": "write"}),
            ),
            call(
                "4",
                "probe_mixed",
                json!({"tag": "d", "ms": 60, "mode": "write"}),
            ),
        ],
        &e.session,
    )
    .await;
    let log = log_of(&e.session);
    assert!(
        pos(&log, "start b") < pos(&log, "end a"),
        "read-mode calls run together: {log:?}"
    );
    assert!(
        pos(&log, "start d") > pos(&log, "end c"),
        "write-mode calls run alone: {log:?}"
    );
}

#[tokio::test]
async fn call_whose_input_failed_validation_counts_as_unsafe() {
    let e = env(DispatcherConfig::default());
    let results =
        e.d.dispatch_batch(
            vec![
                call("1", "probe_read", json!({"tag": "r1", "ms": 150})),
                // `tag` must be a string: invalid, so it runs alone, after r1.
                call("2", "probe_read", json!({"tag": 7})),
                call("3", "probe_read", json!({"tag": "r3", "ms": 1})),
            ],
            &e.session,
        )
        .await;
    assert_eq!(results[1].error_class, Some(ErrorClass::ValidationError));
    let log = log_of(&e.session);
    assert!(
        pos(&log, "start r3") > pos(&log, "end r1"),
        "the call after the invalid one waited for everything before it: {log:?}"
    );
}

#[tokio::test]
async fn streamed_batch_starts_calls_as_they_arrive_and_hands_results_out_as_they_complete() {
    let e = env(DispatcherConfig::default());
    let mut events = e.session.subscribe();
    let batch = e.d.batch(&e.session);
    batch.push(call(
        "slow",
        "probe_read",
        json!({"tag": "slow", "ms": 300}),
    ));
    // The first call runs before the model has streamed the second one.
    let called = next_of(&mut events, "tool.called").await;
    assert_eq!(called.tool_use_id(), "slow");
    batch.push(call("fast", "probe_read", json!({"tag": "fast", "ms": 1})));
    let first = batch.next_completed().await.unwrap();
    assert_eq!(first.tool_use_id, "fast");
    let second = batch.next_completed().await.unwrap();
    assert_eq!(second.tool_use_id, "slow");
    assert!(batch.next_completed().await.is_none());
    assert_eq!(ids(&batch.finish().await), ["slow", "fast"]);
}

async fn wait_for_log(session: &Session, entry: &str) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !log_of(session).iter().any(|e| e == entry) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("'{entry}' never logged"));
}

#[tokio::test]
async fn aborting_a_batch_cancels_what_has_not_finished_with_synthetic_results() {
    let e = env(DispatcherConfig::default());
    let batch = e.d.batch(&e.session);
    batch.push(call("done", "probe_read", json!({"tag": "done", "ms": 0})));
    batch.push(call(
        "running",
        "probe_read",
        json!({"tag": "running", "ms": 5000}),
    ));
    batch.push(call(
        "queued",
        "probe_write",
        json!({"tag": "queued", "ms": 0}),
    ));
    wait_for_log(&e.session, "start running").await;
    let results = batch.abort().await;
    assert_eq!(ids(&results), ["done", "running", "queued"]);
    assert!(!results[0].is_error());
    for r in &results[1..] {
        assert_eq!(r.error_class, Some(ErrorClass::Cancelled), "{r:?}");
        assert_eq!(r.cancel_reason, Some(CancelReason::Aborted), "{r:?}");
    }
    assert!(
        results[2].text().contains("was not run"),
        "{}",
        results[2].text()
    );
    assert!(!log_of(&e.session).iter().any(|l| l == "start queued"));
}

#[tokio::test]
async fn dropping_a_batch_cancels_unfinished_calls() {
    let e = env(DispatcherConfig::default());
    let mut events = e.session.subscribe();
    let batch: Batch = e.d.batch(&e.session);
    batch.push(call(
        "running",
        "probe_read",
        json!({"tag": "running", "ms": 5000}),
    ));
    batch.push(call(
        "queued",
        "probe_write",
        json!({"tag": "queued", "ms": 0}),
    ));
    wait_for_log(&e.session, "start running").await;
    drop(batch);
    let mut failed = Vec::new();
    while failed.len() < 2 {
        let ev = next_of(&mut events, "tool.failed").await;
        failed.push(ev.to_json());
    }
    for ev in &failed {
        assert_eq!(ev["error_class"], "cancelled", "{ev}");
        assert_eq!(ev["cancel_reason"], "aborted", "{ev}");
    }
    wait_for_log(&e.session, "cancelled running").await;
    assert!(!log_of(&e.session).iter().any(|l| l == "start queued"));
}

#[tokio::test]
async fn per_tool_cap_limits_concurrent_calls_of_that_tool() {
    let e = env(DispatcherConfig {
        tool_concurrency: [("probe_read".to_string(), 1)].into(),
        ..DispatcherConfig::default()
    });
    e.d.dispatch_batch(
        vec![
            call("1", "probe_read", json!({"tag": "a", "ms": 80})),
            call("2", "probe_read", json!({"tag": "b", "ms": 80})),
            call(
                "3",
                "probe_mixed",
                json!({"tag": "m", "ms": 80, "mode": "read"}),
            ),
        ],
        &e.session,
    )
    .await;
    let log = log_of(&e.session);
    assert!(
        pos(&log, "start b") > pos(&log, "end a"),
        "one probe_read at a time: {log:?}"
    );
    assert!(
        pos(&log, "start m") < pos(&log, "end a"),
        "other tools are not held back: {log:?}"
    );
}

/// A toolset whose calls run elsewhere (as a mounted server's do), with a cap of its own
/// (which a test may change, as a reloaded entry does).
struct Elsewhere(AtomicUsize);

impl dispatcher_core::Toolset for Elsewhere {
    fn tools(&self) -> Vec<std::sync::Arc<dyn tool_api::ToolFactory>> {
        vec![factory::<ProbeRead>()]
    }
    fn own_cap(&self) -> Option<usize> {
        Some(self.0.load(Ordering::SeqCst))
    }
}

/// A dispatcher with a session cap of `session_cap`, the toolset `far` (an [`Elsewhere`]
/// with a cap of `own_cap`) and a session that sees it.
fn with_elsewhere(
    session_cap: usize,
    own_cap: usize,
    session: &str,
) -> (
    Dispatcher,
    std::sync::Arc<Elsewhere>,
    Session,
    tempfile::TempDir,
) {
    let d = dispatcher(DispatcherConfig {
        max_concurrency: session_cap,
        ..DispatcherConfig::default()
    });
    let far = std::sync::Arc::new(Elsewhere(AtomicUsize::new(own_cap)));
    d.register_toolset(dispatcher_core::ToolsetDef {
        id: "far".into(),
        prefix: Some("far".into()),
        binding: dispatcher_core::ToolsetBinding::Shared(far.clone()),
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = d
        .open_session(SessionSpec::new(session, dir.path()).toolsets(["far"]))
        .unwrap();
    (d, far, session, dir)
}

/// Runs `calls` in `session` as one batch, each of which must succeed; the session's log.
async fn run_ok(d: &Dispatcher, calls: Vec<ToolUse>, session: &Session) -> Vec<String> {
    let results = d.dispatch_batch(calls, session).await;
    assert!(
        results.iter().all(|r| r.error_class.is_none()),
        "{results:?}"
    );
    log_of(session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolset_with_a_cap_of_its_own_runs_under_it_and_takes_no_place_under_the_session_cap() {
    let (d, _, session, _dir) = with_elsewhere(1, 2, "sched-own-cap");
    let far = |tag: &str| call(tag, "far__probe_read", json!({"tag": tag, "ms": 300}));
    let here = |tag: &str| call(tag, "probe_read", json!({"tag": tag, "ms": 300}));
    let calls = vec![far("a"), far("b"), far("c"), here("l"), here("m")];
    let log = run_ok(&d, calls, &session).await;
    let first_far_end = pos(&log, "end a").min(pos(&log, "end b"));
    assert!(
        pos(&log, "start a").max(pos(&log, "start b")) < first_far_end,
        "two of the toolset's calls at once, under its own cap of 2: {log:?}"
    );
    assert!(
        pos(&log, "start c") > first_far_end,
        "the third waits for a place under its toolset's cap: {log:?}"
    );
    assert!(
        pos(&log, "start l") < first_far_end,
        "the toolset's calls take no place under the session's cap of 1: {log:?}"
    );
    assert!(
        pos(&log, "start m") > pos(&log, "end l"),
        "the session's own calls still run one at a time: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolsets_cap_changed_by_a_refresh_holds_for_the_calls_after_it() {
    let (d, far, session, _dir) = with_elsewhere(4, 1, "sched-own-cap-refresh");
    let two = |a: &str, b: &str| {
        [a, b].map(|tag| call(tag, "far__probe_read", json!({"tag": tag, "ms": 200})))
    };
    let log = run_ok(&d, two("a", "b").to_vec(), &session).await;
    assert!(
        pos(&log, "start b") > pos(&log, "end a") || pos(&log, "start a") > pos(&log, "end b"),
        "one at a time under a cap of 1: {log:?}"
    );
    far.0.store(2, Ordering::SeqCst);
    d.refresh_toolset("far").unwrap();
    let log = run_ok(&d, two("c", "d").to_vec(), &session).await;
    assert!(
        pos(&log, "start c").max(pos(&log, "start d")) < pos(&log, "end c").min(pos(&log, "end d")),
        "both at once under the cap of 2 it was refreshed with: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_a_place_under_the_cap_is_cancelled_at_once() {
    // The one place is held by a call an interrupt leaves running (`interrupt = block`).
    let e = env(DispatcherConfig {
        max_concurrency: 1,
        ..DispatcherConfig::default()
    });
    let running = tokio::spawn({
        let (d, s) = (e.d.clone(), e.session.clone());
        async move {
            d.dispatch(
                call("a", "probe_block", json!({"tag": "a", "ms": 3000})),
                &s,
            )
            .await
        }
    });
    wait_for_log(&e.session, "start a").await;
    let waiting = tokio::spawn({
        let (d, s) = (e.d.clone(), e.session.clone());
        async move {
            d.dispatch(call("b", "probe_read", json!({"tag": "b"})), &s)
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    // It returns once every call it interrupted ended, `a` too: not awaited for `b`.
    let interrupt = tokio::spawn({
        let (d, id) = (e.d.clone(), e.session.id().to_string());
        async move { d.cancel_session_tools(&id).await }
    });
    let b = waiting.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "it waited for the place to free: {:?}",
        started.elapsed()
    );
    assert_eq!(b.error_class, Some(dispatcher_core::ErrorClass::Cancelled));
    assert!(!log_of(&e.session).contains(&"start b".to_string()));
    assert_eq!(running.await.unwrap().text(), "done a");
    assert_eq!(interrupt.await.unwrap(), 2);
}

#[tokio::test]
async fn failed_execute_call_cancels_its_siblings_when_configured_and_says_why() {
    let e = env(DispatcherConfig {
        on_execute_error: OnExecuteError::CancelSiblings,
        ..DispatcherConfig::default()
    });
    let batch = e.d.batch(&e.session);
    batch.push(call("sib", "probe_read", json!({"tag": "sib", "ms": 5000})));
    batch.push(call(
        "bad",
        "probe_exec",
        json!({"tag": "bad", "ms": 50, "fail": true}),
    ));
    batch.push(call("later", "probe_write", json!({"tag": "later"})));
    let results = batch.finish().await;
    assert_eq!(results[1].error_class, Some(ErrorClass::ExecutionError));
    assert_eq!(results[1].cancel_reason, None);
    for r in [&results[0], &results[2]] {
        assert_eq!(r.error_class, Some(ErrorClass::Cancelled), "{r:?}");
        assert_eq!(r.cancel_reason, Some(CancelReason::SiblingError), "{r:?}");
        assert!(
            r.text()
                .contains("call bad (probe_exec) in the same batch failed")
                && r.text().contains("did not fail itself"),
            "{}",
            r.text()
        );
        assert_eq!(r.to_json()["cancel_reason"], "sibling_error");
    }
    // A call pushed after the failure does not run either.
    let late = e.d.batch(&e.session);
    late.push(call("x", "probe_exec", json!({"tag": "x", "fail": true})));
    late.push(call("y", "probe_write", json!({"tag": "y"})));
    let r = late.finish().await;
    assert_eq!(r[1].cancel_reason, Some(CancelReason::SiblingError));
}

#[tokio::test]
async fn failed_execute_call_leaves_siblings_alone_by_default() {
    let e = env(DispatcherConfig::default());
    let results =
        e.d.dispatch_batch(
            vec![
                call("sib", "probe_read", json!({"tag": "sib", "ms": 100})),
                call("bad", "probe_exec", json!({"tag": "bad", "fail": true})),
                call("later", "probe_write", json!({"tag": "later"})),
            ],
            &e.session,
        )
        .await;
    assert!(results[1].is_error());
    assert!(
        !results[0].is_error() && !results[2].is_error(),
        "{results:?}"
    );
}

#[tokio::test]
async fn user_cancel_says_user_not_sibling_error() {
    let e = env(DispatcherConfig {
        on_execute_error: OnExecuteError::CancelSiblings,
        ..DispatcherConfig::default()
    });
    let batch = e.d.batch(&e.session);
    batch.push(call("a", "probe_read", json!({"tag": "a", "ms": 5000})));
    wait_for_log(&e.session, "start a").await;
    assert_eq!(e.d.cancel_session_tools(e.session.id()).await, 1);
    let r = batch.finish().await;
    assert_eq!(r[0].cancel_reason, Some(CancelReason::User));
    assert_eq!(r[0].text(), "Tool 'probe_read' was cancelled.");
}

#[tokio::test]
async fn block_tool_runs_to_completion_through_a_user_interrupt() {
    let e = env(DispatcherConfig::default());
    let batch = e.d.batch(&e.session);
    batch.push(call("w", "probe_block", json!({"tag": "w", "ms": 200})));
    batch.push(call("next", "probe_write", json!({"tag": "next"})));
    wait_for_log(&e.session, "start w").await;
    // The interrupt cancels the queued call at once and waits for the running write.
    assert_eq!(e.d.cancel_session_tools(e.session.id()).await, 2);
    let results = batch.finish().await;
    assert!(!results[0].is_error(), "not torn: {:?}", results[0]);
    assert_eq!(results[0].text(), "done w");
    assert_eq!(results[1].cancel_reason, Some(CancelReason::User));
    assert!(!log_of(&e.session).iter().any(|l| l == "start next"));
}

#[tokio::test]
async fn interrupt_behaviour_can_be_set_per_tool_in_config() {
    let e = env(DispatcherConfig {
        timeouts: dispatcher_core::Timeouts {
            cancel_grace: Duration::from_millis(10),
            ..dispatcher_core::Timeouts::default()
        },
        interrupt: [("probe_stubborn".to_string(), InterruptBehavior::Block)].into(),
        ..DispatcherConfig::default()
    });
    let d = e.d.clone();
    let session = e.session.clone();
    let run = tokio::spawn(async move {
        d.dispatch(
            call("s", "probe_stubborn", json!({"tag": "s", "ms": 200})),
            &session,
        )
        .await
    });
    wait_for_log(&e.session, "start s").await;
    e.d.cancel_session_tools(e.session.id()).await;
    let r = run.await.unwrap();
    assert!(!r.is_error(), "{r:?}");
}
