//! The Python wheel (`toolhost-py`) in the test run and the bench: built with maturin (from
//! PyPI, pinned), as a debug build that reuses the workspace's compiled crates for the
//! tests, installed into a venv of its own beside pytest and the official MCP Python SDK,
//! and tested with pytest against a packaged example plugin; a release build for the
//! bench ([`wheel_figures`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::peers;
use crate::plugin::package_crate;
use crate::steps::{Result, announce, fail, io, root};

/// The wheel file maturin wrote into `out`.
fn wheel_in(out: &Path) -> Option<PathBuf> {
    std::fs::read_dir(out)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("toolhost_mcp-"))
                && p.extension().is_some_and(|e| e == "whl")
        })
}

/// Builds the wheel with the cargo `profile` (`dev` for the tests: the workspace's crates
/// are compiled already; `release` for the bench) into `target/wheels`; returns it.
pub fn build_wheel(profile: &str) -> Result<PathBuf> {
    const STEP: &str = "build the Python wheel (maturin, abi3)";
    let peers = peers::dir();
    let maturin = peers::maturin(&peers).or_else(|e| fail(STEP, e))?;
    let out = root().join("target/wheels");
    let _ = std::fs::remove_dir_all(&out);
    announce(STEP);
    let mut maturin_build = Command::new(&maturin);
    maturin_build.args(["build", "--quiet", "--profile", profile]);
    if profile == "dev" {
        // After the workspace's build (`cargo xtask test`): resolved as it was, so that
        // what it compiled is linked, not compiled again (toolhost-py's Cargo.toml says why).
        maturin_build.args(["--features", "workspace-features"]);
    }
    let status = maturin_build
        .arg("-m")
        .arg(root().join("toolhost-py/Cargo.toml"))
        .arg("-o")
        .arg(&out)
        .current_dir(root())
        .status()
        .or_else(|e| fail(STEP, format!("cannot run {}: {e}", maturin.display())))?;
    if !status.success() {
        return fail(STEP, format!("maturin exited with {status}"));
    }
    wheel_in(&out).map_or_else(
        || {
            fail(
                STEP,
                format!("maturin wrote no toolhost wheel into {}", out.display()),
            )
        },
        Ok,
    )
}

/// A venv `name` with `packages` (checked by importing `modules`) and `wheel` installed
/// (again each run); returns its python.
pub fn install_wheel(
    wheel: &Path,
    name: &str,
    packages: &[&str],
    modules: &str,
) -> Result<PathBuf> {
    const STEP: &str = "install the wheel into a venv of its own";
    announce(STEP);
    let peers = peers::dir();
    let python = peers::python_venv(&peers, name, packages, modules).or_else(|e| fail(STEP, e))?;
    peers::output(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(wheel),
    )
    .or_else(|e| fail(STEP, format!("pip install {}: {e}", wheel.display())))?;
    Ok(python)
}

/// The example plugin `text-tools` packaged (debug) into `target/py-fixtures/plugins`.
pub fn plugin_fixture() -> Result<PathBuf> {
    let dir = root().join("target/py-fixtures/plugins");
    let _ = std::fs::remove_dir_all(&dir);
    io("make the plugin directory", std::fs::create_dir_all(&dir))?;
    package_crate(&root().join("examples/plugins/text-tools"), &dir, false)?;
    Ok(dir)
}

/// Runs the wheel's pytest suite; returns (passed, failed, skipped) and whether it passed.
/// `wheel` is the wheel under test, which the tests of its command install again with
/// `uvx` from its folder (a local package index); `state` is their `XDG_STATE_HOME`.
pub fn pytest(
    python: &Path,
    plugins: &Path,
    wheel: &Path,
    state: &Path,
) -> Result<(u64, u64, u64, bool)> {
    const STEP: &str = "run the Python wheel's tests (pytest)";
    announce(STEP);
    let out = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(root().join("toolhost-py"))
        .env("TOOLHOST_TEST_PLUGINS", plugins)
        .env("TOOLHOST_TEST_WHEEL", wheel)
        .env("TOOLHOST_TEST_REQUIRE_PEERS", "1")
        .env("XDG_STATE_HOME", state)
        .output()
        .or_else(|e| fail(STEP, format!("cannot run pytest: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    // The summary line: "28 passed, 1 skipped in 2.95s".
    let summary = text.lines().last().unwrap_or_default();
    let count = |what: &str| -> u64 {
        summary
            .split([',', ' '])
            .collect::<Vec<_>>()
            .windows(2)
            .find(|w| w[1] == what)
            .and_then(|w| w[0].parse().ok())
            .unwrap_or(0)
    };
    Ok((
        count("passed"),
        count("failed") + count("errors") + count("error"),
        count("skipped"),
        out.status.success(),
    ))
}

/// The bench's figures of the wheel, in µs per call: (`Host.run`, `Host.run_async`), each
/// `read_file` of 4 KB.
pub fn wheel_figures() -> std::result::Result<(f64, f64), String> {
    let wheel = build_wheel("release").map_err(|e| e.to_string())?;
    let python = install_wheel(&wheel, "py-wheel-bench", &[], "json").map_err(|e| e.to_string())?;
    let ws = peers::dir().join("wheel-bench-ws");
    std::fs::create_dir_all(&ws).map_err(|e| e.to_string())?;
    let json = |script: PathBuf| -> std::result::Result<serde_json::Value, String> {
        let out = peers::output(Command::new(&python).arg(&script).arg(&ws))?;
        serde_json::from_str(out.trim()).map_err(|e| format!("{}: {e}: {out}", script.display()))
    };
    let wheel = json(root().join("toolhost-py/bench/bench_wheel.py"))?;
    let number = |v: &serde_json::Value, key: &str| {
        v[key].as_f64().ok_or_else(|| format!("no {key} in {v}"))
    };
    Ok((number(&wheel, "run_us")?, number(&wheel, "run_async_us")?))
}
