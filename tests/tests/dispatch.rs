//! Dispatcher behaviour beyond the required list in `spec.rs`.
#![cfg(test)]

mod common;

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Fixture, Scripted, builtins, drain, next_of, policy};
use dispatcher_core::{
    ConfirmationRequest, Confirmer, Decision, Dispatcher, DispatcherConfig, ErrorClass, HookCall,
    HookDecision, PreUseHook, SessionSpec, ToolUse, Visibility, pre_use_fn,
};
use serde_json::{Value, json};
use tool_api::{
    DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput, factory,
};

#[derive(Default)]
struct Stubborn;
impl Tool for Stubborn {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        std::thread::sleep(Duration::from_secs(3));
        Ok(ToolOutput::text("late"))
    }
}
impl DefinedTool for Stubborn {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "stubborn",
            "Ignores cancellation.",
            SideEffect::None,
            json!({"type": "object"}),
        )
        .timeout(Duration::from_millis(200))
    }
}

/// Declares it needs forever (`timeout_ms` 2^64-1) and sleeps 3 s.
#[derive(Default)]
struct Greedy;
impl Tool for Greedy {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        std::thread::sleep(Duration::from_secs(3));
        Ok(ToolOutput::text("late"))
    }
}
impl DefinedTool for Greedy {
    fn definition() -> ToolDefinition {
        let mut d = ToolDefinition::new(
            "greedy",
            "Gives itself all the time in the world.",
            SideEffect::None,
            json!({"type": "object"}),
        );
        d.timeout_ms = Some(u64::MAX);
        d
    }
}

#[derive(Default)]
struct Gated;
impl Tool for Gated {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("gated ran"))
    }
}
impl DefinedTool for Gated {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "gated",
            "Needs a capability.",
            SideEffect::None,
            json!({"type": "object"}),
        )
        .requires_capability("eval")
        .inline()
    }
}

#[derive(Default)]
struct Failing;
impl Tool for Failing {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::internal(
            "connection string postgres://admin:secret@db",
        ))
    }
}
impl DefinedTool for Failing {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "failing",
            "Fails.",
            SideEffect::None,
            json!({"type": "object"}),
        )
        .inline()
    }
}

#[tokio::test]
async fn unknown_tool_is_not_found_listing_available_tools() {
    let d = Dispatcher::new();
    builtins(&d);
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let r = d
        .dispatch(ToolUse::new("tu", "reed_file", json!({})), &fx.session)
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::NotFound));
    assert_eq!(
        r.text(),
        "Tool 'reed_file' not found. Available: list_dir, patch_file, read_file, shell, write_file"
    );
    let e = next_of(&mut events, "tool.failed").await;
    assert_eq!(e.call.side_effects, None);
    assert_eq!(e.to_json()["error_class"], "not_found");
}

#[tokio::test]
async fn tool_exceeding_its_timeout_is_timeout() {
    let d = Dispatcher::new();
    d.register(factory::<Stubborn>()).unwrap();
    let fx = Fixture::new(d.clone());
    let started = Instant::now();
    let r = d
        .dispatch(ToolUse::new("tu", "stubborn", json!({})), &fx.session)
        .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(r.error_class, Some(ErrorClass::Timeout));
    assert_eq!(
        r.text(),
        "Tool 'stubborn' exceeded its 200ms time limit and was stopped."
    );
}

#[tokio::test]
async fn per_tool_timeout_from_config_wins_over_the_declaration() {
    let mut config = DispatcherConfig::default();
    config
        .timeouts
        .per_tool
        .insert("stubborn".into(), Duration::from_millis(50));
    let d = Dispatcher::builder().config(config).build();
    d.register(factory::<Stubborn>()).unwrap();
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(ToolUse::new("tu", "stubborn", json!({})), &fx.session)
        .await;
    assert!(r.text().contains("50ms"), "{}", r.text());
}

#[tokio::test]
async fn a_declared_timeout_lengthens_the_operators_only_up_to_max_timeout() {
    let config = DispatcherConfig {
        timeouts: dispatcher_core::Timeouts {
            max: Duration::from_millis(300),
            ..dispatcher_core::Timeouts::default()
        },
        ..DispatcherConfig::default()
    };
    let d = Dispatcher::builder().config(config).build();
    d.register(factory::<Greedy>()).unwrap();
    d.register(factory::<Stubborn>()).unwrap();
    let fx = Fixture::new(d.clone());
    let started = Instant::now();
    let r = d
        .dispatch(ToolUse::new("tu", "greedy", json!({})), &fx.session)
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.error_class, Some(ErrorClass::Timeout), "{}", r.text());
    assert!(r.text().contains("300ms"), "{}", r.text());
    // A declaration shorter than the bound still shortens the call.
    let r = d
        .dispatch(ToolUse::new("tu", "stubborn", json!({})), &fx.session)
        .await;
    assert!(r.text().contains("200ms"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_calls_run_while_every_warm_runner_holds_an_abandoned_tool() {
    // Six calls of a tool that ignores its 200 ms timeout and sleeps 3 s: more than there
    // are warm runner threads (at most four), so every runner holds one, abandoned. A
    // quick blocking call made then must still run (on tokio's blocking pool), long before
    // any of them wakes up.
    let d = Dispatcher::new();
    d.register(factory::<Stubborn>()).unwrap();
    d.register(tool_api::testing::noop(ToolDefinition::new(
        "blocking_noop",
        "x",
        SideEffect::None,
        json!({"type": "object"}),
    )))
    .unwrap();
    let fx = Fixture::new(d.clone());
    let started = Instant::now();
    let stubborn: Vec<_> = (0..6)
        .map(|i| {
            let (d, s) = (d.clone(), fx.session.clone());
            tokio::spawn(async move {
                d.dispatch(ToolUse::new(format!("tu{i}"), "stubborn", json!({})), &s)
                    .await
            })
        })
        .collect();
    for call in stubborn {
        let r = call.await.unwrap();
        assert_eq!(r.error_class, Some(ErrorClass::Timeout), "{}", r.text());
    }
    let r = d
        .dispatch(
            ToolUse::new("tu_quick", "blocking_noop", json!({})),
            &fx.session,
        )
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the quick call waited for an abandoned one: {:?}",
        started.elapsed()
    );
}

/// Dispatches the tool `make` creates, interrupts it once `running` is set, and checks that
/// it is abandoned (as cancelled) after the 300 ms grace, not before, and not much after.
async fn abandoned_after_grace(make: fn() -> Box<dyn Tool>, running: &'static AtomicBool) {
    let d = Dispatcher::builder()
        .config(DispatcherConfig {
            timeouts: dispatcher_core::Timeouts {
                cancel_grace: Duration::from_millis(300),
                ..dispatcher_core::Timeouts::default()
            },
            ..DispatcherConfig::default()
        })
        .build();
    let def = ToolDefinition::new("stubborn", "x", SideEffect::None, json!({"type": "object"}));
    struct F(ToolDefinition, fn() -> Box<dyn Tool>);
    impl tool_api::ToolFactory for F {
        fn definition(&self) -> &ToolDefinition {
            &self.0
        }
        fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
            Ok((self.1)())
        }
    }
    d.register(Arc::new(F(def, make))).unwrap();
    let fx = Fixture::new(d.clone());
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move {
        d2.dispatch(ToolUse::new("tu", "stubborn", json!({})), &s2)
            .await
    });
    // Set once the tool is running: an interrupt that comes before (just after
    // `tool.called`) stops the call before its tool starts, and there is nothing to abandon.
    while !running.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    d.cancel_session_tools("s1").await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(
        pending.await.unwrap().error_class,
        Some(ErrorClass::Cancelled)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_ignoring_cancellation_is_abandoned_after_grace_period() {
    static RUNNING: AtomicBool = AtomicBool::new(false);
    struct Running;
    impl Tool for Running {
        fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
            RUNNING.store(true, Ordering::SeqCst);
            Stubborn.execute(input, ctx)
        }
    }
    abandoned_after_grace(|| Box::new(Running), &RUNNING).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_ignoring_cancellation_is_abandoned_after_grace_period() {
    // A tool run as a future (`execute_async`, as a mounted server's): the interrupt wakes
    // the call where it waits for its future, which never ends and ignores `cancel`.
    static RUNNING: AtomicBool = AtomicBool::new(false);
    struct Waiting;
    impl Tool for Waiting {
        fn execute(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
            Err(ToolError::failed("run as a future only"))
        }
        fn execute_async(
            self: Arc<Self>,
            _: Value,
            _: ToolContext,
        ) -> Result<tool_api::ToolFuture, (Value, ToolContext)> {
            RUNNING.store(true, Ordering::SeqCst);
            Ok(Box::pin(std::future::pending()))
        }
    }
    abandoned_after_grace(|| Box::new(Waiting), &RUNNING).await;
}

#[tokio::test]
async fn tool_requiring_a_disabled_capability_is_neither_listed_nor_dispatchable() {
    let off = Dispatcher::new();
    off.register(factory::<Gated>()).unwrap();
    let fx = Fixture::new(off.clone());
    assert!(off.definitions_for_session(&fx.session).is_empty());
    let r = off
        .dispatch(ToolUse::new("tu", "gated", json!({})), &fx.session)
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::NotFound));

    let on = Dispatcher::builder().capability("eval").build();
    on.register(factory::<Gated>()).unwrap();
    let fx = Fixture::new(on.clone());
    assert_eq!(on.definitions_for_session(&fx.session).len(), 1);
    assert_eq!(
        on.dispatch(ToolUse::new("tu", "gated", json!({})), &fx.session)
            .await
            .text(),
        "gated ran"
    );
}

#[tokio::test]
async fn session_visibility_filters_listing_and_dispatch() {
    let d = Dispatcher::new();
    builtins(&d);
    let dir = tempfile::tempdir().unwrap();
    let only_read = Visibility::Only(["read_file".to_string()].into());
    let s = d
        .open_session(SessionSpec::new("worker", dir.path()).visibility(only_read))
        .unwrap();
    let names: Vec<String> = d
        .definitions_for_session(&s)
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["read_file"]);
    let r = d
        .dispatch(ToolUse::new("tu", "shell", json!({"command": "true"})), &s)
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::NotFound));
    assert!(r.text().ends_with("Available: read_file"));
}

#[test]
fn a_search_ranks_only_what_the_session_sees_and_follows_the_tools_as_they_change() {
    let d = Dispatcher::new();
    builtins(&d);
    let dir = tempfile::tempdir().unwrap();
    let names = |found: Vec<dispatcher_core::FoundTool>| -> Vec<String> {
        found
            .into_iter()
            .map(|f| f.listing.definition.name)
            .collect()
    };
    let all = d.open_session(SessionSpec::new("all", dir.path())).unwrap();
    assert_eq!(names(d.search_tools(&all, "run a command", 1)), ["shell"]);
    let only_read = Visibility::Only(["read_file".to_string()].into());
    let reader = d
        .open_session(SessionSpec::new("reader", dir.path()).visibility(only_read))
        .unwrap();
    assert!(names(d.search_tools(&reader, "run a command", 5)).is_empty());
    assert_eq!(
        names(d.search_tools(&reader, "read a file", 5)),
        ["read_file"]
    );
    // A tool removed is gone from the next search, one added is found at once.
    assert!(d.unregister("shell"));
    assert!(!names(d.search_tools(&all, "run a command", 5)).contains(&"shell".to_string()));
    for again in builtin_tools::factories() {
        // The others are still there: only shell is registered again.
        let _ = d.register(again);
    }
    assert_eq!(names(d.search_tools(&all, "run a command", 1)), ["shell"]);
}

#[tokio::test]
async fn internal_tool_error_is_redacted_for_the_model() {
    let d = Dispatcher::new();
    d.register(factory::<Failing>()).unwrap();
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(ToolUse::new("tu_9", "failing", json!({})), &fx.session)
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError));
    assert!(!r.text().contains("secret"), "{}", r.text());
}

#[tokio::test]
async fn always_allow_stops_asking_for_that_tool_in_that_session() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder().confirmer(Arc::new(Scripted(Decision::AlwaysAllow))),
    );
    let mut events = fx.session.subscribe();
    for n in 0..3 {
        let r = d
            .dispatch(
                ToolUse::new(
                    "tu",
                    "write_file",
                    json!({"path": format!("{n}.txt"), "content": "x"}),
                ),
                &fx.session,
            )
            .await;
        assert!(!r.is_error());
    }
    let asked = drain(&mut events)
        .iter()
        .filter(|e| e.kind.name() == "tool.confirmation_requested")
        .count();
    assert_eq!(asked, 1);
    // Another session is asked again.
    let other = tempfile::tempdir().unwrap();
    let s2 = d
        .open_session(SessionSpec::new("s2", other.path()))
        .unwrap();
    let mut ev2 = s2.subscribe();
    d.dispatch(
        ToolUse::new("tu", "write_file", json!({"path": "a", "content": "x"})),
        &s2,
    )
    .await;
    assert_eq!(
        drain(&mut ev2)
            .iter()
            .filter(|e| e.kind.name() == "tool.confirmation_requested")
            .count(),
        1
    );
}

fn no_rm_rf() -> Arc<dyn PreUseHook> {
    pre_use_fn("no-rm-rf", |call: &HookCall<'_>| {
        match call.input.get("command").and_then(Value::as_str) {
            Some(c) if c.contains("rm -rf") => {
                HookDecision::Deny("rm -rf is not allowed here".into())
            }
            Some(c) if c.contains("curl") => HookDecision::Ask("network access".into()),
            _ => HookDecision::Continue,
        }
    })
}

#[tokio::test]
async fn hooks_can_deny_or_force_a_prompt() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"per_tool = { shell = "auto" }"#))
            .hook(no_rm_rf())
            .confirmer(Arc::new(Scripted(Decision::Deny))),
    );
    let r = d
        .dispatch(
            ToolUse::new("tu", "shell", json!({"command": "rm -rf /tmp/x"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied));
    assert!(r.text().contains("rm -rf is not allowed here"));
    let r = d
        .dispatch(
            ToolUse::new("tu", "shell", json!({"command": "curl example"})),
            &fx.session,
        )
        .await;
    assert_eq!(
        r.error_class,
        Some(ErrorClass::UserDenied),
        "asked, and the user said no"
    );
    let r = d
        .dispatch(
            ToolUse::new("tu", "shell", json!({"command": "echo ok"})),
            &fx.session,
        )
        .await;
    assert!(!r.is_error());
}

#[tokio::test]
async fn policy_deny_is_user_denied_and_names_the_setting() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder().policy(policy(r#"default = { EXECUTE = "deny" }"#)),
    );
    let r = d
        .dispatch(
            ToolUse::new("tu", "shell", json!({"command": "true"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied));
    assert!(
        r.text().contains("tool_confirmation.default.execute"),
        "{}",
        r.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_runs_unsafe_calls_alone_and_keeps_call_order() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder().policy(policy(r#"default = { WRITE = "auto", EXECUTE = "auto" }"#)),
    );
    fx.write("a.txt", "A");
    let calls = vec![
        ToolUse::new("t0", "read_file", json!({"path": "a.txt"})),
        ToolUse::new("t1", "write_file", json!({"path": "a.txt", "content": "B"})),
        ToolUse::new("t2", "read_file", json!({"path": "a.txt"})),
        ToolUse::new("t3", "nope", json!({})),
    ];
    let r = d.dispatch_batch(calls, &fx.session).await;
    let texts: Vec<String> = r.iter().map(|b| b.text()).collect();
    assert_eq!(
        texts[0], "A",
        "the read before the write sees the old content"
    );
    assert_eq!(
        texts[2], "B",
        "the read after the write sees the new content"
    );
    assert_eq!(r[3].error_class, Some(ErrorClass::NotFound));
    assert_eq!(
        r.iter().map(|b| b.tool_use_id.as_str()).collect::<Vec<_>>(),
        ["t0", "t1", "t2", "t3"]
    );
}

#[tokio::test]
async fn a_patch_that_misses_names_the_lines_of_its_matches_or_of_a_match_but_for_whitespace() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder().policy(policy(r#"default = { WRITE = "auto" }"#)),
    );
    let source = "fn main() {\n    let x = 1;\n    run(x);\n}\nfoo\n\nfoo\n";
    fx.write("main.rs", source);
    let test_host = tool_api::testing::TestHost::new();
    test_host.put_file("main.rs", source);
    let prefix = "patch of 'main.rs' needs exactly one match of `old`, ";
    for (old, expected) in [
        (
            "foo",
            "found 2, at lines 5 and 7: include more surrounding text so it matches once",
        ),
        (
            "let x = 1;\nrun(x);",
            "found 0; the text at line 2 matches it but for whitespace (indentation, line breaks, trailing spaces): copy that text exactly as read_file shows it",
        ),
        (
            "LET X = 1;   RUN(x);",
            "found 0; the text at line 2 matches it but for letter case (and perhaps whitespace): copy that text exactly as read_file shows it",
        ),
        (
            "nothing like it",
            "found 0: check the text, including whitespace",
        ),
    ] {
        let r = d
            .dispatch(
                ToolUse::new(
                    "t",
                    "patch_file",
                    json!({"path": "main.rs", "old": old, "new": "y"}),
                ),
                &fx.session,
            )
            .await;
        assert_eq!(r.text(), format!("{prefix}{expected}"), "{old:?}");
        // A plugin's tests see what the model will.
        let in_test = test_host
            .context()
            .files()
            .patch("main.rs", old, "y")
            .unwrap_err();
        assert_eq!(in_test.message(), r.text(), "{old:?}");
    }
    assert_eq!(std::fs::read_to_string(fx.path("main.rs")).unwrap(), source);
}

#[tokio::test]
async fn patch_file_needs_exactly_one_match() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder().policy(policy(r#"default = { WRITE = "auto" }"#)),
    );
    fx.write("f.txt", "aa bb aa");
    let none = d
        .dispatch(
            ToolUse::new(
                "t",
                "patch_file",
                json!({"path": "f.txt", "old": "zz", "new": "y"}),
            ),
            &fx.session,
        )
        .await;
    assert!(none.text().contains("found 0"), "{}", none.text());
    let two = d
        .dispatch(
            ToolUse::new(
                "t",
                "patch_file",
                json!({"path": "f.txt", "old": "aa", "new": "y"}),
            ),
            &fx.session,
        )
        .await;
    assert!(two.text().contains("found 2"), "{}", two.text());
    assert_eq!(
        std::fs::read_to_string(fx.path("f.txt")).unwrap(),
        "aa bb aa"
    );
    let one = d
        .dispatch(
            ToolUse::new(
                "t",
                "patch_file",
                json!({"path": "f.txt", "old": "bb", "new": "cc"}),
            ),
            &fx.session,
        )
        .await;
    assert!(!one.is_error());
    assert_eq!(
        std::fs::read_to_string(fx.path("f.txt")).unwrap(),
        "aa cc aa"
    );
}

#[tokio::test]
async fn write_file_replaces_atomically_and_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder().policy(policy(r#"default = { WRITE = "auto" }"#)),
    );
    fx.write("run.sh", "old");
    std::fs::set_permissions(fx.path("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let r = d
        .dispatch(
            ToolUse::new(
                "t",
                "write_file",
                json!({"path": "run.sh", "content": "new"}),
            ),
            &fx.session,
        )
        .await;
    assert!(!r.is_error());
    assert_eq!(std::fs::read_to_string(fx.path("run.sh")).unwrap(), "new");
    assert_eq!(
        std::fs::metadata(fx.path("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o750
    );
    let leftovers: Vec<_> = std::fs::read_dir(fx.dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("toolhost"))
        .collect();
    assert!(leftovers.is_empty(), "no temp files left behind");
    let r = d
        .dispatch(
            ToolUse::new(
                "t",
                "write_file",
                json!({"path": "deep/new/dir/f.txt", "content": "x"}),
            ),
            &fx.session,
        )
        .await;
    assert!(!r.is_error(), "{}", r.text());
}

#[tokio::test]
async fn events_serialize_with_the_spec_names_and_fields() {
    let d = Dispatcher::new();
    builtins(&d);
    let fx = Fixture::new(d.clone());
    fx.write("README.md", "# Project Foo");
    let mut all = d.subscribe_all();
    d.dispatch(
        ToolUse::new("tu_01HZ_a", "read_file", json!({"path": "README.md"})),
        &fx.session,
    )
    .await;
    let called = next_of(&mut all, "tool.called").await.to_json();
    for key in [
        "type",
        "session_id",
        "turn_id",
        "tool_use_id",
        "tool_name",
        "side_effects",
        "timestamp_ms",
        "queued_ms",
    ] {
        assert!(
            called.get(key).is_some(),
            "tool.called lacks {key}: {called}"
        );
    }
    assert_eq!(called["tool_use_id"], "tu_01HZ_a");
    assert_eq!(
        called["authorized_by"],
        json!({"by": "policy", "rule": "tool_confirmation.default.read"}),
        "{called}"
    );
    let completed = next_of(&mut all, "tool.completed").await.to_json();
    assert!(completed["duration_ms"].as_f64().unwrap() >= 0.0);
}

#[tokio::test]
async fn unregistered_tool_is_gone_and_the_name_is_free_again() {
    let d = Dispatcher::new();
    builtins(&d);
    assert!(d.unregister("shell"));
    assert!(!d.unregister("shell"));
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(
            ToolUse::new("t", "shell", json!({"command": "true"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::NotFound));
    d.register(builtin_tools::factories().pop().unwrap())
        .unwrap();
}

#[tokio::test]
async fn reopening_a_session_with_another_workspace_is_refused() {
    let d = Dispatcher::new();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    d.open_session(SessionSpec::new("s", a.path())).unwrap();
    assert!(d.open_session(SessionSpec::new("s", a.path())).is_ok());
    let e = d.open_session(SessionSpec::new("s", b.path())).unwrap_err();
    assert!(e.to_string().contains("already open"), "{e}");
    assert!(
        d.open_session(SessionSpec::new("x", "/no/such/dir"))
            .is_err()
    );
}

#[tokio::test]
async fn cancelling_a_call_waiting_for_confirmation_is_cancelled_not_denied() {
    let d = Dispatcher::new();
    builtins(&d);
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let (d2, s2) = (d.clone(), fx.session.clone());
    let pending = tokio::spawn(async move {
        d2.dispatch(
            ToolUse::new("tu", "write_file", json!({"path": "a.txt", "content": "x"})),
            &s2,
        )
        .await
    });
    common::next_of(&mut events, "tool.confirmation_requested").await;
    assert_eq!(d.cancel_session_tools("s1").await, 1);
    let r = pending.await.unwrap();
    assert_eq!(r.error_class, Some(ErrorClass::Cancelled));
    assert!(
        r.text().contains("while waiting for confirmation"),
        "{}",
        r.text()
    );
    let resolved = common::next_of(&mut events, "tool.confirmation_resolved").await;
    assert_eq!(resolved.to_json()["decision"], "cancelled");
    assert!(!fx.path("a.txt").exists());
}

#[test]
fn test_host_and_the_real_workspace_word_file_errors_alike() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bin"), [0xff, 0xfe]).unwrap();
    std::fs::write(dir.path().join("a.txt"), "x x").unwrap();
    let real = dispatcher_core::Workspace::open(dir.path()).unwrap();
    let host = tool_api::testing::TestHost::new();
    host.put_file("bin", [0xff, 0xfe]);
    host.put_file("a.txt", "x x");
    let ctx = host.context();
    let files = ctx.files();
    // What a tool (and so the model) sees of a real workspace error.
    let said = |e: dispatcher_core::FsError| tool_api::ToolError::from(e).to_string();
    let pairs = [
        (
            said(real.read("missing.txt").unwrap_err()),
            files.read("missing.txt").unwrap_err().to_string(),
        ),
        (
            said(real.read("../escape").unwrap_err()),
            files.read("../escape").unwrap_err().to_string(),
        ),
        (
            said(real.read("bin").unwrap_err()),
            files.read("bin").unwrap_err().to_string(),
        ),
        (
            said(real.patch("a.txt", "x", "y").unwrap_err()),
            files.patch("a.txt", "x", "y").unwrap_err().to_string(),
        ),
        (
            said(real.delete("missing.txt").unwrap_err()),
            files.delete("missing.txt").unwrap_err().to_string(),
        ),
    ];
    for (real, test) in pairs {
        assert_eq!(real, test);
    }
}

/// `Probe<CLASS>`, the same tool the `probe` fixture plugin exports.
#[path = "../fixtures/plugins/probe/src/probe.rs"]
mod probe;
use probe::Probe;

#[tokio::test]
async fn a_tools_file_access_is_bounded_by_its_declared_class() {
    let d = Dispatcher::builder().policy(common::allow_all()).build();
    d.register(factory::<Probe<0>>()).unwrap();
    d.register(factory::<Probe<1>>()).unwrap();
    d.register(factory::<Probe<2>>()).unwrap();
    d.register(factory::<Probe<3>>()).unwrap();
    let fx = Fixture::new(d.clone());
    common::assert_file_access_follows_the_declared_class(&d, &fx.session, |rel, text| {
        fx.write(rel, text)
    })
    .await;
}

/// A dispatcher with the built-ins and an inline no-op, over a fresh workspace.
fn with_inline_noop() -> Fixture {
    let d = Dispatcher::builder().policy(common::allow_all()).build();
    builtins(&d);
    d.register(tool_api::testing::noop(
        ToolDefinition::new("nop", "No-op.", SideEffect::None, json!({"type": "object"})).inline(),
    ))
    .unwrap();
    Fixture::new(d)
}

#[tokio::test]
async fn a_read_that_blocks_does_not_hold_up_a_concurrent_inline_call() {
    let fx = with_inline_noop();
    // A FIFO: opening it for reading waits for a writer, like a slow filesystem.
    let fifo = fx.path("slow.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // If the read blocked this (single-threaded) runtime, this unblocks it after 5 s, and
    // the inline call then comes too late: a failure, not a hang.
    let watchdog_fifo = fifo.clone();
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog_fired = fired.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(5));
        watchdog_fired.store(true, std::sync::atomic::Ordering::SeqCst);
        feed_fifo(&watchdog_fifo, b"watchdog");
    });
    // However the test ends, a read still waiting is released (or the runtime never ends).
    struct Release(std::path::PathBuf);
    impl Drop for Release {
        fn drop(&mut self) {
            feed_fifo(&self.0, b"released");
        }
    }
    let release = Release(fifo.clone());
    let d = fx.dispatcher.clone();
    let session = fx.session.clone();
    let slow = tokio::spawn(async move {
        d.dispatch(
            ToolUse::new("tu_slow", "read_file", json!({"path": "slow.fifo"})),
            &session,
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let quick = fx
        .dispatcher
        .dispatch(ToolUse::new("tu_quick", "nop", json!({})), &fx.session)
        .await;
    assert!(!quick.is_error(), "{quick:?}");
    assert!(
        !fired.load(std::sync::atomic::Ordering::SeqCst),
        "the inline call had to wait for the blocked read"
    );
    assert!(!slow.is_finished(), "the read still waits for its writer");
    feed_fifo(&fifo, b"through the pipe");
    let slow = slow.await.unwrap();
    assert_eq!(slow.text(), "through the pipe");
    std::mem::forget(release);
}

#[tokio::test]
async fn reads_and_listings_over_the_inline_budget_run_off_thread_with_one_set_of_events() {
    let fx = with_inline_noop();
    let big: String = (1..=20_000).map(|i| format!("line {i}\n")).collect();
    assert!(big.len() as u64 > dispatcher_core::INLINE_BYTES);
    fx.write("big.txt", &big);
    for i in 0..1500 {
        fx.write(&format!("many/f{i:04}"), "");
    }
    let mut events = fx.session.subscribe();
    let r = fx
        .dispatcher
        .dispatch(
            ToolUse::new(
                "tu",
                "read_file",
                json!({"path": "big.txt", "offset": 19_999, "limit": 2}),
            ),
            &fx.session,
        )
        .await;
    assert_eq!(r.text(), "line 19999\nline 20000");
    let kinds: Vec<String> = drain(&mut events)
        .iter()
        .map(|e| e.kind.name().to_string())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "tool.called").count(),
        1,
        "{kinds:?}"
    );
    let listed = fx
        .dispatcher
        .dispatch(
            ToolUse::new("tu2", "list_dir", json!({"path": "many"})),
            &fx.session,
        )
        .await;
    assert_eq!(listed.text().lines().count(), 1500);
    let small = fx
        .dispatcher
        .dispatch(
            ToolUse::new("tu3", "read_file", json!({"path": "many/f0001"})),
            &fx.session,
        )
        .await;
    assert!(!small.is_error(), "{small:?}");
}

/// Writes to a FIFO if a reader waits on it (trying for up to 2 s).
fn feed_fifo(fifo: &std::path::Path, bytes: &[u8]) {
    use std::os::unix::fs::OpenOptionsExt;
    for _ in 0..200 {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(fifo)
        {
            let _ = std::io::Write::write_all(&mut f, bytes);
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asks the user mid-call and reports the answer (declared `none`: the policy never asks
/// before it runs).
#[derive(Default)]
struct Asking;
impl Tool for Asking {
    fn execute(&self, _input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let answer = ctx.ask_user("Send the report upstream?")?;
        Ok(ToolOutput::text(format!("{answer:?}")))
    }
}
impl DefinedTool for Asking {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "asking",
            "Asks the user.",
            SideEffect::None,
            json!({"type": "object"}),
        )
    }
}

#[tokio::test]
async fn a_tool_asks_the_user_mid_call_through_the_same_broker_and_events() {
    for (decision, shown) in [
        (Decision::Allow, "Allowed"),
        (Decision::Deny, "Denied"),
        (Decision::AlwaysAllow, "Allowed"),
    ] {
        let d = Dispatcher::builder()
            .confirmer(Arc::new(Scripted(decision)))
            .build();
        d.register(factory::<Asking>()).unwrap();
        let fx = Fixture::new(d.clone());
        let mut events = fx.session.subscribe();
        let r = d
            .dispatch(ToolUse::new("tu_ask", "asking", json!({})), &fx.session)
            .await;
        assert_eq!(r.text(), shown, "{r:?}");
        let seen = drain(&mut events);
        let requested = seen
            .iter()
            .find(|e| e.kind.name() == "tool.confirmation_requested")
            .expect("the question is announced");
        let json = requested.to_json();
        assert_eq!(json["input_summary"], "Send the report upstream?", "{json}");
        assert_eq!(json["tool_use_id"], "tu_ask");
        assert!(
            seen.iter()
                .any(|e| e.kind.name() == "tool.confirmation_resolved")
        );
        // "Always" answers this question only: nothing is granted.
        assert!(
            fx.session.approvals().is_empty(),
            "{:?}",
            fx.session.approvals()
        );
    }
}

#[tokio::test]
async fn a_question_nobody_answers_is_no_answer_after_the_confirmation_timeout() {
    struct Silent;
    impl Confirmer for Silent {
        fn name(&self) -> &str {
            "silent"
        }
        fn confirm(&self, _r: ConfirmationRequest) -> dispatcher_core::ConfirmFuture {
            Box::pin(std::future::pending())
        }
    }
    let config = DispatcherConfig {
        timeouts: dispatcher_core::Timeouts {
            confirmation: Duration::from_millis(200),
            ..dispatcher_core::Timeouts::default()
        },
        ..DispatcherConfig::default()
    };
    let d = Dispatcher::builder()
        .config(config)
        .confirmer(Arc::new(Silent))
        .build();
    d.register(factory::<Asking>()).unwrap();
    let fx = Fixture::new(d.clone());
    let r = d
        .dispatch(ToolUse::new("tu", "asking", json!({})), &fx.session)
        .await;
    assert_eq!(r.text(), "NoAnswer", "{r:?}");
}

/// Replaces a workspace file the way an editor saves: a new file renamed over the old one.
fn replace_file(fx_dir: &std::path::Path, rel: &str, content: &str) {
    let tmp = fx_dir.join(format!(".{rel}.new"));
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, fx_dir.join(rel)).unwrap();
}

#[derive(Default)]
struct Holds;
impl Tool for Holds {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        std::thread::sleep(Duration::from_millis(300));
        Ok(ToolOutput::text("held"))
    }
}
impl DefinedTool for Holds {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "holds",
            "Holds its place for a while.",
            SideEffect::None,
            json!({"type": "object"}),
        )
    }
}

#[tokio::test]
async fn a_read_that_waited_for_a_place_reads_the_file_as_it_is_when_it_runs() {
    let d = Dispatcher::builder()
        .config(DispatcherConfig {
            max_concurrency: 1,
            ..Default::default()
        })
        .policy(common::allow_all())
        .build();
    builtins(&d);
    d.register(factory::<Holds>()).unwrap();
    let fx = Fixture::new(d.clone());
    fx.write("a.txt", "before");
    let holder = {
        let (d, s) = (d.clone(), fx.session.clone());
        tokio::spawn(async move { d.dispatch(ToolUse::new("t1", "holds", json!({})), &s).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Checked (and its path opened) now; it waits for the only place.
    let read = {
        let (d, s) = (d.clone(), fx.session.clone());
        tokio::spawn(async move {
            d.dispatch(
                ToolUse::new("t2", "read_file", json!({"path": "a.txt"})),
                &s,
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    replace_file(fx.dir.path(), "a.txt", "after");
    assert_eq!(holder.await.unwrap().text(), "held");
    assert_eq!(read.await.unwrap().text(), "after");
}

#[tokio::test]
async fn a_read_the_user_confirmed_reads_the_file_as_it_is_when_it_runs() {
    struct EditsThenAllows(std::path::PathBuf);
    impl Confirmer for EditsThenAllows {
        fn name(&self) -> &str {
            "edits-then-allows"
        }
        fn confirm(&self, _r: ConfirmationRequest) -> dispatcher_core::ConfirmFuture {
            // While the user looks at the prompt, the file is saved again.
            replace_file(&self.0, "a.txt", "after");
            Box::pin(async move { Decision::Allow.into() })
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let d = Dispatcher::builder()
        .policy(policy(r#"default = { read = "prompt" }"#))
        .confirmer(Arc::new(EditsThenAllows(dir.path().to_path_buf())))
        .build();
    assert_eq!(read_a_file_saved_meanwhile(&d, dir.path()).await, "after");
}

/// `read_file` of `a.txt` (written as "before") in `dir` through `d` with the built-ins:
/// what the call read.
async fn read_a_file_saved_meanwhile(d: &Dispatcher, dir: &std::path::Path) -> String {
    std::fs::write(dir.join("a.txt"), "before").unwrap();
    builtins(d);
    let session = d.open_session(SessionSpec::new("s", dir)).unwrap();
    let r = d
        .dispatch(
            ToolUse::new("t1", "read_file", json!({"path": "a.txt"})),
            &session,
        )
        .await;
    r.text()
}

#[tokio::test]
async fn a_read_a_pre_use_hook_looked_at_reads_the_file_as_it_is_when_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let d = Dispatcher::builder()
        .policy(common::allow_all())
        .hook(pre_use_fn(
            "saves-meanwhile",
            move |_call: &HookCall<'_>| {
                replace_file(&root, "a.txt", "after");
                HookDecision::Continue
            },
        ))
        .build();
    assert_eq!(read_a_file_saved_meanwhile(&d, dir.path()).await, "after");
}

#[tokio::test]
async fn a_listing_through_the_checked_handle_names_entries_as_the_workspace_does() {
    let fx = with_inline_noop();
    fx.write("d/file.txt", "x");
    fx.write("d/sub/inner.txt", "y");
    std::os::unix::fs::symlink("sub", fx.path("d/link_to_sub")).unwrap();
    std::os::unix::fs::symlink("file.txt", fx.path("d/link_to_file")).unwrap();
    std::fs::write(
        fx.path("d")
            .join(std::ffi::OsStr::from_bytes(b"not-utf8-\xff")),
        "",
    )
    .unwrap();
    let listed = fx
        .dispatcher
        .dispatch(
            ToolUse::new("t1", "list_dir", json!({"path": "d"})),
            &fx.session,
        )
        .await;
    let expected = fx.session.workspace().list("d").unwrap();
    assert_eq!(listed.text().lines().collect::<Vec<_>>(), expected);
    assert_eq!(
        expected,
        [
            "file.txt",
            "link_to_file",
            "link_to_sub",
            "not-utf8-\u{fffd}",
            "sub/"
        ]
    );
}

/// A tool `versioned` that answers with its version; `hold` keeps a call running until
/// the test lets it go.
struct Versioned {
    def: ToolDefinition,
    version: &'static str,
    hold: Option<Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>>,
    started: Arc<AtomicBool>,
}

impl Versioned {
    fn new(
        version: &'static str,
        hold: Option<Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>>,
    ) -> Arc<Versioned> {
        let def = ToolDefinition::new(
            "versioned",
            "x",
            SideEffect::None,
            json!({"type": "object"}),
        );
        Arc::new(Versioned {
            def,
            version,
            hold,
            started: Arc::default(),
        })
    }
}

struct VersionedRun(
    &'static str,
    Option<Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>>,
    Arc<AtomicBool>,
);

impl Tool for VersionedRun {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.2.store(true, Ordering::SeqCst);
        if let Some(hold) = &self.1 {
            let (released, wake) = &**hold;
            let mut released = released.lock().unwrap();
            while !*released {
                released = wake.wait(released).unwrap();
            }
        }
        Ok(ToolOutput::text(self.0))
    }
}

impl tool_api::ToolFactory for Versioned {
    fn definition(&self) -> &ToolDefinition {
        &self.def
    }
    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(VersionedRun(
            self.version,
            self.hold.clone(),
            self.started.clone(),
        )))
    }
}

#[tokio::test]
async fn a_tool_replaced_in_one_step_finishes_its_call_in_flight_on_the_old_version_and_serves_new_calls_from_the_new()
 {
    let d = Dispatcher::new();
    builtins(&d);
    let hold = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let old = Versioned::new("1.0", Some(hold.clone()));
    d.register(old.clone()).unwrap();
    let fx = Fixture::new(d.clone());
    let (d2, s2) = (d.clone(), fx.session.clone());
    let in_flight = tokio::spawn(async move {
        d2.dispatch(ToolUse::new("a", "versioned", json!({})), &s2)
            .await
    });
    while !old.started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut changes = d.watch_tools();
    changes.borrow_and_update();
    d.replace_tools(
        &["versioned".to_string()],
        vec![Versioned::new("2.0", None)],
    )
    .unwrap();
    assert!(changes.has_changed().unwrap(), "watchers are told");
    let new = d
        .dispatch(ToolUse::new("b", "versioned", json!({})), &fx.session)
        .await;
    assert_eq!(new.text(), "2.0");
    {
        let (released, wake) = &*hold;
        *released.lock().unwrap() = true;
        wake.notify_all();
    }
    assert_eq!(in_flight.await.unwrap().text(), "1.0");
    // A swap that would be refused (a name another tool keeps) changes nothing.
    let clash = d.replace_tools(
        &["versioned".to_string()],
        vec![
            Versioned::new("3.0", None),
            builtin_tools::factories().remove(0),
        ],
    );
    assert!(clash.is_err(), "{clash:?}");
    let still = d
        .dispatch(ToolUse::new("c", "versioned", json!({})), &fx.session)
        .await;
    assert_eq!(still.text(), "2.0");
}
