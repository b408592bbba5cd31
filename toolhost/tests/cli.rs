//! The `toolhost` binary, driven as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn toolhost(workspace: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(args)
        .current_dir(workspace)
        .env("XDG_CONFIG_HOME", workspace.join(".no-user-config"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn call_prints_result_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# Project Foo\n").unwrap();
    let out = toolhost(
        dir.path(),
        &["call", "read_file", "--input", r#"{"path": "README.md"}"#],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "# Project Foo\n\n");
}

#[test]
fn call_json_prints_the_tool_result_block() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolhost(
        dir.path(),
        &[
            "call",
            "read_file",
            "--input",
            r#"{"path": "../x"}"#,
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let block: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(block["type"], "tool_result");
    assert_eq!(block["is_error"], true);
    assert_eq!(block["error_class"], "permission_denied");
    assert_eq!(
        block["content"][0]["text"],
        "Path '../x' escapes workspace boundary"
    );
}

#[test]
fn write_without_terminal_is_denied_with_a_hint_and_exits_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolhost(
        dir.path(),
        &[
            "call",
            "write_file",
            "--input",
            r#"{"path": "a.txt", "content": "x"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("--yes") && err.contains("[tool_confirmation.per_tool]"),
        "{err}"
    );
    assert!(!dir.path().join("a.txt").exists());
}

#[test]
fn yes_allows_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolhost(
        dir.path(),
        &[
            "call",
            "write_file",
            "--yes",
            "--input",
            r#"{"path": "a.txt", "content": "x"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "x"
    );
}

#[test]
fn policy_deny_wins_over_yes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.toml"),
        "[tool_confirmation.per_tool]\nshell = \"deny\"\n",
    )
    .unwrap();
    let out = toolhost(
        dir.path(),
        &[
            "call",
            "shell",
            "--yes",
            "--input",
            r#"{"command": "touch pwned"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("tool_confirmation.per_tool.shell"),
        "{}",
        text(&out.stdout)
    );
    assert!(!dir.path().join("pwned").exists());
}

#[test]
fn config_error_names_file_and_key_and_exits_two() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("custom.toml");
    std::fs::write(&cfg, "[timeouts]\nexecute_secs = \"long\"\n").unwrap();
    let out = toolhost(dir.path(), &["--config", cfg.to_str().unwrap(), "list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("custom.toml") && err.contains("timeouts.execute_secs"),
        "{err}"
    );
}

#[test]
fn bad_usage_exits_two() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        toolhost(dir.path(), &["call", "read_file", "--input", "{not json"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        toolhost(dir.path(), &["call", "read_file", "--input", "[1]"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(toolhost(dir.path(), &["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        toolhost(dir.path(), &["list", "--workspace", "/no/such/dir"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn list_json_shows_every_builtin_with_its_side_effects() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolhost(dir.path(), &["list", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let pairs: Vec<(String, String)> = tools
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["side_effects"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected = [
        ("list_dir", "read"),
        ("patch_file", "write"),
        ("read_file", "read"),
        ("shell", "execute"),
        ("write_file", "write"),
    ];
    assert_eq!(pairs, expected.map(|(a, b)| (a.to_string(), b.to_string())));
    assert!(
        tools
            .iter()
            .all(|t| t["source"] == "builtin" && t["input_schema"]["type"] == "object")
    );
}
