//! Isolation `process`: the fault corpus. Each fault plugin ends only its own call (and
//! its worker), as an `execution_error` naming the plugin and the cause; other calls and
//! plugins go on, the host (this test process) lives, and the worker restarts on the next
//! call. Also: signatures decide where a package runs.
#![cfg(test)]

mod common;

use std::time::{Duration, Instant};

use common::allow_all;
use common::plugin_env::PluginEnv;
use dispatcher_core::{Dispatcher, DispatcherConfig, ErrorClass, SessionSpec, ToolUse};
use plugin_host::trust::{SecretKey, sign};
use plugin_host::{Isolation, LoadReport, Outcome, PluginHost, Refusal, WorkerSettings};
use serde_json::json;

/// Plugins loaded isolated into a dispatcher with a 2 s timeout for `spin` and a 1 s
/// cancel grace.
fn env() -> PluginEnv {
    let mut config = DispatcherConfig::default();
    config
        .timeouts
        .per_tool
        .insert("spin".into(), Duration::from_secs(2));
    config.timeouts.cancel_grace = Duration::from_secs(1);
    PluginEnv::new(
        Dispatcher::builder()
            .policy(allow_all())
            .config(config)
            .build(),
    )
}

fn host(env: &PluginEnv) -> PluginHost {
    let mut worker = common::worker_settings();
    worker.cancel_grace = Duration::from_secs(1);
    worker.memory_limit = Some(256 << 20);
    host_with(env, worker)
}

fn host_with(env: &PluginEnv, worker: WorkerSettings) -> PluginHost {
    PluginHost::new([env.dir()])
        .cache_dir(env.cache.path())
        .worker(worker)
}

/// Loads everything isolated and checks it all loaded.
fn load(env: &PluginEnv) -> LoadReport {
    let report = host(env)
        .isolation(Isolation::Process)
        .load_into(&env.dispatcher);
    assert_eq!(report.refused().count(), 0, "{:?}", report.lines());
    report
}

/// The fault call fails as an execution error naming the plugin and `cause`; then the
/// healthy tool of another plugin and the plugin's own healthy tool (in a restarted
/// worker) both answer.
async fn ends_only_the_call(
    env: &PluginEnv,
    report: &LoadReport,
    plugin: &str,
    fault: &str,
    cause: &str,
) {
    let r = env.call(fault, json!({})).await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError), "{r:?}");
    let text = r.text();
    assert!(
        text.contains(&format!("plugin '{plugin}' crashed")),
        "{text}"
    );
    assert!(text.contains(cause), "{cause:?} not in: {text}");
    assert!(text.contains("restarts on the next call"), "{text}");
    assert_eq!(
        env.call("garbage_ok", json!({})).await.text(),
        "ok",
        "another plugin goes on"
    );
    let again = env.call(&format!("{fault}_ok"), json!({})).await;
    assert_eq!(again.text(), "ok", "the worker restarts: {again:?}");
    let status = report
        .workers
        .iter()
        .find(|w| w.plugin() == plugin)
        .unwrap()
        .status();
    assert_eq!(status.restarts, 1, "{status:?}");
    assert!(status.pid.is_some(), "{status:?}");
}

#[tokio::test]
async fn segfault_in_execute_ends_only_the_call() {
    let env = env();
    env.add("fault-segv", "fault-segv");
    env.add("fault-garbage", "fault-garbage");
    let report = load(&env);
    ends_only_the_call(&env, &report, "fixture-fault-segv", "segv", "signal 11").await;
    assert!(
        env.call("segv", json!({}))
            .await
            .text()
            .contains("segmentation fault")
    );
}

#[tokio::test]
async fn abort_ends_only_the_call() {
    let env = env();
    env.add("fault-abort", "fault-abort");
    env.add("fault-garbage", "fault-garbage");
    let report = load(&env);
    ends_only_the_call(
        &env,
        &report,
        "fixture-fault-abort",
        "abort_now",
        "signal 6",
    )
    .await;
}

#[tokio::test]
async fn panic_in_a_panic_abort_build_ends_only_the_call_and_its_message_is_kept() {
    let env = env();
    env.add("fault-panic-abort", "fault-panic-abort");
    env.add("fault-garbage", "fault-garbage");
    let report = load(&env);
    ends_only_the_call(
        &env,
        &report,
        "fixture-fault-panic-abort",
        "panic_abort",
        "the fixture panics on purpose",
    )
    .await;
}

#[tokio::test]
async fn memory_bomb_hits_the_worker_limit_and_ends_only_the_call() {
    let env = env();
    env.add("fault-memory", "fault-memory");
    env.add("fault-garbage", "fault-garbage");
    let report = load(&env);
    ends_only_the_call(
        &env,
        &report,
        "fixture-fault-memory",
        "memory_bomb",
        "memory allocation of",
    )
    .await;
}

#[tokio::test]
async fn endless_inline_loop_times_out_and_its_worker_is_killed_after_the_grace() {
    let env = env();
    env.add("fault-spin", "fault-spin");
    env.add("fault-garbage", "fault-garbage");
    let report = load(&env);
    let started = Instant::now();
    let r = env.call("spin", json!({})).await;
    assert_eq!(r.error_class, Some(ErrorClass::Timeout), "{r:?}");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "stopped at its timeout, took {took:?}"
    );
    assert_eq!(env.call("garbage_ok", json!({})).await.text(), "ok");
    // The loop ignores cancellation: after the 1 s grace its worker is killed.
    let worker = report
        .workers
        .iter()
        .find(|w| w.plugin() == "fixture-fault-spin")
        .unwrap();
    let pid = worker.status().pid.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while toolhost_tests::process_alive(pid as i32) {
        assert!(
            Instant::now() < deadline,
            "the spinning worker was never killed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        env.call("spin_ok", json!({})).await.text(),
        "ok",
        "a new worker answers"
    );
    assert_eq!(worker.status().restarts, 1);
}

/// Sends a signal to the load's first worker (STOP, CONT: what a hostile plugin can do to
/// its own process).
fn signals_to_worker(report: &LoadReport) -> impl Fn(rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(
        i32::try_from(report.workers[0].status().pid.unwrap()).unwrap(),
    )
    .unwrap();
    move |signal| rustix::process::kill_process(pid, signal).unwrap()
}

/// A worker that stops reading (stopped by a signal here; a hostile plugin can stop its own
/// process) never holds the host's async thread: a call whose frame its socket cannot take
/// at once is written from a thread of its own, and the host's timers keep running on that
/// (here the only) async thread. Once it reads again, every call is answered.
#[tokio::test]
async fn a_worker_that_stops_reading_never_holds_the_hosts_async_thread() {
    let config = DispatcherConfig {
        max_concurrency: 200,
        ..Default::default()
    };
    let env = PluginEnv::new(
        Dispatcher::builder()
            .policy(allow_all())
            .config(config)
            .build(),
    );
    env.add("fault-spin", "fault-spin");
    let report = load(&env);
    let signal = signals_to_worker(&report);
    signal(rustix::process::Signal::STOP);
    let padding = "x".repeat(8 * 1024);
    // Far more than its socket holds.
    let calls = futures_util::future::join_all(
        (0..100).map(|_| env.call("spin_ok", json!({"padding": padding}))),
    );
    let started = Instant::now();
    let timer = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let slept = started.elapsed();
        signal(rustix::process::Signal::CONT);
        slept
    };
    let (results, slept) = tokio::join!(calls, timer);
    assert!(
        slept < Duration::from_secs(2),
        "a 300 ms timer took {slept:?}: the async thread was held"
    );
    for r in &results {
        assert_eq!(r.text(), "ok", "{r:?}");
    }
}

/// A plugin that judges each call's concurrency safety is asked when the call is pushed,
/// on the host's thread. A worker that does not answer (stopped here; a hostile plugin
/// can stop itself) holds that thread a moment at most: the call is judged by its
/// definition, and runs once the worker reads again.
#[tokio::test]
async fn a_worker_that_does_not_say_whether_a_call_may_run_beside_others_holds_the_host_a_moment_at_most()
 {
    let env = env();
    env.add("good", "good");
    let report = load(&env);
    let signal = signals_to_worker(&report);
    let session = env.session();
    let batch = env.dispatcher.batch(&session);
    signal(rustix::process::Signal::STOP);
    let started = Instant::now();
    batch.push(ToolUse::new(
        "a",
        "steps",
        json!({"tag": "a", "ms": 1, "dry_run": true}),
    ));
    let judged = started.elapsed();
    signal(rustix::process::Signal::CONT);
    // The question has a 50 ms limit; without one, pushing waits for the stopped worker
    // for ever. The bound leaves room for a loaded machine (the whole suite runs beside
    // it on two cores) and still tells the two apart.
    assert!(
        judged < Duration::from_secs(5),
        "pushing the call held the host's thread for {judged:?}"
    );
    let results = batch.finish().await;
    assert_eq!(results[0].text(), "a done", "{results:?}");
}

#[tokio::test]
async fn garbage_on_stdout_and_stderr_never_reaches_the_protocol() {
    let env = env();
    env.add("fault-garbage", "fault-garbage");
    load(&env);
    for _ in 0..3 {
        let r = env.call("garbage", json!({})).await;
        assert!(!r.is_error(), "{r:?}");
        assert_eq!(r.text(), "the real answer");
    }
}

/// A worker the host stops on purpose (at exit, or dropping the plugin) did not crash: its
/// end says so, and the next call starts a new one.
#[tokio::test]
async fn a_worker_the_host_stops_is_not_reported_as_crashed() {
    let env = env();
    env.add("good", "good");
    let report = load(&env);
    let worker = &report.workers[0];
    worker.stop();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = worker.status();
        if status.last_failure.is_some() || Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let end = status.last_failure.unwrap_or_default();
    assert!(
        end.contains("stopped by the host") && !end.contains("crashed"),
        "{end}"
    );
    let session = env
        .dispatcher
        .open_session(SessionSpec::new("s", env.workspace.path()))
        .unwrap();
    let r = env
        .dispatcher
        .dispatch(
            ToolUse::new("tu", "echo_upper", json!({"text": "hi"})),
            &session,
        )
        .await;
    assert_eq!(r.text(), "HI", "{r:?}");
    assert_eq!(worker.status().restarts, 1);
}

#[tokio::test]
async fn worker_that_exits_at_start_up_refuses_only_its_package() {
    let env = env();
    toolhost_tests::package_crash_on_load(env.plugins.path(), "crash-on-load");
    env.add("fault-garbage", "fault-garbage");
    let report = host(&env)
        .isolation(Isolation::Process)
        .load_into(&env.dispatcher);
    let refused: Vec<_> = report.refused().collect();
    assert_eq!(refused.len(), 1, "{:?}", report.lines());
    let Refusal::Worker { detail } = refused[0].1 else {
        panic!("{:?}", refused[0].1);
    };
    assert!(detail.contains("exited at start-up"), "{detail}");
    assert!(detail.contains("signal 6"), "{detail}");
    assert_eq!(report.loaded().count(), 1);
    assert_eq!(env.call("garbage_ok", json!({})).await.text(), "ok");
}

#[tokio::test]
async fn a_missing_worker_program_is_a_refusal_naming_it() {
    let env = env();
    env.add("good", "good");
    let report = host_with(&env, WorkerSettings::new("/no/such/worker", ["x"]))
        .isolation(Isolation::Process)
        .load_into(&env.dispatcher);
    let text = report.refused().next().unwrap().1.to_string();
    assert!(
        text.contains("cannot start the worker program '/no/such/worker'"),
        "{text}"
    );
}

#[tokio::test]
async fn a_panic_abort_build_loads_isolated() {
    let env = env();
    env.add("abort", "abort");
    load(&env);
    let r = env.call("abort_echo", json!({})).await;
    assert!(!r.is_error(), "{r:?}");
}

fn isolation_of(report: &LoadReport) -> Vec<(String, Isolation, Option<String>)> {
    report
        .loaded()
        .map(|p| match &p.outcome {
            Outcome::Loaded {
                name,
                isolation,
                signed_by,
                ..
            } => (name.clone(), *isolation, signed_by.clone()),
            Outcome::Refused(_) => unreachable!(),
        })
        .collect()
}

#[tokio::test]
async fn auto_loads_a_package_signed_by_a_trusted_key_in_process_and_others_isolated() {
    let env = env();
    let key = SecretKey::from_seed([9; 32]);
    sign(&env.add("good", "good"), &key).unwrap();
    env.add("fault-garbage", "fault-garbage");
    let report = host(&env)
        .trusted_keys([key.public()])
        .load_into(&env.dispatcher);
    let mut got = isolation_of(&report);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            ("fixture-fault-garbage".into(), Isolation::Process, None),
            (
                "fixture-good".into(),
                Isolation::InProcess,
                Some(key.public().id())
            ),
        ]
    );
    assert_eq!(
        env.dispatcher
            .dispatch(
                ToolUse::new("tu", "echo_upper", json!({"text": "hi"})),
                &env.dispatcher
                    .open_session(SessionSpec::new("s", env.workspace.path()))
                    .unwrap()
            )
            .await
            .text(),
        "HI"
    );
}

#[tokio::test]
async fn a_per_plugin_setting_overrides_the_signature() {
    let env = env();
    let key = SecretKey::from_seed([9; 32]);
    sign(&env.add("good", "good"), &key).unwrap();
    let report = host(&env)
        .trusted_keys([key.public()])
        .isolate("fixture-good", Isolation::Process)
        .load_into(&env.dispatcher);
    assert_eq!(isolation_of(&report)[0].1, Isolation::Process);
}

fn only_refusal(report: &LoadReport) -> Refusal {
    let refused: Vec<_> = report.refused().collect();
    assert_eq!(refused.len(), 1, "{:?}", report.lines());
    refused[0].1.clone()
}

fn required(env: &PluginEnv, key: &SecretKey) -> LoadReport {
    host(env)
        .trusted_keys([key.public()])
        .require_signatures(true)
        .load_into(&env.dispatcher)
}

#[tokio::test]
async fn require_signatures_refuses_an_unsigned_package_before_opening_it() {
    let env = env();
    // crash-on-load aborts whatever process opens it: refused without opening means alive.
    toolhost_tests::package_crash_on_load(env.plugins.path(), "crash-on-load");
    let key = SecretKey::from_seed([3; 32]);
    let refusal = only_refusal(&required(&env, &key));
    assert!(matches!(refusal, Refusal::Unsigned { .. }), "{refusal}");
    assert!(
        refusal.to_string().contains("cargo xtask plugin sign"),
        "{refusal}"
    );
}

#[tokio::test]
async fn require_signatures_refuses_a_tampered_library() {
    let env = env();
    let key = SecretKey::from_seed([3; 32]);
    let pkg = env.add("good", "good");
    sign(&pkg, &key).unwrap();
    let lib = std::fs::read_dir(&pkg)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "so"))
        .unwrap();
    let mut bytes = std::fs::read(&lib).unwrap();
    bytes.extend_from_slice(b"tampered");
    std::fs::write(&lib, bytes).unwrap();
    // The manifest's checksum catches it first; re-checksumming it is caught by the signature.
    let refusal = only_refusal(&required(&env, &key));
    assert!(
        matches!(refusal, Refusal::ChecksumMismatch { .. }),
        "{refusal}"
    );
    let sha = plugin_host::digest::sha256_file(&lib).unwrap();
    edit_manifest(&pkg, |m| m.sha256 = sha);
    let refusal = only_refusal(&required(&env, &key));
    let Refusal::BadSignature { detail, .. } = &refusal else {
        panic!("{refusal}");
    };
    assert!(detail.contains("modified after it was signed"), "{detail}");
    assert!(detail.contains(&key.public().id()), "{detail}");
}

fn edit_manifest(pkg: &std::path::Path, edit: impl FnOnce(&mut plugin_host::Manifest)) {
    let path = pkg.join("plugin.toml");
    let mut m =
        plugin_host::Manifest::parse(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, m.to_toml()).unwrap();
}

#[tokio::test]
async fn require_signatures_refuses_a_tampered_manifest() {
    let env = env();
    let key = SecretKey::from_seed([3; 32]);
    let pkg = env.add("good", "good");
    sign(&pkg, &key).unwrap();
    edit_manifest(&pkg, |m| {
        m.tools[0].side_effects = tool_api::SideEffect::Execute
    });
    let refusal = only_refusal(&required(&env, &key));
    assert!(
        matches!(&refusal, Refusal::BadSignature { detail, .. } if detail.contains("modified after it was signed")),
        "{refusal}"
    );
}

#[tokio::test]
async fn require_signatures_refuses_an_unknown_key_naming_it() {
    let env = env();
    let trusted = SecretKey::from_seed([3; 32]);
    let stranger = SecretKey::from_seed([4; 32]);
    sign(&env.add("good", "good"), &stranger).unwrap();
    let refusal = only_refusal(&required(&env, &trusted));
    let text = refusal.to_string();
    assert!(text.contains(&stranger.public().id()), "{text}");
    assert!(text.contains("not in trusted_keys"), "{text}");
}

#[tokio::test]
async fn a_signed_package_loads_in_process_under_require_signatures() {
    let env = env();
    let key = SecretKey::from_seed([3; 32]);
    sign(&env.add("good", "good"), &key).unwrap();
    let report = required(&env, &key);
    assert_eq!(isolation_of(&report)[0].1, Isolation::InProcess);
}

#[tokio::test]
async fn an_unknown_key_without_require_signatures_just_runs_isolated() {
    let env = env();
    sign(&env.add("good", "good"), &SecretKey::from_seed([4; 32])).unwrap();
    let report = host(&env)
        .trusted_keys([SecretKey::from_seed([3; 32]).public()])
        .load_into(&env.dispatcher);
    assert_eq!(isolation_of(&report)[0].1, Isolation::Process);
}
