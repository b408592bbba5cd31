//! One worker process: started in four steps ([`start`]: spawn, log drain, handshake,
//! router), then written to by calls and read by its router thread until it is gone.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandbox::Enforcement;

use super::waiter::{Event, Waiter};
use super::{STARTUP_TIMEOUT, WRITE_TIMEOUT, WorkerSettings, lock};
use crate::error::Refusal;
use crate::library::Inspection;
use crate::protocol::{FromWorker, PROTOCOL_VERSION, ToWorker, WireError, read_frame, write_frame};
use crate::sandboxing::{WorkerPlan, with_tmp};

/// The largest frame [`Process::send_now`] writes: far below half a socket's send buffer,
/// so the kernel queues it whole or not at all.
const SEND_NOW_LIMIT: usize = 16 * 1024;

/// One running worker process.
pub(super) struct Process {
    pub(super) plugin: String,
    pub(super) pid: u32,
    writer: Mutex<UnixStream>,
    /// Calls waiting for frames; `None` once the worker is gone.
    pending: Mutex<Option<HashMap<u64, Waiter>>>,
    questions: Mutex<HashMap<u64, mpsc::SyncSender<Result<String, WireError>>>>,
    pub(super) next: AtomicU64,
    /// Why the host killed it, if it did.
    killed_for: Mutex<Option<String>>,
    /// The host stopped it on purpose (shutting down, or dropping the plugin): its end is
    /// not a crash.
    stopped: std::sync::atomic::AtomicBool,
    /// Why it is gone, once it is.
    cause: Mutex<Option<String>>,
    /// Set when everything the worker printed has been logged.
    pub(super) log: Arc<LogDrained>,
    /// What its sandbox holds, as the worker checked after applying it (`None`: unconfined).
    pub(super) sandbox: Option<Enforcement>,
    /// Its egress proxy (a `network` worker's one way out): stops accepting with it.
    _egress: Option<sandbox::egress::Egress>,
}

/// Whether a worker's stdout and stderr have been read to their end and logged: they end
/// when the worker (and whatever it started) has closed them.
#[derive(Default)]
pub(super) struct LogDrained {
    done: Mutex<bool>,
    ended: std::sync::Condvar,
}

impl LogDrained {
    fn set(&self) {
        *lock(&self.done) = true;
        self.ended.notify_all();
    }

    /// Waits until the log has been read to its end, at most `timeout`.
    pub(super) fn wait(&self, timeout: Duration) {
        let done = lock(&self.done);
        let _ = self.ended.wait_timeout_while(done, timeout, |done| !*done);
    }
}

impl Process {
    pub(super) fn alive(&self) -> bool {
        lock(&self.pending).is_some()
    }

    /// Writes one frame. A worker that stops reading its requests for [`WRITE_TIMEOUT`]
    /// (a half-written frame cannot be taken back) is killed.
    pub(super) fn send(&self, message: &ToWorker) -> std::io::Result<()> {
        let result = write_frame(&mut *lock(&self.writer), message);
        self.written(result)
    }

    /// Kills the worker when a write failed for want of its reading.
    fn written(&self, result: std::io::Result<()>) -> std::io::Result<()> {
        if let Err(e) = &result
            && matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        {
            self.kill(format!(
                "it stopped reading its requests for {} s",
                WRITE_TIMEOUT.as_secs()
            ));
        }
        result
    }

    /// Stops the worker on purpose: its whole process group is killed, and its end is
    /// logged as a stop, not a crash.
    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        kill_group(self.pid);
    }

    /// Kills the worker's whole process group (the worker and anything its tools started).
    pub(super) fn kill(&self, reason: String) {
        lock(&self.killed_for).get_or_insert(reason);
        kill_group(self.pid);
    }

    /// Writes one frame if it can without waiting: `Ok(false)` when it is large, another
    /// writer holds the socket, or the worker has not read what it was sent (a thread must
    /// write it). For callers on the
    /// host's async threads, which a worker that stops reading must never hold.
    pub(super) fn send_now(&self, message: &ToWorker) -> std::io::Result<bool> {
        use std::io::Write as _;
        let frame = crate::protocol::encode(message)?;
        if frame.len() > SEND_NOW_LIMIT {
            return Ok(false);
        }
        // Held by a thread blocked writing to a worker that stopped reading: not waited for.
        let mut writer = match self.writer.try_lock() {
            Ok(writer) => writer,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
        };
        let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
        match rustix::net::send(&*writer, &frame, flags) {
            Ok(n) if n == frame.len() => Ok(true),
            // Not expected for a frame this small; the rest must follow before any other
            // frame, so it is written here.
            Ok(n) => {
                let rest = writer.write_all(&frame[n..]);
                drop(writer);
                self.written(rest).map(|()| true)
            }
            Err(rustix::io::Errno::AGAIN) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn register(&self, call: u64, waiter: Waiter) -> bool {
        match lock(&self.pending).as_mut() {
            Some(pending) => {
                pending.insert(call, waiter);
                true
            }
            None => false,
        }
    }

    pub(super) fn unregister(&self, call: u64) {
        if let Some(pending) = lock(&self.pending).as_mut() {
            pending.remove(&call);
        }
    }

    pub(super) fn cause(&self) -> String {
        lock(&self.cause)
            .clone()
            .unwrap_or_else(|| "its worker process is gone".into())
    }

    /// Asks the plugin an extension question (a quick one: it is answered on the worker's
    /// reader thread): its answer, or `None` when none comes within `timeout`. Asked from
    /// the host's async thread, so the question goes out only if the socket takes it at
    /// once: a worker that stopped reading is not waited for, and a question over
    /// [`SEND_NOW_LIMIT`] (a call's input of about 16 KB) is not asked.
    pub(super) fn ask_plugin(
        &self,
        name: &str,
        payload: String,
        timeout: Duration,
    ) -> Option<String> {
        let request = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        lock(&self.questions).insert(request, tx);
        let sent = self.send_now(&ToWorker::PluginExt {
            request,
            name: name.into(),
            payload,
        });
        let answer = matches!(sent, Ok(true))
            .then(|| rx.recv_timeout(timeout).ok())
            .flatten();
        lock(&self.questions).remove(&request);
        answer.and_then(Result::ok)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if lock(&self.pending).is_some() {
            self.stop();
        }
    }
}

/// The last lines a worker wrote to stdout/stderr, kept to explain its death.
#[derive(Default)]
struct Tail(Mutex<VecDeque<String>>);

impl Tail {
    const LINES: usize = 6;
    const WIDTH: usize = 300;

    fn push(&self, line: &str) {
        let mut lines = lock(&self.0);
        if lines.len() == Self::LINES {
            lines.pop_front();
        }
        lines.push_back(line.chars().take(Self::WIDTH).collect());
    }

    fn render(&self) -> String {
        let lines = lock(&self.0);
        if lines.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = lines.iter().map(|l| format!("'{l}'")).collect();
            format!("; its last output: {}", quoted.join(" / "))
        }
    }
}

/// How a worker's exit reads in a message.
fn describe_exit(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => {
                let name = rustix::process::Signal::from_named_raw(signal)
                    .map(|s| format!("{s:?}"))
                    .unwrap_or_default();
                let what = match signal {
                    6 => {
                        " (abort: a panic in a panic = \"abort\" build, abort(), or running out of memory)"
                    }
                    9 => " (killed)",
                    11 => " (segmentation fault: the plugin touched memory it does not own)",
                    7 => " (bus error)",
                    4 => " (illegal instruction)",
                    8 => " (arithmetic fault)",
                    31 => " (bad system call: the sandbox's filter stopped it)",
                    _ => "",
                };
                format!(
                    "was killed by signal {signal}{}{what}",
                    if name.is_empty() {
                        String::new()
                    } else {
                        format!(" {name}")
                    }
                )
            }
            (None, None) => "ended".into(),
        },
        None => "ended (its exit status is unknown)".into(),
    }
}

/// Why a worker could not start.
pub(super) enum StartError {
    /// The library itself was refused (no entry point, incompatible ABI, …), or the worker
    /// could not confine itself.
    Refused(Refusal),
    /// The worker died or misbehaved before reporting.
    Failed(String),
}

fn failed(what: &str, e: &dyn std::fmt::Display) -> StartError {
    StartError::Failed(format!("{what}: {e}"))
}

/// A worker that has started and reported.
pub(super) struct Started {
    pub(super) process: Arc<Process>,
    pub(super) inspection: Inspection,
}

/// Starts a worker for `library` and waits for its report: spawn it, drain its log, read
/// its handshake, start the router that hands its frames to calls. `tmp` is its private
/// temporary directory, if its plan needs one.
pub(super) fn start(
    plugin: &str,
    library: &Path,
    settings: &WorkerSettings,
    plan: &WorkerPlan,
    tmp: Option<&Path>,
) -> Result<Started, StartError> {
    let mut spawned = spawn(plugin, library, settings, plan, tmp)?;
    let log = drain_log(plugin, spawned.pid, spawned.log)?;
    let mut child = Some(spawned.child);
    let ready = handshake(&spawned.host_end, spawned.pid, &mut child, &log)?;
    if plan.confinement.is_ok() && ready.sandbox.is_none() {
        // Only a worker program that ignores `--sandbox` gets here (not this build's).
        kill_group(spawned.pid);
        reap(&mut child, Duration::from_secs(2), spawned.pid);
        return Err(StartError::Refused(Refusal::SandboxFailed {
            detail: format!(
                "the worker program {} reported no sandbox although one was asked for, so it was stopped; use the worker of this toolhost build",
                settings.program.display()
            ),
        }));
    }
    let process = Arc::new(Process {
        plugin: plugin.to_string(),
        pid: spawned.pid,
        writer: Mutex::new(spawned.host_end),
        pending: Mutex::new(Some(HashMap::new())),
        questions: Mutex::new(HashMap::new()),
        next: AtomicU64::new(1),
        killed_for: Mutex::new(None),
        stopped: std::sync::atomic::AtomicBool::new(false),
        cause: Mutex::new(None),
        log: log.drained.clone(),
        sandbox: ready.sandbox,
        _egress: spawned.egress.take(),
    });
    route_frames(&process, ready.reader, child, log)?;
    Ok(Started {
        process,
        inspection: ready.inspection,
    })
}

/// A spawned worker, before it has reported.
struct Spawned {
    child: Child,
    pid: u32,
    host_end: UnixStream,
    log: std::io::PipeReader,
    egress: Option<sandbox::egress::Egress>,
}

/// Step 1: the worker process, with the protocol socket as its stdin, its stdout and
/// stderr on a log pipe, in a process group of its own, with an environment of its own (no
/// variable of the host's) and its sandbox on its command line.
fn spawn(
    plugin: &str,
    library: &Path,
    settings: &WorkerSettings,
    plan: &WorkerPlan,
    tmp: Option<&Path>,
) -> Result<Spawned, StartError> {
    let (host_end, worker_end) =
        UnixStream::pair().map_err(|e| failed("cannot make the worker's socket", &e))?;
    let (log_read, log_write) =
        std::io::pipe().map_err(|e| failed("cannot make the worker's log pipe", &e))?;
    let log_write2 = log_write
        .try_clone()
        .map_err(|e| failed("cannot make the worker's log pipe", &e))?;
    let mut command = Command::new(&settings.program);
    command
        .args(&settings.args)
        .arg("--library")
        .arg(library)
        .arg("--memory-limit")
        .arg(settings.memory_limit.unwrap_or(0).to_string());
    let mut attached = None;
    if let Ok(confinement) = &plan.confinement {
        let confinement = match tmp {
            Some(tmp) => with_tmp(confinement, tmp),
            None => confinement.clone(),
        };
        let json = serde_json::to_string(&confinement)
            .map_err(|e| failed("cannot write the worker's sandbox", &e))?;
        command.arg("--sandbox").arg(json);
        // Its namespaces (hidden paths, a network of its own) are made before it starts;
        // it applies the rest to itself.
        if let Some(prepared) = sandbox::Prepared::namespaces_only(&confinement)
            .map_err(|e| failed("cannot prepare the worker's namespaces", &e))?
        {
            attached = Some(
                prepared
                    .attach(&mut command)
                    .map_err(|e| failed("cannot prepare the worker's namespaces", &e))?,
            );
        }
    }
    command
        .env_clear()
        .envs(plan.environment(tmp))
        .stdin(Stdio::from(OwnedFd::from(worker_end)))
        .stdout(Stdio::from(log_write))
        .stderr(Stdio::from(log_write2))
        // Its own process group: a terminal's ^C reaches the host, which cancels calls;
        // the host kills the group.
        .process_group(0);
    let child = command.spawn().map_err(|e| {
        failed(
            &format!(
                "cannot start the worker program '{}'",
                settings.program.display()
            ),
            &e,
        )
    })?;
    // The parent's copies of the child's ends must close, or EOF never comes.
    drop(command);
    let egress = match (attached, &plan.egress) {
        (Some(attached), Some(rules)) => {
            let plugin = plugin.to_string();
            let log: sandbox::egress::OnRefusal = Arc::new(move |refusal| {
                tracing::warn!(plugin = %plugin, "{refusal}");
            });
            match attached.serve(rules.clone(), Some(log)) {
                Ok(egress) => egress,
                Err(e) => {
                    let mut child = child;
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(failed("the worker's egress proxy could not start", &e));
                }
            }
        }
        _ => None,
    };
    Ok(Spawned {
        pid: child.id(),
        child,
        host_end,
        log: log_read,
        egress,
    })
}

/// The worker's log: its last lines, and whether it has been read to its end.
struct Log {
    tail: Arc<Tail>,
    drained: Arc<LogDrained>,
}

/// Step 2: a thread that logs what the worker prints (plugins log through their context;
/// what reaches the worker's stdout or stderr is unexpected, so it is shown) and keeps its
/// last lines to explain a death. Lines that come together (a panic's message, note and
/// backtrace) are one log record.
fn drain_log(plugin: &str, pid: u32, log: std::io::PipeReader) -> Result<Log, StartError> {
    let tail = Arc::new(Tail::default());
    let drained = Arc::new(LogDrained::default());
    let (t, d, plugin) = (tail.clone(), drained.clone(), plugin.to_string());
    std::thread::Builder::new()
        .name(format!("plugin-log-{plugin}"))
        .spawn(move || {
            let mut reader = BufReader::new(log);
            while let Some(record) = next_record(&mut reader) {
                // A death is explained by the panic's message, not by its backtrace.
                for line in record.iter().take_while(|l| *l != "stack backtrace:") {
                    t.push(line);
                }
                let text = record.join("\n");
                tracing::warn!(target: "toolhost::plugin_worker", plugin = %plugin, pid, "worker output: {text}");
            }
            d.set();
        })
        .map_err(|e| failed("cannot start the worker's log thread", &e))?;
    Ok(Log { tail, drained })
}

/// How long after a line the next one still belongs to the same record.
const RECORD_GAP: Duration = Duration::from_millis(25);
/// The same inside a backtrace, whose frames come as they are symbolized.
const BACKTRACE_GAP: Duration = Duration::from_secs(2);
/// The most lines one record holds (a long backtrace goes on in the next).
const RECORD_LINES: usize = 200;

/// The next lines that came together (each followed within [`RECORD_GAP`] by the next,
/// [`BACKTRACE_GAP`] inside a backtrace); `None` at the end of the output.
fn next_record(reader: &mut BufReader<std::io::PipeReader>) -> Option<Vec<String>> {
    let mut record = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if !matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            break;
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        let gap = if text == "stack backtrace:" || text.starts_with(' ') {
            BACKTRACE_GAP
        } else {
            RECORD_GAP
        };
        record.push(text);
        if record.len() == RECORD_LINES || !more_soon(reader, gap) {
            break;
        }
    }
    (!record.is_empty()).then_some(record)
}

/// Whether another line is already buffered, or output arrives within `gap`.
fn more_soon(reader: &BufReader<std::io::PipeReader>, gap: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    if reader.buffer().contains(&b'\n') {
        return true;
    }
    let timeout = Timespec {
        tv_sec: gap.as_secs() as _,
        tv_nsec: gap.subsec_nanos() as _,
    };
    let mut fds = [PollFd::new(reader.get_ref(), PollFlags::IN)];
    matches!(poll(&mut fds, Some(&timeout)), Ok(n) if n > 0)
}

/// What the worker reported at start.
struct Ready {
    inspection: Inspection,
    sandbox: Option<Enforcement>,
    reader: UnixStream,
}

/// Step 3: the worker's first frame, within [`STARTUP_TIMEOUT`]: `Ready` (in this protocol
/// version), or `Refused`; anything else, silence or death fails the start with the
/// worker's exit and last output.
fn handshake(
    host_end: &UnixStream,
    pid: u32,
    child: &mut Option<Child>,
    log: &Log,
) -> Result<Ready, StartError> {
    let mut reader = host_end
        .try_clone()
        .map_err(|e| failed("cannot clone the worker's socket", &e))?;
    let _ = reader.set_read_timeout(Some(STARTUP_TIMEOUT));
    let first = read_frame::<FromWorker>(&mut reader);
    let _ = reader.set_read_timeout(None);
    let ended = |child: &mut Option<Child>, what: &str| {
        let status = reap(child, Duration::from_secs(2), pid);
        log.drained.wait(Duration::from_millis(300));
        StartError::Failed(format!(
            "{what}: it {}{}",
            describe_exit(status),
            log.tail.render()
        ))
    };
    match first {
        Ok(Some(FromWorker::Ready {
            protocol,
            inspection,
            sandbox,
        })) if protocol == PROTOCOL_VERSION => Ok(Ready {
            inspection,
            sandbox,
            reader,
        }),
        Ok(Some(FromWorker::Ready { protocol, .. })) => {
            kill_group(pid);
            reap(child, Duration::from_secs(2), pid);
            Err(StartError::Failed(format!(
                "the worker speaks protocol {protocol}, this host {PROTOCOL_VERSION}: use the worker of the same toolhost build"
            )))
        }
        Ok(Some(FromWorker::Refused { refusal })) => {
            reap(child, Duration::from_secs(2), pid);
            Err(StartError::Refused(refusal))
        }
        Ok(Some(other)) => {
            kill_group(pid);
            Err(ended(
                child,
                &format!("the worker broke the protocol at start-up (sent {other:?} first)"),
            ))
        }
        Ok(None) => Err(ended(child, "the worker exited at start-up")),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            kill_group(pid);
            Err(ended(
                child,
                &format!(
                    "the worker did not report within {} s and was killed",
                    STARTUP_TIMEOUT.as_secs()
                ),
            ))
        }
        Err(e) => {
            kill_group(pid);
            Err(ended(
                child,
                &format!("the worker broke the protocol at start-up ({e})"),
            ))
        }
    }
}

/// Step 4: the router thread. It hands each frame to the call it names until the stream
/// ends; then it reaps the worker, records why it is gone and tells every waiting call.
fn route_frames(
    process: &Arc<Process>,
    reader: UnixStream,
    mut child: Option<Child>,
    log: Log,
) -> Result<(), StartError> {
    let _ = lock(&process.writer).set_write_timeout(Some(WRITE_TIMEOUT));
    let weak = Arc::downgrade(process);
    let pid = process.pid;
    let spawned = std::thread::Builder::new()
        .name(format!("plugin-worker-{}", process.plugin))
        .spawn(move || {
            let violation = route(&mut BufReader::new(reader), &weak);
            if violation.is_some() {
                kill_group(pid);
            }
            // Give a dying worker a moment to finish exiting before it is killed.
            let status = reap(&mut child, Duration::from_millis(500), pid);
            log.drained.wait(Duration::from_millis(300));
            let Some(process) = weak.upgrade() else {
                return;
            };
            let what = match (lock(&process.killed_for).clone(), violation) {
                (Some(reason), _) => format!("its worker process was killed because {reason}"),
                (None, Some(v)) => format!(
                    "its worker process broke the protocol ({v}) and was killed"
                ),
                (None, None) => format!("its worker process {}", describe_exit(status)),
            };
            let cause = if process.stopped.load(Ordering::Relaxed) {
                let cause = format!(
                    "plugin '{}' was stopped by the host; the worker starts again on the next call",
                    process.plugin
                );
                tracing::debug!(plugin = %process.plugin, pid, "{cause}");
                cause
            } else {
                let cause = format!(
                    "plugin '{}' crashed: {what}{}. Other tools are not affected; the worker restarts on the next call.",
                    process.plugin,
                    log.tail.render()
                );
                tracing::warn!(plugin = %process.plugin, pid, "{cause}");
                cause
            };
            *lock(&process.cause) = Some(cause.clone());
            let pending = lock(&process.pending).take().unwrap_or_default();
            lock(&process.questions).clear();
            for (_, waiter) in pending {
                waiter.send(Event::Died(cause.clone()));
            }
        });
    if let Err(e) = spawned {
        kill_group(pid);
        return Err(failed("cannot start the worker's reader thread", &e));
    }
    Ok(())
}

pub(super) fn kill_group(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Waits up to `patience` for the child to exit, then kills its group and waits.
fn reap(child: &mut Option<Child>, patience: Duration, pid: u32) -> Option<ExitStatus> {
    let mut child = child.take()?;
    let deadline = Instant::now() + patience;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                kill_group(pid);
                return child.wait().ok();
            }
            Err(_) => return None,
        }
    }
}

/// Routes the worker's frames to the calls waiting for them, until the stream ends
/// (`None`) or breaks the protocol (`Some(what)`).
fn route(reader: &mut BufReader<UnixStream>, process: &std::sync::Weak<Process>) -> Option<String> {
    loop {
        let frame = match read_frame::<FromWorker>(reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => return None,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Some(e.to_string()),
            // A worker killed mid-frame, or a reset: it died.
            Err(_) => return None,
        };
        let process = process.upgrade()?;
        let call = match &frame {
            FromWorker::Host { call, .. }
            | FromWorker::Log { call, .. }
            | FromWorker::Output { call, .. }
            | FromWorker::Done { call, .. } => *call,
            FromWorker::PluginExtReply { request, result } => {
                if let Some(tx) = lock(&process.questions).remove(request) {
                    let _ = tx.send(result.clone());
                }
                continue;
            }
            FromWorker::Ready { .. } | FromWorker::Refused { .. } => {
                return Some("it reported its library twice".into());
            }
        };
        let done = matches!(frame, FromWorker::Done { .. });
        let mut pending = lock(&process.pending);
        if let Some(pending) = pending.as_mut() {
            let tx = if done {
                pending.remove(&call)
            } else {
                pending.get(&call).cloned()
            };
            // A frame for a call nobody waits for (it was abandoned) is dropped.
            if let Some(waiter) = tx {
                waiter.send(Event::Frame(frame));
            }
        }
    }
}
