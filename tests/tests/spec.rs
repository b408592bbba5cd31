//! The dispatcher's required behaviours, one test each (the tool contract, the pipeline's
//! error classes, workspace confinement, confirmation, cancellation, events), plus the
//! factory and first-answer-wins guarantees.
#![cfg(test)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Fixture, allow_all, builtins, drain, next_of};
use dispatcher_core::{
    ConfirmationPolicy, Decision, Dispatcher, DispatcherConfig, ErrorClass, EventKind,
    RegistrationError, ResolveError, ToolResultBlock, ToolUse,
};
use serde_json::{Value, json};
use tool_api::{
    DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput,
    factory,
};

// ---------------------------------------------------------------- test tools

/// A configurable tool for policy and validation tests: echoes `text`.
struct Echo {
    def: ToolDefinition,
}

impl Tool for Echo {
    fn execute(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(
            input["text"].as_str().unwrap_or("").to_string(),
        ))
    }
}

struct EchoFactory(ToolDefinition);

impl ToolFactory for EchoFactory {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }
    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(Echo {
            def: self.0.clone(),
        }))
    }
    fn source(&self) -> &str {
        "test"
    }
}

fn echo_of(name: &str, class: SideEffect) -> Arc<dyn ToolFactory> {
    let def = ToolDefinition::new(
        name,
        "Echo text.",
        class,
        json!({
            "type": "object",
            "properties": {"text": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["text"],
            "additionalProperties": false
        }),
    );
    Arc::new(EchoFactory(def))
}

impl Echo {
    #[allow(dead_code)]
    fn name(&self) -> &str {
        &self.def.name
    }
}

/// Blocks until cancelled, polling the context's signal.
#[derive(Default)]
struct WaitForCancel;

static WAIT_STARTED: AtomicBool = AtomicBool::new(false);

impl Tool for WaitForCancel {
    fn execute(&self, _input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        WAIT_STARTED.store(true, Ordering::SeqCst);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            ctx.check_cancelled()?;
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(ToolOutput::text("finished without being cancelled"))
    }
}

impl DefinedTool for WaitForCancel {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "wait_for_cancel",
            "Waits.",
            SideEffect::Read,
            json!({"type": "object"}),
        )
    }
}

/// Tracks how many instances execute at once.
#[derive(Default)]
struct Sleeper;

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MAX_RUNNING: AtomicUsize = AtomicUsize::new(0);

impl Tool for Sleeper {
    fn execute(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
        MAX_RUNNING.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        Ok(ToolOutput::text(format!("done {}", input["n"])))
    }
}

impl DefinedTool for Sleeper {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "sleeper",
            "Sleeps 300 ms.",
            SideEffect::Read,
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        )
    }
}

/// Counts instances made by its factory and records their addresses.
static INSTANCES: AtomicUsize = AtomicUsize::new(0);

struct Counted {
    serial: usize,
}

impl Default for Counted {
    fn default() -> Self {
        Counted {
            serial: INSTANCES.fetch_add(1, Ordering::SeqCst),
        }
    }
}

impl Tool for Counted {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!(
            "{}:{:p}",
            self.serial, self as *const Self
        )))
    }
}

impl DefinedTool for Counted {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "counted",
            "Counts.",
            SideEffect::None,
            json!({"type": "object"}),
        )
        .inline()
    }
}

// ---------------------------------------------------------------- 1, 2: registration

#[test]
fn schema_with_disallowed_construct_is_refused_at_registration() {
    let d = Dispatcher::new();
    let def = ToolDefinition::new(
        "bad",
        "Bad schema.",
        SideEffect::None,
        json!({
            "type": "object",
            "properties": {"mode": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}
        }),
    );
    let err = d.register(Arc::new(EchoFactory(def))).unwrap_err();
    match &err {
        RegistrationError::UnsupportedConstruct {
            pointer,
            construct,
            hint,
            ..
        } => {
            assert_eq!(pointer, "/properties/mode/oneOf");
            assert_eq!(construct, "oneOf");
            assert!(hint.contains("anyOf"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("/properties/mode/oneOf"), "{err}");

    for (schema, construct) in [
        (
            json!({"type": "object", "patternProperties": {"^x": {"type": "string"}}}),
            "patternProperties",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "items": [{"type": "string"}]}}}),
            "items",
        ),
        (
            json!({"type": "object", "$ref": "https://example.com/s.json"}),
            "$ref",
        ),
        (
            json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}),
            "not",
        ),
        (json!({"type": "object", "x-custom": 1}), "x-custom"),
    ] {
        let def = ToolDefinition::new("bad", "Bad.", SideEffect::None, schema);
        match d.register(Arc::new(EchoFactory(def))) {
            Err(RegistrationError::UnsupportedConstruct { construct: c, .. }) => {
                assert_eq!(c, construct)
            }
            other => panic!("{construct}: unexpected {other:?}"),
        }
    }
    let not_object =
        ToolDefinition::new("bad", "Bad.", SideEffect::None, json!({"type": "string"}));
    assert!(matches!(
        d.register(Arc::new(EchoFactory(not_object))),
        Err(RegistrationError::InvalidSchema { .. })
    ));
    let bad_name = ToolDefinition::new(
        "has.dot",
        "Bad.",
        SideEffect::None,
        json!({"type": "object"}),
    );
    assert!(matches!(
        d.register(Arc::new(EchoFactory(bad_name))),
        Err(RegistrationError::InvalidName { .. })
    ));
    assert!(d.read_only_names().is_empty());
}

trait Names {
    fn read_only_names(&self) -> Vec<String>;
}

impl Names for Dispatcher {
    fn read_only_names(&self) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let s = self
            .open_session(dispatcher_core::SessionSpec::new("names", dir.path()))
            .unwrap();
        self.definitions_for_session(&s)
            .into_iter()
            .map(|d| d.name)
            .collect()
    }
}

#[test]
fn duplicate_tool_name_is_refused_naming_both_sources() {
    let d = Dispatcher::new();
    d.register(builtin_tools::factories().remove(0)).unwrap();
    let err = d
        .register(echo_of("read_file", SideEffect::Read))
        .unwrap_err();
    assert_eq!(
        err,
        RegistrationError::Duplicate {
            name: "read_file".into(),
            existing_source: "builtin".into(),
            new_source: "test".into(),
        }
    );
    assert!(err.to_string().contains("builtin") && err.to_string().contains("test"));
}

// ---------------------------------------------------------------- 3: input validation

#[tokio::test]
async fn malformed_input_is_invalid_for_every_side_effect_class() {
    let d = Dispatcher::builder().policy(allow_all()).build();
    for class in SideEffect::ALL {
        d.register(echo_of(&format!("echo_{class}"), class))
            .unwrap();
    }
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    for class in SideEffect::ALL {
        let name = format!("echo_{class}");
        let r = d
            .dispatch(
                ToolUse::new("tu", &name, json!({"count": "three", "extra": 1})),
                &fx.session,
            )
            .await;
        assert!(r.is_error(), "{class}");
        assert_eq!(r.error_class, Some(ErrorClass::ValidationError));
        let text = r.text();
        assert!(
            text.contains("at (root)") && text.contains("\"text\" is a required property"),
            "{text}"
        );
        assert!(text.contains("at /count"), "{text}");
        let event = next_of(&mut events, "tool.input_invalid").await;
        assert_eq!(event.call.side_effects, Some(class));
        let EventKind::InputInvalid { errors } = &event.kind else {
            unreachable!()
        };
        assert!(errors.iter().any(|e| e.pointer == "/count"));
        assert_eq!(errors.len(), 3, "{errors:?}");
    }
    assert!(
        drain(&mut events)
            .iter()
            .all(|e| e.kind.name() != "tool.called")
    );
}

// ---------------------------------------------------------------- 4: workspace boundary

#[tokio::test]
async fn path_escaping_via_dotdot_is_permission_denied() {
    let d = Dispatcher::new();
    builtins(&d);
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    for path in [
        "../../etc/passwd",
        "sub/../../outside.txt",
        "a/b/../../../x",
    ] {
        let r = d
            .dispatch(
                ToolUse::new("tu_b", "read_file", json!({"path": path})),
                &fx.session,
            )
            .await;
        assert_eq!(r.error_class, Some(ErrorClass::PermissionDenied), "{path}");
        assert_eq!(
            r.text(),
            format!("Path '{path}' escapes workspace boundary")
        );
        let failed = next_of(&mut events, "tool.failed").await;
        let EventKind::Failed { error_class, .. } = &failed.kind else {
            unreachable!()
        };
        assert_eq!(*error_class, ErrorClass::PermissionDenied);
    }
}

#[tokio::test]
async fn absolute_path_outside_workspace_is_permission_denied() {
    let d = Dispatcher::new();
    builtins(&d);
    let fx = Fixture::new(d.clone());
    let outside = tempfile::NamedTempFile::new().unwrap();
    for path in [outside.path().to_str().unwrap(), "/etc/passwd"] {
        let r = d
            .dispatch(
                ToolUse::new("tu", "read_file", json!({"path": path})),
                &fx.session,
            )
            .await;
        assert_eq!(
            r.error_class,
            Some(ErrorClass::PermissionDenied),
            "{path}: {}",
            r.text()
        );
    }
    // An absolute path inside the workspace is fine.
    fx.write("inside.txt", "in");
    let inside = fx.session.workspace().root().join("inside.txt");
    let r = d
        .dispatch(
            ToolUse::new("tu", "read_file", json!({"path": inside.to_str().unwrap()})),
            &fx.session,
        )
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert_eq!(r.text(), "in");
}

#[tokio::test]
async fn symlink_leading_outside_is_permission_denied() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), fx.path("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), fx.path("linkdir")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../tmp", fx.path("rel_link")).unwrap();

    for (tool, input) in [
        ("read_file", json!({"path": "link.txt"})),
        ("read_file", json!({"path": "linkdir/secret.txt"})),
        ("list_dir", json!({"path": "linkdir"})),
        ("list_dir", json!({"path": "rel_link"})),
        (
            "write_file",
            json!({"path": "linkdir/new.txt", "content": "x"}),
        ),
        (
            "patch_file",
            json!({"path": "link.txt", "old": "secret", "new": "leak"}),
        ),
    ] {
        let r = d
            .dispatch(ToolUse::new("tu", tool, input.clone()), &fx.session)
            .await;
        assert_eq!(
            r.error_class,
            Some(ErrorClass::PermissionDenied),
            "{tool} {input}: {}",
            r.text()
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!outside.path().join("new.txt").exists());
}

// ---------------------------------------------------------------- 5, 6, 7: confirmation

fn prompting_writes() -> Dispatcher {
    let d = Dispatcher::builder()
        .policy(toml::from_str(r#"default = { WRITE = "prompt" }"#).unwrap())
        .build();
    builtins(&d);
    d
}

#[tokio::test]
async fn confirmed_write_runs_after_user_allows() {
    let d = prompting_writes();
    let fx = Fixture::new(d.clone());
    fx.write("src/auth.ts", "old");
    let mut events = fx.session.subscribe();
    let call = ToolUse::new(
        "tu_01HZ_c",
        "write_file",
        json!({"path": "src/auth.ts", "content": "new"}),
    );
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move { d2.dispatch(call, &s2).await });

    let requested = next_of(&mut events, "tool.confirmation_requested").await;
    let EventKind::ConfirmationRequested {
        request_id,
        projected_modifications,
        input_summary,
        ..
    } = &requested.kind
    else {
        unreachable!()
    };
    assert_eq!(
        projected_modifications,
        &vec!["will modify src/auth.ts".to_string()]
    );
    assert!(input_summary.contains("src/auth.ts"));
    assert_eq!(requested.call.side_effects, Some(SideEffect::Write));
    assert_eq!(fx.dispatcher.broker().pending(Some("s1")).len(), 1);
    assert_eq!(
        std::fs::read_to_string(fx.path("src/auth.ts")).unwrap(),
        "old",
        "nothing runs before the answer"
    );

    d.broker()
        .resolve(request_id, Decision::Allow, "tui")
        .unwrap();
    let r = pending.await.unwrap();
    assert!(!r.is_error(), "{}", r.text());
    assert_eq!(
        std::fs::read_to_string(fx.path("src/auth.ts")).unwrap(),
        "new"
    );
    let resolved = next_of(&mut events, "tool.confirmation_resolved").await;
    let EventKind::ConfirmationResolved {
        decision,
        resolved_by,
        ..
    } = &resolved.kind
    else {
        unreachable!()
    };
    assert_eq!((decision.as_str(), resolved_by.as_str()), ("allow", "tui"));
    next_of(&mut events, "tool.called").await;
    next_of(&mut events, "tool.completed").await;
}

#[tokio::test]
async fn denied_write_is_user_denied_and_does_not_run() {
    let d = prompting_writes();
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let call = ToolUse::new(
        "tu_01HZ_c",
        "write_file",
        json!({"path": "src/auth.ts", "content": "x"}),
    );
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move { d2.dispatch(call, &s2).await });
    let requested = next_of(&mut events, "tool.confirmation_requested").await;
    let EventKind::ConfirmationRequested {
        request_id,
        projected_modifications,
        ..
    } = &requested.kind
    else {
        unreachable!()
    };
    assert_eq!(
        projected_modifications,
        &vec!["will create src/auth.ts".to_string()]
    );
    d.broker()
        .resolve(request_id, Decision::Deny, "dashboard")
        .unwrap();
    let r = pending.await.unwrap();
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied));
    assert_eq!(r.text(), "User denied this operation.");
    assert!(!fx.path("src/auth.ts").exists());
    let rest = drain(&mut events);
    assert!(rest.iter().all(|e| e.kind.name() != "tool.called"));
    assert!(rest.iter().any(|e| matches!(
        e.kind,
        EventKind::Failed {
            error_class: ErrorClass::UserDenied,
            ..
        }
    )));
}

#[tokio::test]
async fn unanswered_confirmation_times_out() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().config(DispatcherConfig {
        timeouts: dispatcher_core::Timeouts {
            confirmation: Duration::from_secs(1),
            ..dispatcher_core::Timeouts::default()
        },
        ..DispatcherConfig::default()
    }));
    let mut events = fx.session.subscribe();
    let started = Instant::now();
    let r = d
        .dispatch(
            ToolUse::new("tu", "write_file", json!({"path": "a.txt", "content": "x"})),
            &fx.session,
        )
        .await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(r.error_class, Some(ErrorClass::ConfirmationTimeout));
    assert!(r.text().contains("within 1s"), "{}", r.text());
    assert!(!fx.path("a.txt").exists());
    let resolved = next_of(&mut events, "tool.confirmation_resolved").await;
    let EventKind::ConfirmationResolved {
        decision,
        request_id,
        ..
    } = &resolved.kind
    else {
        unreachable!()
    };
    assert_eq!(decision, "timeout");
    // A client answering late is told the request is gone.
    assert!(matches!(
        d.broker().resolve(request_id, Decision::Allow, "late"),
        Err(ResolveError::AlreadyResolved { .. })
    ));
}

#[tokio::test]
async fn first_confirmation_answer_wins_and_later_ones_are_told() {
    let d = prompting_writes();
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let call = ToolUse::new("tu", "write_file", json!({"path": "w.txt", "content": "x"}));
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move { d2.dispatch(call, &s2).await });
    let requested = next_of(&mut events, "tool.confirmation_requested").await;
    let EventKind::ConfirmationRequested { request_id, .. } = &requested.kind else {
        unreachable!()
    };
    d.broker()
        .resolve(request_id, Decision::Allow, "tui")
        .unwrap();
    let late = d
        .broker()
        .resolve(request_id, Decision::Deny, "dashboard")
        .unwrap_err();
    assert_eq!(
        late,
        ResolveError::AlreadyResolved {
            request_id: request_id.to_string(),
            decision: "allow".into(),
            by: "tui".into(),
        }
    );
    assert!(!pending.await.unwrap().is_error());
    assert!(matches!(
        d.broker().resolve("cr_nope", Decision::Allow, "x"),
        Err(ResolveError::Unknown { .. })
    ));
}

// ---------------------------------------------------------------- 8: concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_calls_with_cap_four_run_four_at_a_time_and_return_in_order() {
    let d = Dispatcher::new();
    d.register(factory::<Sleeper>()).unwrap();
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let calls: Vec<ToolUse> = (0..6)
        .map(|n| ToolUse::new(format!("tu_{n}"), "sleeper", json!({"n": n})))
        .collect();
    let results = d.dispatch_batch(calls, &fx.session).await;
    assert_eq!(MAX_RUNNING.load(Ordering::SeqCst), 4);
    let ids: Vec<&str> = results.iter().map(|r| r.tool_use_id.as_str()).collect();
    assert_eq!(ids, ["tu_0", "tu_1", "tu_2", "tu_3", "tu_4", "tu_5"]);
    for (n, r) in results.iter().enumerate() {
        assert_eq!(r.text(), format!("done {n}"));
    }
    let queued: Vec<f64> = drain(&mut events)
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Called {
                queued_ms,
                authorized_by: _,
            } => Some(queued_ms),
            _ => None,
        })
        .collect();
    assert_eq!(queued.len(), 6);
    assert_eq!(
        queued.iter().filter(|q| **q < 150.0).count(),
        4,
        "{queued:?}"
    );
    assert_eq!(
        queued.iter().filter(|q| **q >= 250.0).count(),
        2,
        "{queued:?}"
    );
}

// ---------------------------------------------------------------- 9, 10: cancellation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_sets_signal_and_tool_reports_cancelled() {
    let d = Dispatcher::new();
    d.register(factory::<WaitForCancel>()).unwrap();
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move {
        d2.dispatch(ToolUse::new("tu", "wait_for_cancel", json!({})), &s2)
            .await
    });
    next_of(&mut events, "tool.called").await;
    while !WAIT_STARTED.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    assert_eq!(d.cancel_session_tools("s1").await, 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    let r = pending.await.unwrap();
    assert_eq!(r.error_class, Some(ErrorClass::Cancelled));
    let failed = next_of(&mut events, "tool.failed").await;
    assert!(matches!(
        failed.kind,
        EventKind::Failed {
            error_class: ErrorClass::Cancelled,
            ..
        }
    ));
    assert_eq!(fx.session.calls_in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_cancel_sends_sigterm_then_sigkill_after_five_seconds() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    let mut events = fx.session.subscribe();
    // The command ignores SIGTERM, so only SIGKILL stops it.
    let command = "trap 'echo got-term' TERM; echo started; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done";
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move {
        d2.dispatch(
            ToolUse::new("tu_01HZ_d", "shell", json!({"command": command})),
            &s2,
        )
        .await
    });
    next_of(&mut events, "tool.called").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    d.cancel_session_tools("s1").await;
    let elapsed = started.elapsed();
    let r = pending.await.unwrap();
    assert_eq!(r.error_class, Some(ErrorClass::Cancelled));
    assert!(
        elapsed >= Duration::from_secs(5) && elapsed < Duration::from_secs(9),
        "{elapsed:?}"
    );
    assert_eq!(r.metadata["sigterm_sent"], true);
    assert_eq!(r.metadata["sigkill_sent"], true);
    assert_eq!(r.metadata["signal"], 9);
    let text = r.text();
    assert!(
        text.contains("started") && text.contains("got-term"),
        "{text}"
    );
    let failed = next_of(&mut events, "tool.failed").await;
    let EventKind::Failed { partial_output, .. } = &failed.kind else {
        unreachable!()
    };
    assert!(partial_output.as_deref().unwrap_or("").contains("started"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_command_that_honours_sigterm_stops_at_once() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    let mut events = fx.session.subscribe();
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move {
        d2.dispatch(
            ToolUse::new("tu", "shell", json!({"command": "sleep 60"})),
            &s2,
        )
        .await
    });
    next_of(&mut events, "tool.called").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    d.cancel_session_tools("s1").await;
    assert!(started.elapsed() < Duration::from_secs(2));
    let r = pending.await.unwrap();
    assert_eq!(r.error_class, Some(ErrorClass::Cancelled));
    assert_eq!(r.metadata["sigkill_sent"], false);
    assert_eq!(r.metadata["signal"], 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_output_held_open_by_a_detached_process_is_returned_and_named() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    // The detached process leaves the command's group, so the group's SIGKILL misses it,
    // and it keeps stdout and stderr open for far longer than the call may wait.
    // The shell waits until the detached process has left its group (it writes its pid
    // after `setsid`), else the group's SIGKILL at the shell's exit could still reach it.
    let command = "setsid sh -c 'echo $$ > held.pid; exec sleep 120' & \
                   while [ ! -s held.pid ]; do sleep 0.01; done; echo started; echo warned >&2";
    let r = d
        .dispatch(
            ToolUse::new("tu", "shell", json!({"command": command})),
            &fx.session,
        )
        .await;
    let held = std::fs::read_to_string(fx.path("held.pid")).unwrap_or_default();
    if let Ok(pid) = held.trim().parse::<i32>() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(!r.is_error(), "{}", r.text());
    let text = r.text();
    assert!(
        text.starts_with("started\n[stderr]\nwarned\n"),
        "what arrived before the shell exited is kept: {text}"
    );
    assert!(
        text.contains("[stdout and stderr still open") && text.contains("setsid"),
        "{text}"
    );
    assert_eq!(r.metadata["output_left_open"], json!(["stdout", "stderr"]));
    assert_eq!(r.metadata["stdout_bytes"], 8);
    assert_eq!(r.metadata["exit_code"], 0);
}

// 11 (exception wrapping) and 12 (fs API enforcement) assert on logs: see logging.rs.

// ---------------------------------------------------------------- 13: trusted workspace

#[tokio::test]
async fn trusted_workspace_auto_runs_writes_but_execute_still_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let policy: ConfirmationPolicy = toml::from_str(&format!(
        r#"
        trusted_workspaces = ["{}"]
        [trusted_workspace_overrides]
        EXECUTE = "prompt"
        "#,
        dir.path().display()
    ))
    .unwrap();
    let d = Dispatcher::builder()
        .policy(policy)
        .config(DispatcherConfig {
            timeouts: dispatcher_core::Timeouts {
                confirmation: Duration::from_millis(300),
                ..dispatcher_core::Timeouts::default()
            },
            ..DispatcherConfig::default()
        })
        .build();
    builtins(&d);
    let session = d
        .open_session(dispatcher_core::SessionSpec::new("s1", dir.path()))
        .unwrap();
    let w = d
        .dispatch(
            ToolUse::new("tu", "write_file", json!({"path": "a.txt", "content": "x"})),
            &session,
        )
        .await;
    assert!(!w.is_error(), "{}", w.text());
    let x = d
        .dispatch(
            ToolUse::new("tu", "shell", json!({"command": "true"})),
            &session,
        )
        .await;
    assert_eq!(
        x.error_class,
        Some(ErrorClass::ConfirmationTimeout),
        "{}",
        x.text()
    );

    // The same policy outside the trusted workspace still prompts for writes.
    let other = tempfile::tempdir().unwrap();
    let s2 = d
        .open_session(dispatcher_core::SessionSpec::new("s2", other.path()))
        .unwrap();
    let w2 = d
        .dispatch(
            ToolUse::new("tu", "write_file", json!({"path": "a.txt", "content": "x"})),
            &s2,
        )
        .await;
    assert_eq!(w2.error_class, Some(ErrorClass::ConfirmationTimeout));
}

// ---------------------------------------------------------------- 14: event side effects

#[tokio::test]
async fn called_event_side_effects_match_each_builtin_declaration() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    fx.write("f.txt", "hello");
    let mut events = d.subscribe_all();
    let calls = [
        ("read_file", json!({"path": "f.txt"}), SideEffect::Read),
        ("list_dir", json!({}), SideEffect::Read),
        (
            "write_file",
            json!({"path": "g.txt", "content": "x"}),
            SideEffect::Write,
        ),
        (
            "patch_file",
            json!({"path": "f.txt", "old": "hello", "new": "bye"}),
            SideEffect::Write,
        ),
        ("shell", json!({"command": "echo hi"}), SideEffect::Execute),
    ];
    for (name, input, class) in calls {
        let def = d
            .definitions_for_session(&fx.session)
            .into_iter()
            .find(|t| t.name == name)
            .unwrap();
        assert_eq!(
            def.side_effects, class,
            "{name} declares its documented class"
        );
        let r = d
            .dispatch(ToolUse::new("tu", name, input), &fx.session)
            .await;
        assert!(!r.is_error(), "{name}: {}", r.text());
        let called = next_of(&mut events, "tool.called").await;
        assert_eq!(
            (&*called.call.tool_name, called.call.side_effects),
            (name, Some(class))
        );
        assert_eq!(called.to_json()["side_effects"], class.as_str());
        assert_eq!(called.to_json()["type"], "tool.called");
    }
}

// ---------------------------------------------------------------- factories

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_produces_distinct_instance_per_call() {
    let d = Dispatcher::new();
    d.register(factory::<Counted>()).unwrap();
    let fx = Fixture::new(d.clone());
    let before = INSTANCES.load(Ordering::SeqCst);
    let calls: Vec<ToolUse> = (0..3)
        .map(|n| ToolUse::new(format!("tu{n}"), "counted", json!({})))
        .collect();
    let results = d.dispatch_batch(calls, &fx.session).await;
    assert_eq!(INSTANCES.load(Ordering::SeqCst) - before, 3);
    let serials: std::collections::HashSet<String> = results
        .iter()
        .map(|r| r.text().split(':').next().unwrap().to_string())
        .collect();
    assert_eq!(serials.len(), 3);
}

#[test]
fn every_file_operation_refuses_paths_and_symlinks_leading_outside() {
    let fx = Fixture::new(Dispatcher::new());
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), fx.path("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), fx.path("linkdir")).unwrap();
    let ws = fx.session.workspace();
    for path in [
        "../x.txt",
        "/etc/passwd",
        "link.txt",
        "linkdir/secret.txt",
        "linkdir/new.txt",
    ] {
        let escapes = |e: dispatcher_core::FsError| e.is_permission_denied();
        assert!(ws.read_bytes(path).is_err_and(escapes), "read_bytes {path}");
        assert!(
            ws.write_bytes(path, b"x").is_err_and(escapes),
            "write_bytes {path}"
        );
        assert!(ws.append(path, b"x").is_err_and(escapes), "append {path}");
        if path != "link.txt" {
            // Deleting the link itself is deleting a workspace entry, not what it points at.
            assert!(ws.delete(path).is_err_and(escapes), "delete {path}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "s"
    );
    assert!(!outside.path().join("new.txt").exists());
}

#[test]
fn a_whole_file_read_over_the_limit_is_refused_before_reading() {
    let fx = Fixture::new(Dispatcher::new());
    // Sparse: a size over the limit without the bytes on disk.
    let file = std::fs::File::create(fx.path("huge.log")).unwrap();
    file.set_len(dispatcher_core::MAX_READ_BYTES + 1).unwrap();
    let e = fx.session.workspace().read_bytes("huge.log").unwrap_err();
    assert!(
        matches!(e, dispatcher_core::FsError::TooLarge { size, .. } if size == dispatcher_core::MAX_READ_BYTES + 1),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "'huge.log' is 1073741825 bytes, over the 1073741824-byte limit of one whole-file read; read a part of it another way (e.g. a range of lines)"
    );
}

#[tokio::test]
async fn read_file_of_a_binary_file_says_it_reads_text_only() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    std::fs::write(fx.path("image.bin"), b"\x89PNG\r\n\x1a\n\xff\xfe").unwrap();
    let r = d
        .dispatch(
            ToolUse::new("tu", "read_file", json!({"path": "image.bin"})),
            &fx.session,
        )
        .await;
    assert_eq!(
        r.error_class,
        Some(ErrorClass::ExecutionError),
        "{}",
        r.text()
    );
    assert_eq!(
        r.text(),
        "'image.bin' is not UTF-8 text (a binary file?); read_file returns text only"
    );
}

#[tokio::test]
async fn a_read_only_file_is_not_replaced_patched_or_appended_to() {
    use std::os::unix::fs::PermissionsExt;
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    fx.write("locked.txt", "keep me\n");
    std::fs::set_permissions(
        fx.path("locked.txt"),
        std::fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    let expected = "'locked.txt' is read-only (no write permission for anyone); it was left as it is: make it writable first if it should change";
    for (tool, input) in [
        (
            "write_file",
            json!({"path": "locked.txt", "content": "gone"}),
        ),
        (
            "patch_file",
            json!({"path": "locked.txt", "old": "keep", "new": "lose"}),
        ),
    ] {
        let r = d
            .dispatch(ToolUse::new("tu", tool, input), &fx.session)
            .await;
        assert_eq!(
            r.error_class,
            Some(ErrorClass::PermissionDenied),
            "{tool}: {}",
            r.text()
        );
        assert_eq!(r.text(), format!("permission denied: {expected}"), "{tool}");
    }
    let appended = fx.session.workspace().append("locked.txt", b"more");
    assert!(
        appended.as_ref().is_err_and(|e| e.to_string() == expected),
        "{appended:?}"
    );
    assert_eq!(
        std::fs::read_to_string(fx.path("locked.txt")).unwrap(),
        "keep me\n"
    );
    let mode = std::fs::metadata(fx.path("locked.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o444);
    // Nothing half-made is left beside it.
    let names: Vec<_> = std::fs::read_dir(fx.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("locked.txt")]);
}

#[tokio::test]
async fn a_write_through_a_symlink_inside_the_workspace_changes_its_target_and_keeps_the_link() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    fx.write("docs/AGENTS.md", "agents v1\n");
    std::os::unix::fs::symlink("docs/AGENTS.md", fx.path("CLAUDE.md")).unwrap();
    // A chain, and a link whose target does not exist yet.
    std::os::unix::fs::symlink("CLAUDE.md", fx.path("GEMINI.md")).unwrap();
    std::os::unix::fs::symlink("notes/new.md", fx.path("NEW.md")).unwrap();
    for (tool, input) in [
        (
            "write_file",
            json!({"path": "CLAUDE.md", "content": "v2\n"}),
        ),
        (
            "patch_file",
            json!({"path": "GEMINI.md", "old": "v2", "new": "v3"}),
        ),
        (
            "write_file",
            json!({"path": "NEW.md", "content": "fresh\n"}),
        ),
    ] {
        let r = d
            .dispatch(ToolUse::new("tu", tool, input.clone()), &fx.session)
            .await;
        assert!(!r.is_error(), "{tool} {input}: {}", r.text());
    }
    assert_eq!(
        std::fs::read_to_string(fx.path("docs/AGENTS.md")).unwrap(),
        "v3\n"
    );
    assert_eq!(
        std::fs::read_to_string(fx.path("notes/new.md")).unwrap(),
        "fresh\n"
    );
    // Links that lead to each other are refused, and nothing is written.
    std::os::unix::fs::symlink("loop_b", fx.path("loop_a")).unwrap();
    std::os::unix::fs::symlink("loop_a", fx.path("loop_b")).unwrap();
    let looped = fx.session.workspace().write_bytes("loop_a", b"x");
    assert!(
        looped
            .as_ref()
            .is_err_and(|e| e.to_string().contains("symbolic links")),
        "{looped:?}"
    );
    for link in ["CLAUDE.md", "GEMINI.md", "NEW.md", "loop_a", "loop_b"] {
        assert!(
            std::fs::symlink_metadata(fx.path(link))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{link} is still a link"
        );
    }
}

/// Reads `input` with `read_file`, expecting success.
async fn read(d: &Dispatcher, fx: &Fixture, input: Value) -> ToolResultBlock {
    let r = d
        .dispatch(ToolUse::new("tu", "read_file", input), &fx.session)
        .await;
    assert_eq!(r.error_class, None, "{}", r.text());
    r
}

#[tokio::test]
async fn read_file_cuts_a_line_over_the_line_limit_and_says_where_to_read_on() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    // 120,000 characters in 180,000 bytes: cuts fall between characters, not bytes.
    let long = "éx".repeat(60_000);
    std::fs::write(fx.path("bundle.min.js"), format!("// header\n{long}\n")).unwrap();

    let whole = read(&d, &fx, json!({"path": "bundle.min.js"})).await;
    let note = " [line 2 cut: characters 1-50000 of 120000 shown; read on with offset=2, limit=1, column=50001]";
    assert_eq!(
        whole.text(),
        format!("// header\n{}{note}", &long[..75_000])
    );
    assert_eq!(whole.metadata["lines_cut"], 1);

    let second = read(
        &d,
        &fx,
        json!({"path": "bundle.min.js", "offset": 2, "limit": 1, "column": 50_001}),
    )
    .await;
    let note = " [line 2 cut: characters 50001-100000 of 120000 shown; read on with offset=2, limit=1, column=100001]";
    assert_eq!(second.text(), format!("{}{note}", &long[75_000..150_000]));
    assert_eq!(second.metadata["first_column"], 50_001);

    let last = read(
        &d,
        &fx,
        json!({"path": "bundle.min.js", "offset": 2, "limit": 1, "column": 100_001}),
    )
    .await;
    assert_eq!(last.text(), &long[150_000..], "the rest, with no note");
    assert!(
        last.metadata.get("lines_cut").is_none(),
        "{}",
        last.metadata
    );

    let refused = d
        .dispatch(
            ToolUse::new(
                "tu",
                "read_file",
                json!({"path": "bundle.min.js", "offset": 2, "column": 120_002}),
            ),
            &fx.session,
        )
        .await;
    assert_eq!(refused.error_class, Some(ErrorClass::ValidationError));
    assert_eq!(
        refused.text(),
        "invalid input: column 120002 is past the end of line 2 of 'bundle.min.js', which has 120000 characters"
    );
}

#[tokio::test]
async fn read_file_offset_past_the_end_is_invalid_input_naming_the_length() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    std::fs::write(fx.path("short.txt"), "one\ntwo\n").unwrap();
    let r = d
        .dispatch(
            ToolUse::new("tu", "read_file", json!({"path": "short.txt", "offset": 3})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::ValidationError));
    assert_eq!(
        r.text(),
        "invalid input: offset 3 is past the end of 'short.txt', which has 2 lines"
    );
    // The last line is still there to read.
    assert_eq!(
        read(&d, &fx, json!({"path": "short.txt", "offset": 2}))
            .await
            .text(),
        "two"
    );
}

#[tokio::test]
async fn read_file_numbers_past_u64_mean_past_the_end_and_are_not_ignored() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    std::fs::write(fx.path("short.txt"), "one\ntwo\n").unwrap();
    // JSON numbers past u64 arrive as floats; they passed the schema as integers >= 1.
    let offset: Value =
        serde_json::from_str(r#"{"path": "short.txt", "offset": 18446744073709551616}"#).unwrap();
    let r = d
        .dispatch(ToolUse::new("tu", "read_file", offset), &fx.session)
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::ValidationError));
    assert_eq!(
        r.text(),
        "invalid input: offset 1.8446744073709552e+19 is past the end of 'short.txt', which has 2 lines"
    );
    let column = json!({"path": "short.txt", "offset": 2, "column": 1e20});
    let r = d
        .dispatch(ToolUse::new("tu", "read_file", column), &fx.session)
        .await;
    assert_eq!(
        r.text(),
        "invalid input: column 1e+20 is past the end of line 2 of 'short.txt', which has 3 characters"
    );
    // A limit past u64 is no limit.
    let limit = json!({"path": "short.txt", "limit": 1e300});
    assert_eq!(read(&d, &fx, limit).await.text(), "one\ntwo");
}

#[tokio::test]
async fn a_write_to_a_path_that_names_a_directory_is_refused_and_creates_nothing() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    let test_host = tool_api::testing::TestHost::new();
    for path in ["new/dir/", "new/dir/.", "new/dir/.."] {
        let r = d
            .dispatch(
                ToolUse::new("tu", "write_file", json!({"path": path, "content": "x"})),
                &fx.session,
            )
            .await;
        assert_eq!(r.error_class, Some(ErrorClass::ExecutionError), "{path}");
        assert_eq!(
            r.text(),
            format!(
                "'{path}' ends with '/', '/.' or '/..', so it names a directory; give the path of a file"
            )
        );
        // A plugin's tests see what the model will.
        let in_test = test_host.context().files().write(path, "x").unwrap_err();
        assert_eq!(in_test.message(), r.text());
    }
    assert!(
        !fx.path("new").exists(),
        "nothing created, not even the parent"
    );
}

#[tokio::test]
async fn read_file_of_a_range_of_a_file_over_the_read_limit_points_to_a_command() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    // Sparse: a size over the limit without the bytes on disk.
    let file = std::fs::File::create(fx.path("huge.log")).unwrap();
    file.set_len(dispatcher_core::MAX_READ_BYTES + 1).unwrap();
    let r = d
        .dispatch(
            ToolUse::new(
                "tu",
                "read_file",
                json!({"path": "huge.log", "offset": 1000, "limit": 100}),
            ),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError));
    assert_eq!(
        r.text(),
        "'huge.log' is 1073741825 bytes, over the 1073741824-byte limit of one whole-file read (read_file reads all of a file, even for a range of lines); read the lines you need with a command, if you have a tool that runs one (`tail -n 100 huge.log`, `sed -n '1000,1100p' huge.log`)"
    );
}

#[tokio::test]
async fn read_file_of_text_in_another_encoding_shows_what_it_cannot_decode_and_says_so() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    // Latin-1: ü, ß and ö are one byte each, none of them UTF-8.
    std::fs::write(
        fx.path("legacy.txt"),
        b"Gr\xfc\xdfe aus K\xf6ln\nzweite Zeile\n",
    )
    .unwrap();
    let r = read(&d, &fx, json!({"path": "legacy.txt"})).await;
    let note = "[3 bytes of 'legacy.txt' are not UTF-8 (another encoding, e.g. Latin-1?) and are shown as \u{FFFD}; a patch_file `old` cannot match the lines that hold them]";
    assert_eq!(
        r.text(),
        format!("Gr\u{FFFD}\u{FFFD}e aus K\u{FFFD}ln\nzweite Zeile\n\n{note}")
    );
    assert_eq!(r.metadata["invalid_utf8_bytes"], 3);
    let second = read(&d, &fx, json!({"path": "legacy.txt", "offset": 2})).await;
    assert_eq!(second.text(), format!("zweite Zeile\n{note}"));
}

#[tokio::test]
async fn read_file_of_a_file_holding_nul_bytes_is_refused_as_binary() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    // Valid UTF-8 all the same: UTF-16 text of ASCII letters.
    std::fs::write(fx.path("notes.txt"), b"h\x00i\x00").unwrap();
    let r = d
        .dispatch(
            ToolUse::new("tu", "read_file", json!({"path": "notes.txt"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError));
    assert_eq!(
        r.text(),
        "'notes.txt' holds NUL bytes (a binary file, or UTF-16 text?); read_file returns text only"
    );
}

#[tokio::test]
async fn a_path_that_is_not_there_gets_the_names_it_may_have_meant() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    std::fs::create_dir_all(fx.path("src")).unwrap();
    std::fs::write(fx.path("src/main.tsx"), "x").unwrap();
    std::fs::write(fx.path("README.md"), "x").unwrap();
    for (tool, input, expected) in [
        (
            "read_file",
            json!({"path": "src/main.ts"}),
            "'src/main.ts' not found in the workspace; did you mean 'src/main.tsx'?",
        ),
        (
            "read_file",
            json!({"path": "readme.md"}),
            "'readme.md' not found in the workspace; did you mean 'README.md'?",
        ),
        (
            "patch_file",
            json!({"path": "lib/util/x.rs", "old": "a", "new": "b"}),
            "'lib/util/x.rs' not found in the workspace; there is no directory 'lib'",
        ),
        (
            "list_dir",
            json!({"path": "srcs"}),
            "'srcs' not found in the workspace; did you mean 'src'?",
        ),
        (
            "read_file",
            json!({"path": "nothing/like/it.txt"}),
            "'nothing/like/it.txt' not found in the workspace; there is no directory 'nothing'",
        ),
        (
            "read_file",
            json!({"path": "unrelated.rs"}),
            "'unrelated.rs' not found in the workspace",
        ),
    ] {
        let r = d
            .dispatch(ToolUse::new("tu", tool, input), &fx.session)
            .await;
        assert_eq!(r.error_class, Some(ErrorClass::ExecutionError), "{tool}");
        assert_eq!(r.text(), expected, "{tool}");
    }
}

#[tokio::test]
async fn a_patch_whose_old_and_new_are_the_same_is_invalid_and_writes_nothing() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    std::fs::write(fx.path("f.txt"), "keep").unwrap();
    let before = std::fs::metadata(fx.path("f.txt"))
        .unwrap()
        .modified()
        .unwrap();
    let r = d
        .dispatch(
            ToolUse::new(
                "tu",
                "patch_file",
                json!({"path": "f.txt", "old": "keep", "new": "keep"}),
            ),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::ValidationError));
    assert_eq!(
        r.text(),
        "invalid input: `old` and `new` are the same: there is nothing to change"
    );
    let after = std::fs::metadata(fx.path("f.txt"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after, "the file was not rewritten");
}

#[tokio::test]
async fn a_path_under_a_file_names_the_file() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    std::fs::create_dir_all(fx.path("src")).unwrap();
    std::fs::write(fx.path("src/config.json"), "{}").unwrap();
    for (tool, input) in [
        (
            "write_file",
            json!({"path": "src/config.json/x", "content": "1"}),
        ),
        ("read_file", json!({"path": "src/config.json/x"})),
        ("list_dir", json!({"path": "src/config.json/y/z"})),
    ] {
        let path = input["path"].as_str().unwrap().to_string();
        let r = d
            .dispatch(ToolUse::new("tu", tool, input), &fx.session)
            .await;
        assert_eq!(
            r.text(),
            format!("'{path}' lies under 'src/config.json', which is a file, not a directory"),
            "{tool}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(fx.path("src/config.json")).unwrap(),
        "{}"
    );
}

#[tokio::test]
async fn a_directory_given_to_read_and_a_file_given_to_list_name_the_other_tool() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().policy(allow_all()));
    std::fs::create_dir_all(fx.path("src")).unwrap();
    std::fs::write(fx.path("notes.txt"), "x").unwrap();
    for (tool, input, expected) in [
        (
            "read_file",
            json!({"path": "src"}),
            "'src' is a directory; list it with list_dir",
        ),
        (
            "patch_file",
            json!({"path": "src", "old": "a", "new": "b"}),
            "'src' is a directory; list it with list_dir",
        ),
        (
            "list_dir",
            json!({"path": "notes.txt"}),
            "'notes.txt' is not a directory; read it with read_file",
        ),
    ] {
        let r = d
            .dispatch(ToolUse::new("tu", tool, input), &fx.session)
            .await;
        assert_eq!(r.text(), expected, "{tool}");
    }
}
