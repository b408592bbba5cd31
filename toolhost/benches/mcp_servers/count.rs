//! Instructions per call, counted with callgrind: a figure that repeats exactly for the same
//! binary and input, where the time per call moves with the evening.
//!
//! A stdio server is started under `valgrind --tool=callgrind`, initialized, and sent `n`
//! `tools/call` requests; once all are answered its input is closed (a call in flight at
//! end of input would be cancelled, and counted half) and valgrind reports the instructions
//! the whole run took. Per call = (I(2n) − I(n)) / n: start-up, `initialize` and shutdown
//! cancel out.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

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
/// calls.
pub fn per_call(server: &Server, n: u64) -> Result<f64, String> {
    let once = instructions(server, n)?;
    let twice = instructions(server, 2 * n)?;
    if twice <= once {
        return Err(format!(
            "{}: {twice} instructions for {} calls, not more than {once} for {n}",
            server.name,
            2 * n
        ));
    }
    Ok((twice - once) as f64 / n as f64)
}

/// The instructions one run of `calls` calls took, as callgrind collected them.
///
/// Every request is in the server's input before it starts, in a pipe made large enough
/// for all of them (its answers go to another), so that it reads the same chunks on every
/// run: with a writer racing the server, how many lines each read returned moved the count
/// by a few hundred instructions per call. The input stays open until every call is
/// answered.
fn instructions(server: &Server, calls: u64) -> Result<u64, String> {
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
    // Every call answered: end of input now stops the server with nothing in flight.
    drop(to);
    let pid = child.id();
    let status = child.wait().map_err(|e| e.to_string())?;
    let text = report.join().unwrap_or_default();
    collected(&text, pid).ok_or_else(|| {
        format!(
            "{}: valgrind reported no count ({status}): {}",
            server.name,
            text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        )
    })
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
fn collected(report: &str, pid: u32) -> Option<u64> {
    let prefix = format!("=={pid}== Collected :");
    report.lines().find_map(|l| {
        let after = l.strip_prefix(&prefix)?;
        after.trim().parse().ok()
    })
}
