//! What toolhost says of its sandbox, and what it does where the sandbox cannot be
//! enforced: `toolhost sandbox` names each mechanism and what confines each tool; where
//! Landlock is missing (here: hidden by a seccomp filter, as a container's policy hides
//! it), a command, an isolated plugin and an MCP server that need a sandbox are refused,
//! naming what is missing and the one setting that accepts the risk, and
//! `allow_unsandboxed` runs them unconfined and says so everywhere.
#![cfg(target_os = "linux")]
#![cfg(test)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use toolhost_tests::{fixtures, package_library, without_landlock};

/// A workspace with the hostile plugin (every tool declares `none`; unsigned, so isolated)
/// under `.plugins`, and `config` as its toolhost.toml.
fn workspace(config: &str) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    package_library(
        &fixtures().library("hostile"),
        &ws.path().join(".plugins"),
        "hostile",
    );
    std::fs::write(
        ws.path().join("toolhost.toml"),
        format!("plugin_dirs = [\".plugins\"]\n{config}"),
    )
    .unwrap();
    ws
}

fn command(ws: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    c.args(args)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"))
        .stdin(Stdio::null());
    c
}

fn run(ws: &Path, args: &[&str]) -> Output {
    command(ws, args).output().unwrap()
}

/// `toolhost ARGS` where Landlock is hidden from it and everything it starts.
fn run_without_landlock(ws: &Path, args: &[&str]) -> Output {
    let mut c = command(ws, args);
    without_landlock(&mut c);
    c.output().unwrap()
}

/// The report's line for `tool`.
fn line_of<'a>(report: &'a str, tool: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{tool} ")))
        .unwrap_or_else(|| panic!("no line for {tool} in:\n{report}"))
}

#[test]
fn the_report_names_each_mechanism_and_what_confines_each_tool() {
    let ws = workspace("");
    let out = run(ws.path(), &["sandbox"]);
    let report = toolhost_tests::text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{report}{}",
        toolhost_tests::text(&out.stderr)
    );
    for mechanism in ["landlock", "seccomp", "no_new_privs", "limits"] {
        assert!(
            report
                .lines()
                .any(|l| l.trim_start().starts_with(mechanism)),
            "{mechanism} missing:\n{report}"
        );
    }
    assert!(
        line_of(&report, "landlock").contains("enforced"),
        "{report}"
    );
    let shell = line_of(&report, "shell");
    assert!(
        shell.contains("its programs: workspace-write") && shell.contains("Landlock ABI"),
        "{shell}"
    );
    let hostile = line_of(&report, "hostile_read_file");
    assert!(
        hostile.contains("plugin worker, may only use its context")
            && hostile.contains("enforced (Landlock ABI"),
        "{hostile}"
    );
    assert!(
        line_of(&report, "read_file").contains("files only through the workspace API"),
        "{report}"
    );
}

#[test]
fn the_report_as_json_gives_each_tool_its_placement() {
    let ws = workspace("[sandbox.per_tool]\nshell = \"read-only\"\n");
    let out = run(ws.path(), &["sandbox", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tool = |name: &str| {
        report["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {report}"))["sandbox"]
            .clone()
    };
    let hostile = tool("hostile_ok");
    assert_eq!(hostile["runs"], "worker");
    assert_eq!(hostile["grant"], "context only");
    assert_eq!(hostile["state"], "enforced");
    let shell = tool("shell");
    assert_eq!(shell["runs"], "in_process");
    assert_eq!(shell["programs"]["mode"], "read-only");
    assert_eq!(report["mechanisms"][0]["name"], "landlock");
    assert_eq!(report["mechanisms"][0]["state"], "enforced");
}

#[test]
fn list_json_says_what_confines_each_tool() {
    let ws = workspace("");
    let out = run(ws.path(), &["list", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hostile = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "hostile_spawn")
        .unwrap();
    assert_eq!(hostile["sandbox"]["runs"], "worker", "{hostile}");
}

#[test]
fn where_landlock_is_missing_the_report_says_so_and_exits_one() {
    let ws = tempfile::tempdir().unwrap();
    let out = run_without_landlock(ws.path(), &["sandbox"]);
    let report = toolhost_tests::text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{report}{}",
        toolhost_tests::text(&out.stderr)
    );
    let landlock = line_of(&report, "landlock");
    assert!(
        landlock.contains("unavailable") && landlock.contains("seccomp policy hides it"),
        "{landlock}"
    );
    let shell = line_of(&report, "shell");
    assert!(
        shell.contains("refused") && shell.contains("allow_unsandboxed"),
        "{shell}"
    );
}

#[test]
fn where_landlock_is_missing_a_command_is_refused_naming_what_is_missing_and_the_setting() {
    let ws = workspace("");
    let out = run_without_landlock(
        ws.path(),
        &[
            "call",
            "shell",
            "--yes",
            "--input",
            r#"{"command": "echo ran > ran.txt"}"#,
        ],
    );
    let result = toolhost_tests::text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{result}");
    assert!(
        result.contains("the command was not run")
            && result.contains("Landlock")
            && result.contains("allow_unsandboxed = true"),
        "{result}"
    );
    assert!(!ws.path().join("ran.txt").exists(), "the command ran");
}

#[test]
fn allow_unsandboxed_runs_the_command_unconfined_and_says_so() {
    let ws = workspace("[sandbox]\nallow_unsandboxed = true\n");
    let out = run_without_landlock(
        ws.path(),
        &[
            "call",
            "shell",
            "--yes",
            "--json",
            "--input",
            r#"{"command": "echo ran > ran.txt"}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert!(ws.path().join("ran.txt").exists());
    let block: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sandbox = block["metadata"]["sandbox"].as_str().unwrap_or_default();
    assert!(sandbox.starts_with("unsandboxed ("), "{block}");
    assert!(
        toolhost_tests::text(&out.stderr).contains("UNSANDBOXED"),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
}

#[test]
fn where_landlock_is_missing_an_isolated_plugin_is_refused_before_it_runs() {
    let ws = workspace("");
    let out = run_without_landlock(ws.path(), &["plugins"]);
    let report = toolhost_tests::text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let refused = report
        .lines()
        .find(|l| l.starts_with("refused"))
        .unwrap_or_else(|| panic!("nothing refused:\n{report}"));
    assert!(
        refused.contains("cannot be enforced here: missing Landlock")
            && refused.contains("allow_unsandboxed = true` under [plugins.fixture-hostile]"),
        "{refused}"
    );
}

#[test]
fn a_plugin_allowed_unsandboxed_loads_and_every_report_says_so() {
    let ws = workspace("[plugins.fixture-hostile]\nallow_unsandboxed = true\n");
    let out = run_without_landlock(ws.path(), &["plugins"]);
    let report = toolhost_tests::text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("UNSANDBOXED (context only)"), "{report}");
    let out = run_without_landlock(ws.path(), &["sandbox"]);
    let report = toolhost_tests::text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        line_of(&report, "hostile_ok").contains("UNSANDBOXED: allow_unsandboxed = true; the sandbox cannot be enforced here: missing Landlock"),
        "{report}"
    );
}

#[test]
fn where_landlock_is_missing_a_stdio_mcp_server_is_not_started() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\n",
            fixtures().mcp_server().display()
        ),
    )
    .unwrap();
    let out = run_without_landlock(ws.path(), &["plugins"]);
    let report = toolhost_tests::text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("refused  MCP server 'fixture'")
            && report.contains("was not started")
            && report.contains("allow_unsandboxed = true"),
        "{report}"
    );
}

#[test]
fn a_component_s_tools_are_reported_in_the_webassembly_sandbox_with_their_hosts() {
    let Some(components) = toolhost_tests::peer("TOOLHOST_TEST_COMPONENTS") else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    toolhost_tests::copy_dir(
        &components.join("packages/fetch"),
        &ws.path().join(".plugins/fetch"),
    );
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "plugin_dirs = [\".plugins\"]\n[plugins.fetch]\nhttp_hosts = [\"api.example.com\"]\n",
    )
    .unwrap();
    let out = run(ws.path(), &["sandbox"]);
    let report = toolhost_tests::text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{report}{}",
        toolhost_tests::text(&out.stderr)
    );
    let line = line_of(&report, "http_get");
    assert!(
        line.ends_with(
            "WebAssembly sandbox; files only through the workspace API (network); HTTP only to api.example.com"
        ),
        "{line}"
    );
    assert!(
        line_of(&report, "http_get_undeclared").ends_with("(none); no network"),
        "{report}"
    );
}
