//! toolhost as a client of MCP servers: the fixture server (including one that crashes and
//! one that never answers initialize) and toolhost itself.
#![cfg(test)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

mod common;

use common::mcp::{call, text};

fn fixture_server() -> String {
    toolhost_tests::fixtures()
        .mcp_server()
        .display()
        .to_string()
}

fn write_config(dir: &Path, extra: &str) {
    let config = format!(
        r#"
[tool_confirmation.per_tool]
fx__touch = "auto"
fx__echo = "auto"

[[mcp_servers]]
id = "fixture"
prefix = "fx"
command = "{server}"
side_effects = {{ grow = "write" }}
{extra}
"#,
        server = fixture_server()
    );
    std::fs::write(dir.join("toolhost.toml"), config).unwrap();
}

/// `toolhost` with `args` in `dir`, away from the user's own config, cache and state.
fn in_dir(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    command
        .args(args)
        .current_dir(dir)
        .env("XDG_CONFIG_HOME", dir.join(".no-config"))
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .env("XDG_STATE_HOME", dir.join(".state"));
    command
}

fn toolhost(dir: &Path, args: &[&str]) -> Output {
    in_dir(dir, args).output().unwrap()
}

/// `toolhost serve --mcp` over `dir` (its toolhost.toml, no user configuration, its own
/// state directory), as a client's transport.
fn serve_transport(dir: &Path) -> TokioChildProcess {
    let cmd = common::command(dir, &["serve", "--mcp"]);
    TokioChildProcess::new(tokio::process::Command::from(cmd)).unwrap()
}

async fn serve(dir: &Path) -> RunningService<RoleClient, ()> {
    serve_as(&(), dir).await
}

/// [`serve`] with `client` as the client (2025 era).
async fn serve_as<C: rmcp::ClientHandler + Clone>(
    client: &C,
    dir: &Path,
) -> RunningService<RoleClient, C> {
    client.clone().serve(serve_transport(dir)).await.unwrap()
}

/// [`serve`] with `client` as a 2026-07-28 client.
async fn serve_2026_as<C: rmcp::ClientHandler + Clone>(
    client: &C,
    dir: &Path,
) -> RunningService<RoleClient, C> {
    use rmcp::ClientServiceExt as _;
    client
        .clone()
        .serve_with_lifecycle(
            serve_transport(dir),
            rmcp::ClientLifecycleMode::Auto {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            },
        )
        .await
        .unwrap()
}

#[test]
fn server_tools_are_published_under_the_prefix_and_annotations_are_not_trusted_blindly() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let out = toolhost(dir.path(), &["list", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let class = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))["side_effects"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(class("fx__echo"), "read", "annotated read-only");
    assert_eq!(class("fx__touch"), "execute", "no annotations: execute");
    assert_eq!(class("fx__grow"), "write", "the config override wins");
    let echo = tools.iter().find(|t| t["name"] == "fx__echo").unwrap();
    assert_eq!(
        (echo["toolset"].as_str(), echo["original_name"].as_str()),
        (Some("fixture"), Some("echo"))
    );
    let out = toolhost(
        dir.path(),
        &["call", "fx__echo", "--input", r#"{"text": "hi"}"#],
    );
    assert_eq!(
        toolhost_tests::text(&out.stdout),
        "echo: hi\n",
        "{}",
        toolhost_tests::text(&out.stderr)
    );
}

/// A server that announces a change while it starts (as servers that register their
/// tools then do) is re-listed once it is up, not refused as "down", and a command that
/// ends at once stops it without a warning about republishing into a host that is gone.
#[test]
fn a_list_change_announced_while_a_server_starts_warns_of_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--grow-at-start\"]");
    for _ in 0..5 {
        let out = toolhost(dir.path(), &["list"]);
        let log = toolhost_tests::text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{log}");
        assert!(!log.contains("WARN"), "{log}");
        assert!(toolhost_tests::text(&out.stdout).contains("fx__echo"));
    }
}

#[test]
fn a_server_that_never_initializes_is_reported_and_the_others_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let hang = format!(
        "[[mcp_servers]]\nid = \"hang\"\nprefix = \"hang\"\ncommand = \"{}\"\nargs = [\"--never-init\"]\nstartup_timeout_secs = 1\n",
        fixture_server()
    );
    write_config(dir.path(), &hang);
    let started = Instant::now();
    let out = toolhost(dir.path(), &["plugins"]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not waited on forever"
    );
    assert_eq!(out.status.code(), Some(1));
    let report = toolhost_tests::text(&out.stdout);
    assert!(report.contains("loaded   MCP server 'fixture'"), "{report}");
    assert!(
        report.contains("refused  MCP server 'hang'") && report.contains("within 1s"),
        "{report}"
    );
}

#[tokio::test]
async fn a_crashed_server_fails_the_call_naming_it_and_restarts_on_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let s = serve(dir.path()).await;
    let crashed = call(&s, "fx__crash", json!({})).await;
    assert_eq!(crashed.is_error, Some(true));
    let t = text(&crashed);
    assert!(
        t.contains("MCP server 'fixture'") && t.contains("exit status: 3"),
        "{t}"
    );
    let again = call(&s, "fx__echo", json!({"text": "back"})).await;
    assert_eq!(text(&again), "echo: back", "restarted on the next call");
    s.cancel().await.unwrap();
}

/// `toolhost ARGS` over `dir` with its log filtered at `level`: its error output.
fn log_of(dir: &Path, level: &str, args: &[&str]) -> String {
    let out = in_dir(dir, args)
        .env("TOOLHOST_LOG", level)
        .output()
        .unwrap();
    toolhost_tests::text(&out.stderr)
}

#[test]
fn a_mounted_servers_error_output_is_debug_log_and_never_shown_after_it_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let echo = ["call", "fx__echo", "--input", r#"{"text": "x"}"#];
    // The fixture writes a banner at start and complains when its pipes close, as Node
    // servers do; a few runs, since the complaint races toolhost's exit.
    for _ in 0..4 {
        for level in ["info", "warn"] {
            let log = log_of(dir.path(), level, &echo);
            assert!(!log.contains("fixture: starting"), "{level}: {log}");
            assert!(!log.contains("EPIPE"), "{level}: {log}");
        }
        let debug = log_of(dir.path(), "debug", &echo);
        assert!(debug.contains("fixture: starting on stdio"), "{debug}");
        assert!(
            !debug.contains("EPIPE"),
            "said after it was stopped: {debug}"
        );
    }
    let list = log_of(dir.path(), "info", &["list"]);
    assert!(!list.contains("fixture:"), "{list}");
}

#[test]
fn a_server_that_dies_on_its_own_shows_its_last_error_output() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let log = log_of(dir.path(), "warn", &["call", "fx__crash", "--yes"]);
    assert!(
        log.contains("MCP server 'fixture' ended") && log.contains("fixture: crashing on purpose"),
        "{log}"
    );
}

#[tokio::test]
async fn tools_list_changed_from_a_server_republishes_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "[tool_confirmation.default]\nWRITE = \"auto\"\n",
    );
    let s = serve(dir.path()).await;
    assert_eq!(text(&call(&s, "fx__grow", json!({})).await), "grown");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let names: Vec<String> = s
            .peer()
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        if names.iter().any(|n| n == "fx__extra") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fx__extra never appeared: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        text(&call(&s, "fx__extra", json!({"text": "new"})).await),
        "echo: new"
    );
    s.cancel().await.unwrap();
}

#[tokio::test]
async fn toolhost_can_use_toolhost_as_an_mcp_server() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "inner file\n").unwrap();
    let inner_config = dir.path().join("inner.toml");
    std::fs::write(&inner_config, "").unwrap();
    let inner = format!(
        "[[mcp_servers]]\nid = \"inner\"\nprefix = \"inner\"\ncommand = \"{}\"\nargs = [\"--config\", \"{}\", \"serve\", \"--mcp\", \"--workspace\", \"{}\"]\n",
        env!("CARGO_BIN_EXE_toolhost"),
        inner_config.display(),
        dir.path().display()
    );
    write_config(dir.path(), &inner);
    let s = serve(dir.path()).await;
    let r = call(&s, "inner__read_file", json!({"path": "notes.txt"})).await;
    assert_eq!(text(&r), "inner file\n");
    let escape = call(&s, "inner__read_file", json!({"path": "../x"})).await;
    assert_eq!(escape.is_error, Some(true));
    assert!(
        text(&escape).contains("escapes workspace boundary"),
        "{}",
        text(&escape)
    );
    s.cancel().await.unwrap();
}

#[test]
fn a_config_that_starts_toolhost_as_its_own_server_does_not_recurse_without_end() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[[mcp_servers]]\nid = \"me\"\nprefix = \"me\"\ncommand = \"{}\"\nargs = [\"serve\", \"--mcp\", \"--workspace\", \".\"]\nstartup_timeout_secs = 20\n",
        env!("CARGO_BIN_EXE_toolhost")
    );
    std::fs::write(dir.path().join("toolhost.toml"), config).unwrap();
    let started = Instant::now();
    let out = toolhost(dir.path(), &["plugins"]);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    // The toolhost it starts finds its own configuration above it and refuses at once.
    let report = toolhost_tests::text(&out.stdout);
    assert!(
        report.contains("refused  MCP server 'me'") && report.contains("exited"),
        "{report}{}",
        toolhost_tests::text(&out.stderr)
    );
    assert!(
        toolhost_tests::text(&out.stderr).contains("mounts toolhost on this same configuration"),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
}

#[tokio::test]
async fn cancelling_a_call_reaches_the_external_server() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "[tool_confirmation.per_tool]\n");
    let dispatcher = dispatcher_core::Dispatcher::new();
    let config: mcp_toolsets::McpServerConfig = toml::from_str(&format!(
        "id = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\n",
        fixture_server()
    ))
    .unwrap();
    let ts = mcp_toolsets::McpToolset::start(
        config,
        &mcp_toolsets::ServerSandbox::new(dir.path()),
        std::sync::Arc::new(mcp_toolsets::MemoryPins::default()),
    )
    .await
    .unwrap();
    dispatcher
        .register_toolset(dispatcher_core::ToolsetDef {
            id: "fixture".into(),
            prefix: Some("fx".into()),
            binding: dispatcher_core::ToolsetBinding::Shared(ts.clone()),
        })
        .unwrap();
    let session = dispatcher
        .open_session(dispatcher_core::SessionSpec::new("s", dir.path()).toolsets(["fixture"]))
        .unwrap();
    let mut events = session.subscribe();
    let (d, s2) = (dispatcher.clone(), session.clone());
    let pending = tokio::spawn(async move {
        d.dispatch(
            dispatcher_core::ToolUse::new("tu", "fx__slow", json!({})),
            &s2,
        )
        .await
    });
    loop {
        let e = events.recv().await.unwrap();
        if e.kind.name() == "tool.called" {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    dispatcher.cancel_session_tools("s").await;
    assert!(started.elapsed() < Duration::from_secs(3));
    let r = pending.await.unwrap();
    assert_eq!(r.error_class, Some(dispatcher_core::ErrorClass::Cancelled));
    dispatcher_core::Toolset::stop(ts.as_ref());
}

#[tokio::test]
async fn a_server_that_cannot_restart_is_retried_with_a_doubling_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started-once");
    // Starts the fixture server the first time only; every restart fails at once.
    let config = format!(
        r#"
[tool_confirmation.per_tool]
fx__echo = "auto"

[[mcp_servers]]
id = "fixture"
prefix = "fx"
command = "/bin/sh"
args = ["-c", "if [ -e '{marker}' ]; then echo 'no restart' >&2; exit 1; fi; touch '{marker}'; exec '{server}'"]
readable_roots = ["{server}"]  # the script runs it: its sandbox must let it
"#,
        marker = marker.display(),
        server = fixture_server()
    );
    std::fs::write(dir.path().join("toolhost.toml"), config).unwrap();
    let s = serve(dir.path()).await;
    assert_eq!(call(&s, "fx__crash", json!({})).await.is_error, Some(true));

    // The next call tries a restart, which fails: the next attempt waits 1 s…
    let t = text(&call(&s, "fx__echo", json!({"text": "a"})).await);
    assert!(t.contains("retrying in 1s"), "{t}");
    // …and a call within that second does not even try.
    let t = text(&call(&s, "fx__echo", json!({"text": "b"})).await);
    assert!(
        t.contains("MCP server 'fixture' is down") && t.contains("next restart attempt in"),
        "{t}"
    );
    // After it, one more failed attempt doubles the wait.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = text(&call(&s, "fx__echo", json!({"text": "c"})).await);
    assert!(t.contains("retrying in 2s"), "{t}");
    s.cancel().await.unwrap();
}

/// A 2025-era client that counts the `notifications/tools/list_changed` it gets.
#[derive(Clone, Default)]
struct ListWatcher(std::sync::Arc<tokio::sync::Notify>);

impl rmcp::ClientHandler for ListWatcher {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.0.notify_one();
    }
}

#[tokio::test]
async fn a_2025_client_is_told_when_a_server_behind_toolhost_changes_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "[tool_confirmation.default]\nWRITE = \"auto\"\n",
    );
    let told = ListWatcher::default();
    let s = serve_as(&told, dir.path()).await;
    let caps = s.peer().peer_info().unwrap().capabilities.clone();
    assert_eq!(
        caps.tools.and_then(|t| t.list_changed),
        Some(true),
        "the server declares tools.listChanged"
    );
    let before = s.peer().list_all_tools().await.unwrap();
    assert!(!before.iter().any(|t| t.name == "fx__extra"));
    // A call that changes nothing tells nothing.
    assert_eq!(
        text(&call(&s, "fx__echo", json!({"text": "x"})).await),
        "echo: x"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), told.0.notified())
            .await
            .is_err(),
        "no change, no notice"
    );
    assert_eq!(text(&call(&s, "fx__grow", json!({})).await), "grown");
    tokio::time::timeout(Duration::from_secs(10), told.0.notified())
        .await
        .expect("notifications/tools/list_changed reached the client");
    let after = s.peer().list_all_tools().await.unwrap();
    assert!(after.iter().any(|t| t.name == "fx__extra"), "{after:?}");
    s.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2026_client_is_told_of_tool_changes_on_its_listen_stream() {
    use rmcp::ClientServiceExt as _;
    use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "[tool_confirmation.default]\nWRITE = \"auto\"\n",
    );
    let s = ()
        .serve_with_lifecycle(
            serve_transport(dir.path()),
            rmcp::ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            },
        )
        .await
        .unwrap();
    let mut listen = s
        .peer()
        .listen(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .build(),
        )
        .await
        .unwrap();
    assert_eq!(
        listen.acknowledged(),
        &SubscriptionFilter::builder().tools_list_changed().build(),
        "tools only: no mounted server says when its prompts change"
    );
    // A stream that asks for nothing toolhost sends (prompt changes no server tells, a
    // resource nobody serves) is acknowledged with nothing, stays open, and is told nothing.
    let mut quiet = s
        .peer()
        .listen(
            SubscriptionFilter::builder()
                .prompts_list_changed()
                .resource_subscription("nobody://x")
                .build(),
        )
        .await
        .unwrap();
    assert_eq!(quiet.acknowledged(), &SubscriptionFilter::new());
    assert_eq!(text(&call(&s, "fx__grow", json!({})).await), "grown");
    let note = tokio::time::timeout(Duration::from_secs(10), listen.next())
        .await
        .expect("a notice on the listen stream")
        .unwrap();
    assert!(
        matches!(
            note,
            Some(ServerNotification::ToolListChangedNotification(_))
        ),
        "{note:?}"
    );
    let after = s.peer().list_all_tools().await.unwrap();
    assert!(after.iter().any(|t| t.name == "fx__extra"), "{after:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), quiet.next())
            .await
            .is_err(),
        "the quiet stream stays open and is told nothing"
    );
    s.cancel().await.unwrap();
}

#[test]
fn a_server_tool_outside_the_schema_subset_is_left_out_and_its_other_tools_are_published() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[[mcp_servers]]\nid = \"mixed\"\nprefix = \"mx\"\ncommand = \"{}\"\nargs = [\"--with-oneof\"]\n\n\
         [tool_confirmation.per_tool]\nmx__echo = \"auto\"\n",
        fixture_server()
    );
    std::fs::write(dir.path().join("toolhost.toml"), config).unwrap();
    let out = toolhost(dir.path(), &["plugins"]);
    let report = toolhost_tests::text(&out.stdout);
    assert!(
        report.contains("loaded   MCP server 'mixed' (prefix mx): echo (read)"),
        "{report}"
    );
    assert!(
        report.contains(
            "left out MCP server 'mixed': tool 'either': input_schema uses oneOf at /properties/v/oneOf"
        ) && report.contains("(its other tools are published)"),
        "{report}"
    );
    assert_eq!(out.status.code(), Some(1), "a left-out tool is a refusal");
    let out = toolhost(
        dir.path(),
        &["call", "mx__echo", "--input", r#"{"text": "still here"}"#],
    );
    assert_eq!(
        toolhost_tests::text(&out.stdout),
        "echo: still here\n",
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let out = toolhost(dir.path(), &["list"]);
    assert!(
        !toolhost_tests::text(&out.stdout).contains("mx__either"),
        "{}",
        toolhost_tests::text(&out.stdout)
    );
}

#[test]
fn an_image_a_server_sent_that_is_not_base64_is_named_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let out = toolhost(
        dir.path(),
        &["call", "fx__echo", "--input", r#"{"text": "bad image"}"#],
    );
    assert_eq!(
        toolhost_tests::text(&out.stdout),
        "echo: bad image\n[an image (image/png) from MCP server 'fixture' was not valid base64 (Invalid symbol 32, offset 3.) and is left out]\n",
        "{}",
        toolhost_tests::text(&out.stderr)
    );
}

/// A config whose fixture server changes `echo`'s description and `touch`'s schema while
/// `dir/changed` exists.
fn rug_pull_config(dir: &Path, extra: &str) {
    write_config(
        dir,
        &format!(
            "args = [\"--changed-if\", \"{}\"]\n{extra}",
            dir.join("changed").display()
        ),
    );
}

#[test]
fn a_tool_that_changed_since_it_was_pinned_is_withheld_until_approved() {
    let dir = tempfile::tempdir().unwrap();
    rug_pull_config(dir.path(), "");
    // First sight: everything published, and pinned.
    let first = toolhost(dir.path(), &["list"]);
    assert!(
        toolhost_tests::text(&first.stdout).contains("fx__echo"),
        "{}",
        toolhost_tests::text(&first.stderr)
    );
    // The server changes two tools between starts.
    std::fs::write(dir.path().join("changed"), "").unwrap();
    let report = toolhost(dir.path(), &["plugins"]);
    assert_eq!(report.status.code(), Some(1));
    let said = toolhost_tests::text(&report.stdout);
    assert!(
        said.contains("tool 'echo' withheld: its definition changed since it was pinned")
            && said.contains("read ~/.ssh/id_rsa")
            && said.contains("tool 'touch' withheld")
            && said.contains("input schema at /properties/secret")
            && said.contains("toolhost mcp approve fixture echo"),
        "{said}"
    );
    let listed = toolhost_tests::text(&toolhost(dir.path(), &["list"]).stdout);
    assert!(
        !listed.contains("fx__echo")
            && !listed.contains("fx__touch")
            && listed.contains("fx__slow"),
        "{listed}"
    );
    let call = toolhost(
        dir.path(),
        &["call", "fx__echo", "--input", r#"{"text": "hi"}"#],
    );
    assert_eq!(
        call.status.code(),
        Some(1),
        "a withheld tool cannot be called"
    );
    // Approving one tool publishes it; the other stays withheld.
    let approve = toolhost(dir.path(), &["mcp", "approve", "fixture", "echo"]);
    assert_eq!(
        approve.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&approve.stderr)
    );
    assert!(
        toolhost_tests::text(&approve.stdout)
            .contains("approved MCP server 'fixture' tool 'echo': description"),
        "{}",
        toolhost_tests::text(&approve.stdout)
    );
    let listed = toolhost_tests::text(&toolhost(dir.path(), &["list"]).stdout);
    assert!(
        listed.contains("fx__echo") && !listed.contains("fx__touch"),
        "{listed}"
    );
    let again = toolhost(dir.path(), &["mcp", "approve", "fixture", "echo"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        toolhost_tests::text(&again.stderr).contains("nothing to approve for echo")
            && toolhost_tests::text(&again.stderr).contains("pending: touch"),
        "{}",
        toolhost_tests::text(&again.stderr)
    );
}

#[test]
fn with_on_change_warn_a_changed_tool_is_published_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    rug_pull_config(dir.path(), "on_change = \"warn\"\n");
    toolhost(dir.path(), &["list"]);
    std::fs::write(dir.path().join("changed"), "").unwrap();
    let listed = toolhost(dir.path(), &["list"]);
    assert!(toolhost_tests::text(&listed.stdout).contains("fx__echo"));
    let log = toolhost_tests::text(&listed.stderr);
    assert!(
        log.contains("WARN")
            && log.contains("tool 'echo' changed its definition since it was pinned"),
        "{log}"
    );
}

#[test]
fn approving_names_the_servers_there_are() {
    let dir = tempfile::tempdir().unwrap();
    rug_pull_config(dir.path(), "");
    let out = toolhost(dir.path(), &["mcp", "approve", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        toolhost_tests::text(&out.stderr).contains("no MCP server 'nope'")
            && toolhost_tests::text(&out.stderr).contains("ids: fixture"),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
}

#[test]
fn a_server_mounted_without_a_prefix_publishes_its_tools_under_their_own_names() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"plain\"\nprefix = \"\"\ncommand = \"{}\"\n",
            fixture_server()
        ),
    )
    .unwrap();
    let listed = toolhost(dir.path(), &["list"]);
    let table = toolhost_tests::text(&listed.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("echo ") && l.contains("mcp:plain")),
        "{table}{}",
        toolhost_tests::text(&listed.stderr)
    );
    let call = toolhost(
        dir.path(),
        &["call", "echo", "--input", r#"{"text": "hi"}"#],
    );
    assert_eq!(
        toolhost_tests::text(&call.stdout),
        "echo: hi\n",
        "{}",
        toolhost_tests::text(&call.stderr)
    );
    let report = toolhost_tests::text(&toolhost(dir.path(), &["plugins"]).stdout);
    assert!(
        report.contains("MCP server 'plain' (no prefix)"),
        "{report}"
    );
}

#[test]
fn two_servers_without_a_prefix_offering_one_name_are_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let entry = |id: &str| {
        format!(
            "[[mcp_servers]]\nid = \"{id}\"\nprefix = \"\"\ncommand = \"{}\"\n",
            fixture_server()
        )
    };
    std::fs::write(
        dir.path().join("toolhost.toml"),
        entry("first") + &entry("second"),
    )
    .unwrap();
    let out = toolhost(dir.path(), &["plugins"]);
    assert_eq!(out.status.code(), Some(1));
    let report = toolhost_tests::text(&out.stdout);
    assert!(
        report.contains("loaded   MCP server 'first'")
            && report.contains("toolset 'second' (mounted without a prefix) clashes with the tool of the same name from mcp:first"),
        "{report}"
    );
}

#[tokio::test]
async fn a_mounted_tools_progress_is_the_calls_live_output() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = dispatcher_core::Dispatcher::new();
    let config = mcp_toolsets::McpServerConfig::new("fixture", "fx", fixture_server());
    let ts = mcp_toolsets::McpToolset::start(
        config,
        &mcp_toolsets::ServerSandbox::new(dir.path()),
        std::sync::Arc::new(mcp_toolsets::MemoryPins::default()),
    )
    .await
    .unwrap();
    dispatcher
        .register_toolset(dispatcher_core::ToolsetDef {
            id: "fixture".into(),
            prefix: Some("fx".into()),
            binding: dispatcher_core::ToolsetBinding::Shared(ts.clone()),
        })
        .unwrap();
    let session = dispatcher
        .open_session(dispatcher_core::SessionSpec::new("s", dir.path()).toolsets(["fixture"]))
        .unwrap();
    let mut call = dispatcher.invocation(
        dispatcher_core::ToolUse::new("tu", "fx__steps", json!({})),
        &session,
    );
    let mut events = call.events();
    let result = call.run().await;
    assert_eq!(result.text(), "steps: done", "{result:?}");
    let mut streamed = String::new();
    while let Some(e) = events.try_recv() {
        if let dispatcher_core::EventKind::OutputDelta { chunk } = &e.kind {
            streamed.push_str(chunk);
        }
    }
    assert_eq!(streamed, "step 1 of 3\nstep 2 of 3\nstep 3 of 3\n");
    dispatcher_core::Toolset::stop(ts.as_ref());
}

#[tokio::test]
async fn a_mounted_servers_prompts_resources_and_completion_come_through() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--offers\"]\n");
    let s = serve(dir.path()).await;
    let peer = s.peer();
    assert!(
        peer.peer_info().unwrap().capabilities.completions.is_some(),
        "completion is declared when a mounted server can complete"
    );
    // Prompts are named with the server's prefix, like its tools.
    let prompts = peer.list_all_prompts().await.unwrap();
    assert_eq!(
        prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["fx__greet"]
    );
    let args = serde_json::Map::from_iter([("name".to_string(), json!("Ada"))]);
    let got = peer
        .get_prompt(rmcp::model::GetPromptRequestParams::new("fx__greet").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&got.messages[0].content).unwrap()["text"],
        "Say hello to Ada."
    );
    // Resources keep their URIs; a URI under a template reaches its server too.
    let resources = peer.list_all_resources().await.unwrap();
    assert_eq!(resources[0].uri, "fixture://readme");
    let templates = peer.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "fixture://notes/{id}");
    for (uri, want) in [
        ("fixture://readme", "the fixture's readme"),
        ("fixture://notes/7", "note 7"),
    ] {
        let read = peer
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
            .unwrap();
        assert_eq!(
            serde_json::to_value(&read.contents[0]).unwrap()["text"],
            want,
            "{uri}"
        );
    }
    let missing = peer
        .read_resource(rmcp::model::ReadResourceRequestParams::new("other://x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("Resource not found: other://x"),
        "{missing}"
    );
    // Completion reaches the server that owns the prompt.
    let done = peer
        .complete(rmcp::model::CompleteRequestParams::new(
            rmcp::model::Reference::for_prompt("fx__greet"),
            rmcp::model::ArgumentInfo::new("name", "Al"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, ["Alan"]);
    s.cancel().await.unwrap();
}

/// The npm reference server `server-everything` (`cargo xtask test` installs it), mounted
/// with prefix `ev`; `None` when the run does not have it.
fn mount_server_everything(dir: &Path) -> Option<()> {
    mount_server_everything_with(dir, "")
}

/// [`mount_server_everything`] with `extra` configuration before its entry.
fn mount_server_everything_with(dir: &Path, extra: &str) -> Option<()> {
    let node = toolhost_tests::peer("TOOLHOST_TEST_NODE")?;
    let server = toolhost_tests::peer("TOOLHOST_TEST_SERVER_EVERYTHING")?;
    // Its modules are read from where npm put them.
    let modules = server.ancestors().nth(4).unwrap().to_path_buf();
    std::fs::write(
        dir.join("toolhost.toml"),
        format!(
            "{extra}\n[[mcp_servers]]\nid = \"ev\"\nprefix = \"ev\"\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\nreadable_roots = [\"{}\"]\n",
            node.display(),
            server.display(),
            modules.display()
        ),
    )
    .unwrap();
    Some(())
}

#[tokio::test]
async fn the_reference_server_everything_keeps_its_prompts_resources_and_completion_behind_toolhost()
 {
    let dir = tempfile::tempdir().unwrap();
    if mount_server_everything(dir.path()).is_none() {
        return;
    }
    let s = serve(dir.path()).await;
    let peer = s.peer();
    let tools = peer.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "ev__echo"), "{tools:?}");
    // It lists its roots tool only for a client with roots: toolhost declares the
    // workspace.
    let roots = text(&call(&s, "ev__get-roots-list", json!({})).await);
    let workspace = format!("file://{}", dir.path().canonicalize().unwrap().display());
    assert!(roots.contains(&workspace), "{roots}");
    assert_eq!(
        text(&call(&s, "ev__echo", json!({"message": "through toolhost"})).await),
        "Echo: through toolhost"
    );
    // Its prompts, named like its tools; one without required arguments answers.
    let prompts = peer.list_all_prompts().await.unwrap();
    assert!(
        prompts.len() >= 3 && prompts.iter().all(|p| p.name.starts_with("ev__")),
        "{prompts:?}"
    );
    let simple = prompts
        .iter()
        .find(|p| {
            p.arguments
                .as_ref()
                .is_none_or(|a| a.iter().all(|a| a.required != Some(true)))
        })
        .expect("a prompt without required arguments");
    let got = peer
        .get_prompt(rmcp::model::GetPromptRequestParams::new(
            simple.name.clone(),
        ))
        .await
        .unwrap();
    assert!(!got.messages.is_empty(), "{got:?}");
    // Its resources with their own URIs, each readable through toolhost.
    let resources = peer.list_all_resources().await.unwrap();
    assert!(!resources.is_empty());
    let first = &resources[0];
    let read = peer
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            first.uri.clone(),
        ))
        .await
        .unwrap();
    assert!(!read.contents.is_empty(), "{read:?}");
    let templates = peer.list_all_resource_templates().await.unwrap();
    assert!(!templates.is_empty(), "{templates:?}");
    // Completion reaches it for a prompt with arguments.
    assert!(peer.peer_info().unwrap().capabilities.completions.is_some());
    if let Some((prompt, argument)) = prompts.iter().find_map(|p| {
        p.arguments
            .as_ref()
            .and_then(|a| a.first())
            .map(|a| (p.name.clone(), a.name.clone()))
    }) {
        let done = peer
            .complete(rmcp::model::CompleteRequestParams::new(
                rmcp::model::Reference::for_prompt(prompt),
                rmcp::model::ArgumentInfo::new(argument, ""),
            ))
            .await;
        assert!(done.is_ok(), "{done:?}");
    }
    s.cancel().await.unwrap();
}

/// A 2025-era client with roots of its own: `file:///client/project`.
#[derive(Clone, Default)]
struct RootedClient;

#[allow(deprecated, reason = "roots are what is tested")]
impl rmcp::ClientHandler for RootedClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps = serde_json::from_value(json!({"roots": {"listChanged": true}})).unwrap();
        rmcp::model::ClientConfig::new(caps, rmcp::model::Implementation::new("rooted", "1"))
    }

    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        Ok(rmcp::model::ListRootsResult::new(vec![
            rmcp::model::Root::new("file:///client/project"),
        ]))
    }
}

#[tokio::test]
async fn a_mounted_server_asking_roots_gets_the_workspace_or_the_calling_clients_own() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--roots\"]");
    let workspace = format!("file://{}", dir.path().canonicalize().unwrap().display());
    // A client that declared no roots: the server is given the session's workspace.
    let plain = serve(dir.path()).await;
    let said = text(&call(&plain, "fx__roots", json!({})).await);
    assert_eq!(said, format!("{workspace} (changed 0)"));
    plain.cancel().await.unwrap();
    // A client with roots of its own: they pass through for its calls, and so does its
    // notice that they changed.
    let rooted = serve_as(&RootedClient, dir.path()).await;
    let said = text(&call(&rooted, "fx__roots", json!({})).await);
    assert_eq!(said, "file:///client/project (changed 0)");
    rooted.peer().notify_roots_list_changed().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let said = text(&call(&rooted, "fx__roots", json!({})).await);
        if said == "file:///client/project (changed 1)" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the change never reached the server: {said}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rooted.cancel().await.unwrap();
}

/// A 2025-era client that can elicit and sample: it answers a form with the color `teal`,
/// a sampling request with `hi there`, and keeps the messages it was asked.
#[derive(Clone, Default)]
struct AnsweringClient(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

#[allow(deprecated, reason = "sampling is what is tested")]
impl rmcp::ClientHandler for AnsweringClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps =
            serde_json::from_value(json!({"elicitation": {"form": {}}, "sampling": {}})).unwrap();
        rmcp::model::ClientConfig::new(caps, rmcp::model::Implementation::new("answering", "1"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_string(&request).unwrap());
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"color": "teal"})),
        )
    }

    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_string(&request.messages).unwrap());
        Ok(rmcp::model::CreateMessageResult::new(
            rmcp::model::SamplingMessage::assistant_text("hi there"),
            "test-model".into(),
        ))
    }
}

#[tokio::test]
async fn a_mounted_servers_questions_go_to_the_user_of_the_client_that_made_the_call() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--asks\"]\n");
    let client = AnsweringClient::default();
    let s = serve_as(&client, dir.path()).await;
    // The server's own form, message and answer: not toolhost's allow/deny question.
    assert_eq!(
        text(&call(&s, "fx__ask", json!({})).await),
        r#"ask: {"action":"accept","content":{"color":"teal"}}"#
    );
    let asked = client.0.lock().unwrap().clone();
    assert!(
        asked.len() == 1 && asked[0].contains("Which color?") && asked[0].contains("\"color\""),
        "{asked:?}"
    );
    let sampled = call(&s, "fx__sample", json!({})).await;
    assert!(
        text(&sampled).starts_with("sample: ") && text(&sampled).contains("hi there"),
        "{sampled:?}"
    );
    assert!(client.0.lock().unwrap()[1].contains("Say hi"));
    s.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_that_cannot_be_asked_leaves_elicitation_to_the_broker_and_sampling_fails_naming_the_server()
 {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--asks\"]\n");
    let s = serve(dir.path()).await;
    // Nobody can be asked: `[mcp] prompt_fallback` (deny) declines the form.
    assert_eq!(
        text(&call(&s, "fx__ask", json!({})).await),
        r#"ask: {"action":"decline"}"#
    );
    let sampled = call(&s, "fx__sample", json!({})).await;
    assert_eq!(sampled.is_error, Some(true));
    let said = text(&sampled);
    assert!(
        said.contains("MCP server 'fixture' asked to sample a model")
            && said.contains("cannot sample"),
        "{said}"
    );
    s.cancel().await.unwrap();
}

#[tokio::test]
async fn the_reference_server_everythings_elicitation_and_sampling_reach_the_calling_client() {
    let dir = tempfile::tempdir().unwrap();
    let auto = "[tool_confirmation.per_tool]\n\"ev__trigger-sampling-request\" = \"auto\"\n\"ev__trigger-elicitation-request\" = \"auto\"\n";
    if mount_server_everything_with(dir.path(), auto).is_none() {
        return;
    }
    let client = AnsweringClient::default();
    let s = serve_as(&client, dir.path()).await;
    // It publishes these only to a client that declares elicitation and sampling:
    // toolhost declares what it relays.
    let tools = s.peer().list_all_tools().await.unwrap();
    for name in [
        "ev__trigger-elicitation-request",
        "ev__trigger-sampling-request",
    ] {
        assert!(tools.iter().any(|t| t.name == name), "{name} in {tools:?}");
    }
    let sampled = call(
        &s,
        "ev__trigger-sampling-request",
        json!({"prompt": "greet"}),
    )
    .await;
    assert!(text(&sampled).contains("hi there"), "{sampled:?}");
    let elicited = call(&s, "ev__trigger-elicitation-request", json!({})).await;
    let asked = client.0.lock().unwrap().clone();
    assert!(
        asked.iter().any(|a| a.contains("Please provide inputs")),
        "the server's own form reached the client: {asked:?} ({elicited:?})"
    );
    s.cancel().await.unwrap();
}

#[tokio::test]
async fn the_reference_server_everythings_task_only_tool_runs_as_a_2025_task_behind_toolhost() {
    let dir = tempfile::tempdir().unwrap();
    let auto = "[tool_confirmation.per_tool]\n\"ev__simulate-research-query\" = \"auto\"\n";
    if mount_server_everything_with(dir.path(), auto).is_none() {
        return;
    }
    let client = AnsweringClient::default();
    let s = serve_as(&client, dir.path()).await;
    // Its execution.taskSupport is "required": a plain tools/call is refused (-32601), and
    // toolhost calls it as a 2025-11-25 task and waits for its result.
    let done = call(
        &s,
        "ev__simulate-research-query",
        json!({"topic": "tidal energy", "ambiguous": true}),
    )
    .await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert!(
        text(&done).contains("Research Report: tidal energy"),
        "{done:?}"
    );
    // Its question in the task (an elicitation/create tied to the task) reached the
    // client that made the call.
    let asked = client.0.lock().unwrap().clone();
    assert!(
        asked
            .iter()
            .any(|a| a.contains("could have multiple interpretations")),
        "{asked:?}"
    );
    s.cancel().await.unwrap();
}

/// A 2025-era client that keeps the notifications mounted servers' events become.
#[derive(Clone, Default)]
struct NoticeKeeper(
    std::sync::Arc<tokio::sync::Mutex<Vec<String>>>,
    std::sync::Arc<tokio::sync::Notify>,
);

impl NoticeKeeper {
    async fn keep(&self, notice: String) {
        self.0.lock().await.push(notice);
        self.1.notify_one();
    }

    /// Waits until a kept notice contains `part` (10 s at most).
    async fn wait_for(&self, part: &str) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let seen = self.1.notified();
                if self.0.lock().await.iter().any(|n| n.contains(part)) {
                    return;
                }
                seen.await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "no notice with {part:?}: {:?}",
            self.0.lock().await
        );
    }

    async fn count(&self, part: &str) -> usize {
        self.0
            .lock()
            .await
            .iter()
            .filter(|n| n.contains(part))
            .count()
    }
}

#[allow(deprecated, reason = "logging is what is tested")]
impl rmcp::ClientHandler for NoticeKeeper {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _c: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.keep(format!("progress {}", params.message.unwrap_or_default()))
            .await;
    }
    async fn on_prompt_list_changed(&self, _c: rmcp::service::NotificationContext<RoleClient>) {
        self.keep("prompts changed".into()).await;
    }
    async fn on_resource_list_changed(&self, _c: rmcp::service::NotificationContext<RoleClient>) {
        self.keep("resources changed".into()).await;
    }
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _c: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.keep(format!("updated {}", params.uri)).await;
    }
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _c: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.keep(format!("log {}", serde_json::to_string(&params).unwrap()))
            .await;
    }
}

#[tokio::test]
#[allow(
    deprecated,
    reason = "logging and resources/subscribe are what is tested"
)]
async fn a_2025_client_gets_a_mounted_servers_list_changes_resource_updates_and_logs() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--offers\"]\n");
    let notices = NoticeKeeper::default();
    let s = serve_as(&notices, dir.path()).await;
    let peer = s.peer();
    let caps = peer.peer_info().unwrap().capabilities.clone();
    assert_eq!(
        caps.resources.as_ref().and_then(|r| r.subscribe),
        Some(true)
    );
    assert!(caps.logging.is_some());
    // A resource update reaches a client subscribed to it, and only while it is.
    peer.subscribe(rmcp::model::SubscribeRequestParams::new("fixture://readme"))
        .await
        .unwrap();
    assert_eq!(
        text(&call(&s, "fx__note", json!({})).await),
        "noted (subscribed: true)"
    );
    notices.wait_for("updated fixture://readme").await;
    peer.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(
        "fixture://readme",
    ))
    .await
    .unwrap();
    assert_eq!(
        text(&call(&s, "fx__note", json!({})).await),
        "noted (subscribed: false)"
    );
    let unknown = peer
        .subscribe(rmcp::model::SubscribeRequestParams::new("nobody://x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unknown.contains("no mounted MCP server offers nobody://x"),
        "{unknown}"
    );
    // Log messages come once a level is set, labelled with the server's id.
    call(&s, "fx__log", json!({"text": "too early"})).await;
    peer.set_level(rmcp::model::SetLevelRequestParams::new(
        rmcp::model::LoggingLevel::Info,
    ))
    .await
    .unwrap();
    call(&s, "fx__log", json!({"text": "careful"})).await;
    notices.wait_for("careful").await;
    let logged = notices.0.lock().await.clone();
    assert!(
        logged
            .iter()
            .any(|n| n.contains(r#""logger":"fixture/fixture-log""#)
                && n.contains(r#""level":"warning""#)),
        "{logged:?}"
    );
    assert_eq!(notices.count("too early").await, 0);
    // A list change is told, and the lists are new when it is.
    assert_eq!(text(&call(&s, "fx__more", json!({})).await), "more");
    notices.wait_for("prompts changed").await;
    notices.wait_for("resources changed").await;
    let prompts = peer.list_all_prompts().await.unwrap();
    assert!(
        prompts.iter().any(|p| p.name == "fx__farewell"),
        "{prompts:?}"
    );
    let resources = peer.list_all_resources().await.unwrap();
    assert!(
        resources.iter().any(|r| r.uri == "fixture://more"),
        "{resources:?}"
    );
    s.cancel().await.unwrap();
}

#[tokio::test]
#[allow(deprecated, reason = "logging is what is tested")]
async fn a_2026_client_gets_resource_updates_and_list_changes_on_its_stream_and_logs_with_its_call()
{
    use rmcp::model::{ServerNotification as N, SubscriptionFilter};
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--offers\"]\n");
    let notices = NoticeKeeper::default();
    let s = serve_2026_as(&notices, dir.path()).await;
    let wanted = SubscriptionFilter::builder()
        .prompts_list_changed()
        .resources_list_changed()
        .resource_subscription("fixture://readme")
        .build();
    let mut listen = s.peer().listen(wanted.clone()).await.unwrap();
    assert_eq!(listen.acknowledged(), &wanted);
    assert_eq!(
        text(&call(&s, "fx__note", json!({})).await),
        "noted (subscribed: true)"
    );
    let mut seen = Vec::new();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), listen.next())
            .await
            .expect("a notice on the stream")
            .unwrap()
            .unwrap()
    };
    match next().await {
        N::ResourceUpdatedNotification(u) => assert_eq!(u.params.uri, "fixture://readme"),
        other => panic!("{other:?}"),
    }
    call(&s, "fx__more", json!({})).await;
    for _ in 0..2 {
        seen.push(match next().await {
            N::PromptListChangedNotification(_) => "prompts",
            N::ResourceListChangedNotification(_) => "resources",
            other => panic!("{other:?}"),
        });
    }
    seen.sort();
    assert_eq!(seen, ["prompts", "resources"]);
    // A call whose _meta asks for a log level gets the server's log messages with it.
    let mut params = CallToolRequestParams::new("fx__log").with_arguments(
        serde_json::Map::from_iter([("text".to_string(), json!("with the call"))]),
    );
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.set_log_level(rmcp::model::LoggingLevel::Warning);
    params.meta = Some(meta);
    s.peer().call_tool(params).await.unwrap();
    notices.wait_for("with the call").await;
    s.cancel().await.unwrap();
}

#[tokio::test]
#[allow(deprecated, reason = "logging is what is tested")]
async fn the_reference_server_everythings_progress_and_logs_reach_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let auto = "[tool_confirmation.per_tool]\n\"ev__toggle-simulated-logging\" = \"auto\"\n";
    if mount_server_everything_with(dir.path(), auto).is_none() {
        return;
    }
    let notices = NoticeKeeper::default();
    let s = serve_as(&notices, dir.path()).await;
    // Its long-running tool's progress reaches the client that called it (rmcp's client
    // sends a progress token with every request).
    let done = call(
        &s,
        "ev__trigger-long-running-operation",
        json!({"duration": 1, "steps": 2}),
    )
    .await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    notices.wait_for("progress ").await;
    // Its log messages, once the client set a level, labelled with its id.
    s.peer()
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Debug,
        ))
        .await
        .unwrap();
    call(&s, "ev__toggle-simulated-logging", json!({})).await;
    notices.wait_for(r#""logger":"ev"#).await;
    call(&s, "ev__toggle-simulated-logging", json!({})).await;
    s.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2025_servers_question_reaches_a_2026_client_in_a_round_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--asks\"]\n");
    let client = AnsweringClient::default();
    let s = serve_2026_as(&client, dir.path()).await;
    // The server asks with elicitation/create while its call waits; the 2026 client is
    // asked in an input_required round (rmcp's client loop answers it and retries), and
    // the call that waited gets the answer.
    let done = s
        .call_tool(CallToolRequestParams::new("fx__ask"))
        .await
        .unwrap();
    assert_eq!(
        text(&done),
        r#"ask: {"action":"accept","content":{"color":"teal"}}"#
    );
    let asked = client.0.lock().unwrap().clone();
    assert!(
        asked.len() == 1 && asked[0].contains("Which color?"),
        "{asked:?}"
    );
    // By hand: the round, its answer, and the same state once more (refused).
    let first = s
        .peer()
        .call_tool_once(CallToolRequestParams::new("fx__ask"))
        .await
        .unwrap();
    let rmcp::model::CallToolResponse::InputRequired(round) = first else {
        panic!("expected input_required, got {first:?}")
    };
    let state = round.request_state.clone().unwrap();
    let answer: rmcp::model::InputResponses = [(
        "elicitation".to_string(),
        json!({"action": "accept", "content": {"color": "red"}}),
    )]
    .into();
    let retry = || {
        CallToolRequestParams::new("fx__ask")
            .with_input_responses(answer.clone())
            .with_request_state(state.clone())
    };
    let done = s.peer().call_tool_once(retry()).await.unwrap();
    let rmcp::model::CallToolResponse::Complete(done) = done else {
        panic!("expected the result, got {done:?}")
    };
    assert!(text(&done).contains("red"), "{done:?}");
    let again = s
        .peer()
        .call_tool_once(retry())
        .await
        .unwrap_err()
        .to_string();
    assert!(again.contains("requestState refused"), "{again}");
    s.cancel().await.unwrap();
}

#[tokio::test]
#[allow(deprecated, reason = "resources/subscribe is what is tested")]
async fn a_subscription_is_renewed_when_its_server_restarts() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "args = [\"--offers\"]\n");
    let notices = NoticeKeeper::default();
    let s = serve_as(&notices, dir.path()).await;
    s.peer()
        .subscribe(rmcp::model::SubscribeRequestParams::new("fixture://readme"))
        .await
        .unwrap();
    let crashed = call(&s, "fx__crash", json!({})).await;
    assert_eq!(crashed.is_error, Some(true), "{crashed:?}");
    // The next call starts it again; the subscription follows (asked for right after the
    // restart, so it may land a moment after that call).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let noted = text(&call(&s, "fx__note", json!({})).await);
        if noted == "noted (subscribed: true)" {
            break;
        }
        assert!(Instant::now() < deadline, "never subscribed again: {noted}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    notices.wait_for("updated fixture://readme").await;
    s.cancel().await.unwrap();
}

#[test]
fn an_unknown_input_schemas_value_is_refused_naming_the_key_and_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "input_schemas = \"anything\"\n");
    let out = toolhost(dir.path(), &["list"]);
    let said = toolhost_tests::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("mcp_servers[0].input_schemas")
            && said.contains("expected `subset` or `as-given`"),
        "{said}"
    );
}
