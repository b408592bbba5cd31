//! The host side of isolation `process`: a plugin's tools as [`ToolFactory`]s whose calls
//! run in a worker process (see [`crate::worker`] and [`crate::protocol`]).
//!
//! One [`PluginWorker`] per loaded package owns the worker process. A call is one
//! [`ToWorker::Execute`] frame and one [`FromWorker::Done`] frame; the host answers the
//! tool's callbacks in between on the call's own thread, through the call's real context,
//! so file access has exactly the confinement and class checks of an in-process call.
//!
//! When the worker dies (a signal, `abort()`, the memory limit, a protocol violation, or
//! the host killing it because a cancelled call did not stop within the grace period),
//! every call it was running ends with a `Failed` error that names the plugin and the cause;
//! the next call starts a new worker (at once after one failure, then with a doubling delay
//! up to 30 s while it keeps failing). Other plugins and the host never notice.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use abi_stable::std_types::{RResult, RStr};
use serde_json::Value;
use tool_api::abi::{AbiError, OP_CONCURRENCY_SAFE};
use tool_api::{Level, Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput};

use crate::error::Refusal;
use crate::library::Inspection;
use crate::protocol::{
    CallIdentity, FromWorker, HostAnswer, HostOp, PROTOCOL_VERSION, ToWorker, WireError,
    read_frame, write_frame,
};

/// The default per-worker memory limit (address space): 1 GiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;

/// How long a write to a worker may block before the worker is declared stuck (5 s).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the host waits for a plugin's answer to a quick question (per-call
/// concurrency safety) before it uses the tool's definition instead.
const QUESTION_TIMEOUT: Duration = Duration::from_millis(250);

/// How long a worker may take to open its library and report (10 s).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How workers are started and limited.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The worker program (`toolhost`, or any binary that calls [`crate::worker::run`]).
    pub program: PathBuf,
    /// Arguments before the worker's own (`["plugin-worker"]` for `toolhost`).
    pub args: Vec<OsString>,
    /// Address-space limit per worker in bytes (`None`: unlimited). Default 1 GiB.
    pub memory_limit: Option<u64>,
    /// How long a cancelled call may take to stop before its worker is killed.
    pub cancel_grace: Duration,
}

impl WorkerSettings {
    /// Workers started as `program args… --library LIB --memory-limit BYTES`, with the
    /// default memory limit and the dispatcher's default cancel grace (30 s).
    pub fn new<A: Into<OsString>>(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = A>,
    ) -> Self {
        WorkerSettings {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            memory_limit: Some(DEFAULT_MEMORY_LIMIT),
            cancel_grace: dispatcher_core::DispatcherConfig::default().cancel_grace,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a call's waiting thread hears.
enum Event {
    Frame(FromWorker),
    /// The worker is gone, with the cause.
    Died(String),
    /// The call was asked to stop: the grace period starts.
    Cancel,
}

/// One running worker process.
struct Process {
    plugin: String,
    pid: u32,
    writer: Mutex<UnixStream>,
    /// Calls waiting for frames; `None` once the worker is gone.
    pending: Mutex<Option<HashMap<u64, Sender<Event>>>>,
    questions: Mutex<HashMap<u64, mpsc::SyncSender<Result<String, WireError>>>>,
    next: AtomicU64,
    /// Why the host killed it, if it did.
    killed_for: Mutex<Option<String>>,
    /// Why it is gone, once it is.
    cause: Mutex<Option<String>>,
    /// Set when everything the worker printed has been logged.
    log: Arc<LogDrained>,
}

/// Whether a worker's stdout and stderr have been read to their end and logged: they end
/// when the worker (and whatever it started) has closed them.
#[derive(Default)]
struct LogDrained {
    done: Mutex<bool>,
    ended: std::sync::Condvar,
}

impl LogDrained {
    fn set(&self) {
        *lock(&self.done) = true;
        self.ended.notify_all();
    }

    /// Waits until the log has been read to its end, at most `timeout`.
    fn wait(&self, timeout: Duration) {
        let done = lock(&self.done);
        let _ = self.ended.wait_timeout_while(done, timeout, |done| !*done);
    }
}

impl Process {
    fn alive(&self) -> bool {
        lock(&self.pending).is_some()
    }

    /// Writes one frame. A worker that stops reading its requests for [`WRITE_TIMEOUT`]
    /// (a half-written frame cannot be taken back) is killed.
    fn send(&self, message: &ToWorker) -> std::io::Result<()> {
        let result = write_frame(&mut *lock(&self.writer), message);
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

    /// Kills the worker's whole process group (the worker and anything its tools started).
    fn kill(&self, reason: String) {
        lock(&self.killed_for).get_or_insert(reason);
        if let Some(pid) = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }

    fn register(&self, call: u64, tx: Sender<Event>) -> bool {
        match lock(&self.pending).as_mut() {
            Some(pending) => {
                pending.insert(call, tx);
                true
            }
            None => false,
        }
    }

    fn unregister(&self, call: u64) {
        if let Some(pending) = lock(&self.pending).as_mut() {
            pending.remove(&call);
        }
    }

    fn cause(&self) -> String {
        lock(&self.cause)
            .clone()
            .unwrap_or_else(|| "its worker process is gone".into())
    }

    /// Asks the plugin an extension question (a quick one: it is answered on the worker's
    /// reader thread).
    fn ask_plugin(&self, name: &str, payload: String, timeout: Duration) -> Option<String> {
        let request = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        lock(&self.questions).insert(request, tx);
        let sent = self.send(&ToWorker::PluginExt {
            request,
            name: name.into(),
            payload,
        });
        let answer = sent.ok().and_then(|()| rx.recv_timeout(timeout).ok());
        lock(&self.questions).remove(&request);
        answer.and_then(Result::ok)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if lock(&self.pending).is_some() {
            self.kill("the host no longer needs it".into());
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
enum StartError {
    /// The library itself was refused (no entry point, incompatible ABI, …).
    Refused(Refusal),
    /// The worker died or misbehaved before reporting.
    Failed(String),
}

fn start(
    plugin: &str,
    library: &Path,
    settings: &WorkerSettings,
) -> Result<(Arc<Process>, Inspection), StartError> {
    let failed = |what: &str, e: &dyn std::fmt::Display| StartError::Failed(format!("{what}: {e}"));
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
        .arg(settings.memory_limit.unwrap_or(0).to_string())
        .stdin(Stdio::from(OwnedFd::from(worker_end)))
        .stdout(Stdio::from(log_write))
        .stderr(Stdio::from(log_write2))
        // Its own process group: a terminal's ^C reaches the host, which cancels calls;
        // the host kills the group.
        .process_group(0)
        // Fewer malloc arenas: the address-space limit measures what the plugin uses.
        .env("MALLOC_ARENA_MAX", "2")
        // A crash explains itself in a few lines (kept for the call's error), not a
        // backtrace of the worker's own frames.
        .env("RUST_BACKTRACE", "0");
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
    let pid = child.id();
    let tail = Arc::new(Tail::default());
    let drained = Arc::new(LogDrained::default());
    {
        let tail = tail.clone();
        let plugin = plugin.to_string();
        let drained = drained.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("plugin-log-{plugin}"))
            .spawn(move || {
                let mut reader = BufReader::new(log_read);
                let mut line = Vec::new();
                while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end();
                    // Plugins log through their context; what reaches the worker's stdout or
                    // stderr is unexpected, so it is shown.
                    tracing::warn!(target: "toolhost::plugin_worker", plugin = %plugin, pid, "worker output: {text}");
                    tail.push(text);
                    line.clear();
                }
                drained.set();
            });
        if let Err(e) = spawned {
            return Err(failed("cannot start the worker's log thread", &e));
        }
    }
    let mut child = Some(child);
    let mut reader = host_end
        .try_clone()
        .map_err(|e| failed("cannot clone the worker's socket", &e))?;
    let _ = reader.set_read_timeout(Some(STARTUP_TIMEOUT));
    let first = read_frame::<FromWorker>(&mut reader);
    let _ = reader.set_read_timeout(None);
    let ended = |child: &mut Option<Child>, tail: &Tail, what: &str| {
        let status = reap(child, Duration::from_secs(2), pid);
        drained.wait(Duration::from_millis(300));
        StartError::Failed(format!(
            "{what}: it {}{}",
            describe_exit(status),
            tail.render()
        ))
    };
    let inspection = match first {
        Ok(Some(FromWorker::Ready {
            protocol,
            inspection,
        })) if protocol == PROTOCOL_VERSION => inspection,
        Ok(Some(FromWorker::Ready { protocol, .. })) => {
            kill_group(pid);
            reap(&mut child, Duration::from_secs(2), pid);
            return Err(StartError::Failed(format!(
                "the worker speaks protocol {protocol}, this host {PROTOCOL_VERSION}: use the worker of the same toolhost build"
            )));
        }
        Ok(Some(FromWorker::Refused { refusal })) => {
            reap(&mut child, Duration::from_secs(2), pid);
            return Err(StartError::Refused(refusal));
        }
        Ok(Some(other)) => {
            kill_group(pid);
            return Err(ended(
                &mut child,
                &tail,
                &format!("the worker broke the protocol at start-up (sent {other:?} first)"),
            ));
        }
        Ok(None) => return Err(ended(&mut child, &tail, "the worker exited at start-up")),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            kill_group(pid);
            return Err(ended(
                &mut child,
                &tail,
                &format!(
                    "the worker did not report within {} s and was killed",
                    STARTUP_TIMEOUT.as_secs()
                ),
            ));
        }
        Err(e) => {
            kill_group(pid);
            return Err(ended(
                &mut child,
                &tail,
                &format!("the worker broke the protocol at start-up ({e})"),
            ));
        }
    };
    let _ = host_end.set_write_timeout(Some(WRITE_TIMEOUT));
    let process = Arc::new(Process {
        plugin: plugin.to_string(),
        pid,
        writer: Mutex::new(host_end),
        pending: Mutex::new(Some(HashMap::new())),
        questions: Mutex::new(HashMap::new()),
        next: AtomicU64::new(1),
        killed_for: Mutex::new(None),
        cause: Mutex::new(None),
        log: drained.clone(),
    });
    let weak = Arc::downgrade(&process);
    let spawned = std::thread::Builder::new()
        .name(format!("plugin-worker-{plugin}"))
        .spawn(move || {
            let violation = route(&mut BufReader::new(reader), &weak);
            if violation.is_some() {
                kill_group(pid);
            }
            // Give a dying worker a moment to finish exiting before it is killed.
            let status = reap(&mut child, Duration::from_millis(500), pid);
            drained.wait(Duration::from_millis(300));
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
            let cause = format!(
                "plugin '{}' crashed: {what}{}. Other tools are not affected; the worker restarts on the next call.",
                process.plugin,
                tail.render()
            );
            tracing::warn!(plugin = %process.plugin, pid, "{cause}");
            *lock(&process.cause) = Some(cause.clone());
            let pending = lock(&process.pending).take().unwrap_or_default();
            lock(&process.questions).clear();
            for (_, tx) in pending {
                let _ = tx.send(Event::Died(cause.clone()));
            }
        });
    if let Err(e) = spawned {
        kill_group(pid);
        return Err(failed("cannot start the worker's reader thread", &e));
    }
    Ok((process, inspection))
}

fn kill_group(pid: u32) {
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
            if let Some(tx) = tx {
                let _ = tx.send(Event::Frame(frame));
            }
        }
    }
}

/// The state of one package's worker.
enum State {
    Running(Arc<Process>),
    Down { cause: String, retry_at: Instant },
}

/// A package's worker process: started at load, restarted on demand after it dies.
pub struct PluginWorker {
    plugin: String,
    library: PathBuf,
    settings: WorkerSettings,
    tools: Vec<ToolDefinition>,
    state: Mutex<State>,
    restarts: AtomicU64,
    failures: AtomicU32,
}

/// What [`PluginWorker::status`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The plugin.
    pub plugin: String,
    /// The running worker's pid, if one runs.
    pub pid: Option<u32>,
    /// How many times it was restarted.
    pub restarts: u64,
    /// Why the last worker died, if it did and none runs now.
    pub last_failure: Option<String>,
}

impl std::fmt::Debug for PluginWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginWorker")
            .field("plugin", &self.plugin)
            .field("status", &self.status())
            .finish()
    }
}

/// The delay before restart attempt `n` after consecutive failures: none after the first,
/// then 250 ms doubling up to 30 s.
fn backoff(failures: u32) -> Duration {
    if failures <= 1 {
        Duration::ZERO
    } else {
        Duration::from_millis(250)
            .saturating_mul(1 << (failures - 2).min(7))
            .min(Duration::from_secs(30))
    }
}

impl PluginWorker {
    /// Starts the worker for a package's library and reads what it exports.
    pub(crate) fn start(
        plugin: &str,
        library: &Path,
        settings: &WorkerSettings,
    ) -> Result<(Arc<PluginWorker>, Inspection), Refusal> {
        match start(plugin, library, settings) {
            Ok((process, inspection)) => Ok((
                Arc::new(PluginWorker {
                    plugin: plugin.to_string(),
                    library: library.to_path_buf(),
                    settings: settings.clone(),
                    tools: inspection.tools.clone(),
                    state: Mutex::new(State::Running(process)),
                    restarts: AtomicU64::new(0),
                    failures: AtomicU32::new(0),
                }),
                inspection,
            )),
            Err(StartError::Refused(refusal)) => Err(refusal),
            Err(StartError::Failed(detail)) => Err(Refusal::Worker { detail }),
        }
    }

    /// The plugin's name.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Whether a worker runs, its restarts, and why the last one died.
    pub fn status(&self) -> WorkerStatus {
        let state = lock(&self.state);
        let (pid, last_failure) = match &*state {
            State::Running(p) if p.alive() => (Some(p.pid), None),
            State::Running(p) => (None, Some(p.cause())),
            State::Down { cause, .. } => (None, Some(cause.clone())),
        };
        WorkerStatus {
            plugin: self.plugin.clone(),
            pid,
            restarts: self.restarts.load(Ordering::Relaxed),
            last_failure,
        }
    }

    /// Stops the worker (its running calls end as crashed).
    pub fn stop(&self) {
        if let State::Running(p) = &*lock(&self.state) {
            p.kill("the host stopped it".into());
        }
    }

    /// The worker if one runs now (never starts one).
    fn running(&self) -> Option<Arc<Process>> {
        match &*lock(&self.state) {
            State::Running(p) if p.alive() => Some(p.clone()),
            _ => None,
        }
    }

    /// The running worker, restarting it when it died and its backoff has passed.
    fn process(&self) -> Result<Arc<Process>, String> {
        let mut state = lock(&self.state);
        if let State::Running(p) = &*state {
            if p.alive() {
                return Ok(p.clone());
            }
            let failures = self.failures.fetch_add(1, Ordering::SeqCst) + 1;
            *state = State::Down {
                cause: p.cause(),
                retry_at: Instant::now() + backoff(failures),
            };
        }
        let State::Down { cause, retry_at } = &*state else {
            return Err("unreachable worker state".into());
        };
        let now = Instant::now();
        if now < *retry_at {
            return Err(format!(
                "{cause} It failed {} times in a row; the next restart is in {} ms.",
                self.failures.load(Ordering::SeqCst),
                retry_at.duration_since(now).as_millis()
            ));
        }
        let restarted = match start(&self.plugin, &self.library, &self.settings) {
            Ok((process, inspection)) if inspection.tools == self.tools => Ok(process),
            Ok((process, _)) => {
                process.kill("its library changed".into());
                Err(format!(
                    "plugin '{}' cannot restart: its library now exports different tools than when it was loaded; reload the host",
                    self.plugin
                ))
            }
            Err(StartError::Refused(r)) => {
                Err(format!("plugin '{}' cannot restart: {r}", self.plugin))
            }
            Err(StartError::Failed(detail)) => {
                Err(format!("plugin '{}' cannot restart: {detail}", self.plugin))
            }
        };
        match restarted {
            Ok(process) => {
                self.restarts.fetch_add(1, Ordering::Relaxed);
                tracing::info!(plugin = %self.plugin, pid = process.pid, "plugin worker restarted");
                *state = State::Running(process.clone());
                Ok(process)
            }
            Err(message) => {
                let failures = self.failures.fetch_add(1, Ordering::SeqCst) + 1;
                *state = State::Down {
                    cause: message.clone(),
                    retry_at: Instant::now() + backoff(failures),
                };
                Err(message)
            }
        }
    }

    fn call_finished(&self) {
        self.failures.store(0, Ordering::SeqCst);
    }
}

impl Drop for PluginWorker {
    /// Stops the worker, and waits (half a second at most) until what it printed last has
    /// reached the log: a host that exits next would lose it otherwise.
    fn drop(&mut self) {
        let running = self.running();
        self.stop();
        if let Some(process) = running {
            process.log.wait(Duration::from_millis(500));
        }
    }
}

/// Makes instances of one isolated plugin tool.
pub(crate) struct IsolatedToolFactory {
    pub(crate) worker: Arc<PluginWorker>,
    /// The plugin's definition, never `inline`: a call waits on the worker, so it runs
    /// where timeouts and cancellation reach it.
    pub(crate) definition: ToolDefinition,
    pub(crate) source: String,
    pub(crate) per_call_safety: bool,
}

impl ToolFactory for IsolatedToolFactory {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(IsolatedTool {
            worker: self.worker.clone(),
            name: self.definition.name.clone(),
            running: Mutex::new(Running::default()),
        }))
    }

    fn source(&self) -> &str {
        &self.source
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        // Asked on the host's async thread: only a running worker is asked (a restart
        // belongs to the call, on its own thread); without one the definition decides.
        crate::adapter::judge_concurrency(&self.definition, self.per_call_safety, input, |p| {
            let process = self.worker.running()?;
            process.ask_plugin(OP_CONCURRENCY_SAFE, p, QUESTION_TIMEOUT)
        })
    }
}

#[derive(Default)]
struct Running {
    call: Option<(Arc<Process>, u64, Sender<Event>)>,
    cancelled: bool,
}

/// One isolated call.
struct IsolatedTool {
    worker: Arc<PluginWorker>,
    name: String,
    running: Mutex<Running>,
}

fn tool_error(e: WireError) -> ToolError {
    AbiError {
        code: e.code,
        message: e.message.into(),
    }
    .into()
}

fn answer(ctx: &ToolContext, op: HostOp) -> Result<HostAnswer, WireError> {
    fn done<T>(
        r: RResult<T, AbiError>,
        f: impl FnOnce(T) -> HostAnswer,
    ) -> Result<HostAnswer, WireError> {
        match r {
            RResult::ROk(v) => Ok(f(v)),
            RResult::RErr(e) => Err(WireError {
                code: e.code,
                message: e.message.into_string(),
            }),
        }
    }
    let host = ctx.host();
    match op {
        HostOp::Read { path } => done(host.fs_read(path.as_str().into()), |t| {
            HostAnswer::Text(t.into_string())
        }),
        HostOp::ReadBytes { path } => done(host.fs_read_bytes(path.as_str().into()), |b| {
            HostAnswer::Bytes(b.into_vec())
        }),
        HostOp::Write { path, data } => done(
            host.fs_write(path.as_str().into(), data.as_slice().into()),
            |()| HostAnswer::Unit,
        ),
        HostOp::Append { path, data } => done(
            host.fs_append(path.as_str().into(), data.as_slice().into()),
            |()| HostAnswer::Unit,
        ),
        HostOp::Exists { path } => done(host.fs_exists(path.as_str().into()), HostAnswer::Bool),
        HostOp::List { path } => done(host.fs_list(path.as_str().into()), |n| {
            HostAnswer::Names(n.into_iter().map(|s| s.into_string()).collect())
        }),
        HostOp::Delete { path } => {
            done(host.fs_delete(path.as_str().into()), |()| HostAnswer::Unit)
        }
        HostOp::Patch { path, old, new } => done(
            host.fs_patch(
                path.as_str().into(),
                old.as_str().into(),
                new.as_str().into(),
            ),
            |()| HostAnswer::Unit,
        ),
        HostOp::Extension { name, payload } => done(
            host.extension(RStr::from(name.as_str()), RStr::from(payload.as_str())),
            |t| HostAnswer::Text(t.into_string()),
        ),
    }
}

impl Tool for IsolatedTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let process = self.worker.process().map_err(ToolError::failed)?;
        let call = process.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        if !process.register(call, tx.clone()) {
            return Err(ToolError::failed(process.cause()));
        }
        let cancelled = {
            let mut running = lock(&self.running);
            running.call = Some((process.clone(), call, tx));
            running.cancelled
        };
        let _unregister = Unregister(&process, call);
        let log_level = (1..=5u8)
            .rev()
            .find(|&l| ctx.log().enabled(Level::from_code(l)))
            .unwrap_or(0);
        let execute = ToWorker::Execute {
            call,
            tool: self.name.clone(),
            input,
            identity: CallIdentity {
                session_id: ctx.session_id().into(),
                turn_id: ctx.turn_id().into(),
                tool_use_id: ctx.tool_use_id().into(),
                workspace_root: ctx.workspace_root().into(),
            },
            log_level,
        };
        if let Err(e) = process.send(&execute) {
            // The reader notices the death and explains it; wait for that.
            tracing::debug!(plugin = %process.plugin, "cannot send a call to the worker: {e}");
        }
        if cancelled {
            let _ = process.send(&ToWorker::Cancel { call });
        }
        let grace = self.worker.settings.cancel_grace;
        let mut deadline = cancelled.then(|| Instant::now() + grace);
        loop {
            let event = match deadline {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            match event {
                Ok(Event::Frame(FromWorker::Host { request, op, .. })) => {
                    let result = answer(ctx, op);
                    let _ = process.send(&ToWorker::HostReply {
                        call,
                        request,
                        result,
                    });
                }
                Ok(Event::Frame(FromWorker::Log { level, message, .. })) => {
                    ctx.host().log(level, message.as_str().into());
                }
                Ok(Event::Frame(FromWorker::Output { chunk, .. })) => ctx.output(&chunk),
                Ok(Event::Frame(FromWorker::Done { result, .. })) => {
                    self.worker.call_finished();
                    return result.map_err(tool_error);
                }
                Ok(Event::Frame(_)) => {}
                Ok(Event::Died(cause)) => return Err(ToolError::failed(cause)),
                Ok(Event::Cancel) => {
                    if deadline.is_none() {
                        let _ = process.send(&ToWorker::Cancel { call });
                        deadline = Some(Instant::now() + grace);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    deadline = None;
                    process.kill(format!(
                        "tool '{}' did not stop within {} ms of being cancelled",
                        self.name,
                        grace.as_millis()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ToolError::failed(process.cause()));
                }
            }
        }
    }

    /// Only wakes the call's own thread, which tells the worker: `cancel` is called from
    /// the host's async threads and must never wait on the socket.
    fn cancel(&self) -> bool {
        let mut running = lock(&self.running);
        running.cancelled = true;
        if let Some((_, _, tx)) = &running.call {
            let _ = tx.send(Event::Cancel);
        }
        true
    }
}

struct Unregister<'a>(&'a Process, u64);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0.unregister(self.1);
    }
}
