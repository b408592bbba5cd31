//! `[sandbox.per_tool] shell = "remote"`: the spec's `Remote` grant. Two local instances:
//! the front (A) validates, asks and records the call; the runner (B), another
//! `toolhost serve --http` behind a bearer token, runs it in its own workspace. Output,
//! errors and cancellation come back.
#![cfg(test)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

mod common;
use common::raw_http::{post_stateless, result_text, stateless};
use common::{Server, command, start, workspace};

const TOKEN: &str = "runner-token-0123456789abcdef";

/// The runner: its own workspace, a token, and a policy that lets its caller's shell
/// calls run (they were confirmed at the front).
fn runner(ws: &Path) -> Server {
    std::fs::write(
        ws.join("toolhost.toml"),
        "[tool_confirmation.per_tool]\nshell = \"auto\"\n",
    )
    .unwrap();
    let mut cmd = command(ws, &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("TOOLHOST_HTTP_TOKEN", TOKEN);
    start(cmd)
}

/// The front, routing `shell` to the runner at `url`; `extra` is more of its config.
fn front(ws: &Path, url: &str, extra: &str) -> Server {
    std::fs::write(
        ws.join("toolhost.toml"),
        format!(
            "[sandbox.per_tool]\nshell = \"remote\"\n[remote]\nurl = \"{url}\"\nbearer_token_env = \"RUNNER_TOKEN\"\n{extra}"
        ),
    )
    .unwrap();
    let mut cmd = command(ws, &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("RUNNER_TOKEN", TOKEN);
    start(cmd)
}

fn shell(id: i64, command: &str, extra: Value) -> Value {
    let mut params = json!({"name": "shell", "arguments": {"command": command}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    stateless(id, "tools/call", params, true)
}

/// A shell call at `server`, confirmed there: its result.
fn confirmed_shell(server: &Server, command: &str) -> Value {
    let round = post_stateless(&server.addr, &shell(1, command, json!({}))).json();
    assert_eq!(round["result"]["resultType"], "input_required", "{round}");
    let state = round["result"]["requestState"].clone();
    let retry = shell(
        2,
        command,
        json!({
            "inputResponses": {"confirm": {"action": "accept", "content": {"decision": "allow"}}},
            "requestState": state,
        }),
    );
    post_stateless(&server.addr, &retry).json()["result"].clone()
}

#[test]
fn a_routed_call_is_confirmed_here_and_runs_there_its_output_coming_back() {
    let (ws_a, ws_b) = (workspace(), workspace());
    let b = runner(ws_b.path());
    let a = front(ws_a.path(), &format!("http://{}/mcp", b.addr), "");
    let result = confirmed_shell(&a, "echo ran > where.txt; echo hello from the runner");
    assert_eq!(result["isError"], false, "{result}");
    assert!(
        result_text(&result).contains("hello from the runner"),
        "{result}"
    );
    assert!(
        ws_b.path().join("where.txt").exists(),
        "it did not run at the runner"
    );
    assert!(
        !ws_a.path().join("where.txt").exists(),
        "it ran at the front"
    );
    // A failure there is the call's failure here.
    let failed = confirmed_shell(&a, "echo broken >&2; exit 3");
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(result_text(&failed).contains("broken"), "{failed}");
    // The listing says where it runs.
    let out = command(ws_a.path(), &["list", "--json"])
        .env("RUNNER_TOKEN", TOKEN)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains(&format!("http://{}/mcp", b.addr)),
        "{listed}"
    );
}

#[test]
fn a_routed_call_over_its_time_is_cancelled_there_too() {
    // Stopped while its request is open (0.5 s), and once the runner made it a task (2 s:
    // a call still running after 1 s becomes one).
    for limit in ["0.5", "2"] {
        let (ws_a, ws_b) = (workspace(), workspace());
        let b = runner(ws_b.path());
        let a = front(
            ws_a.path(),
            &format!("http://{}/mcp", b.addr),
            &format!("[timeouts.per_tool]\nshell = {limit}\n"),
        );
        let result = confirmed_shell(&a, "sleep 4; echo late > late.txt");
        assert_eq!(result["isError"], true, "{limit}: {result}");
        assert!(
            result_text(&result).contains("time limit"),
            "{limit}: {result}"
        );
        std::thread::sleep(Duration::from_secs(5));
        assert!(
            !ws_b.path().join("late.txt").exists(),
            "{limit}: the command went on at the runner after the call was cancelled"
        );
    }
}

#[test]
fn a_runner_that_cannot_be_reached_or_refuses_the_token_fails_the_call_saying_so() {
    let (ws_a, ws_b) = (workspace(), workspace());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let a = front(ws_a.path(), &url, "");
    let result = confirmed_shell(&a, "echo never > never.txt");
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result_text(&result).contains("cannot be reached") && result_text(&result).contains(&url),
        "{result}"
    );
    // A runner up, but the token wrong.
    let b = runner(ws_b.path());
    std::fs::write(
        ws_a.path().join("toolhost.toml"),
        format!(
            "[sandbox.per_tool]\nshell = \"remote\"\n[remote]\nurl = \"http://{}/mcp\"\nbearer_token_env = \"RUNNER_TOKEN\"\n",
            b.addr
        ),
    )
    .unwrap();
    let mut cmd = command(ws_a.path(), &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("RUNNER_TOKEN", "a-wrong-token-of-enough-length");
    let a = start(cmd);
    let result = confirmed_shell(&a, "echo never > never.txt");
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result_text(&result).contains("cannot be reached"),
        "{result}"
    );
    assert!(!ws_b.path().join("never.txt").exists());
}

#[test]
fn a_runner_that_comes_up_later_is_reached_then() {
    let (ws_a, ws_b) = (workspace(), workspace());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let a = front(ws_a.path(), &format!("http://127.0.0.1:{port}/mcp"), "");
    let first = confirmed_shell(&a, "echo early");
    assert!(result_text(&first).contains("cannot be reached"), "{first}");
    std::fs::write(
        ws_b.path().join("toolhost.toml"),
        "[tool_confirmation.per_tool]\nshell = \"auto\"\n",
    )
    .unwrap();
    let mut cmd = command(
        ws_b.path(),
        &["serve", "--http", &format!("127.0.0.1:{port}")],
    );
    cmd.env("TOOLHOST_HTTP_TOKEN", TOKEN);
    let _b = start(cmd);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = confirmed_shell(&a, "echo reached");
        if r["isError"] == false {
            assert!(result_text(&r).contains("reached"), "{r}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never reached: {r}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn remote_without_a_remote_table_stops_the_program_naming_the_key() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[sandbox.per_tool]\nshell = \"remote\"\n",
    )
    .unwrap();
    let out = command(ws.path(), &["list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("sandbox.per_tool.shell") && said.contains("[remote]"),
        "{said}"
    );
}
