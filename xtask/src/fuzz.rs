//! `cargo xtask fuzz`: the fuzz targets in `fuzz/` (cargo-fuzz, libFuzzer), run from their
//! seed corpora (`fuzz/seeds/TARGET`, kept in the repository) into a working corpus under
//! `target/fuzz/corpus/TARGET`; a crash is saved under `target/fuzz/artifacts/TARGET/` and
//! fails the step, naming the input.
//!
//! Fuzzing needs a nightly toolchain (`rustup toolchain install nightly`: the coverage
//! instrumentation) and cargo-fuzz, which is installed once under `target/tools` when
//! missing. `cargo xtask test` does not fuzz: the workspace's own build compiles the targets
//! uninstrumented and `fuzz/tests/seeds.rs` replays every seed through them.

use std::path::PathBuf;
use std::process::Command;

use crate::steps::{Result, announce, fail, io, root, run};

/// Every fuzz target (the parsers of untrusted input), sorted: one file each in
/// `fuzz/fuzz_targets/`, as `fuzz/Cargo.toml` declares them (`fuzz/tests/seeds.rs` holds the
/// two to the same count), so a new target is fuzzed without being named here.
fn all_targets() -> Result<Vec<String>> {
    let dir = root().join("fuzz/fuzz_targets");
    let entries = io("list the fuzz targets", std::fs::read_dir(&dir))?;
    let mut targets: Vec<String> = entries
        .filter_map(std::result::Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
        .collect();
    targets.sort();
    Ok(targets)
}

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
                // Unoptimized: it only starts cargo and the targets, and compiles in two
                // thirds of the time (31 s against 48 here; CI builds it every run).
                "--debug",
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

/// Runs `targets` (all when empty) for `seconds` each, built optimized and instrumented.
pub fn fuzz(targets: &[String], seconds: u64) -> Result {
    let all = all_targets()?;
    for t in targets {
        if !all.contains(t) {
            return fail(
                "fuzz",
                format!("no fuzz target '{t}'; the targets are {}", all.join(", ")),
            );
        }
    }
    let chosen: Vec<&str> = if targets.is_empty() {
        all.iter().map(String::as_str).collect()
    } else {
        targets.iter().map(String::as_str).collect()
    };
    nightly()?;
    let cargo_fuzz = cargo_fuzz()?;
    let fuzz_dir = root().join("fuzz");
    let work = root().join("target/fuzz");
    // Built once for all targets, without a sanitizer: the code under test is safe Rust,
    // so libFuzzer looks for panics, overflows (debug assertions) and endless loops.
    let cargo_fuzz_to = |what: &str| {
        let mut cmd = Command::new(&cargo_fuzz);
        cmd.args(["fuzz", what, "--sanitizer", "none"])
            .arg("--fuzz-dir")
            .arg(&fuzz_dir)
            .current_dir(root())
            .env("RUSTUP_TOOLCHAIN", "nightly")
            .env("CARGO_TARGET_DIR", work.join("build"))
            // CI lints the workspace inside its build with the stable toolchain's
            // clippy-driver (`.ci/run`): not a driver for nightly's compiler.
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS");
        cmd
    };
    run(
        "build the fuzz targets (nightly, libFuzzer)",
        &mut cargo_fuzz_to("build"),
    )?;
    let logs = work.join("logs");
    io("make the fuzz logs", std::fs::create_dir_all(&logs))?;
    // The targets run side by side, as many at once as there are cores: each is one
    // process on one core for `seconds`. What each says goes to its log, read back below.
    let at_once = std::thread::available_parallelism().map_or(1, usize::from);
    for batch in chosen.chunks(at_once) {
        let mut running = Vec::new();
        for &target in batch {
            let corpus = work.join("corpus").join(target);
            let artifacts = work.join("artifacts").join(target);
            for dir in [&corpus, &artifacts] {
                io(
                    "make the fuzz corpus directories",
                    std::fs::create_dir_all(dir),
                )?;
            }
            let step = format!("fuzz {target} for {seconds} s");
            announce(&step);
            let log_path = logs.join(format!("{target}.log"));
            let log = io("make the fuzz logs", std::fs::File::create(&log_path))?;
            let err = io("make the fuzz logs", log.try_clone())?;
            let child = cargo_fuzz_to("run")
                .arg(target)
                .arg(&corpus)
                .arg(fuzz_dir.join("seeds").join(target))
                .arg("--")
                .arg(format!("-max_total_time={seconds}"))
                .arg(format!("-artifact_prefix={}/", artifacts.display()))
                .arg("-print_final_stats=1")
                .stdout(log)
                .stderr(err)
                .spawn()
                .or_else(|e| fail(&step, format!("could not start cargo-fuzz: {e}")))?;
            running.push((target, step, child, log_path, artifacts));
        }
        // Every run of the batch is waited for before one that failed is reported.
        let mut ended = Vec::new();
        for (target, step, mut child, log_path, artifacts) in running {
            let status = child.wait();
            ended.push((target, step, status, log_path, artifacts));
        }
        for (target, step, status, log_path, artifacts) in ended {
            let status = status.or_else(|e| fail(&step, e))?;
            let said = std::fs::read_to_string(&log_path).unwrap_or_default();
            if status.success() {
                println!("{target}: {}", final_stats(&said));
                continue;
            }
            let tail: Vec<&str> = said.lines().rev().take(40).collect();
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
            return fail(
                &step,
                format!(
                    "{status} (its whole output: {}): the input that failed is in {} (replay it with `target/debug/{target} FILE`; once mended, add it to fuzz/seeds/{target}, which every `cargo xtask test` replays)",
                    log_path.display(),
                    artifacts.display()
                ),
            );
        }
    }
    Ok(())
}

/// What libFuzzer's final statistics (`-print_final_stats=1`) say of a run: the inputs it
/// tried and what it added to the corpus.
fn final_stats(said: &str) -> String {
    let stat = |name: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix(':'))
            .map_or("?", str::trim)
    };
    format!(
        "{} inputs tried, {} added to the corpus",
        stat("stat::number_of_executed_units"),
        stat("stat::new_units_added")
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_runs_final_statistics_are_read_from_what_libfuzzer_said() {
        let said = "INFO: Running\nDone 4096 runs in 10 second(s)\nstat::number_of_executed_units: 4096\nstat::average_exec_per_sec:     409\nstat::new_units_added:          17\n";
        assert_eq!(
            super::final_stats(said),
            "4096 inputs tried, 17 added to the corpus"
        );
        assert_eq!(
            super::final_stats(""),
            "? inputs tried, ? added to the corpus"
        );
    }
}
