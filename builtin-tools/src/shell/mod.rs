//! The `shell` tool: runs a command with `/bin/sh -c` in the workspace directory.
//!
//! The command runs in the call's sandbox ([`ToolContext::process_sandbox`], with the
//! host's settings from [`ToolContext::sandbox_settings`]): under `workspace-write` (the
//! default) it reads and runs everything but the deny list (keys, tokens, histories:
//! hidden), writes the workspace, a private temporary directory (`TMPDIR`), the writable
//! roots and the build caches, and has no network unless granted, then only through the
//! egress proxy to the hosts `[sandbox.network] allow` names; under `read-only` it writes
//! only the temporary directory; under `host` it runs with the user's rights. Its
//! environment is the host's minus every secret (`[sandbox.env]`). Where the granted
//! sandbox cannot be enforced the command is refused (`permission_denied`, naming what is
//! missing), unless the host allows running unconfined (`allow_unsandboxed`). The
//! metadata's `sandbox` says what it ran in; when a command fails, what the sandbox
//! denied it (a path, a host) is added to its result and `sandbox_denials`, with the
//! setting that allows it.
//!
//! The command runs in a session of its own (`setsid` in the child before `exec`), so it
//! has no controlling terminal: a program that asks on `/dev/tty` (a password, an SSH
//! host key, a git credential) fails at once instead of stopping, unseen, until the call's
//! timeout. The session's one process group is the command's. On cancellation (the host's
//! signal or [`Tool::cancel`]) the whole group gets SIGTERM, and SIGKILL [`KILL_AFTER`]
//! later if it is still running; the output captured so far is returned. When the shell exits, anything it
//! left running in its group is killed. Each of stdout and stderr keeps its first
//! [`OUTPUT_CAP`] bytes; the rest is counted and dropped.
//!
//! A process the command moved out of its group (`setsid`, a daemon that detaches) is not
//! reached by the group's signals. If it keeps the command's stdout or stderr open, the call
//! does not wait for it: [`OUTPUT_GRACE`] after the shell exits, the call returns what
//! arrived, says which stream was left open (the text and `output_left_open` in the
//! metadata), and stops reading that pipe (a later write to it gets `EPIPE`/`SIGPIPE`).
//!
//! While the command runs, what it prints (the kept part) is streamed as live output
//! ([`ToolContext::output`], `tool.output_delta` events), stderr lines prefixed `[stderr] `.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, Signal, kill_process_group};
mod confine;

use confine::{confine, denials, serve_egress};
use serde::Deserialize;
use serde_json::json;
use tool_api::schemars::{self, JsonSchema};
use tool_api::{SideEffect, ToolContext, ToolDefinition, ToolError, ToolOutput, TypedTool};

/// How long after SIGTERM a still-running command gets SIGKILL.
pub const KILL_AFTER: Duration = Duration::from_secs(5);
/// Bytes kept of each of stdout and stderr.
pub const OUTPUT_CAP: usize = 64 * 1024;
/// How often a running command's loop forwards output and checks for cancellation.
const POLL: Duration = Duration::from_millis(10);
const POLL_SPEC: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 10_000_000,
};
/// How long after the command exits its output may still arrive. A pipe still open then is
/// held by a process outside the command's group; what arrived so far is returned.
pub const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// `shell` (execute): runs a shell command in the workspace directory.
#[derive(Default)]
pub struct Shell {
    pgid: AtomicI32,
    cancel_requested: AtomicBool,
}

/// A command line for /bin/sh, run in the workspace directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellInput {
    /// The command line to run.
    #[schemars(length(min = 1))]
    pub command: String,
}

/// Signals the command's process group. While the shell is not yet reaped
/// (`shell_unreaped`), a group that is not there yet (`setsid` has not made it) means the
/// shell itself gets the signal; once reaped, its pid may be another process's.
fn signal_group(pgid: i32, signal: Signal, shell_unreaped: bool) {
    if let Some(pid) = Pid::from_raw(pgid) {
        // ESRCH (already gone) is fine.
        if kill_process_group(pid, signal) == Err(rustix::io::Errno::SRCH) && shell_unreaped {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// `/bin/sh -c command` in a session of its own: the child calls `setsid` before `exec`,
/// so its pid is the session's and its process group's id.
fn shell_command(command: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(command);
    sandbox::new_session(&mut cmd);
    cmd
}

/// What a capture thread reports.
enum Captured {
    /// `read` bytes arrived on a stream; `kept` is the part of them within `OUTPUT_CAP`.
    Chunk {
        which: usize,
        kept: Vec<u8>,
        read: usize,
    },
    /// The stream ended.
    Done(usize),
}

/// How often a capture thread that waits for output looks whether it was told to stop
/// (50 ms).
const STOP_CHECK: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 50_000_000,
};

/// Reads a stream to its end, reporting each chunk as it arrives and keeping no more than
/// `OUTPUT_CAP` bytes of it. It stops early when `stop` is set: a process outside the
/// command's group (started with `setsid`, a daemon) may hold the pipe open for ever.
fn capture(
    mut stream: impl Read + AsFd + Send + 'static,
    tx: mpsc::Sender<Captured>,
    which: usize,
    stop: Arc<AtomicBool>,
) {
    thread::spawn(move || {
        let mut kept_len = 0usize;
        let mut buf = [0u8; 8192];
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let mut fds = [PollFd::new(&stream, PollFlags::IN)];
            match poll(&mut fds, Some(&STOP_CHECK)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(_) => break,
            }
            match stream.read(&mut buf) {
                Ok(0) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
                Ok(n) => {
                    let room = OUTPUT_CAP.saturating_sub(kept_len);
                    let kept = buf[..n.min(room)].to_vec();
                    kept_len += kept.len();
                    if tx
                        .send(Captured::Chunk {
                            which,
                            kept,
                            read: n,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Captured::Done(which));
    });
}

/// One stream's output as the call has received it.
#[derive(Default)]
struct Stream {
    /// Its first `OUTPUT_CAP` bytes.
    kept: Vec<u8>,
    /// How many bytes arrived in all.
    total: usize,
    /// It reached its end (else something still holds it open).
    ended: bool,
    live: LiveText,
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

/// Records a captured chunk and streams it to the context as live output.
fn receive(ctx: &ToolContext, streams: &mut [Stream; 2], msg: Captured) {
    match msg {
        Captured::Chunk { which, kept, read } => {
            let stream = &mut streams[which];
            stream.total += read;
            stream.kept.extend_from_slice(&kept);
            let text = stream.live.push(&kept);
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
        Captured::Done(which) => streams[which].ended = true,
    }
}

/// Waits at most [`POLL`] for a command's shell to exit. On Linux its pidfd becomes
/// readable the moment it does, so a quick command is not held until the next poll
/// (which made every command take at least 10 ms); elsewhere, a plain sleep.
struct ExitWatch(Option<std::os::fd::OwnedFd>);

impl ExitWatch {
    fn new(pid: i32) -> ExitWatch {
        #[cfg(target_os = "linux")]
        let fd = Pid::from_raw(pid).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        #[cfg(not(target_os = "linux"))]
        let fd = {
            let _ = pid;
            None
        };
        ExitWatch(fd)
    }

    fn wait(&self) {
        match &self.0 {
            Some(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                let _ = poll(&mut fds, Some(&POLL_SPEC));
            }
            None => thread::sleep(POLL),
        }
    }
}

/// How the command's process ended, and how far it had to be stopped.
struct Ended {
    status: std::process::ExitStatus,
    /// SIGTERM was sent to its group (the call was cancelled).
    term_sent: bool,
    /// SIGKILL followed, after [`KILL_AFTER`].
    killed: bool,
}

/// Starts `command` in the call's sandbox, its output piped: the process, its sandbox
/// (kept while it runs) and its egress proxy (when it may use the network).
fn start(
    command: &str,
    ctx: &ToolContext,
) -> Result<
    (
        std::process::Child,
        confine::Confined,
        Option<sandbox::egress::Egress>,
    ),
    ToolError,
> {
    let mut confined = confine(ctx)?;
    let mut cmd = shell_command(command);
    cmd.current_dir(ctx.workspace_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    confined.settings.env.apply(&mut cmd);
    if let Some(tmp) = &confined.tmp {
        cmd.env("TMPDIR", tmp.path());
    }
    if confined.grant.is_some_and(|g| g.network) {
        cmd.envs(sandbox::egress::proxy_env());
    }
    let attached = match confined.prepared.take() {
        Some(prepared) => Some(prepared.attach(&mut cmd).map_err(|e| {
            ToolError::failed(format!("could not prepare the command's sandbox: {e}"))
        })?),
        None => None,
    };
    let mut child = cmd.spawn().map_err(|e| {
        ToolError::failed(format!(
            "could not start the shell (/bin/sh) in sandbox '{}': {e}",
            confined.label
        ))
    })?;
    let egress = match attached {
        Some(attached) => match serve_egress(&confined.settings, attached) {
            Ok(egress) => egress,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        },
        None => None,
    };
    Ok((child, confined, egress))
}

impl Shell {
    /// Passes the command's output on as it comes until it exits; on cancellation,
    /// SIGTERM to its process group, then SIGKILL after [`KILL_AFTER`].
    fn supervise(
        &self,
        child: &mut std::process::Child,
        pgid: i32,
        ctx: &ToolContext,
        rx: &mpsc::Receiver<Captured>,
        streams: &mut [Stream; 2],
    ) -> Result<Ended, ToolError> {
        let exited = ExitWatch::new(pgid);
        let mut term_sent: Option<Instant> = None;
        let mut killed = false;
        loop {
            while let Ok(msg) = rx.try_recv() {
                receive(ctx, streams, msg);
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    return Ok(Ended {
                        status,
                        term_sent: term_sent.is_some(),
                        killed,
                    });
                }
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
                    signal_group(pgid, Signal::TERM, true);
                    term_sent = Some(Instant::now());
                }
                Some(at) if !killed && at.elapsed() >= KILL_AFTER => {
                    ctx.log().warn(format_args!(
                        "command still running {}s after SIGTERM: SIGKILL",
                        KILL_AFTER.as_secs()
                    ));
                    signal_group(pgid, Signal::KILL, true);
                    killed = true;
                }
                _ => {}
            }
            exited.wait();
        }
    }
}

/// Reads what is left of the output for [`OUTPUT_GRACE`] after the command exited; the
/// streams still open then (held by a process outside its group) are named, and no
/// longer read.
fn drain(
    ctx: &ToolContext,
    rx: &mpsc::Receiver<Captured>,
    streams: &mut [Stream; 2],
    stop: &AtomicBool,
) -> Vec<&'static str> {
    let deadline = Instant::now() + OUTPUT_GRACE;
    while !streams.iter().all(|s| s.ended) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(msg) => receive(ctx, streams, msg),
            Err(_) => break,
        }
    }
    stop.store(true, Ordering::Release);
    let left_open: Vec<&str> = ["stdout", "stderr"]
        .into_iter()
        .zip(streams.iter())
        .filter(|(_, s)| !s.ended)
        .map(|(name, _)| name)
        .collect();
    if !left_open.is_empty() {
        ctx.log().warn(format_args!(
            "the command exited but its {} stayed open, held by a process outside its group",
            left_open.join(" and ")
        ));
    }
    left_open
}

/// The result's text: stdout, then stderr under `[stderr]`, each with a note when cut
/// (`kept` bytes of `total`), then the streams left open.
fn output_text(
    (stdout, stdout_total): (&[u8], usize),
    (stderr, stderr_total): (&[u8], usize),
    left_open: &[&str],
) -> String {
    let mut text = String::from_utf8_lossy(stdout).into_owned();
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
        text.push_str(&String::from_utf8_lossy(stderr));
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
    if !left_open.is_empty() {
        text.push_str(&format!(
            "[{} still open {}s after the command exited, held by a process it started \
             outside its process group (setsid, a daemon), which was not stopped; output \
             after this point is not shown]\n",
            left_open.join(" and "),
            OUTPUT_GRACE.as_secs()
        ));
    }
    text
}

impl TypedTool for Shell {
    type Input = ShellInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "shell",
            "Run a shell command (/bin/sh -c) in the workspace directory and return its stdout, stderr and exit code. Output beyond 64 KiB per stream is cut.",
            SideEffect::Execute,
        )
    }

    fn run(&self, input: ShellInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let command = input.command.as_str();
        let (mut child, confined, egress) = start(command, ctx)?;
        let pgid = i32::try_from(child.id()).unwrap_or(0);
        self.pgid.store(pgid, Ordering::SeqCst);
        ctx.log()
            .debug(format_args!("shell started (pgid {pgid}): {command}"));

        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut streams: [Stream; 2] = Default::default();
        match child.stdout.take() {
            Some(out) => capture(out, tx.clone(), 0, stop.clone()),
            None => streams[0].ended = true,
        }
        match child.stderr.take() {
            Some(err) => capture(err, tx, 1, stop.clone()),
            None => streams[1].ended = true,
        }
        let ended = self.supervise(&mut child, pgid, ctx, &rx, &mut streams)?;
        // Whatever the shell left in its group goes too, so the pipes close.
        signal_group(pgid, Signal::KILL, false);
        let left_open = drain(ctx, &rx, &mut streams, &stop);
        let [
            Stream {
                kept: stdout,
                total: stdout_total,
                ..
            },
            Stream {
                kept: stderr,
                total: stderr_total,
                ..
            },
        ] = streams;
        let status = ended.status;
        let cancelled = ended.term_sent;
        let mut text = output_text((&stdout, stdout_total), (&stderr, stderr_total), &left_open);
        let denied = if status.success() {
            Vec::new()
        } else {
            let output = format!(
                "{}\n{}",
                String::from_utf8_lossy(&stderr),
                String::from_utf8_lossy(&stdout)
            );
            denials(&confined, ctx, egress.as_ref(), &output)
        };
        for d in &denied {
            ctx.log().warn(format_args!("sandbox: {d}"));
            text.push_str(&format!("[sandbox] {d}\n"));
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
            "sigkill_sent": ended.killed,
            "output_left_open": left_open,
            "sandbox": confined.label,
            "sandbox_denials": denied,
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
