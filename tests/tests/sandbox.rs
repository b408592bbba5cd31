//! Isolated plugins run in an OS sandbox their declared class decides, applied before
//! their library is opened: a hostile plugin whose tools all declare `none` tries, with
//! plain `std`, each escape; each fails with evidence at its target, the call ends as a
//! readable error, and the worker and the host go on. A `network` plugin connects through
//! its egress proxy to the hosts it is allowed, and nowhere else; an `execute` plugin
//! starts programs that write the workspace and nothing else.
#![cfg(target_os = "linux")]
#![cfg(test)]

mod common;

use std::io::{ErrorKind, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use common::allow_all;
use common::plugin_env::PluginEnv;
use dispatcher_core::{Dispatcher, ErrorClass, ToolResultBlock};
use plugin_host::{Isolation, LoadReport, PluginHost, PluginSandbox, WorkerGrant};
use serde_json::{Value, json};

const SECRET: &str = "the-planted-secret-7f3a";

/// A stand-in SSH key planted outside the workspace, on the deny list of the workers.
fn env() -> PluginEnv {
    let env = PluginEnv::new(Dispatcher::builder().policy(allow_all()).build());
    std::fs::write(env.outside("id_ed25519"), SECRET).unwrap();
    env
}

fn host(env: &PluginEnv) -> PluginHost {
    let mut worker = common::worker_settings();
    worker.sandbox.workspaces = vec![env.workspace.path().to_path_buf()];
    // The stand-in home's secrets are on the deny list, as `~/.ssh` is.
    worker.sandbox.settings.deny_read = vec![env.outside("id_ed25519")];
    PluginHost::new([env.dir()])
        .cache_dir(env.cache.path())
        .isolation(Isolation::Process)
        .worker(worker)
}

/// Packages fixture `name` and loads everything isolated, with `sandbox` for it.
fn load(env: &PluginEnv, name: &str, sandbox: Option<PluginSandbox>) -> LoadReport {
    env.add(name, name);
    let mut host = host(env);
    if let Some(s) = sandbox {
        host = host.sandbox(format!("fixture-{name}"), s);
    }
    let report = host.load_into(&env.dispatcher);
    assert_eq!(report.refused().count(), 0, "{:?}", report.lines());
    report
}

/// The call failed as a readable execution error that says the OS refused.
fn assert_refused(r: &ToolResultBlock, attempt: &str) {
    assert_eq!(
        r.error_class,
        Some(ErrorClass::ExecutionError),
        "{attempt}: {r:?}"
    );
    let text = r.text();
    assert!(
        text.contains("refused")
            && (text.contains("ermission denied") || text.contains("not permitted")),
        "{attempt}: {text}"
    );
}

/// A listener on loopback that nothing has reached yet.
fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    (l, port)
}

fn nothing_arrived(l: &TcpListener) -> bool {
    matches!(l.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

#[tokio::test]
async fn every_escape_of_a_none_plugin_fails_at_its_target_and_the_worker_goes_on() {
    let env = env();
    let report = load(&env, "hostile", None);
    let host_pid = std::process::id().to_string();
    let inside = env.workspace.path().join("bypass.txt");
    let (listener, port) = listener();
    let attempts: Vec<(&str, &str, Value)> = vec![
        (
            "read a planted secret outside the workspace",
            "hostile_read_file",
            json!({"path": env.outside("id_ed25519")}),
        ),
        (
            "read /etc/passwd",
            "hostile_read_file",
            json!({"path": "/etc/passwd"}),
        ),
        (
            "write outside the workspace",
            "hostile_write_file",
            json!({"path": env.outside("planted")}),
        ),
        (
            "write inside the workspace bypassing the context",
            "hostile_write_file",
            json!({"path": inside}),
        ),
        (
            "connect to a local listener",
            "hostile_connect",
            json!({"port": port}),
        ),
        ("spawn a process", "hostile_spawn", json!({})),
        (
            "read the host's environment through /proc",
            "hostile_read_file",
            json!({"path": format!("/proc/{host_pid}/environ")}),
        ),
        (
            "signal the host",
            "hostile_signal",
            json!({"pid": host_pid}),
        ),
        (
            "read /etc/passwd from a thread of its own",
            "hostile_thread_read",
            json!({"path": "/etc/passwd"}),
        ),
    ];
    for (attempt, tool, input) in attempts {
        let r = env.call(tool, input).await;
        assert_refused(&r, attempt);
        assert!(!r.text().contains(SECRET), "{attempt}: {}", r.text());
        assert!(!r.text().contains("root:"), "{attempt}: {}", r.text());
        assert_eq!(env.call("hostile_ok", json!({})).await.text(), "ok");
    }
    // Evidence at each target.
    assert!(!env.outside("planted").exists());
    assert!(!inside.exists());
    assert!(nothing_arrived(&listener), "something connected");
    let status = report.workers[0].status();
    assert_eq!(status.restarts, 0, "the worker went on: {status:?}");
    assert!(status.pid.is_some());
}

#[tokio::test]
async fn the_host_environment_is_not_the_workers() {
    let env = env();
    load(&env, "hostile", None);
    for name in ["PATH", "HOME", "CARGO_MANIFEST_DIR"] {
        assert!(std::env::var_os(name).is_some(), "the host has {name}");
        let r = env.call("hostile_env", json!({"name": name})).await;
        assert!(r.is_error(), "{name}: {}", r.text());
        assert!(r.text().contains("not found"), "{}", r.text());
    }
}

#[tokio::test]
async fn the_worker_reports_the_sandbox_it_applied_before_opening_its_library() {
    let env = env();
    let report = load(&env, "hostile", None);
    let status = report.workers[0].status();
    let enforcement = status.sandbox.clone().expect("a sandbox report");
    assert_eq!(enforcement.state, sandbox::State::Enforced, "{status:?}");
    assert_eq!(status.grant, WorkerGrant::default());
    assert!(
        status
            .sandbox_line()
            .starts_with("sandbox: context only, enforced"),
        "{}",
        status.sandbox_line()
    );
}

/// A network plugin's settings allowing `ports` on 127.0.0.1 through its proxy.
fn allowing(ports: &[&str]) -> PluginSandbox {
    PluginSandbox {
        http_hosts: sandbox::HostList::new(ports.iter().map(|p| format!("127.0.0.1:{p}"))).unwrap(),
        ..PluginSandbox::default()
    }
}

/// The call failed because the egress proxy refused, and says why.
fn assert_proxy_refused(r: &ToolResultBlock, why: &str) {
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError), "{r:?}");
    assert!(
        r.text().contains("403") && r.text().contains(why),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn a_network_plugin_connects_through_its_proxy_and_still_reads_no_file() {
    let env = env();
    let (listener, port) = listener();
    load(&env, "netprobe", Some(allowing(&[&port])));
    let r = env.call("net_connect", json!({"port": port})).await;
    assert_eq!(r.text(), "CONNECTED", "{r:?}");
    listener.set_nonblocking(false).unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    let mut said = String::new();
    conn.read_to_string(&mut said).unwrap();
    assert_eq!(said, "hello from a network tool");
    let r = env
        .call("net_read_file", json!({"path": env.outside("id_ed25519")}))
        .await;
    assert_refused(&r, "read a secret");
}

#[tokio::test]
async fn a_network_plugin_cannot_go_around_its_proxy() {
    let env = env();
    let (listener, port) = listener();
    load(&env, "netprobe", Some(allowing(&[&port])));
    let r = env
        .call("net_connect", json!({"port": port, "direct": true}))
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError), "{r:?}");
    assert!(r.text().contains("connecting refused"), "{}", r.text());
    assert!(nothing_arrived(&listener));
}

#[tokio::test]
async fn a_host_not_on_a_network_plugins_list_is_refused_by_name() {
    let env = env();
    let (listener, port) = listener();
    load(&env, "netprobe", Some(allowing(&["1"])));
    let r = env.call("net_connect", json!({"port": port})).await;
    assert_proxy_refused(
        &r,
        &format!("network: 127.0.0.1:{port} refused, not in [plugins.fixture-netprobe] http_hosts"),
    );
    assert!(nothing_arrived(&listener));
}

#[tokio::test]
async fn a_network_plugin_narrowed_to_context_only_cannot_connect() {
    let env = env();
    load(
        &env,
        "netprobe",
        Some(PluginSandbox {
            grant: Some(WorkerGrant::default()),
            ..PluginSandbox::default()
        }),
    );
    let (listener, port) = listener();
    let r = env.call("net_connect", json!({"port": port})).await;
    assert_refused(&r, "connect");
    assert!(nothing_arrived(&listener));
}

#[tokio::test]
async fn tcp_ports_narrow_where_a_network_plugin_connects() {
    let env = env();
    let (allowed, allowed_port) = listener();
    let (other, other_port) = listener();
    let mut sandbox = allowing(&[&allowed_port, &other_port]);
    sandbox.tcp_ports = Some(vec![allowed_port.parse().unwrap()]);
    load(&env, "netprobe", Some(sandbox));
    let r = env.call("net_connect", json!({"port": other_port})).await;
    assert_proxy_refused(&r, &format!("port {other_port} is not in tcp_ports"));
    assert!(nothing_arrived(&other));
    let r = env.call("net_connect", json!({"port": allowed_port})).await;
    assert_eq!(r.text(), "CONNECTED", "{r:?}");
    drop(allowed);
}

#[tokio::test]
async fn an_execute_plugins_programs_write_the_workspace_and_nothing_else() {
    let env = env();
    load(&env, "execprobe", None);
    let r = env
        .call(
            "exec_run",
            json!({"command": "echo made > made.txt && cat made.txt"}),
        )
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("made.txt")).unwrap(),
        "made\n"
    );
    let outside = env.outside("planted");
    let r = env
        .call(
            "exec_run",
            json!({"command": format!("echo x > {}", outside.display())}),
        )
        .await;
    assert!(r.is_error(), "{}", r.text());
    assert!(!outside.exists());
    let r = env
        .call(
            "exec_run",
            json!({"command": format!("cat {}", env.outside("id_ed25519").display())}),
        )
        .await;
    assert!(r.is_error() && !r.text().contains(SECRET), "{}", r.text());
}

#[tokio::test]
async fn a_none_plugin_widened_to_execute_is_logged_and_may_spawn() {
    let env = env();
    let report = load(
        &env,
        "hostile",
        Some(PluginSandbox {
            grant: Some(WorkerGrant {
                network: false,
                execute: true,
            }),
            ..PluginSandbox::default()
        }),
    );
    assert_eq!(report.workers[0].status().grant.to_string(), "execute");
    let r = env.call("hostile_spawn", json!({})).await;
    assert!(r.text().contains("SPAWNED: spawned"), "{}", r.text());
}

/// The library itself is all a worker may read of its package: the rest stays closed.
#[tokio::test]
async fn a_worker_reads_its_library_and_not_its_package_folder() {
    let env = env();
    load(&env, "hostile", None);
    let manifest: PathBuf = env.plugins.path().join("hostile").join("plugin.toml");
    assert!(Path::new(&manifest).exists());
    let r = env
        .call("hostile_read_file", json!({"path": manifest}))
        .await;
    assert_refused(&r, "read its own manifest");
}

#[tokio::test]
async fn a_plugin_run_unconfined_by_configuration_reaches_outside_and_every_report_says_so() {
    let env = env();
    let report = load(
        &env,
        "hostile",
        Some(PluginSandbox {
            unconfined: true,
            ..PluginSandbox::default()
        }),
    );
    let r = env
        .call(
            "hostile_read_file",
            json!({"path": env.outside("id_ed25519")}),
        )
        .await;
    assert!(r.text().contains(SECRET), "{}", r.text());
    let status = report.workers[0].status();
    assert!(status.sandbox.is_none(), "{status:?}");
    assert!(
        status
            .sandbox_line()
            .contains("UNSANDBOXED (context only): unconfined by configuration"),
        "{}",
        status.sandbox_line()
    );
    match report.workers[0].placement() {
        tool_api::Placement::Worker { state, detail, .. } => {
            assert_eq!(state, "unsandboxed");
            assert!(
                detail.contains("unconfined by configuration")
                    && !detail.contains("allow_unsandboxed"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A worker program that ignores the sandbox it is given (not this build's worker, or one
/// replaced on disk) is stopped before any call reaches it, naming what happened.
#[tokio::test]
async fn a_worker_program_that_ignores_its_sandbox_is_refused() {
    let env = env();
    env.add("hostile", "hostile");
    let script = env.outside.path().join("lax-worker.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# drops --sandbox JSON, runs the real worker\nkeep=\"\"\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = --sandbox ]; then shift 2; continue; fi\n  keep=\"$keep '$1'\"; shift\ndone\neval exec '{}' $keep\n",
            env!("CARGO_BIN_EXE_plugin-worker")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut worker = common::worker_settings();
    worker.program = script;
    let report = host(&env).worker(worker).load_into(&env.dispatcher);
    let refused: Vec<String> = report.refused().map(|(_, r)| r.to_string()).collect();
    assert_eq!(refused.len(), 1, "{:?}", report.lines());
    assert!(
        refused[0].contains("reported no sandbox although one was asked for"),
        "{}",
        refused[0]
    );
    assert!(report.workers.is_empty());
}

#[tokio::test]
async fn http_hosts_on_a_native_plugin_in_process_is_refused_not_ignored() {
    let env = env();
    env.add("netprobe", "netprobe");
    let report = host(&env)
        .isolation(Isolation::InProcess)
        .sandbox(
            "fixture-netprobe",
            PluginSandbox {
                http_hosts: sandbox::HostList::new(["api.example.com"]).unwrap(),
                ..PluginSandbox::default()
            },
        )
        .load_into(&env.dispatcher);
    let (_, refusal) = report.refused().next().expect("refused");
    assert!(
        matches!(refusal, plugin_host::Refusal::HttpHostsNative { .. }),
        "{refusal}"
    );
    let text = refusal.to_string();
    assert!(
        text.contains("fixture-netprobe") && text.contains("isolation = \"process\""),
        "{text}"
    );
    let r = env.call("net_connect", json!({"port": "1"})).await;
    assert_eq!(
        r.error_class,
        Some(ErrorClass::NotFound),
        "nothing registered: {r:?}"
    );
}
