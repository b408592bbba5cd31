//! Tools written as WebAssembly components: loaded from packages like native plugins, run
//! under the same policy, events and confirmations, and confined by the WebAssembly
//! sandbox (files only through the host, no network, no environment), with limits that
//! hold inside it: a trap, an endless loop or a memory bomb ends only its call.
//!
//! The components are built from Python by componentize-py and from JavaScript by
//! componentize-js: `cargo xtask test` builds them
//! and names their folder in `TOOLHOST_TEST_COMPONENTS` (by hand:
//! `TOOLHOST_TEST_COMPONENTS=$(cargo xtask wasm-fixtures) cargo test --test wasm`).
#![cfg(test)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::wasm::{
    Components, assert_fails, assert_returns_cancelled, faults, lone_tool, refusal, run_on_thread,
};
use common::{Scripted, allow_all, drain};
use dispatcher_core::{Decision, Dispatcher, DispatcherConfig, ErrorClass, EventKind, ToolUse};
use plugin_host::{Isolation, Outcome, Refusal};
use serde_json::{Value, json};

#[tokio::test]
async fn a_component_package_loads_and_is_reported_as_wasm() {
    let Some(env) = Components::new(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    let report = env.load();
    let Outcome::Loaded {
        isolation, tools, ..
    } = &report.packages[0].outcome
    else {
        panic!("{:?}", report.lines());
    };
    assert_eq!(*isolation, Isolation::Wasm);
    assert_eq!(tools.len(), 2);
    assert!(report.lines()[0].contains("[wasm]"), "{:?}", report.lines());
}

#[tokio::test]
async fn a_python_tool_runs_and_returns_its_output() {
    let Some(env) = Components::loaded(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    let r = env
        .call("word_stats", json!({"text": "one two\nthree"}))
        .await;
    assert!(!r.is_error(), "{}", r.text());
    let v: Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(v, json!({"chars": 13, "lines": 2, "words": 3}));
}

#[tokio::test]
async fn a_javascript_tool_runs_and_returns_its_output() {
    let Some(env) = Components::loaded(&["text-case"], Dispatcher::builder()) else {
        return;
    };
    for (to, expected) in [
        ("snake", "parse_http_header"),
        ("kebab", "parse-http-header"),
        ("title", "Parse Http Header"),
    ] {
        let r = env
            .call("change_case", json!({"text": "parseHttp header", "to": to}))
            .await;
        assert_eq!(r.text(), expected, "{to}: {r:?}");
    }
    let r = env
        .call("change_case", json!({"text": "x", "to": "shouting"}))
        .await;
    assert_fails(&r, ErrorClass::ValidationError, "");
}

#[tokio::test]
async fn a_component_without_a_language_runtime_loads_and_answers() {
    let Some(env) = Components::loaded(&["wat-noop"], Dispatcher::builder()) else {
        return;
    };
    let r = env.call("wat_noop", json!({"anything": true})).await;
    assert!(!r.is_error(), "{r:?}");
    assert_eq!(r.text(), "");
}

#[tokio::test]
async fn a_component_reads_workspace_files_through_the_host() {
    let Some(env) = Components::loaded(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    env.fx.write("notes/a.txt", "alpha beta\n");
    let r = env.call("file_stats", json!({"path": "notes/a.txt"})).await;
    assert!(!r.is_error(), "{}", r.text());
    assert!(r.text().contains("\"words\": 2"), "{}", r.text());
}

#[tokio::test]
async fn input_that_fails_the_schema_is_refused_before_the_component_runs() {
    let Some(env) = Components::loaded(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    let r = env.call("word_stats", json!({"text": 5})).await;
    assert_fails(&r, ErrorClass::ValidationError, "");
}

#[tokio::test]
async fn a_path_outside_the_workspace_is_refused_by_the_host() {
    let Some(env) = faults() else { return };
    for path in ["../outside.txt", "/etc/passwd"] {
        let r = env.call("wasm_read", json!({"path": path})).await;
        assert_fails(&r, ErrorClass::PermissionDenied, "");
    }
}

#[tokio::test]
async fn a_component_can_touch_files_only_as_its_declared_class_allows() {
    let Some(env) = faults() else { return };
    env.fx.write("a.txt", "secret");
    let r = env
        .call("wasm_read_undeclared", json!({"path": "a.txt"}))
        .await;
    assert_fails(
        &r,
        ErrorClass::PermissionDenied,
        "declares side effects 'none'",
    );
}

#[tokio::test]
async fn a_component_has_no_files_no_environment_and_no_network_of_its_own() {
    let Some(env) = faults() else { return };
    env.fx.write(
        "Cargo.toml",
        "in the workspace, still not reachable without the host",
    );
    let r = env.call("wasm_open_outside", json!({})).await;
    assert!(r.is_error(), "it opened a file: {}", r.text());
    assert_eq!(r.text(), "no file could be opened");
    // A real connection attempt through wasi:sockets, to a listener that would see it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = env.call("wasm_connect_out", json!({ "port": port })).await;
    assert!(
        r.is_error() && r.text().starts_with("refused by wasi:sockets: "),
        "{}",
        r.text()
    );
    assert!(
        r.text().contains("ACCESS_DENIED") || r.text().contains("access"),
        "{}",
        r.text()
    );
    assert!(listener.accept().is_err(), "the connection arrived");
    let r = env.call("wasm_env", json!({})).await;
    let v: Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(v["env"], json!({}), "no host environment: {v}");
}

#[tokio::test]
async fn a_write_is_asked_for_and_recorded_like_any_write() {
    let Some(denied) = Components::loaded(
        &["faults"],
        Dispatcher::builder().confirmer(Arc::new(Scripted(Decision::Deny))),
    ) else {
        return;
    };
    let r = denied
        .call("wasm_write", json!({"path": "out.txt", "text": "x"}))
        .await;
    assert_fails(&r, ErrorClass::UserDenied, "");
    assert!(!denied.fx.path("out.txt").exists());

    let Some(env) = faults() else { return };
    let r = env
        .call("wasm_write", json!({"path": "out.txt", "text": "hello"}))
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert_eq!(
        std::fs::read_to_string(env.fx.path("out.txt")).unwrap(),
        "hello"
    );
    assert_eq!(r.record.files_modified, ["out.txt"]);
}

#[tokio::test]
async fn a_trap_ends_only_its_call_with_a_readable_execution_error() {
    let Some(env) = faults() else { return };
    let r = env.call("wasm_trap", json!({})).await;
    assert_fails(&r, ErrorClass::ExecutionError, "crashed");
    let text = r.text();
    assert!(
        text.contains("RuntimeError: deliberate failure in wasm_trap"),
        "{text}"
    );
    let r = env.call("wasm_echo", json!({"after": "trap"})).await;
    assert!(!r.is_error(), "the next call works: {}", r.text());
}

#[tokio::test]
async fn an_endless_loop_is_stopped_by_its_timeout_and_the_next_call_works() {
    let mut config = DispatcherConfig::default();
    config
        .timeouts
        .per_tool
        .insert("wasm_spin".into(), Duration::from_millis(500));
    let Some(env) = Components::loaded(&["faults"], Dispatcher::builder().config(config)) else {
        return;
    };
    let started = std::time::Instant::now();
    let r = env.call("wasm_spin", json!({})).await;
    assert_fails(&r, ErrorClass::Timeout, "");
    assert!(started.elapsed() < Duration::from_secs(10));
    let r = env.call("wasm_noop", json!({})).await;
    assert!(!r.is_error(), "{}", r.text());
}

#[tokio::test]
async fn cancelling_a_call_stops_a_component_in_an_endless_loop() {
    let Some(env) = faults() else { return };
    let mut events = env.fx.session.subscribe();
    let d = env.d().clone();
    let session = env.fx.session.clone();
    let call = tokio::spawn(async move {
        d.dispatch(ToolUse::new("tu_spin", "wasm_spin", json!({})), &session)
            .await
    });
    common::next_of(&mut events, "tool.called").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(env.d().request_cancel(env.fx.session.id(), "tu_spin"));
    let r = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the loop stops")
        .unwrap();
    assert_fails(&r, ErrorClass::Cancelled, "");
    assert!(!env.call("wasm_noop", json!({})).await.is_error());
}

/// A fresh instance of the fault fixture's endless loop, outside any dispatcher.
fn spin_tool() -> Option<Arc<dyn tool_api::Tool>> {
    lone_tool(
        "faults",
        "wasm_spin",
        plugin_host::plugin_wasm::HostList::none(),
    )
}

#[test]
fn cancel_stops_the_loop_itself_not_only_the_wait_for_it() {
    let Some(tool) = spin_tool() else { return };
    let ended = run_on_thread(tool.clone(), json!({}));
    std::thread::sleep(Duration::from_millis(300));
    assert!(ended.try_recv().is_err(), "still looping");
    assert!(tool.cancel());
    assert_returns_cancelled(&ended, "the thread running the loop");
}

#[test]
fn a_call_cancelled_before_it_starts_does_not_run() {
    let Some(tool) = spin_tool() else { return };
    assert!(tool.cancel());
    let ended = run_on_thread(tool, json!({}));
    assert_returns_cancelled(&ended, "it, at once instead of looping,");
}

#[tokio::test]
async fn a_memory_bomb_hits_the_instance_limit_and_ends_only_its_call() {
    let Some(env) = Components::new(&["faults"], Dispatcher::builder()) else {
        return;
    };
    let report = env.host().wasm_memory(96 << 20).load_into(env.d());
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let r = env.call("wasm_hog", json!({})).await;
    assert_fails(
        &r,
        ErrorClass::ExecutionError,
        "ran out of memory (the limit is 96 MiB",
    );
    assert!(!env.call("wasm_noop", json!({})).await.is_error());
}

#[tokio::test]
async fn a_large_result_is_spooled_like_any_tool_s() {
    let config = DispatcherConfig {
        results: dispatcher_core::ResultLimits {
            max_chars: 1000,
            preview_chars: 50,
            ..dispatcher_core::ResultLimits::default()
        },
        ..DispatcherConfig::default()
    };
    let Some(env) = Components::loaded(&["faults"], Dispatcher::builder().config(config)) else {
        return;
    };
    let r = env.call("wasm_lines", json!({"n": 5000})).await;
    assert!(!r.is_error(), "{r:?}");
    assert!(
        r.text().starts_with("1\n2\n3\n"),
        "a preview first: {}",
        r.text()
    );
    let path = r.metadata["spooled_output"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let full = std::fs::read_to_string(env.fx.path(&path)).unwrap();
    assert!(
        full.starts_with("1\n2\n") && full.ends_with("\n5000"),
        "nothing is lost"
    );
}

#[tokio::test]
async fn a_component_that_prints_a_lot_is_not_failed_for_it() {
    let Some(env) = faults() else { return };
    let r = env.call("wasm_chatty", json!({})).await;
    assert_eq!(r.text(), "done", "{r:?}");
}

#[tokio::test]
async fn every_call_gets_a_fresh_instance() {
    let Some(env) = faults() else { return };
    for _ in 0..3 {
        assert_eq!(env.call("wasm_counter", json!({})).await.text(), "1");
    }
}

/// The fault fixture, its manifest asking for reused instances.
fn reused_faults(config: DispatcherConfig) -> Option<Components> {
    let env = Components::new(
        &["faults"],
        Dispatcher::builder().policy(allow_all()).config(config),
    )?;
    env.edit_manifest(
        "faults",
        "kind = \"component\"",
        "kind = \"component\"\ninstances = \"reused\"",
    );
    let report = env.load();
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    Some(env)
}

async fn counter(env: &Components) -> String {
    env.call("wasm_counter", json!({})).await.text()
}

#[tokio::test]
async fn a_component_that_asks_for_reused_instances_keeps_its_memory_between_calls() {
    let Some(env) = reused_faults(DispatcherConfig::default()) else {
        return;
    };
    for expected in ["1", "2", "3"] {
        assert_eq!(counter(&env).await, expected);
    }
}

#[tokio::test]
async fn a_trap_timeout_or_memory_bomb_ends_a_reused_instance() {
    let mut config = DispatcherConfig::default();
    config
        .timeouts
        .per_tool
        .insert("wasm_spin".into(), Duration::from_millis(300));
    let Some(env) = reused_faults(config) else {
        return;
    };
    for fault in ["wasm_trap", "wasm_spin", "wasm_hog"] {
        assert_eq!(counter(&env).await, "1", "before {fault}");
        assert_eq!(counter(&env).await, "2", "before {fault}");
        // The fault runs in the one kept instance, which is then dropped, not kept.
        let r = env.call(fault, json!({})).await;
        assert!(r.is_error(), "{fault}: {}", r.text());
        assert_eq!(counter(&env).await, "1", "after {fault}");
        // Leave nothing kept for the next round: a trap ends the instance.
        let _ = env.call("wasm_trap", json!({})).await;
    }
}

#[tokio::test]
async fn a_reused_instance_serves_each_call_from_that_call_s_own_workspace() {
    let Some(env) = reused_faults(DispatcherConfig::default()) else {
        return;
    };
    env.fx.write("a.txt", "first workspace");
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("a.txt"), "second workspace").unwrap();
    let second = env
        .d()
        .open_session(dispatcher_core::SessionSpec::new("s2", other.path()))
        .unwrap();
    let read = |session| {
        env.d().dispatch(
            ToolUse::new("tu", "wasm_read", json!({"path": "a.txt"})),
            session,
        )
    };
    assert_eq!(counter(&env).await, "1");
    assert_eq!(read(&env.fx.session).await.text(), "first workspace");
    assert_eq!(read(&second).await.text(), "second workspace");
    assert_eq!(
        counter(&env).await,
        "2",
        "every call ran in the one instance"
    );
}

#[tokio::test]
async fn live_output_reaches_the_event_stream() {
    let Some(env) = faults() else { return };
    let mut events = env.fx.session.subscribe();
    let r = env.call("wasm_progress", json!({"chunks": 2})).await;
    assert_eq!(r.text(), "done");
    let chunks: Vec<String> = drain(&mut events)
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::OutputDelta { chunk } => Some(chunk.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(chunks, ["chunk 0\n", "chunk 1\n"]);
}

#[tokio::test]
async fn a_component_asks_the_user_through_the_host_confirmation_flow() {
    let Some(env) = Components::loaded(
        &["faults"],
        Dispatcher::builder().confirmer(Arc::new(Scripted(Decision::Allow))),
    ) else {
        return;
    };
    let mut events = env.fx.session.subscribe();
    let r = env
        .call("wasm_ask", json!({"question": "Upload it?"}))
        .await;
    assert_eq!(r.text(), "allowed", "{r:?}");
    assert!(
        drain(&mut events)
            .iter()
            .any(|e| e.kind.name() == "tool.confirmation_requested"),
        "the question went through the broker"
    );
}

#[tokio::test]
async fn calls_of_a_component_run_concurrently() {
    let Some(env) = faults() else { return };
    let calls = (0..4).map(|i| {
        env.d().dispatch(
            ToolUse::new(format!("tu_{i}"), "wasm_echo", json!({"i": i})),
            &env.fx.session,
        )
    });
    let results = futures_util::future::join_all(calls).await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.text(), json!({"i": i}).to_string());
    }
}

#[tokio::test]
async fn a_second_start_takes_compiled_code_from_the_cache() {
    let Some(env) = Components::new(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    let compiled = tempfile::tempdir().unwrap();
    let host = || env.host().wasm_cache_dir(compiled.path());
    assert_eq!(host().load_into(&Dispatcher::new()).loaded().count(), 1);
    let entries: Vec<PathBuf> = std::fs::read_dir(compiled.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let sha =
        plugin_host::digest::sha256_file(&env.plugins.path().join("text-stats/text-stats.wasm"))
            .unwrap();
    assert!(
        entries[0].to_string_lossy().contains(&sha),
        "keyed by the digest: {entries:?}"
    );
    let written = std::fs::metadata(&entries[0]).unwrap().modified().unwrap();
    let started = std::time::Instant::now();
    assert_eq!(host().load_into(&Dispatcher::new()).loaded().count(), 1);
    eprintln!("second start: {:?}", started.elapsed());
    assert_eq!(
        std::fs::metadata(&entries[0]).unwrap().modified().unwrap(),
        written
    );
}

#[tokio::test]
async fn a_component_built_against_another_interface_version_is_refused_before_it_is_compiled() {
    for (version, expected) in [
        (
            "2.0.0",
            "major versions differ; rebuild the component against toolhost:plugin@1.0",
        ),
        ("1.9.0", "it needs a newer host; upgrade toolhost"),
    ] {
        let Some(env) = Components::new(&["text-stats"], Dispatcher::builder()) else {
            return;
        };
        env.edit_manifest(
            "text-stats",
            "tool_api = \"1.0.0\"",
            &format!("tool_api = \"{version}\""),
        );
        let report = env.load();
        let r = refusal(&report);
        assert!(matches!(r, Refusal::IncompatibleInterface { .. }), "{r}");
        assert!(r.to_string().contains(expected), "{r}");
    }
}

#[tokio::test]
async fn a_changed_component_is_refused_by_its_checksum() {
    let Some(env) = Components::new(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    let file = env.plugins.path().join("text-stats/text-stats.wasm");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let report = env.load();
    assert!(
        matches!(refusal(&report), Refusal::ChecksumMismatch { .. }),
        "{:?}",
        report.lines()
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_component_is_refused_saying_what_to_build() {
    let Some(env) = Components::new(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    let file = env.plugins.path().join("text-stats/text-stats.wasm");
    std::fs::write(&file, b"\0asm\x01\0\0\0garbage").unwrap();
    let sha = plugin_host::digest::sha256_file(&file).unwrap();
    let text = std::fs::read_to_string(env.manifest("text-stats")).unwrap();
    let old = text
        .lines()
        .find(|l| l.starts_with("sha256"))
        .unwrap()
        .to_string();
    env.edit_manifest("text-stats", &old, &format!("sha256 = \"{sha}\""));
    let report = env.load();
    let r = refusal(&report).to_string();
    assert!(r.contains("is not a valid WebAssembly component"), "{r}");
    assert!(r.contains("wasm32-wasip2"), "{r}");
}

#[tokio::test]
async fn a_component_set_to_run_in_process_is_refused_saying_why() {
    let Some(env) = Components::new(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    let report = env
        .host()
        .isolate("text-stats", Isolation::InProcess)
        .load_into(env.d());
    let r = refusal(&report).to_string();
    assert!(r.contains("always runs in the WebAssembly sandbox"), "{r}");
}

#[tokio::test]
async fn a_component_package_for_another_target_is_refused() {
    let Some(env) = Components::new(&["text-stats"], Dispatcher::builder()) else {
        return;
    };
    env.edit_manifest("text-stats", "wasm32-wasip2", "wasm32-wasip1");
    let report = env.load();
    assert!(
        matches!(refusal(&report), Refusal::WrongTarget { expected, .. } if expected == "wasm32-wasip2"),
        "{:?}",
        report.lines()
    );
}
