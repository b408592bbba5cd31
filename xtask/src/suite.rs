//! The test suite: `cargo xtask test` (what the tests need, installed; every test, the
//! fuzz targets' seed replays among them; the Python wheel's) and `cargo xtask ci`.

use std::process::Command;

use std::path::{Path, PathBuf};

use crate::steps::{Result, announce, cargo, fail, fresh_state, run};
use crate::{components, python};

/// Test totals summed over `cargo test` runs.
#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

/// Whether cargo-nextest is installed: it runs every test of every binary side by side
/// (one process each), where `cargo test` runs the binaries one after another.
fn nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The tests of the workspace's targets, with `args` (`--test NAME`, …): through
/// cargo-nextest where it is installed, else `cargo test`.
fn test_command(args: &[&str]) -> Command {
    let mut cmd = cargo();
    if nextest() {
        cmd.args(["nextest", "run", "--no-fail-fast", "--workspace"]);
    } else {
        cmd.args(["test", "--workspace"]);
    }
    cmd.args(args);
    cmd
}

/// Adds up a nextest `Summary` line (`N tests run: N passed (2 slow), N failed, N skipped`).
fn add_nextest_summary(line: &str, totals: &mut Totals) {
    let Some(rest) = line.split(" run:").nth(1) else {
        return;
    };
    for part in rest.split(',') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => totals.passed += n,
            "failed" | "timed" => totals.failed += n,
            "skipped" => totals.ignored += n,
            _ => {}
        }
    }
}

/// Runs a test step (`cargo test` or `cargo nextest run`), echoing its output and adding up
/// its `test result:` lines (or nextest's summary).
fn run_tests(step: &str, cmd: &mut Command, totals: &mut Totals) -> Result {
    use std::io::{BufRead, BufReader};
    announce(step);
    let nextest = cmd.get_args().any(|a| a == "nextest");
    if nextest {
        // nextest reports on stderr; its per-test lines and summary are what is counted.
        cmd.stderr(std::process::Stdio::piped());
    }
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .or_else(|e| fail(step, format!("could not start cargo: {e}")))?;
    let stderr = child.stderr.take().map(|err| {
        std::thread::spawn(move || {
            let mut summary = Vec::new();
            for line in BufReader::new(err)
                .lines()
                .map_while(std::result::Result::ok)
            {
                eprintln!("{line}");
                if line.trim_start().starts_with("Summary [") {
                    summary.push(line);
                }
            }
            summary
        })
    });
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            println!("{line}");
            if nextest {
                continue;
            }
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
    if let Some(summary) = stderr.and_then(|t| t.join().ok()) {
        for line in summary {
            add_nextest_summary(&line, totals);
        }
    }
    let status = child.wait().or_else(|e| fail(step, e))?;
    if status.success() {
        Ok(())
    } else {
        fail(step, format!("exited with {status}"))
    }
}

/// Node 22 with the conformance suite, and a venv with the Python SDK, under
/// `target/peers`: the environment that tells the tests where they are (and that they are
/// required).
pub fn test_peers() -> Result<Vec<(&'static str, PathBuf)>> {
    const STEP: &str = "install the MCP conformance suite, server-everything and oidc-provider (npm), the Python SDK, pytest, the OTLP protobufs and a text model (PyPI)";
    announce(STEP);
    let peers = crate::peers::for_the_tests().or_else(|e| fail(STEP, e))?;
    Ok(vec![
        ("TOOLHOST_TEST_TEXT_MODEL", peers.text_model),
        ("TOOLHOST_TEST_OTLP_PYTHON", peers.otlp),
        ("TOOLHOST_TEST_NODE", peers.node),
        ("TOOLHOST_TEST_CONFORMANCE", peers.conformance),
        ("TOOLHOST_TEST_PYTHON_SDK", peers.python_sdk),
        ("TOOLHOST_TEST_SERVER_EVERYTHING", peers.everything),
        ("TOOLHOST_TEST_PYTEST", peers.pytest),
        ("TOOLHOST_TEST_OIDC_PROVIDER", peers.oidc),
    ])
}

/// The distribution's Chromium and chromedriver, for the console's browser test:
/// installed with `apt-get` when missing (CI runs as root with Debian's packages).
pub fn ensure_browser() -> Result {
    const STEP: &str = "install Chromium and chromedriver for the console's browser test";
    let present = || {
        std::path::Path::new("/usr/bin/chromium").exists()
            && std::path::Path::new("/usr/bin/chromedriver").exists()
    };
    if present() {
        return Ok(());
    }
    announce(STEP);
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    let installed = apt(&["install", "-y", "-qq", "chromium", "chromium-driver"])
        || (apt(&["update", "-qq"])
            && apt(&["install", "-y", "-qq", "chromium", "chromium-driver"]));
    if installed && present() {
        Ok(())
    } else {
        fail(
            STEP,
            "could not install them; as root on Debian: apt-get update && apt-get install chromium chromium-driver",
        )
    }
}

/// Debian's `redis-server`, for the tests of the shared state store: installed with
/// `apt-get` when missing; returns it.
pub fn ensure_redis() -> Result<PathBuf> {
    ensure_debian_program(
        "install redis-server for the shared state tests",
        "redis-server",
        "/usr/bin/redis-server",
    )
}

/// Debian's `docker-registry` (the CNCF distribution registry), for the tests of publishing
/// and installing plugins through an OCI registry: installed when missing; returns it.
pub fn ensure_oci_registry() -> Result<PathBuf> {
    ensure_debian_program(
        "install docker-registry for the OCI registry tests",
        "docker-registry",
        "/usr/bin/docker-registry",
    )
}

/// `program`, from the Debian package `package`, installed with `apt-get` when missing.
fn ensure_debian_program(step: &str, package: &str, program: &str) -> Result<PathBuf> {
    let program = PathBuf::from(program);
    if program.exists() {
        return Ok(program);
    }
    announce(step);
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    let installed = apt(&["install", "-y", "-qq", package])
        || (apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", package]));
    if installed && program.exists() {
        Ok(program)
    } else {
        fail(
            step,
            format!(
                "could not install it; as root on Debian: apt-get update && apt-get install {package}"
            ),
        )
    }
}

const FIXTURE_WORKSPACE: &str = "build the fixture workspace (tests/fixtures: plugins and MCP servers the tests load and start)";

/// Builds the fixture workspace as the tests' `toolhost_tests::fixtures()` does (same
/// command, same target directory, so theirs is then up to date), on a thread of its own:
/// the installs and component builds it runs beside leave a core idle most of their time,
/// and the tests would otherwise start by waiting for it (two minutes of compiling on a
/// fresh clone). Its output is kept and shown only when it fails.
fn build_fixture_workspace() -> std::thread::JoinHandle<Result> {
    announce(&format!("{FIXTURE_WORKSPACE}, beside the next steps"));
    let mut cmd = xtask_launcher::fixture_workspace_build();
    std::thread::spawn(move || {
        let out = cmd
            .output()
            .or_else(|e| fail(FIXTURE_WORKSPACE, format!("could not start cargo: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        fail(FIXTURE_WORKSPACE, format!("exited with {}", out.status))
    })
}

/// `cargo xtask test`: builds everything, then runs every test (doctests included) and
/// prints one `N passed, N failed` summary line.
pub fn test() -> Result {
    // What `cargo xtask test` was built with (xtask-launcher's tool.rs): up to date when it
    // was started that way.
    run(
        "build the workspace and test binaries",
        cargo().args(["build", "--workspace", "--all-targets"]),
    )?;
    let fixture_workspace = build_fixture_workspace();
    ensure_browser()?;
    let redis = ensure_redis()?;
    // Tests that start toolhost without a state directory of their own pin there.
    let state = fresh_state("test")?;
    let mut peers = test_peers()?;
    peers.push(("XDG_STATE_HOME", state.clone()));
    peers.push(("TOOLHOST_TEST_REDIS", redis));
    peers.push(("TOOLHOST_TEST_OCI_REGISTRY", ensure_oci_registry()?));
    peers.push(("TOOLHOST_TEST_COMPONENTS", components::fixtures()?));
    fixture_workspace
        .join()
        .unwrap_or_else(|_| fail(FIXTURE_WORKSPACE, "its thread panicked"))?;
    let mut totals = Totals::default();
    let result = run_tests(
        "run unit, integration and CLI tests",
        test_command(&["--lib", "--bins", "--tests"])
            .env("TOOLHOST_TEST_REQUIRE_PEERS", "1")
            .envs(peers.clone()),
        &mut totals,
    )
    .and_then(|()| {
        // Benchmarks have mains of their own (a few rounds in test mode, to prove they
        // work), which only `cargo test` runs. `--bench '*'`, not `--benches`: that also
        // selects every library and binary (bench = true by default), whose unit tests the
        // step above ran already.
        run_tests(
            "run the benchmarks in test mode",
            cargo()
                .args(["test", "--workspace", "--bench", "*"])
                .env("TOOLHOST_TEST_REQUIRE_PEERS", "1")
                .envs(peers),
            &mut totals,
        )
    })
    .and_then(|()| {
        run_tests(
            "run the plugin suite again with every plugin isolated in a worker process",
            // `--workspace`, not `-p toolhost-tests`: the same feature set as the run
            // above, so nothing is built twice.
            test_command(&["--test", "plugins"])
                .env("TOOLHOST_TEST_ISOLATION", "process")
                .env("XDG_STATE_HOME", &state),
            &mut totals,
        )
    })
    .and_then(|()| {
        run_tests(
            "run doctests",
            cargo()
                .args(["test", "--workspace", "--doc"])
                .env("XDG_STATE_HOME", &state),
            &mut totals,
        )
    })
    .and_then(|()| crate::registry::check_packages())
    .and_then(|()| python_tests(&state, &mut totals))
    .and_then(|()| demo_tests(&state, &mut totals));
    println!(
        "\ntests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    result
}

/// The demo as a new user runs it, alone and last: its build (toolhost without default
/// features, what the tour runs) replaces `target/debug/toolhost`, which the tests above run
/// with every feature; the workspace's build afterwards puts theirs back.
fn demo_tests(state: &Path, totals: &mut Totals) -> Result {
    let only_ignored: &[&str] = if nextest() {
        &["--test", "demo", "--run-ignored", "only"]
    } else {
        &["--test", "demo", "--", "--ignored"]
    };
    let ran = run_tests(
        "run the demo as a new user would (alone: it builds toolhost as the demo does)",
        test_command(only_ignored).env("XDG_STATE_HOME", state),
        totals,
    );
    run(
        "put the workspace's toolhost back in target/debug",
        cargo().args(["build", "--workspace", "--all-targets"]),
    )?;
    ran
}

/// The Python wheel: built, installed into a fresh venv, tested with pytest.
fn python_tests(state: &Path, totals: &mut Totals) -> Result {
    let wheel = python::build_wheel("dev")?;
    let (venv, packages, modules) = crate::peers::WHEEL_VENV;
    let python = python::install_wheel(&wheel, venv, &packages, modules)?;
    let plugins = python::plugin_fixture()?;
    let (passed, failed, skipped, ok) = python::pytest(&python, &plugins, &wheel, state)?;
    totals.passed += passed;
    totals.failed += failed;
    totals.ignored += skipped;
    if ok {
        Ok(())
    } else {
        fail(
            "run the Python wheel's tests (pytest)",
            format!("{failed} failed"),
        )
    }
}

/// `cargo xtask ci`: formatting, clippy, the API docs (a broken intra-doc link is an
/// error: tool-api's docs are what plugin authors read), then [`test()`].
pub fn ci() -> Result {
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
    run(
        "API docs (warnings are errors)",
        cargo()
            .args(["doc", "--no-deps", "--workspace"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    test()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nextest_summary_adds_its_passed_failed_and_skipped() {
        let mut totals = Totals::default();
        add_nextest_summary(
            "     Summary [  63.044s] 20/23 tests run: 19 passed (2 slow), 1 failed, 3 skipped",
            &mut totals,
        );
        add_nextest_summary(
            "     Summary [   0.513s] 1 test run: 1 passed, 29 skipped",
            &mut totals,
        );
        assert_eq!((totals.passed, totals.failed, totals.ignored), (20, 1, 32));
    }
}
