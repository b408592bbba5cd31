//! The `shell` tool: runs a command with `/bin/sh -c` in the workspace directory.
//!
//! The command runs in its own process group. On cancellation (the host's signal or
//! [`Tool::cancel`]) the whole group gets SIGTERM, and SIGKILL [`KILL_AFTER`] later if it is
//! still running; the output captured so far is returned. When the shell exits, anything it
//! left running in its group is killed, so a call leaves no processes behind. Each of stdout
//! and stderr keeps its first [`OUTPUT_CAP`] bytes; the rest is counted and dropped.
//!
//! While the command runs, what it prints (the kept part) is streamed as live output
//! ([`ToolContext::output`], `tool.output_delta` events), stderr lines prefixed `[stderr] `.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::{Value, json};
use tool_api::{DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

/// How long after SIGTERM a still-running command gets SIGKILL.
pub const KILL_AFTER: Duration = Duration::from_secs(5);
/// Bytes kept of each of stdout and stderr.
pub const OUTPUT_CAP: usize = 64 * 1024;
const POLL: Duration = Duration::from_millis(10);

/// `shell` (execute): runs a shell command in the workspace directory.
#[derive(Default)]
pub struct Shell {
    pgid: AtomicI32,
    cancel_requested: AtomicBool,
}

impl DefinedTool for Shell {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "shell",
            "Run a shell command (/bin/sh -c) in the workspace directory and return its stdout, stderr and exit code. Output beyond 64 KiB per stream is cut.",
            SideEffect::Execute,
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "description": "The command line to run."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        )
    }
}

fn signal_group(pgid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid) {
        // ESRCH (already gone) is fine.
        let _ = kill_process_group(pid, signal);
    }
}

/// What a capture thread reports.
enum Captured {
    /// A chunk of the kept part of a stream, as it arrives.
    Chunk(usize, Vec<u8>),
    /// The stream ended: its kept bytes and its total length.
    Done(usize, Vec<u8>, usize),
}

/// Reads a stream to its end, keeping the first `OUTPUT_CAP` bytes and reporting each kept
/// chunk as it arrives.
fn capture(mut stream: impl Read + Send + 'static, tx: mpsc::Sender<Captured>, which: usize) {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let mut total = 0usize;
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n;
                    let room = OUTPUT_CAP.saturating_sub(kept.len());
                    let keep = &buf[..n.min(room)];
                    if !keep.is_empty() {
                        kept.extend_from_slice(keep);
                        let _ = tx.send(Captured::Chunk(which, keep.to_vec()));
                    }
                }
            }
        }
        let _ = tx.send(Captured::Done(which, kept, total));
    });
}

/// Turns byte chunks of one stream into text for live output, never splitting a UTF-8
/// character across two chunks.
#[derive(Default)]
struct LiveText {
    pending: Vec<u8>,
}

impl LiveText {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete character at the end waits for the next chunk.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        text
    }
}

/// Streams captured chunks to the context as live output.
fn stream_live(
    ctx: &ToolContext,
    live: &mut [LiveText; 2],
    streams: &mut [(Vec<u8>, usize); 2],
    done: &mut usize,
    msg: Captured,
) {
    match msg {
        Captured::Chunk(which, bytes) => {
            let text = live[which].push(&bytes);
            if text.is_empty() {
                return;
            }
            if which == 0 {
                ctx.output(&text);
            } else {
                let prefixed: String = text
                    .split_inclusive('\n')
                    .map(|line| format!("[stderr] {line}"))
                    .collect();
                ctx.output(&prefixed);
            }
        }
        Captured::Done(which, kept, total) => {
            streams[which] = (kept, total);
            *done += 1;
        }
    }
}

impl Tool for Shell {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let command = input
            .get("command")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::invalid_input("'command' must be a string"))?;
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(command)
            .current_dir(ctx.workspace_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| ToolError::failed(format!("could not start /bin/sh: {e}")))?;
        let pgid = i32::try_from(child.id()).unwrap_or(0);
        self.pgid.store(pgid, Ordering::SeqCst);
        ctx.log()
            .debug(format_args!("shell started (pgid {pgid}): {command}"));

        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            capture(out, tx.clone(), 0);
        }
        if let Some(err) = child.stderr.take() {
            capture(err, tx, 1);
        }

        let mut term_sent: Option<Instant> = None;
        let mut killed = false;
        let mut live: [LiveText; 2] = Default::default();
        let mut streams = [(Vec::new(), 0usize), (Vec::new(), 0usize)];
        let mut done = 0usize;
        let status = loop {
            while let Ok(msg) = rx.try_recv() {
                stream_live(ctx, &mut live, &mut streams, &mut done, msg);
            }
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => {
                    return Err(ToolError::failed(format!(
                        "waiting for the command failed: {e}"
                    )));
                }
            }
            let cancelled = self.cancel_requested.load(Ordering::SeqCst) || ctx.is_cancelled();
            match term_sent {
                None if cancelled => {
                    ctx.log()
                        .info("cancelling: SIGTERM to the command's process group");
                    signal_group(pgid, Signal::TERM);
                    term_sent = Some(Instant::now());
                }
                Some(at) if !killed && at.elapsed() >= KILL_AFTER => {
                    ctx.log().warn(format_args!(
                        "command still running {}s after SIGTERM: SIGKILL",
                        KILL_AFTER.as_secs()
                    ));
                    signal_group(pgid, Signal::KILL);
                    killed = true;
                }
                _ => {}
            }
            thread::sleep(POLL);
        };
        // Whatever the shell left in its group goes too, so the pipes close.
        signal_group(pgid, Signal::KILL);

        let deadline = Instant::now() + Duration::from_secs(2);
        while done < 2 {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(msg) => stream_live(ctx, &mut live, &mut streams, &mut done, msg),
                Err(_) => break,
            }
        }
        let [(stdout, stdout_total), (stderr, stderr_total)] = streams;
        let cancelled = term_sent.is_some();

        let mut text = String::from_utf8_lossy(&stdout).into_owned();
        if stdout_total > stdout.len() {
            text.push_str(&format!(
                "\n[stdout truncated: {} of {stdout_total} bytes shown]",
                stdout.len()
            ));
        }
        if !stderr.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("[stderr]\n");
            text.push_str(&String::from_utf8_lossy(&stderr));
            if stderr_total > stderr.len() {
                text.push_str(&format!(
                    "\n[stderr truncated: {} of {stderr_total} bytes shown]",
                    stderr.len()
                ));
            }
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let ending = match (status.code(), status.signal()) {
            (Some(code), _) => format!("[exit code: {code}]"),
            (None, Some(sig)) => format!("[killed by signal {sig}]"),
            _ => "[exited]".to_string(),
        };
        text.push_str(&ending);
        let metadata = json!({
            "exit_code": status.code(),
            "signal": status.signal(),
            "stdout_bytes": stdout_total,
            "stderr_bytes": stderr_total,
            "cancelled": cancelled,
            "sigterm_sent": cancelled,
            "sigkill_sent": killed,
        });
        let success = status.success() && !cancelled;
        let out = if success {
            ToolOutput::text(text)
        } else {
            ToolOutput::failure(text)
        };
        Ok(out.with_metadata(metadata).with_command(command))
    }

    fn cancel(&self) -> bool {
        let first = !self.cancel_requested.swap(true, Ordering::SeqCst);
        let pgid = self.pgid.load(Ordering::SeqCst);
        // The execute loop sends SIGTERM on its next poll and escalates to SIGKILL.
        first && pgid != 0
    }
}
