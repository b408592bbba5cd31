//! `cargo xtask`: the project's own commands.
//!
//! ```text
//! cargo xtask test     build everything the tests need, then run every test (incl. doctests)
//! cargo xtask ci       cargo fmt --check, clippy -D warnings, then `test`
//! cargo xtask demo     build toolhost and run it on sample calls in a scratch workspace
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A failed step: what was being done and why it failed.
struct StepError {
    step: String,
    why: String,
}

type Result<T = ()> = std::result::Result<T, StepError>;

fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs a command to completion, streaming its output, naming the step on failure.
fn run(step: &str, cmd: &mut Command) -> Result {
    eprintln!("\n==> {step}");
    let status = cmd.status().map_err(|e| StepError {
        step: step.into(),
        why: format!("could not start {:?}: {e}", cmd.get_program()),
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(StepError {
            step: step.into(),
            why: format!("exited with {status}"),
        })
    }
}

/// Test totals summed over `cargo test` runs.
#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

/// Runs a `cargo test` step, echoing its output and adding up its `test result:` lines.
fn run_tests(step: &str, cmd: &mut Command, totals: &mut Totals) -> Result {
    use std::io::{BufRead, BufReader};
    eprintln!("\n==> {step}");
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| StepError {
            step: step.into(),
            why: format!("could not start cargo: {e}"),
        })?;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            println!("{line}");
            if let Some(rest) = line.strip_prefix("test result: ") {
                let count = |what: &str| -> u64 {
                    rest.split(';')
                        .find_map(|part| part.trim().strip_suffix(what))
                        .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
                        .unwrap_or(0)
                };
                totals.passed += count(" passed");
                totals.failed += count(" failed");
                totals.ignored += count(" ignored");
            }
        }
    }
    let status = child.wait().map_err(|e| StepError {
        step: step.into(),
        why: e.to_string(),
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(StepError {
            step: step.into(),
            why: format!("exited with {status}"),
        })
    }
}

fn test() -> Result {
    run(
        "build the workspace and test binaries",
        cargo().args(["build", "--workspace", "--all-targets"]),
    )?;
    let mut totals = Totals::default();
    let result = run_tests(
        "run unit, integration and CLI tests, and benchmarks in test mode",
        cargo().args(["test", "--workspace", "--all-targets"]),
        &mut totals,
    )
    .and_then(|()| {
        run_tests(
            "run doctests",
            cargo().args(["test", "--workspace", "--doc"]),
            &mut totals,
        )
    });
    println!(
        "\nall tests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    result
}

fn ci() -> Result {
    run(
        "check formatting",
        cargo().args(["fmt", "--all", "--", "--check"]),
    )?;
    run(
        "clippy (warnings are errors)",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    test()
}

fn demo() -> Result {
    run("build toolhost", cargo().args(["build", "-p", "toolhost"]))?;
    let bin = root().join("target/debug/toolhost");
    let ws = root().join("target/demo-workspace");
    let prepare = || -> std::io::Result<()> {
        let _ = std::fs::remove_dir_all(&ws);
        std::fs::create_dir_all(ws.join("src"))?;
        std::fs::write(
            ws.join("README.md"),
            "# Demo project\n\nA scratch workspace for the toolhost demo.\n",
        )?;
        std::fs::write(
            ws.join("src/main.rs"),
            "fn main() {\n    println!(\"hello\");\n}\n",
        )?;
        std::fs::write(
            ws.join("toolhost.toml"),
            "# Demo policy: writes are confirmed (answered by --yes below), shell is denied.\n\
             [tool_confirmation.per_tool]\nshell = \"deny\"\n",
        )
    };
    prepare().map_err(|e| StepError {
        step: "prepare the demo workspace".into(),
        why: e.to_string(),
    })?;
    let toolhost = |args: &[&str]| {
        let mut c = Command::new(&bin);
        c.args(args)
            .current_dir(&ws)
            .env("XDG_CONFIG_HOME", ws.join(".config"));
        c
    };
    let show = |title: &str, args: &[&str]| -> Result {
        eprintln!("\n==> {title}\n$ toolhost {}", args.join(" "));
        let status = toolhost(args).status().map_err(|e| StepError {
            step: title.into(),
            why: e.to_string(),
        })?;
        eprintln!("(exit code {})", status.code().unwrap_or(-1));
        Ok(())
    };
    show("list the tools", &["list"])?;
    show(
        "read a file",
        &["call", "read_file", "--input", r#"{"path": "README.md"}"#],
    )?;
    show(
        "write a file (write prompts; --yes answers allow)",
        &[
            "call",
            "write_file",
            "--yes",
            "--input",
            r#"{"path": "notes/todo.md", "content": "- try toolhost\n"}"#,
        ],
    )?;
    show(
        "patch it (exactly one match)",
        &[
            "call",
            "patch_file",
            "--yes",
            "--input",
            r#"{"path": "notes/todo.md", "old": "try", "new": "ship"}"#,
        ],
    )?;
    show(
        "escape the workspace (refused)",
        &[
            "call",
            "read_file",
            "--input",
            r#"{"path": "../../etc/passwd"}"#,
        ],
    )?;
    show(
        "run a shell command (denied by the demo policy)",
        &["call", "shell", "--yes", "--input", r#"{"command": "ls"}"#],
    )?;
    show(
        "invalid input (every error with its JSON pointer)",
        &[
            "call",
            "read_file",
            "--json",
            "--input",
            r#"{"path": 7, "limit": 0}"#,
        ],
    )?;
    eprintln!("\nDemo workspace: {}", ws.display());
    Ok(())
}

fn usage() -> &'static str {
    "usage: cargo xtask <test | ci | demo>\n\n  test   build what the tests need, run every test\n  ci     fmt check, clippy, then test\n  demo   run toolhost on sample calls"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("ci") => ci(),
        Some("demo") => demo(),
        Some("-h" | "--help" | "help") => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!(
                "cargo xtask: unknown command {}\n\n{}",
                other.map_or("(none)".to_string(), |o| format!("'{o}'")),
                usage()
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\ncargo xtask: step '{}' failed: {}", e.step, e.why);
            ExitCode::FAILURE
        }
    }
}
