//! `toolhost serve --mcp` driven by an rmcp client, as a third-party MCP client would.
#![cfg(test)]

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::ClientServiceExt as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, NumberOrString,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestMetaObject, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestContext, RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData as McpError};
use serde_json::{Value, json};
use toolhost_tests::{process_alive, read_pid, wait_exit};

mod common;

use common::mcp::{call, text};
use common::workspace;

/// A client that answers elicitation with a fixed decision (or does not support it) and
/// records the progress notifications it gets.
#[derive(Clone, Default)]
struct TestClient {
    answer: Option<&'static str>,
    /// The protocol version to speak (default 2025-06-18).
    version: Option<ProtocolVersion>,
    progress: std::sync::Arc<std::sync::Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.answer.is_some() {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("toolhost-test-client", "1.0.0"))
            .with_protocol_version(
                self.version
                    .clone()
                    .unwrap_or(ProtocolVersion::V_2025_06_18),
            )
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"decision": self.answer.unwrap_or("deny")})))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

async fn connect(ws: &Path, client: TestClient) -> RunningService<RoleClient, TestClient> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.args(["serve", "--mcp", "--workspace"])
        .arg(ws)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"));
    let transport = TokioChildProcess::new(cmd).unwrap();
    match client.version.clone() {
        // A 2026-07-28 client probes with server/discover and falls back for old servers.
        Some(v) if v >= ProtocolVersion::V_2026_07_28 => client
            .serve_with_lifecycle(
                transport,
                rmcp::ClientLifecycleMode::Auto {
                    preferred_versions: vec![v],
                    legacy_version: Some(ProtocolVersion::V_2025_11_25),
                },
            )
            .await
            .unwrap(),
        _ => client.serve(transport).await.unwrap(),
    }
}

#[tokio::test]
async fn lists_tools_with_schemas_and_side_effect_annotations() {
    let ws = workspace();
    let service = connect(ws.path(), TestClient::default()).await;
    let info = service.peer().peer_info().unwrap();
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("toolhost")
    );
    let tools = service.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        ["list_dir", "patch_file", "read_file", "shell", "write_file"]
    );
    let read = tools.iter().find(|t| t.name == "read_file").unwrap();
    let a = read.annotations.as_ref().unwrap();
    assert_eq!(
        (a.read_only_hint, a.destructive_hint),
        (Some(true), Some(false))
    );
    let shell = tools.iter().find(|t| t.name == "shell").unwrap();
    assert_eq!(
        shell.annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );
    assert_eq!(read.input_schema.get("type"), Some(&json!("object")));
    service.cancel().await.unwrap();
}

#[tokio::test]
async fn each_listed_tool_says_in_its_meta_what_confines_it() {
    let ws = workspace();
    toolhost_tests::package_library(
        &toolhost_tests::fixtures().library("hostile"),
        &ws.path().join(".plugins"),
        "hostile",
    );
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "plugin_dirs = [\".plugins\"]\n",
    )
    .unwrap();
    let service = connect(ws.path(), TestClient::default()).await;
    let tools = service.peer().list_all_tools().await.unwrap();
    let sandbox = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        tool.meta.as_ref().unwrap().0["toolhost/sandbox"].clone()
    };
    let hostile = sandbox("hostile_connect");
    assert_eq!(
        (&hostile["runs"], &hostile["grant"], &hostile["state"]),
        (&json!("worker"), &json!("context only"), &json!("enforced")),
        "{hostile}"
    );
    assert!(
        hostile["detail"].as_str().unwrap().contains("Landlock ABI"),
        "{hostile}"
    );
    let shell = sandbox("shell");
    assert_eq!(shell["runs"], "in_process");
    assert_eq!(shell["programs"]["mode"], "workspace-write", "{shell}");
    service.cancel().await.unwrap();
}

#[tokio::test]
async fn calls_succeed_and_errors_are_results_with_is_error() {
    let ws = workspace();
    let service = connect(ws.path(), TestClient::default()).await;
    let ok = call(&service, "read_file", json!({"path": "README.md"})).await;
    assert_eq!(
        (text(&ok).as_str(), ok.is_error),
        ("# hello\n", Some(false))
    );

    let unknown = call(&service, "reed_file", json!({})).await;
    assert_eq!(unknown.is_error, Some(true));
    assert!(
        text(&unknown).starts_with("Tool 'reed_file' not found. Available:"),
        "{}",
        text(&unknown)
    );

    let invalid = call(&service, "read_file", json!({"path": 5})).await;
    assert_eq!(invalid.is_error, Some(true));
    assert!(text(&invalid).contains("at /path"), "{}", text(&invalid));

    let escape = call(&service, "read_file", json!({"path": "../../etc/passwd"})).await;
    assert_eq!(escape.is_error, Some(true));
    assert_eq!(
        text(&escape),
        "Path '../../etc/passwd' escapes workspace boundary"
    );

    // The session is still usable after every error.
    let again = call(&service, "list_dir", json!({})).await;
    assert_eq!(again.is_error, Some(false));
    service.cancel().await.unwrap();
}

#[tokio::test]
async fn prompts_go_through_elicitation_when_the_client_supports_it() {
    let ws = workspace();
    let allow = connect(
        ws.path(),
        TestClient {
            answer: Some("allow"),
            ..TestClient::default()
        },
    )
    .await;
    let r = call(
        &allow,
        "write_file",
        json!({"path": "allowed.txt", "content": "x"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert!(ws.path().join("allowed.txt").exists());
    let meta = r.meta.as_ref().expect("the side-effect record in _meta");
    assert_eq!(meta.0["toolhost/files_modified"], json!(["allowed.txt"]));
    allow.cancel().await.unwrap();

    let deny = connect(
        ws.path(),
        TestClient {
            answer: Some("deny"),
            ..TestClient::default()
        },
    )
    .await;
    let r = call(
        &deny,
        "write_file",
        json!({"path": "denied.txt", "content": "x"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(text(&r), "User denied this operation.");
    assert!(!ws.path().join("denied.txt").exists());
    deny.cancel().await.unwrap();
}

fn write_params(path: &str) -> CallToolRequestParams {
    let Value::Object(args) = json!({"path": path, "content": "x"}) else {
        unreachable!()
    };
    CallToolRequestParams::new("write_file").with_arguments(args)
}

#[tokio::test]
async fn a_2026_client_confirms_through_input_required_and_the_call_runs_once() {
    let ws = workspace();
    let service = connect(
        ws.path(),
        TestClient {
            answer: Some("allow"),
            version: Some(ProtocolVersion::V_2026_07_28),
            ..TestClient::default()
        },
    )
    .await;
    // The SDK's own loop: input_required, the elicitation answered, the retry.
    let r = service.call_tool(write_params("auto.txt")).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert!(ws.path().join("auto.txt").exists());

    // One round by hand.
    let first = service.call_tool_once(write_params("b.txt")).await.unwrap();
    let rmcp::model::CallToolResponse::InputRequired(asked) = first else {
        panic!("expected input_required, got {first:?}")
    };
    let question = serde_json::to_value(&asked).unwrap();
    let message = question["inputRequests"]["confirm"]["params"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("a confirm form: {question}"));
    assert!(
        message.contains("'write_file' (write) asks to run"),
        "{message}"
    );
    assert!(!ws.path().join("b.txt").exists(), "nothing ran yet");
    let state = asked.request_state.clone().unwrap();
    let allow: rmcp::model::InputResponses = [(
        "confirm".to_string(),
        json!({"action": "accept", "content": {"decision": "allow"}}),
    )]
    .into();
    let retry = |path: &str, state: &str| {
        write_params(path)
            .with_input_responses(allow.clone())
            .with_request_state(state.to_string())
    };
    let refused = |r: Result<rmcp::model::CallToolResponse, rmcp::ServiceError>| {
        let e = r.expect_err("refused").to_string();
        assert!(e.contains("requestState refused"), "{e}");
        e
    };
    // Other arguments, or an altered state: refused.
    refused(service.call_tool_once(retry("other.txt", &state)).await);
    let mut altered = state.clone().into_bytes();
    let i = altered.len() / 2;
    altered[i] = if altered[i] == b'a' { b'b' } else { b'a' };
    refused(
        service
            .call_tool_once(retry("b.txt", std::str::from_utf8(&altered).unwrap()))
            .await,
    );
    assert!(!ws.path().join("other.txt").exists() && !ws.path().join("b.txt").exists());
    // The right retry runs the call; the same state again is refused.
    let done = service
        .call_tool_once(retry("b.txt", &state))
        .await
        .unwrap();
    assert!(
        matches!(done, rmcp::model::CallToolResponse::Complete(ref r) if r.is_error == Some(false)),
        "{done:?}"
    );
    assert!(ws.path().join("b.txt").exists());
    let e = refused(service.call_tool_once(retry("b.txt", &state)).await);
    assert!(e.contains("already used"), "{e}");
    service.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2026_client_without_elicitation_gets_the_fallback() {
    let ws = workspace();
    let service = connect(
        ws.path(),
        TestClient {
            version: Some(ProtocolVersion::V_2026_07_28),
            ..TestClient::default()
        },
    )
    .await;
    let r = service.call_tool(write_params("x.txt")).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).contains("prompt_fallback = \"deny\""),
        "{}",
        text(&r)
    );
    assert!(!ws.path().join("x.txt").exists());
    service.cancel().await.unwrap();
}

#[tokio::test]
async fn without_elicitation_the_fallback_denies_and_names_the_keys_that_allow() {
    let ws = workspace();
    let service = connect(ws.path(), TestClient::default()).await;
    let r = call(
        &service,
        "write_file",
        json!({"path": "x.txt", "content": "x"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(
        t.contains("cannot ask its user")
            && t.contains("prompt_fallback = \"deny\"")
            && t.contains("write_file = \"auto\""),
        "{t}"
    );
    assert!(!t.contains("User denied"), "nobody was asked: {t}");
    assert!(!ws.path().join("x.txt").exists());
    service.cancel().await.unwrap();
}

/// The binary's allocator is mimalloc (`toolhost/src/allocator.rs`), whose free memory an
/// idle server gives back (`toolhost/src/quiet.rs`).
#[cfg(all(feature = "mimalloc", target_os = "linux", target_env = "gnu"))]
#[test]
fn a_server_gives_its_free_memory_back_once_per_spell_its_client_is_quiet() {
    use std::io::{BufRead as _, Read as _, Write as _};
    let ws = workspace();
    let mut command = raw_server_command(ws.path(), &[]);
    command.env("TOOLHOST_LOG", "toolhost::quiet=debug");
    let (mut child, mut stdin) = raw_server_from(command, json!({}));
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains(r#""id":1"#), "{line}");
    // Quiet for well over the 100 ms, twice, with one request between.
    std::thread::sleep(Duration::from_millis(800));
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list"}}"#).unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains(r#""id":2"#), "{line}");
    std::thread::sleep(Duration::from_millis(800));
    drop(stdin);
    child.wait().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert_eq!(
        log.matches("gave the allocator's free memory back").count(),
        2,
        "{log}"
    );
}

#[test]
fn the_fallback_explains_itself_to_a_client_that_sends_no_progress_token() {
    let ws = workspace();
    let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"x.txt","content":"x"}}}"#;
    let seen = raw_exchange(ws.path(), vec![call.to_vec()], 7);
    let answer = seen.iter().find(|v| v["id"] == 7).unwrap();
    let t = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        t.contains("nobody could be asked")
            && t.contains("does not support elicitation")
            && t.contains("write_file = \"auto\""),
        "{answer}"
    );
    assert!(!ws.path().join("x.txt").exists());
}

/// Whether the process exists and is not a zombie waiting for its (re)parent to reap it.
fn try_read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

async fn read_pid_async(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = try_read_pid(path) {
            return pid;
        }
        assert!(Instant::now() < deadline, "the command never wrote its pid");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn allow_shell(ws: &Path) {
    std::fs::write(
        ws.join("toolhost.toml"),
        "[tool_confirmation.per_tool]\nshell = \"auto\"\n",
    )
    .unwrap();
}

#[tokio::test]
async fn notifications_cancelled_stops_the_shell_process_group() {
    let ws = workspace();
    allow_shell(ws.path());
    let service = connect(ws.path(), TestClient::default()).await;
    let args = json!({"command": "sleep 60 & echo $! > sleeper.pid; wait"});
    let Value::Object(args) = args else {
        unreachable!()
    };
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("shell").with_arguments(args),
    ));
    let handle = service
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let pid = read_pid_async(&ws.path().join("sleeper.pid")).await;
    assert!(process_alive(pid));
    handle.cancel(Some("user interrupt".into())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(8);
    while process_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!process_alive(pid), "the shell's child was stopped");
    // The session keeps working.
    assert_eq!(
        call(&service, "list_dir", json!({})).await.is_error,
        Some(false)
    );
    service.cancel().await.unwrap();
}

#[tokio::test]
async fn live_output_reaches_the_client_as_progress_notifications() {
    let ws = workspace();
    allow_shell(ws.path());
    let client = TestClient::default();
    let progress = client.progress.clone();
    let service = connect(ws.path(), client).await;
    let Value::Object(args) = json!({"command": "echo first; sleep 0.5; echo second"}) else {
        unreachable!()
    };
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("shell").with_arguments(args),
    ));
    let options =
        PeerRequestOptions::no_options().with_meta(RequestMetaObject::with_progress_token(
            ProgressToken(NumberOrString::String("live-1".into())),
        ));
    let handle = service
        .peer()
        .send_cancellable_request(request, options)
        .await
        .unwrap();
    // rmcp puts its own token in `_meta`; the server must echo whichever it got.
    let token = handle.progress_token.clone();
    let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
        panic!("not a tool result")
    };
    assert_eq!(text(&result), "first\nsecond\n[exit code: 0]");
    let deadline = Instant::now() + Duration::from_secs(5);
    while progress.lock().unwrap().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let notes = progress.lock().unwrap().clone();
    let messages: Vec<&str> = notes.iter().filter_map(|n| n.message.as_deref()).collect();
    assert_eq!(messages, ["first\n", "second\n"], "{notes:?}");
    assert!(notes.iter().all(|n| n.progress_token == token), "{notes:?}");
    assert!(notes[0].progress < notes[1].progress, "progress only grows");
    service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_calls_are_served_concurrently() {
    let ws = workspace();
    allow_shell(ws.path());
    let service = connect(ws.path(), TestClient::default()).await;
    let peer = service.peer().clone();
    let started = Instant::now();
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let peer = peer.clone();
            tokio::spawn(async move {
                let Value::Object(args) = json!({"command": format!("sleep 0.5; echo {i}")}) else {
                    unreachable!()
                };
                peer.call_tool(CallToolRequestParams::new("shell").with_arguments(args))
                    .await
                    .unwrap()
            })
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        let r = c.await.unwrap();
        assert_eq!(r.is_error, Some(false));
        assert!(text(&r).starts_with(&format!("{i}\n")), "{}", text(&r));
    }
    // 20 half-second calls under the cap of 4: 5 waves, not 20 in a row.
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    service.cancel().await.unwrap();
}

/// `toolhost serve --mcp` over `ws` on raw pipes (with `extra` arguments), already sent the
/// 2025 handshake of a client declaring `capabilities`; stdin stays open. A plain
/// `tools/call` on these pipes (no progress token) is answered without rmcp's
/// per-request service; a call from rmcp's own client always asks for progress and goes
/// through it.
fn raw_server(
    ws: &Path,
    extra: &[&std::ffi::OsStr],
    capabilities: Value,
) -> (std::process::Child, std::process::ChildStdin) {
    raw_server_from(raw_server_command(ws, extra), capabilities)
}

/// The command [`raw_server`] runs.
fn raw_server_command(ws: &Path, extra: &[&std::ffi::OsStr]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    command
        .args(["serve", "--mcp", "--workspace"])
        .arg(ws)
        .args(extra)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"));
    command
}

/// [`raw_server`] of `command`.
fn raw_server_from(
    mut command: std::process::Command,
    capabilities: Value,
) -> (std::process::Child, std::process::ChildStdin) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": capabilities,
            "clientInfo": {"name": "t", "version": "1"}}});
    for frame in [
        initialize.to_string(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
    ] {
        writeln!(stdin, "{frame}").unwrap();
    }
    (child, stdin)
}

/// [`raw_server`] with no client capabilities, already sent one `tools/call` (id 2) of
/// `tool` with `arguments`.
fn raw_server_calling(
    ws: &Path,
    extra: &[&std::ffi::OsStr],
    tool: &str,
    arguments: Value,
) -> (std::process::Child, std::process::ChildStdin) {
    use std::io::Write;
    let (child, mut stdin) = raw_server(ws, extra, json!({}));
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    writeln!(stdin, "{call}").unwrap();
    (child, stdin)
}

/// The messages a raw server writes, read on a thread of their own.
struct RawOutput {
    lines: std::sync::mpsc::Receiver<Value>,
    /// Every message taken so far.
    seen: Vec<Value>,
}

impl RawOutput {
    fn of(child: &mut std::process::Child) -> RawOutput {
        use std::io::BufRead;
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let message = serde_json::from_str::<Value>(&line)
                    .unwrap_or_else(|e| panic!("not JSON on stdout: {line:?}: {e}"));
                if tx.send(message).is_err() {
                    break;
                }
            }
        });
        RawOutput {
            lines,
            seen: Vec::new(),
        }
    }

    /// The next message that `wanted`, within 20 s.
    fn until(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        self.until_within(Duration::from_secs(20), wanted)
    }

    /// The next message that `wanted`, within `wait`.
    fn until_within(&mut self, wait: Duration, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(message) => {
                    self.seen.push(message.clone());
                    if wanted(&message) {
                        return message;
                    }
                }
                Err(e) => panic!("not seen ({e}); got {:?}", self.seen),
            }
        }
    }

    /// Every message written until the server closed its output.
    fn rest(mut self) -> Vec<Value> {
        while let Ok(message) = self.lines.recv_timeout(Duration::from_secs(20)) {
            self.seen.push(message);
        }
        self.seen
    }
}

/// The answer to request `id`.
fn answers(id: i64) -> impl Fn(&Value) -> bool {
    move |m| m["id"] == json!(id) && m.get("method").is_none()
}

#[test]
fn a_2025_session_is_answered_in_its_own_shape_without_result_type() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "abc").unwrap();
    // A plain call (the transport answers it) and one with a progress token (rmcp does).
    let (mut child, mut stdin) =
        raw_server_calling(ws.path(), &[], "read_file", json!({"path": "a.txt"}));
    {
        use std::io::Write;
        let with_progress = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "a.txt"},
                "_meta": {"progressToken": "p"}}});
        writeln!(stdin, "{with_progress}").unwrap();
    }
    let mut out = RawOutput::of(&mut child);
    for id in [2, 3] {
        let answer = out.until(answers(id));
        assert_eq!(answer["result"]["content"][0]["text"], "abc", "{answer}");
        assert!(
            answer["result"].get("resultType").is_none(),
            "a 2025 client got a 2026 field: {answer}"
        );
    }
    drop(stdin);
    let _ = child.wait();
}

#[test]
fn a_plain_call_is_cancelled_by_notifications_cancelled_gets_no_answer_and_the_session_goes_on() {
    use std::io::Write;
    let ws = workspace();
    allow_shell(ws.path());
    let (mut child, mut stdin) = raw_server_calling(
        ws.path(),
        &[],
        "shell",
        json!({"command": "sleep 60 & echo $! > sleeper.pid; wait"}),
    );
    let mut out = RawOutput::of(&mut child);
    let pid = read_pid(&ws.path().join("sleeper.pid"));
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":2,"reason":"user interrupt"}}}}"#
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(8);
    while process_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!process_alive(pid), "the shell's child was stopped");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"README.md"}}}}}}"#
    )
    .unwrap();
    let next = out.until(answers(3));
    assert_eq!(next["result"]["content"][0]["text"], "# hello\n", "{next}");
    drop(stdin);
    let _ = wait_exit(&mut child);
    let seen = out.rest();
    assert!(
        !seen.iter().any(|m| m["id"] == json!(2)),
        "a cancelled request gets no answer: {seen:?}"
    );
}

#[test]
fn a_plain_call_asks_its_user_through_elicitation_and_runs_on_the_answer() {
    use std::io::Write;
    let ws = workspace();
    let (mut child, mut stdin) = raw_server(ws.path(), &[], json!({"elicitation": {}}));
    let mut out = RawOutput::of(&mut child);
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":"allowed.txt","content":"x"}}}}}}"#
    )
    .unwrap();
    let question = out.until(|m| m["method"] == "elicitation/create");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"decision": "allow"}}});
    writeln!(stdin, "{answer}").unwrap();
    let result = out.until(answers(2));
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("allowed.txt")).unwrap(),
        "x"
    );
    drop(stdin);
    let _ = wait_exit(&mut child);
}

#[test]
fn a_call_still_running_when_the_input_ends_is_answered_before_the_server_exits() {
    let ws = workspace();
    allow_shell(ws.path());
    let (mut child, stdin) = raw_server_calling(
        ws.path(),
        &[],
        "shell",
        json!({"command": "echo $$ > shell.pid; sleep 60"}),
    );
    let out = RawOutput::of(&mut child);
    read_pid(&ws.path().join("shell.pid"));
    drop(stdin);
    assert!(wait_exit(&mut child).success());
    let seen = out.rest();
    let answer = seen
        .iter()
        .find(|m| answers(2)(m))
        .unwrap_or_else(|| panic!("no answer to the running call: {seen:?}"));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
}

#[test]
fn closing_stdin_ends_the_server_and_leaves_no_processes() {
    let ws = workspace();
    allow_shell(ws.path());
    let (mut child, stdin) = raw_server_calling(
        ws.path(),
        &[],
        "shell",
        json!({"command": "sleep 60 & echo $! > sleeper.pid; wait"}),
    );
    let pid = read_pid(&ws.path().join("sleeper.pid"));
    drop(stdin);
    let started = Instant::now();
    let status = wait_exit(&mut child);
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(!process_alive(pid), "no leftover child process");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    for line in out.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("non-protocol output on stdout: {line:?}: {e}"));
        assert_eq!(v["jsonrpc"], "2.0");
    }
}

#[test]
fn nothing_an_in_process_plugin_prints_reaches_the_protocol_stream() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[plugins.fixture-noisy]\nisolation = \"in_process\"\n",
    )
    .unwrap();
    plugin_output_stays_off_the_protocol(&ws);
}

#[test]
fn nothing_an_isolated_plugin_prints_reaches_the_protocol_stream() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[plugins.fixture-noisy]\nisolation = \"process\"\n",
    )
    .unwrap();
    plugin_output_stays_off_the_protocol(&ws);
}

/// A plugin prints a forged JSON-RPC response and garbage to stdout: the client sees only
/// protocol frames, the real result, and the printing goes to the log (stderr).
fn plugin_output_stays_off_the_protocol(ws: &tempfile::TempDir) {
    use std::io::{BufRead, BufReader};
    let plugins = ws.path().join(".plugins");
    toolhost_tests::package_library(
        &toolhost_tests::fixtures().library("noisy"),
        &plugins,
        "noisy",
    );
    let (mut child, stdin) = raw_server_calling(
        ws.path(),
        &[std::ffi::OsStr::new("--plugins"), plugins.as_os_str()],
        "noisy_print",
        json!({}),
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut frames: Vec<Value> = Vec::new();
    while frames.last().is_none_or(|f| f["id"] != 2) {
        let line = lines.next().expect("a reply to the call").unwrap();
        let frame: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("non-protocol output on stdout: {line:?}: {e}"));
        frames.push(frame);
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(rest.is_empty(), "after the last reply: {rest:?}");
    assert!(
        frames.iter().all(|f| f["id"] != 999),
        "a forged frame reached the client: {frames:?}"
    );
    let reply = frames.last().unwrap();
    assert_eq!(reply["result"]["content"][0]["text"], "the real result");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("garbage from a plugin") && stderr.contains("\"id\":999"),
        "what the plugin printed went to the log stream: {stderr}"
    );
}

#[test]
fn sigint_to_serve_stops_running_commands_and_workers_and_leaves_no_process() {
    let ws = workspace();
    allow_shell(ws.path());
    // An unsigned plugin: it runs in a worker process.
    let plugins = ws.path().join(".plugins");
    toolhost_tests::package_library(
        &toolhost_tests::fixtures().library("good"),
        &plugins,
        "good",
    );
    let (mut child, stdin) = raw_server_calling(
        ws.path(),
        &[std::ffi::OsStr::new("--plugins"), plugins.as_os_str()],
        "shell",
        json!({"command": "sleep 77 & echo $! > sleeper.pid; wait"}),
    );
    let sleeper = read_pid(&ws.path().join("sleeper.pid"));
    let children = toolhost_tests::children_of(child.id());
    assert!(
        children.len() >= 2,
        "the worker and the shell run as children: {children:?}"
    );
    toolhost_tests::send_signal(child.id(), rustix::process::Signal::INT);
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(130), "128 + SIGINT");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !process_alive(sleeper),
        "the command's process group was stopped"
    );
    for pid in children {
        assert!(!process_alive(pid), "child {pid} (a worker?) survived");
    }
    drop(stdin);
}

#[test]
fn serve_answers_requests_from_a_file_into_a_file() {
    // Neither a pipe nor a socket: the blocking-thread fallback for stdin and stdout.
    let ws = workspace();
    let requests = ws.path().join("requests.jsonl");
    std::fs::write(
        &requests,
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n"
        ),
    )
    .unwrap();
    let answers = ws.path().join("answers.jsonl");
    let status = common::command(ws.path(), &["serve", "--mcp"])
        .stdin(std::fs::File::open(&requests).unwrap())
        .stdout(std::fs::File::create(&answers).unwrap())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let text = std::fs::read_to_string(&answers).unwrap();
    let frames: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames.len(), 2, "{text}");
    assert!(
        frames[1]["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "read_file"),
        "{text}"
    );
}

/// Sends `frames` (raw lines) after the handshake to a fresh `serve --mcp` and returns every
/// response, by id, once the response to `last_id` arrived (30 s at most).
fn raw_exchange(ws: &Path, frames: Vec<Vec<u8>>, last_id: i64) -> Vec<Value> {
    use std::io::Write;
    let (mut child, mut stdin) =
        raw_server_calling(ws, &[], "read_file", json!({"path": "README.md"}));
    let writer = std::thread::spawn(move || {
        for frame in frames {
            stdin.write_all(&frame).unwrap();
            stdin.write_all(b"\n").unwrap();
        }
        stdin
    });
    let mut out = RawOutput::of(&mut child);
    out.until_within(Duration::from_secs(30), |v| v["id"] == json!(last_id));
    drop(writer.join().unwrap());
    let _ = child.kill();
    let _ = child.wait();
    out.seen
}

#[test]
fn every_bad_message_gets_a_json_rpc_error_naming_the_problem_and_the_server_keeps_serving() {
    let ws = workspace();
    let mut bad_utf8 = br#"{"jsonrpc":"2.0","id":10,"method":"ping","params":{"x":""#.to_vec();
    bad_utf8.extend([0xff, 0xc3]);
    bad_utf8.extend(br#""}}"#);
    let mut deep = br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"#.to_vec();
    deep.extend(std::iter::repeat_n(b'[', 100_000));
    deep.extend(std::iter::repeat_n(b']', 100_000));
    deep.extend(b"}}}");
    let mut huge = br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"big.txt","content":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'a', 50 << 20));
    huge.extend(br#""}}}"#);
    let frames = vec![
        bad_utf8,
        deep,
        huge,
        b"this is not json".to_vec(),
        br#"{"jsonrpc":"2.0","id":13,"method":"tools/call"}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"read_file","arguments":[1]}}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"README.md"}}}"#.to_vec(),
    ];
    let seen = raw_exchange(ws.path(), frames, 15);
    let error = |id: Value| -> (i64, String) {
        let v = seen
            .iter()
            .find(|v| v["id"] == id && v.get("error").is_some())
            .unwrap_or_else(|| panic!("no error for id {id}: {seen:?}"));
        (
            v["error"]["code"].as_i64().unwrap(),
            v["error"]["message"].as_str().unwrap().to_string(),
        )
    };
    let (code, message) = error(json!(10));
    assert_eq!(code, -32700, "{message}");
    assert!(message.contains("UTF-8"), "{message}");
    let (code, message) = error(json!(11));
    assert_eq!(code, -32700, "{message}");
    assert!(message.contains("128 levels"), "{message}");
    let (code, message) = error(json!(12));
    assert_eq!(code, -32600, "{message}");
    assert!(
        message.contains("16777216") && message.contains("max_message_bytes"),
        "{message}"
    );
    let (code, message) = error(Value::Null);
    assert_eq!(code, -32700, "{message}");
    let (code, message) = error(json!(13));
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("params"), "{message}");
    let (code, message) = error(json!(14));
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("arguments"), "{message}");
    let ok = seen.iter().find(|v| v["id"] == json!(15)).unwrap();
    assert_eq!(ok["result"]["content"][0]["text"], "# hello\n", "{ok}");
    assert!(!ws.path().join("big.txt").exists());
}

#[test]
fn an_unknown_method_or_prompt_is_answered_with_what_was_not_found() {
    let ws = workspace();
    let frames = vec![
        br#"{"jsonrpc":"2.0","id":20,"method":"tools/frobnicate","params":{}}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":21,"method":"prompts/get","params":{"name":"review"}}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":22,"method":"logging/setLevel","params":{"level":"debug"}}"#
            .to_vec(),
        br#"{"jsonrpc":"2.0","id":23,"method":"ping"}"#.to_vec(),
    ];
    let seen = raw_exchange(ws.path(), frames, 23);
    let error = |id: i64| -> &Value {
        seen.iter()
            .find(|v| v["id"] == json!(id))
            .map(|v| &v["error"])
            .unwrap_or_else(|| panic!("no answer for id {id}: {seen:?}"))
    };
    let unknown = error(20);
    assert_eq!(unknown["code"], -32601, "{unknown}");
    assert_eq!(unknown["data"]["method"], "tools/frobnicate", "{unknown}");
    let message = unknown["message"].as_str().unwrap();
    assert!(
        message.starts_with("Method not found: 'tools/frobnicate'")
            && message.contains("tools/call"),
        "{message}"
    );
    let prompt = error(21);
    assert_eq!(prompt["code"], -32602, "{prompt}");
    assert_eq!(prompt["data"]["name"], "review", "{prompt}");
    assert!(
        prompt["message"]
            .as_str()
            .unwrap()
            .contains("Prompt not found: 'review'"),
        "{prompt}"
    );
    // logging/setLevel is answered (mounted servers' log messages pass through).
    for id in [22, 23] {
        assert!(
            seen.iter()
                .any(|v| v["id"] == json!(id) && v["result"] == json!({})),
            "{id}: {seen:?}"
        );
    }
}

#[test]
fn resource_subscriptions_are_method_not_found_when_no_mounted_server_offers_them() {
    let ws = workspace();
    let frames = vec![
        br#"{"jsonrpc":"2.0","id":30,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#
            .to_vec(),
        br#"{"jsonrpc":"2.0","id":31,"method":"resources/unsubscribe","params":{"uri":"file:///a"}}"#
            .to_vec(),
    ];
    let seen = raw_exchange(ws.path(), frames, 31);
    for (id, method) in [(30, "resources/subscribe"), (31, "resources/unsubscribe")] {
        let answer = seen
            .iter()
            .find(|v| v["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer for id {id}: {seen:?}"));
        assert_eq!(
            answer["error"],
            json!({
                "code": -32601,
                "message": format!("Method not found: '{method}'; toolhost passes resource subscriptions through to the MCP servers it mounts, and none of them offers subscriptions"),
                "data": {"method": method},
            }),
            "{answer}"
        );
    }
}

#[test]
fn a_request_reusing_the_id_of_one_in_flight_is_refused_and_both_are_answered() {
    use std::io::{BufRead, Write};
    let ws = workspace();
    allow_shell(ws.path());
    // Request 2, the shell command, is in flight while the same id comes again.
    let (mut child, mut stdin) = raw_server_calling(
        ws.path(),
        &[],
        "shell",
        json!({"command": "sleep 1; echo first"}),
    );
    for frame in [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"README.md"}}}"#,
        r#"{"jsonrpc":"2.0","id":"2","method":"ping"}"#,
    ] {
        writeln!(stdin, "{frame}").unwrap();
    }
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen: Vec<Value> = Vec::new();
    while !seen
        .iter()
        .any(|v| v["id"] == json!(2) && v.get("result").is_some())
    {
        let line = lines.next().expect("the server ended early").unwrap();
        seen.push(serde_json::from_str(&line).unwrap());
    }
    // Free again once answered: the same id is served.
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"ping"}}"#).unwrap();
    let again: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    drop(stdin);
    let _ = child.wait();

    let refused = seen
        .iter()
        .find(|v| v["id"] == json!(2) && v.get("error").is_some())
        .unwrap_or_else(|| panic!("the second id 2 was not answered: {seen:?}"));
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("id 2 is taken by a request still in flight"),
        "{refused}"
    );
    let first = seen
        .iter()
        .find(|v| v["id"] == json!(2) && v.get("result").is_some())
        .unwrap();
    assert_eq!(
        first["result"]["content"][0]["text"], "first\n[exit code: 0]",
        "{first}"
    );
    assert!(
        seen.iter()
            .any(|v| v["id"] == json!("2") && v["result"] == json!({})),
        "the string id \"2\" is another id: {seen:?}"
    );
    assert_eq!(again, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
}

/// The `notifications/message` lines `serve --mcp` sends a 2025 client that set the level
/// `warning` and then sent a line that is not JSON (which toolhost refuses, logging a
/// warning), within `wait`.
fn log_messages_after_a_refused_line(ws: &Path, wait: Duration) -> Vec<Value> {
    use std::io::{BufRead, Write};
    let (mut child, mut stdin) =
        raw_server_calling(ws, &[], "read_file", json!({"path": "README.md"}));
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":20,"method":"logging/setLevel","params":{{"level":"warning"}}}}"#
    )
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    // The level is set first: then the refused line.
    while rx.recv_timeout(Duration::from_secs(10)).unwrap()["id"] != 20 {}
    writeln!(stdin, "{{not json").unwrap();
    let deadline = Instant::now() + wait;
    let mut messages = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(v) if v["method"] == "notifications/message" => {
                messages.push(v["params"].clone());
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    messages
}

#[test]
fn toolhosts_own_warnings_reach_a_client_that_set_a_level_only_with_client_logs_on() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[mcp]\nclient_logs = true\n",
    )
    .unwrap();
    let got = log_messages_after_a_refused_line(ws.path(), Duration::from_secs(10));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["logger"], "toolhost");
    assert_eq!(got[0]["level"], "warning");
    assert!(
        got[0]["data"]
            .as_str()
            .unwrap()
            .contains("refused a message"),
        "{got:?}"
    );
    // Off by default: the log names what every client of the server did.
    let ws = workspace();
    assert_eq!(
        log_messages_after_a_refused_line(ws.path(), Duration::from_secs(2)),
        Vec::<Value>::new()
    );
}
