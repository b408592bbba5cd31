//! Instructions per call, counted with callgrind: a figure that repeats exactly for the same
//! binary and input, where the time per call moves with the evening.
//!
//! A stdio server is started under `valgrind --tool=callgrind`, initialized, and sent `n`
//! `tools/call` requests; once all are answered its input is closed (a call in flight at
//! end of input would be cancelled, and counted half) and valgrind reports the instructions
//! the whole run took. Per call = (I(2n) − I(n)) / n: start-up, `initialize` and shutdown
//! cancel out.
//!
//! A gateway's mounted server can be counted with it: the gateway's configuration mounts
//! it under callgrind, writing its report into a directory of its own
//! (`--log-file=DIR/%p.log`, [`Server::mounted_logs`]). Once every call is answered it is
//! sent SIGTERM (a gateway kills what it mounts as it stops, and a killed process reports
//! nothing), and its `Collected` line is read from there.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Answer, Server};

/// Whether `valgrind` runs here.
pub fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Instructions per `tools/call` of `server` (a stdio server), from runs of `n` and `2n`
/// calls: its own, and with [`Server::mounted_logs`] its mounted server's beside them.
pub fn per_call(server: &Server, n: u64) -> Result<(f64, Option<f64>), String> {
    per_call_of(&server.name, n, |calls| instructions(server, calls))
}

/// Instructions per call of `name` from `run` (the instructions one run of that many
/// calls took: the server's own, and its mounted server's where counted), over `n` and
/// `2n` calls: per call = (I(2n) − I(n)) / n, start-up and shutdown cancelled out.
pub fn per_call_of(
    name: &str,
    n: u64,
    mut run: impl FnMut(u64) -> Result<(u64, Option<u64>), String>,
) -> Result<(f64, Option<f64>), String> {
    let once = run(n)?;
    let twice = run(2 * n)?;
    let per = |what: &str, once: u64, twice: u64| {
        if twice <= once {
            return Err(format!(
                "{name}{what}: {twice} instructions for {} calls, not more than {once} for {n}",
                2 * n
            ));
        }
        Ok((twice - once) as f64 / n as f64)
    };
    let own = per("", once.0, twice.0)?;
    let mounted = match (once.1, twice.1) {
        (Some(once), Some(twice)) => Some(per(" (its mounted server)", once, twice)?),
        _ => None,
    };
    Ok((own, mounted))
}

/// The instructions one run of `calls` calls took, as callgrind collected them.
///
/// Every request is in the server's input before it starts, in a pipe made large enough
/// for all of them (its answers go to another), so that it reads the same chunks on every
/// run: with a writer racing the server, how many lines each read returned moved the count
/// by a few hundred instructions per call. The input stays open until every call is
/// answered. With [`Server::mounted_logs`], also the mounted server's count (read once the
/// gateway has stopped).
fn instructions(server: &Server, calls: u64) -> Result<(u64, Option<u64>), String> {
    if let Some(dir) = &server.mounted_logs {
        clear_logs(dir)?;
    }
    let params = serde_json::json!({"name": server.tool, "arguments": server.arguments});
    let mut requests = String::new();
    requests.push_str(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"toolhost-bench","version":"1"}}}"#,
    );
    requests.push('\n');
    requests.push_str(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    requests.push('\n');
    for id in 0..calls {
        requests.push_str(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{params}}}"#,
            1000 + id
        ));
        requests.push('\n');
    }
    let (input, mut to) = large_pipe(requests.len())?;
    let (mut from, output) = large_pipe(1 << 20)?;
    to.write_all(requests.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut child = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            "--trace-children=no",
        ])
        .args(&server.command)
        .env("XDG_STATE_HOME", crate::state_home())
        .envs(&server.env)
        .stdin(Stdio::from(input))
        .stdout(Stdio::from(output))
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: cannot start valgrind: {e}", server.name))?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let report = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut answers = BufReader::new(&mut from);
    let mut answered = 0;
    let mut line = String::new();
    while answered < calls {
        line.clear();
        if answers.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err(format!(
                "{}: the server stopped after {answered} of {calls} answers",
                server.name
            ));
        }
        let Ok(answer) = serde_json::from_str::<Answer>(&line) else {
            continue;
        };
        if answer
            .id
            .as_ref()
            .and_then(Value::as_u64)
            .is_some_and(|id| id >= 1000)
        {
            if answer.error.is_some()
                || answer
                    .result
                    .as_ref()
                    .is_some_and(|r| r.is_error == Some(true))
            {
                return Err(format!("{}: a call failed: {}", server.name, line.trim()));
            }
            answered += 1;
        }
    }
    let pid = child.id();
    // A mounted server is counted first: its gateway would kill it as it stops (no report),
    // so it is asked to stop (SIGTERM, which callgrind reports on) while its gateway waits.
    let mounted = match &server.mounted_logs {
        Some(dir) => {
            let mounted = toolhost_tests::children_of(pid);
            for pid in &mounted {
                if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
            }
            Some(mounted_count(dir, &mounted).map_err(|e| format!("{}: {e}", server.name))?)
        }
        None => None,
    };
    // Every call answered: end of input now stops the server with nothing in flight.
    drop(to);
    let status = child.wait().map_err(|e| e.to_string())?;
    let text = report.join().unwrap_or_default();
    let own = collected(&text, pid).ok_or_else(|| {
        format!(
            "{}: valgrind reported no count ({status}): {}",
            server.name,
            text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        )
    })?;
    Ok((own, mounted))
}

/// Empties the directory a mounted server's reports go to (made if missing).
fn clear_logs(dir: &Path) -> Result<(), String> {
    let what = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(what)?;
    for entry in std::fs::read_dir(dir).map_err(what)? {
        let path = entry.map_err(what)?.path();
        if path.extension().is_some_and(|e| e == "log") {
            std::fs::remove_file(&path).map_err(what)?;
        }
    }
    Ok(())
}

/// How long a mounted server may take to write its report once asked to stop.
const REPORT_WAIT: Duration = Duration::from_secs(30);

/// The mounted servers' count (`pids`, asked to stop), from their reports in `dir`, each
/// named for its process: a process one forks reports under its own name, and counts only
/// what ran before the fork. Waits for each report, written as its process exits.
fn mounted_count(dir: &Path, pids: &[i32]) -> Result<u64, String> {
    if pids.is_empty() {
        return Err("the gateway had started no mounted server to count".into());
    }
    let start = Instant::now();
    let mut total = 0;
    for pid in pids {
        let report = dir.join(format!("{pid}.log"));
        loop {
            let text = std::fs::read_to_string(&report).unwrap_or_default();
            // Only a whole line: the report may be read while it is being written.
            let count = text.split_inclusive('\n').find_map(|l| {
                let (_, after) = l.strip_suffix('\n')?.split_once("Collected :")?;
                after.trim().parse::<u64>().ok()
            });
            if let Some(n) = count {
                total += n;
                break;
            }
            if start.elapsed() > REPORT_WAIT {
                return Err(format!(
                    "the mounted server (process {pid}) wrote no count into {} within {} s of SIGTERM",
                    report.display(),
                    REPORT_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(total)
}

/// A pipe that holds at least `bytes` (its read end, its write end).
fn large_pipe(bytes: usize) -> Result<(std::fs::File, std::fs::File), String> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    let size = bytes.next_power_of_two().max(1 << 16);
    rustix::pipe::fcntl_setpipe_size(&write, size).map_err(|e| {
        format!(
            "a pipe of {size} bytes: {e} (raise /proc/sys/fs/pipe-max-size, or count fewer calls)"
        )
    })?;
    Ok((std::fs::File::from(read), std::fs::File::from(write)))
}

/// The `Collected : N` line of callgrind's summary for process `pid` (the server: valgrind
/// runs it in its own process). A process the server forks (to start a sandboxed
/// child, which then executes another program) reports a summary of its own first, and it
/// counts what the server ran before the fork: a gateway's count was read from its
/// upstream's fork once, a third of its own.
pub fn collected(report: &str, pid: u32) -> Option<u64> {
    let prefix = format!("=={pid}== Collected :");
    report.lines().find_map(|l| {
        let after = l.strip_prefix(&prefix)?;
        after.trim().parse().ok()
    })
}
