//! `cargo xtask fuzz`: the fuzz targets in `fuzz/` (cargo-fuzz, libFuzzer), run from their
//! seed corpora (`fuzz/seeds/TARGET`, kept in the repository) into a working corpus under
//! `target/fuzz/corpus/TARGET`; a crash is saved under `target/fuzz/artifacts/TARGET/` and
//! fails the step, naming the input.
//!
//! They need a nightly toolchain (`rustup toolchain install nightly`) and cargo-fuzz, which
//! is installed once under `target/tools` when missing.

use std::path::PathBuf;
use std::process::Command;

use crate::steps::{Result, announce, fail, io, root, run};

/// Every fuzz target: the parsers of untrusted input.
pub const TARGETS: [&str; 12] = [
    "worker_frames",
    "workspace_path",
    "mcp_screen",
    "request_state",
    "plugin_manifest",
    "upstream_lines",
    "oauth_tokens",
    "egress_request",
    "oauth_callback",
    "tool_globs",
    "docker_config",
    "secrets_scan",
];

/// The cargo-fuzz the project is fuzzed with.
const CARGO_FUZZ: &str = "0.13.2";

/// cargo-fuzz, installed under `target/tools` when missing.
fn cargo_fuzz() -> Result<PathBuf> {
    const STEP: &str = "install cargo-fuzz (once, under target/tools)";
    let tools = root().join("target/tools");
    let bin = tools.join("bin/cargo-fuzz");
    if bin.exists() {
        return Ok(bin);
    }
    run(
        STEP,
        crate::steps::cargo()
            .args([
                "install",
                "cargo-fuzz",
                "--locked",
                "--version",
                CARGO_FUZZ,
                "--root",
            ])
            .arg(&tools),
    )?;
    if bin.exists() {
        Ok(bin)
    } else {
        fail(
            STEP,
            format!("cargo install did not leave {}", bin.display()),
        )
    }
}

/// Fails unless a nightly toolchain is installed (libFuzzer's instrumentation needs it).
fn nightly() -> Result {
    const STEP: &str = "find a nightly toolchain for the fuzz targets";
    let ok = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Ok(())
    } else {
        fail(
            STEP,
            "no nightly toolchain: install one with `rustup toolchain install nightly` (cargo-fuzz needs it)",
        )
    }
}

/// How the fuzz targets are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// Optimized, as for a real fuzzing session (`cargo xtask fuzz`).
    Release,
    /// Unoptimized: compiles in about two thirds of the time, for the short smoke runs of
    /// `cargo xtask test`.
    Dev,
}

/// Runs `targets` (all when empty) for `seconds` each, built as `build` says.
pub fn fuzz(targets: &[String], seconds: u64, build: Build) -> Result {
    for t in targets {
        if !TARGETS.contains(&t.as_str()) {
            return fail(
                "fuzz",
                format!(
                    "no fuzz target '{t}'; the targets are {}",
                    TARGETS.join(", ")
                ),
            );
        }
    }
    let chosen: Vec<&str> = if targets.is_empty() {
        TARGETS.to_vec()
    } else {
        targets.iter().map(String::as_str).collect()
    };
    nightly()?;
    let cargo_fuzz = cargo_fuzz()?;
    let fuzz_dir = root().join("fuzz");
    let work = root().join("target/fuzz");
    // Built once for all targets, without a sanitizer: the code under test is safe Rust,
    // so libFuzzer looks for panics, overflows (debug assertions) and endless loops.
    run(
        "build the fuzz targets (nightly, libFuzzer)",
        Command::new(&cargo_fuzz)
            .args(["fuzz", "build", "--sanitizer", "none"])
            .args((build == Build::Dev).then_some("--dev"))
            .arg("--fuzz-dir")
            .arg(&fuzz_dir)
            .current_dir(root())
            .env("RUSTUP_TOOLCHAIN", "nightly")
            .env("CARGO_TARGET_DIR", work.join("build")),
    )?;
    for target in chosen {
        let corpus = work.join("corpus").join(target);
        let artifacts = work.join("artifacts").join(target);
        io(
            "make the fuzz corpus directories",
            std::fs::create_dir_all(&corpus),
        )?;
        io(
            "make the fuzz corpus directories",
            std::fs::create_dir_all(&artifacts),
        )?;
        let step = format!("fuzz {target} for {seconds} s");
        announce(&step);
        let status = Command::new(&cargo_fuzz)
            .args(["fuzz", "run", "--sanitizer", "none"])
            .args((build == Build::Dev).then_some("--dev"))
            .arg("--fuzz-dir")
            .arg(&fuzz_dir)
            .arg(target)
            .arg(&corpus)
            .arg(fuzz_dir.join("seeds").join(target))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            .current_dir(root())
            .env("RUSTUP_TOOLCHAIN", "nightly")
            .env("CARGO_TARGET_DIR", work.join("build"))
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                return fail(
                    &step,
                    format!(
                        "{s}: the input that failed is in {} (replay it with `cargo +nightly fuzz run -s none --fuzz-dir fuzz {target} FILE`)",
                        artifacts.display()
                    ),
                );
            }
            Err(e) => return fail(&step, format!("could not start cargo-fuzz: {e}")),
        }
    }
    Ok(())
}
