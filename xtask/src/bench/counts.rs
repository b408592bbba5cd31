//! Instructions per call of the dispatcher's CPU-bound rows, and of a plugin host's start,
//! counted with callgrind: a figure that repeats exactly for the same binary, where the
//! time moves with the evening.
//!
//! The `dispatch` bench, started as `dispatch --count NAME N`, makes N calls of one row on
//! one thread, each inside functions named `counted…`; callgrind collects only there
//! (`--toggle-collect='*counted*'`), so the count is the calls alone, as criterion times
//! them. Per call = (I(2n) − I(n)) / n: a first call's one-time work cancels out.

use std::collections::BTreeMap;
use std::process::Command;

use crate::peers::output;
use crate::steps::{announce, cargo};

/// Calls per count: the second count makes twice as many.
const CALLS: u64 = 1000;

/// Instructions per call, by the `dispatch` bench's row name.
pub(super) type Counts = BTreeMap<String, f64>;

/// Counts every row the `dispatch` bench can count (`--count-rows`); what cannot be
/// counted is said in `skipped`.
pub(super) fn dispatch_counts(skipped: &mut Vec<String>) -> Counts {
    announce("instructions per call of the dispatcher's rows (callgrind)");
    let counted = bench_executable("toolhost-dispatcher-core", "dispatch").and_then(|exe| {
        let rows = output(Command::new(&exe).arg("--count-rows"))?;
        rows.lines()
            .map(|row| {
                let once = instructions(&exe, row, CALLS)?;
                let twice = instructions(&exe, row, 2 * CALLS)?;
                Ok((
                    row.to_string(),
                    twice.saturating_sub(once) as f64 / CALLS as f64,
                ))
            })
            .collect::<Result<Counts, String>>()
    });
    counted
        .map_err(|e| skipped.push(format!("instructions per call of the dispatcher: {e}")))
        .unwrap_or_default()
}

/// The start modes a child of the `plugins` bench counts, by its rows' names: a first start
/// over 50 packages, a later one, and the first start's floor (hashing, then `dlopen`).
const START_MODES: [&str; 4] = [
    "load_50_packages",
    "load_50_packages_remembered",
    "sha256_50_libraries",
    "dlopen_50_libraries",
];

/// Instructions of a start over 50 plugin packages and of its floor, each counted in a
/// fresh child of the `plugins` bench (`--make-packages` makes them once): the child's
/// every thread (the hashing and loading run on several), user space only, less a child
/// that starts and ends doing nothing.
pub(super) fn start_counts(skipped: &mut Vec<String>) -> Counts {
    announce("instructions of a host's start over 50 plugin packages (callgrind)");
    let counted = bench_executable("toolhost-tests", "plugins").and_then(|exe| {
        let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
        output(Command::new(&exe).arg("--make-packages").arg(dir.path()))?;
        let count = |mode: &str| {
            let spec = format!(
                "{mode}\n{}\n{}",
                dir.path().join("packages").display(),
                dir.path().join("remembered").display()
            );
            let mut valgrind = Command::new("valgrind");
            valgrind
                .args(["--tool=callgrind", "--callgrind-out-file=/dev/null", &exe])
                .env("TOOLHOST_BENCH_LOAD_CHILD", spec);
            collected_by(&mut valgrind, mode)
        };
        let nothing = count("nothing")?;
        START_MODES
            .iter()
            .map(|mode| {
                Ok((
                    mode.to_string(),
                    count(mode)?.saturating_sub(nothing) as f64,
                ))
            })
            .collect::<Result<Counts, String>>()
    });
    counted
        .map_err(|e| skipped.push(format!("instructions of a plugin host's start: {e}")))
        .unwrap_or_default()
}

/// The path of `package`'s bench `bench`, built in the bench profile.
fn bench_executable(package: &str, bench: &str) -> Result<String, String> {
    let text = output(cargo().args([
        "bench",
        "-p",
        package,
        "--bench",
        bench,
        "--no-run",
        "--message-format=json",
    ]))?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == bench)
        .find_map(|m| m["executable"].as_str().map(String::from))
        .ok_or_else(|| format!("cargo named no executable for the {bench} bench"))
}

/// The instructions `calls` calls of `row` took, as callgrind collected them.
fn instructions(exe: &str, row: &str, calls: u64) -> Result<u64, String> {
    let mut valgrind = Command::new("valgrind");
    valgrind.args([
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--toggle-collect=*counted*",
        exe,
        "--count",
        row,
        &calls.to_string(),
    ]);
    collected_by(&mut valgrind, row)
}

/// What `valgrind` (a callgrind run of `row`) collected.
fn collected_by(valgrind: &mut Command, row: &str) -> Result<u64, String> {
    let child = valgrind
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start valgrind ({e}); apt-get install valgrind"))?;
    let pid = child.id();
    let out = child
        .wait_with_output()
        .map_err(|e| format!("valgrind: {e}"))?;
    let report = String::from_utf8_lossy(&out.stderr);
    match collected(&report, pid) {
        Some(n) if out.status.success() => Ok(n),
        _ => Err(format!(
            "{row}: valgrind reported no count ({}): {}",
            out.status,
            report.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
        )),
    }
}

/// The `Collected : N` line of callgrind's summary for process `pid`, the program
/// valgrind ran (in its own process). A process it forked reports first, with what the
/// program ran before the fork: that line is not the program's count.
fn collected(report: &str, pid: u32) -> Option<u64> {
    let prefix = format!("=={pid}== Collected :");
    report.lines().find_map(|l| {
        let after = l.strip_prefix(&prefix)?;
        after.trim().replace(',', "").parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_read_from_callgrinds_summary() {
        let report = "==1== Events    : Ir\n==1== Collected : 1268005\n==1==\n==1== I   refs:      1,268,005\n";
        assert_eq!(collected(report, 1), Some(1_268_005));
        assert_eq!(collected("==1== no summary", 1), None);
    }

    #[test]
    fn the_count_is_the_programs_not_that_of_a_process_it_forked() {
        let report = "==18443== Collected : 103297716\n==18436== Events    : Ir\n==18436== Collected : 184771632\n";
        assert_eq!(collected(report, 18436), Some(184_771_632));
        assert_eq!(collected(report, 7), None);
    }
}
