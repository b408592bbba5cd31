//! The `toolhost` binary, driven as a user would.
#![cfg(test)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// `program` run in `workspace`, away from the user's own config, cache and state.
fn in_workspace(program: &str, workspace: &Path) -> Command {
    let mut command = Command::new(program);
    command
        .current_dir(workspace)
        .env("XDG_CONFIG_HOME", workspace.join(".no-user-config"))
        .env("XDG_CACHE_HOME", workspace.join(".cache"))
        .env("XDG_STATE_HOME", workspace.join(".state"));
    command
}

/// `toolhost` with `args` in `workspace`, away from the user's own config, cache and state.
fn command(workspace: &Path, args: &[&str]) -> Command {
    let mut command = in_workspace(env!("CARGO_BIN_EXE_toolhost"), workspace);
    command.args(args);
    command
}

/// The shell command line `shell` run in `workspace` under a pseudo-terminal (util-linux
/// `script`), away from the user's own config, cache and state.
fn under_a_terminal(workspace: &Path, shell: &str) -> Command {
    let mut command = in_workspace("script", workspace);
    command.args(["-qec", shell, "/dev/null"]);
    command
}

fn toolhost(workspace: &Path, args: &[&str]) -> Output {
    command(workspace, args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn call_prints_result_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# Project Foo\n").unwrap();
    let out = toolhost(
        dir.path(),
        &["call", "read_file", "--input", r#"{"path": "README.md"}"#],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    // The file as it is: no blank line added after its last newline.
    assert_eq!(toolhost_tests::text(&out.stdout), "# Project Foo\n");
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
    // The hint is in the result the model reads, and says nobody was asked.
    let result = toolhost_tests::text(&out.stdout);
    assert!(
        result.contains("no terminal to ask")
            && result.contains("--yes")
            && result.contains("write_file = \"auto\"")
            && result.contains("[tool_confirmation.per_tool]"),
        "{result}"
    );
    assert!(!result.contains("User denied"), "{result}");
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
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "x"
    );
}

/// `toolhost` with `stdin` piped in.
fn toolhost_reading(workspace: &Path, args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = command(workspace, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn input_dash_reads_the_input_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let content = "line\n".repeat(50_000);
    let input = serde_json::json!({"path": "big.txt", "content": content}).to_string();
    let args = ["call", "write_file", "--yes", "--input", "-"];
    let out = toolhost_reading(dir.path(), &args, input.as_bytes());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("big.txt")).unwrap(),
        content
    );
    let bad = toolhost_reading(dir.path(), &args, b"{not json");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        toolhost_tests::text(&bad.stderr).contains("--input (read from stdin) is not valid JSON"),
        "{}",
        toolhost_tests::text(&bad.stderr)
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
        toolhost_tests::text(&out.stdout).contains("tool_confirmation.per_tool.shell"),
        "{}",
        toolhost_tests::text(&out.stdout)
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
    let err = toolhost_tests::text(&out.stderr);
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

fn plugin_dir_with_good_and_tampered(root: &Path) -> std::path::PathBuf {
    let plugins = root.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let lib = toolhost_tests::fixtures().library("good");
    toolhost_tests::package_library(&lib, &plugins, "good");
    let bad = toolhost_tests::package_library(&lib, &plugins, "tampered");
    let manifest = bad.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let sha_line = text
        .lines()
        .find(|l| l.starts_with("sha256"))
        .unwrap()
        .to_string();
    std::fs::write(
        &manifest,
        text.replace(&sha_line, &format!("sha256 = \"{}\"", "0".repeat(64))),
    )
    .unwrap();
    plugins
}

#[test]
fn plugins_command_reports_each_package_and_exits_one_when_any_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with_good_and_tampered(dir.path());
    let out = toolhost(
        dir.path(),
        &["plugins", "--plugins", plugins.to_str().unwrap()],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let report = toolhost_tests::text(&out.stdout);
    assert!(
        report.contains("loaded   fixture-good 0.1.0") && report.contains("echo_upper (none)"),
        "{report}"
    );
    assert!(
        report.contains("refused") && report.contains("checksum mismatch"),
        "{report}"
    );
    assert!(
        report.contains("[process]: echo_upper"),
        "an unsigned package runs isolated: {report}"
    );
    assert!(
        report.contains("worker   fixture-good: running as pid") && report.contains("restarts: 0"),
        "{report}"
    );
}

#[test]
fn require_signatures_in_the_config_refuses_unsigned_packages() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with_good_and_tampered(dir.path());
    std::fs::write(
        dir.path().join("toolhost.toml"),
        "require_signatures = true\n",
    )
    .unwrap();
    let out = toolhost(
        dir.path(),
        &["plugins", "--plugins", plugins.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let report = toolhost_tests::text(&out.stdout);
    assert!(
        report.contains("plugin 'fixture-good' is not signed and require_signatures = true"),
        "{report}"
    );
}

#[test]
fn call_dispatches_a_plugin_tool_from_a_plugins_flag() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with_good_and_tampered(dir.path());
    let out = toolhost(
        dir.path(),
        &[
            "call",
            "echo_upper",
            "--plugins",
            plugins.to_str().unwrap(),
            "--input",
            r#"{"text": "hi"}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert_eq!(toolhost_tests::text(&out.stdout), "HI\n");
    assert!(
        toolhost_tests::text(&out.stderr).contains("plugin refused"),
        "refusals are warned about: {}",
        toolhost_tests::text(&out.stderr)
    );
}

/// Ordinary runs over an unsigned plugin (isolated, in its sandbox, as every new author's
/// first plugin runs) print no warning: the worker the host stops as it exits is not a
/// crash. Many runs, since the false report came from a race (a third to a half of runs).
#[test]
fn ordinary_runs_over_an_isolated_plugin_warn_of_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    toolhost_tests::package_library(
        &toolhost_tests::fixtures().library("good"),
        &plugins,
        "good",
    );
    let plugins = plugins.to_str().unwrap();
    let runs: [&[&str]; 3] = [
        &["plugins", "--plugins", plugins],
        &["list", "--plugins", plugins],
        &[
            "call",
            "echo_upper",
            "--plugins",
            plugins,
            "--input",
            r#"{"text": "hi"}"#,
        ],
    ];
    for _ in 0..8 {
        for args in runs {
            let out = toolhost(dir.path(), args);
            let log = toolhost_tests::text(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {log}");
            assert!(
                !log.contains("WARN") && !log.contains("ERROR") && !log.contains("crashed"),
                "{args:?}: {log}"
            );
        }
    }
}

#[test]
fn plugin_dirs_in_the_config_are_relative_to_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    plugin_dir_with_good_and_tampered(dir.path());
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("toolhost.toml"),
        "plugin_dirs = [\"../plugins\"]\n",
    )
    .unwrap();
    let out = toolhost(dir.path(), &["--config", "conf/toolhost.toml", "list"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let listing = toolhost_tests::text(&out.stdout);
    assert!(
        listing.contains("echo_upper") && listing.contains("plugin:fixture-good"),
        "{listing}"
    );
}

#[test]
fn manifest_renders_every_tool_as_json_or_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let json_out = toolhost(dir.path(), &["manifest", "--format", "json"]);
    assert_eq!(json_out.status.code(), Some(0));
    let tools: Vec<Value> = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(tools.len(), 5);
    for t in &tools {
        for key in [
            "name",
            "source",
            "side_effects",
            "description",
            "input_schema",
        ] {
            assert!(t.get(key).is_some(), "{key} missing in {t}");
        }
    }
    let md = toolhost(dir.path(), &["manifest", "--format", "markdown"]);
    let text = toolhost_tests::text(&md.stdout);
    assert!(text.starts_with("# Tools\n"), "{text}");
    for name in ["read_file", "write_file", "patch_file", "list_dir", "shell"] {
        assert!(
            text.contains(&format!("\n## {name}\n")),
            "{name} section missing"
        );
    }
    assert!(text.contains("```json\n{"), "schemas are rendered");
    assert_eq!(
        toolhost(dir.path(), &["manifest", "--format", "yaml"])
            .status
            .code(),
        Some(2)
    );
}

/// Runs toolhost under a pseudo-terminal (util-linux `script`), answering `answer`.
fn toolhost_on_a_terminal(workspace: &Path, args: &str, answer: &str) -> Output {
    use std::io::Write;
    let command = format!("{} {args}", env!("CARGO_BIN_EXE_toolhost"));
    let mut child = under_a_terminal(workspace, &command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answer.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn prompt_on_a_terminal_asks_and_follows_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let yes = toolhost_on_a_terminal(
        dir.path(),
        r#"call write_file --input '{"path": "yes.txt", "content": "x"}'"#,
        "y\n",
    );
    let shown = toolhost_tests::text(&yes.stdout);
    assert!(
        shown.contains("'write_file' (write) asks to run") && shown.contains("will create yes.txt"),
        "{shown}"
    );
    assert!(shown.contains("[y]es / [n]o / [a]lways"), "{shown}");
    assert!(dir.path().join("yes.txt").exists());
    let no = toolhost_on_a_terminal(
        dir.path(),
        r#"call write_file --input '{"path": "no.txt", "content": "x"}'"#,
        "n\n",
    );
    assert!(
        toolhost_tests::text(&no.stdout).contains("User denied this operation."),
        "{}",
        toolhost_tests::text(&no.stdout)
    );
    assert!(!dir.path().join("no.txt").exists());
}

#[test]
fn a_plugin_directory_named_twice_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("plugins/bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("plugin.toml"), "name = \"bad\"\n").unwrap();
    std::fs::write(
        dir.path().join("toolhost.toml"),
        "plugin_dirs = [\"plugins\"]\n",
    )
    .unwrap();
    let plugins = dir.path().join("plugins");
    let out = toolhost(
        dir.path(),
        &[
            "--plugins",
            plugins.to_str().unwrap(),
            "call",
            "list_dir",
            "--input",
            "{}",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let stderr = toolhost_tests::text(&out.stderr);
    assert_eq!(stderr.matches("plugin refused").count(), 1, "{stderr}");
    assert!(stderr.contains("missing field `version`"), "{stderr}");
}

#[test]
fn call_json_shows_what_the_tool_did() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolhost(
        dir.path(),
        &[
            "call",
            "write_file",
            "--yes",
            "--json",
            "--input",
            r#"{"path": "a.txt", "content": "x"}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let block: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(block["files_modified"], serde_json::json!(["a.txt"]));
}

#[test]
fn sigterm_to_call_stops_the_command_and_leaves_no_process() {
    use rustix::process::Signal;
    let dir = tempfile::tempdir().unwrap();
    let mut child = command(
        dir.path(),
        &[
            "call",
            "shell",
            "--yes",
            "--input",
            r#"{"command": "sleep 77 & echo $! > sleeper.pid; wait"}"#,
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let sleeper = toolhost_tests::read_pid(&dir.path().join("sleeper.pid"));
    assert!(toolhost_tests::process_alive(sleeper));
    toolhost_tests::send_signal(child.id(), Signal::TERM);
    let status = toolhost_tests::wait_exit(&mut child);
    assert_eq!(status.code(), Some(143), "128 + SIGTERM");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !toolhost_tests::process_alive(sleeper),
        "the command's process group was stopped"
    );
}

/// `serve --mcp` fed one line that is not JSON and then end of input: it logs a warning.
fn serve_refusing_garbage_on_a_terminal(workspace: &Path, no_color: bool) -> String {
    let command = format!(
        "echo garbage | {} serve --mcp >/dev/null",
        env!("CARGO_BIN_EXE_toolhost")
    );
    let mut script = under_a_terminal(workspace, &command);
    script.env_remove("NO_COLOR").stdin(Stdio::null());
    if no_color {
        script.env("NO_COLOR", "1");
    }
    toolhost_tests::text(&script.output().unwrap().stdout)
}

#[test]
fn logs_are_coloured_only_on_a_terminal_without_no_color() {
    let dir = tempfile::tempdir().unwrap();
    let mut piped = command(dir.path(), &["serve", "--mcp"])
        .env_remove("NO_COLOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = piped.stdin.take().unwrap();
        stdin.write_all(b"garbage\n").unwrap();
    }
    let logged = toolhost_tests::text(&piped.wait_with_output().unwrap().stderr);
    assert!(logged.contains("refused a message"), "{logged}");
    assert!(
        !logged.contains('\u{1b}'),
        "colour codes in a pipe: {logged:?}"
    );

    let terminal = serve_refusing_garbage_on_a_terminal(dir.path(), false);
    assert!(terminal.contains("refused a message"), "{terminal}");
    assert!(
        terminal.contains("\u{1b}["),
        "no colour on a terminal: {terminal:?}"
    );

    let no_color = serve_refusing_garbage_on_a_terminal(dir.path(), true);
    assert!(no_color.contains("refused a message"), "{no_color}");
    assert!(
        !no_color.contains('\u{1b}'),
        "colour despite NO_COLOR: {no_color:?}"
    );
}

#[test]
fn a_command_has_no_controlling_terminal_so_a_prompt_on_it_fails_at_once() {
    // toolhost on a terminal (under `script`), as a CLI agent or `toolhost call` runs it: a
    // command that opens /dev/tty (sudo, ssh's host-key question, a git credential
    // prompt) would otherwise stop, unseen, until the call's timeout.
    if !Path::new("/usr/bin/setsid").exists() && !Path::new("/bin/setsid").exists() {
        eprintln!("skipped: no setsid here (commands run in a process group of their own)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = r#"{"command": "if (: </dev/tty) 2>/dev/null; then echo has-a-terminal; else echo no-terminal; fi; ps -o sid= -p $$ > sid"}"#;
    let command = format!(
        "{} call shell --yes --input '{input}'; ps -o sid= -p $$ > host-sid",
        env!("CARGO_BIN_EXE_toolhost")
    );
    let out = under_a_terminal(dir.path(), &command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = toolhost_tests::text(&out.stdout);
    assert!(printed.contains("no-terminal"), "{printed}");
    let sid = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    assert_ne!(
        sid("sid").trim(),
        sid("host-sid").trim(),
        "the command runs in a session of its own"
    );
}

#[test]
fn a_config_that_mounts_toolhost_on_itself_is_refused_at_once_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"in\"\nprefix = \"in\"\ncommand = \"{}\"\nargs = [\"serve\", \"--mcp\"]\n",
            env!("CARGO_BIN_EXE_toolhost")
        ),
    )
    .unwrap();
    let out = toolhost(dir.path(), &["list"]);
    let (listed, err) = (
        toolhost_tests::text(&out.stdout),
        toolhost_tests::text(&out.stderr),
    );
    assert!(
        !listed.contains("in__"),
        "no copy of its own tools: {listed}"
    );
    assert!(listed.contains("read_file"), "{listed}");
    assert_eq!(
        err.matches("mounts toolhost on this same configuration")
            .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("entry 'in'") && err.contains("--config") && err.contains("exited"),
        "{err}"
    );
    assert!(!err.contains("TOOLHOST_NESTING"), "{err}");
}

#[test]
fn toolhost_mounted_on_another_config_still_starts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inner.toml"), "").unwrap();
    std::fs::write(
        dir.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"in\"\nprefix = \"in\"\ncommand = \"{}\"\nargs = [\"--config\", \"inner.toml\", \"serve\", \"--mcp\"]\n",
            env!("CARGO_BIN_EXE_toolhost")
        ),
    )
    .unwrap();
    let out = toolhost(dir.path(), &["list"]);
    assert!(
        toolhost_tests::text(&out.stdout).contains("in__read_file"),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert!(
        !toolhost_tests::text(&out.stderr).contains("WARN"),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
}

/// Runs the panic-abort fixture's tool in an isolated worker, with `env` set for toolhost.
fn worker_panic(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    toolhost_tests::package_library(
        &toolhost_tests::fixtures().library("fault-panic-abort"),
        &plugins,
        "fault-panic-abort",
    );
    let out = command(
        dir.path(),
        &[
            "call",
            "panic_abort",
            "--plugins",
            plugins.to_str().unwrap(),
            "--input",
            "{}",
        ],
    )
    .env_remove("RUST_BACKTRACE")
    .envs(env.iter().copied())
    .stdin(Stdio::null())
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    toolhost_tests::text(&out.stderr)
}

#[test]
fn a_worker_panic_is_one_log_record() {
    let log = worker_panic(&[]);
    assert_eq!(log.matches("worker output:").count(), 1, "{log}");
    let record = &log[log.find("worker output:").unwrap()..];
    assert!(
        record.contains("panicked at") && record.contains("the fixture panics on purpose"),
        "{log}"
    );
    assert!(record.contains("RUST_BACKTRACE=1"), "{log}");
}

#[test]
fn rust_backtrace_reaches_the_worker_when_asked_for() {
    let log = worker_panic(&[("RUST_BACKTRACE", "1")]);
    assert!(log.contains("stack backtrace:"), "{log}");
    assert_eq!(log.matches("worker output:").count(), 1, "{log}");
}

#[test]
fn the_subcommands_answer_to_the_names_users_try() {
    let dir = tempfile::tempdir().unwrap();
    let listed = toolhost(dir.path(), &["tools"]);
    assert_eq!(
        listed.status.code(),
        Some(0),
        "{}",
        toolhost_tests::text(&listed.stderr)
    );
    assert!(toolhost_tests::text(&listed.stdout).contains("read_file"));
    let typo = toolhost(dir.path(), &["lisst"]);
    assert!(
        toolhost_tests::text(&typo.stderr).contains("a similar subcommand exists: 'list'"),
        "{}",
        toolhost_tests::text(&typo.stderr)
    );
}
