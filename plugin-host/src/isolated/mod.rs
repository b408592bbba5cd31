//! The host side of isolation `process`: a plugin's tools as [`ToolFactory`](tool_api::ToolFactory)s whose calls
//! run in a worker process (see [`crate::worker`] and [`crate::protocol`]).
//!
//! One [`PluginWorker`] per loaded package owns the worker process. A call is one
//! [`ToWorker::Execute`](crate::protocol::ToWorker::Execute) frame and one [`FromWorker::Done`](crate::protocol::FromWorker::Done) frame; the host answers the
//! tool's callbacks in between on a blocking thread, through the call's real context, so
//! file access has exactly the confinement and class checks of an in-process call.
//!
//! A call to a running worker is a future on the host's async thread
//! ([`tool_api::Tool::execute_async`]): its frame is written without waiting, and the
//! worker's reader thread wakes it with each frame, so a call costs the wake-ups of the
//! worker and of its reader, not also those of a blocking thread in between. A call whose
//! frame the socket cannot take at once (large, or a worker that stopped reading), or one
//! that must start the worker first, runs on a blocking thread as before.
//!
//! When the worker dies (a signal, `abort()`, the memory limit, a protocol violation, or
//! the host killing it because a cancelled call did not stop within the grace period),
//! every call it was running ends with a `Failed` error that names the plugin and the cause;
//! the next call starts a new worker (at once after one failure, then with a doubling delay
//! up to 30 s while it keeps failing). Other plugins and the host never notice.
//!
//! The worker runs in an OS sandbox ([`crate::sandboxing`]) that it applies to itself
//! before it opens the library, and reports what holds in its first frame; with no
//! variable of the host's environment; in a process group of its own.

mod call;
mod process;
mod waiter;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sandbox::{Enforcement, PrivateTmp};
use tool_api::ToolDefinition;

use crate::error::Refusal;
use crate::library::Inspection;
use crate::sandboxing::{WorkerGrant, WorkerPlan};
use process::{Process, StartError, Started};

pub(crate) use call::IsolatedToolFactory;

/// The default per-worker memory limit (address space): 1 GiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;

/// How long a write to a worker may block before the worker is declared stuck (5 s).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the host waits for a plugin's answer to a quick question (per-call
/// concurrency safety) before it uses the tool's definition instead. It is asked on the
/// host's async thread when a call is pushed, so a worker that does not answer (stopped,
/// or hostile) may hold that thread no longer than this. A worker answers in tens of
/// microseconds; the rest is room for a loaded machine's wake-ups (it was 250 ms, and
/// one such worker held every session for that long at each of its calls).
const QUESTION_TIMEOUT: Duration = Duration::from_millis(50);

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
    /// How workers are confined (workspaces for `execute` plugins, whether to run
    /// unconfined where the sandbox cannot be enforced).
    pub sandbox: crate::sandboxing::WorkerSandbox,
}

impl WorkerSettings {
    /// Workers started as `program args… --library LIB --memory-limit BYTES [--sandbox
    /// JSON]`, with the default memory limit, the dispatcher's default cancel grace (30 s)
    /// and the default sandbox (no workspace; never unconfined).
    pub fn new<A: Into<OsString>>(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = A>,
    ) -> Self {
        WorkerSettings {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            memory_limit: Some(DEFAULT_MEMORY_LIMIT),
            cancel_grace: dispatcher_core::Timeouts::default().cancel_grace,
            sandbox: crate::sandboxing::WorkerSandbox::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
    plan: WorkerPlan,
    /// The private temporary directory of a worker that starts programs (kept across
    /// restarts, removed with the worker).
    tmp: Option<PrivateTmp>,
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
    /// What the worker may do beyond its context.
    pub grant: WorkerGrant,
    /// What its sandbox holds, as the running worker checked it (`None`: none runs, or it
    /// runs unconfined: see [`WorkerStatus::unsandboxed`]).
    pub sandbox: Option<Enforcement>,
    /// Why it runs unconfined, when `allow_unsandboxed` let it.
    pub unsandboxed: Option<String>,
}

impl WorkerStatus {
    /// One line: `sandbox: context only, enforced (Landlock ABI 7, …)`.
    pub fn sandbox_line(&self) -> String {
        match (&self.unsandboxed, &self.sandbox) {
            (Some(why), _) => format!("UNSANDBOXED ({}): {why}", self.grant),
            (None, Some(e)) => format!("sandbox: {}, {}", self.grant, e.summary()),
            (None, None) => format!("sandbox: {} (no worker running)", self.grant),
        }
    }
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
    /// Starts the worker for a package's library, confined as `plan` says, and reads what
    /// it exports.
    pub(crate) fn start(
        plugin: &str,
        library: &Path,
        settings: &WorkerSettings,
        plan: WorkerPlan,
    ) -> Result<(Arc<PluginWorker>, Inspection), Refusal> {
        let tmp = if plan.needs_tmp() {
            Some(PrivateTmp::new().map_err(|e| Refusal::Worker {
                detail: e.to_string(),
            })?)
        } else {
            None
        };
        let started = process::start(
            plugin,
            library,
            settings,
            &plan,
            tmp.as_ref().map(PrivateTmp::path),
        );
        match started {
            Ok(Started {
                process,
                inspection,
            }) => Ok((
                Arc::new(PluginWorker {
                    plugin: plugin.to_string(),
                    library: library.to_path_buf(),
                    settings: settings.clone(),
                    plan,
                    tmp,
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
        let (pid, last_failure, sandbox) = match &*state {
            State::Running(p) if p.alive() => (Some(p.pid), None, p.sandbox.clone()),
            State::Running(p) => (None, Some(p.cause()), None),
            State::Down { cause, .. } => (None, Some(cause.clone()), None),
        };
        WorkerStatus {
            plugin: self.plugin.clone(),
            pid,
            restarts: self.restarts.load(Ordering::Relaxed),
            last_failure,
            grant: self.plan.grant,
            sandbox,
            unsandboxed: self.plan.confinement.as_ref().err().cloned(),
        }
    }

    /// Where its tools' calls run, from its plan: what its sandbox holds on this kernel,
    /// or why it runs unconfined. The same across restarts, so a client's tool list does
    /// not change when a worker does (the running worker's own report is in
    /// [`PluginWorker::status`]).
    pub fn placement(&self) -> tool_api::Placement {
        let (state, detail) = match &self.plan.confinement {
            Err(why) => ("unsandboxed".to_string(), format!("UNSANDBOXED: {why}")),
            Ok(c) => match sandbox::expected(c) {
                Ok(e) => (e.state.to_string(), e.summary()),
                Err(missing) => ("unsandboxed".to_string(), missing.to_string()),
            },
        };
        tool_api::Placement::Worker {
            grant: self.plan.grant.to_string(),
            state,
            detail,
        }
    }

    /// Stops the worker on purpose (logged as a stop, not a crash); its running calls end
    /// as failed, saying the host stopped it.
    pub fn stop(&self) {
        if let State::Running(p) = &*lock(&self.state) {
            p.stop();
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
        let started = process::start(
            &self.plugin,
            &self.library,
            &self.settings,
            &self.plan,
            self.tmp.as_ref().map(PrivateTmp::path),
        );
        let restarted = match started {
            Ok(Started {
                process,
                inspection,
            }) if inspection.tools == self.tools => Ok(process),
            Ok(Started { process, .. }) => {
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
