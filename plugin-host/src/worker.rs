//! The worker side of isolation `process`: a process that loads one plugin library and
//! serves its calls over the [`crate::protocol`].
//!
//! A host binary offers it as a subcommand (`toolhost plugin-worker`) that calls
//! [`run`] with its remaining arguments; any binary that links plugin-host can do the same.
//! The worker:
//!
//! - limits its own address space (`RLIMIT_AS`, `--memory-limit BYTES`) before it opens the
//!   library, so a memory bomb ends the worker, not the machine;
//! - takes the protocol socket from fd 0 and points fd 0 at `/dev/null`; its stdout and
//!   stderr are the host's log, never the protocol; closes every other descriptor it
//!   inherited;
//! - confines itself to the sandbox on its command line (`--sandbox JSON`, a
//!   [`sandbox::Confinement`]) while it still runs one thread and before it opens the
//!   library (opening a library runs its constructors), and reports what holds; if it
//!   cannot, it refuses ([`Refusal::SandboxFailed`]) and never opens the library;
//! - runs calls on a pool of threads that grows to the number of calls running at once and
//!   is reused (no thread per call); the thread that reads the host's messages never runs
//!   a tool, so it can always deliver the answers to a tool's file operations;
//! - exits as soon as the host's end of the socket closes, whatever its tools are doing.

use std::collections::HashMap;
use std::io::{self, BufReader};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use abi_stable::std_types::{RArc, RResult, RSlice, RStr, RString, RVec};
use tool_api::abi::{
    AbiError, AbiToolBox, ERROR_INTERNAL, HostContext, HostContext_TO, HostCtx, OP_OUTPUT_DELTA,
    PluginModRef, TD_Opaque,
};

use crate::error::Refusal;
use crate::protocol::{
    CallIdentity, FromWorker, HostAnswer, HostOp, PROTOCOL_VERSION, ToWorker, WireError,
    read_frame, write_frame,
};

/// The worker's command line: `--library PATH [--memory-limit BYTES] [--sandbox JSON]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    /// The plugin library to load.
    pub library: PathBuf,
    /// The address-space limit in bytes (`None`: unlimited).
    pub memory_limit: Option<u64>,
    /// The sandbox to confine itself to before opening the library (`None`: unconfined,
    /// as the host decided).
    pub sandbox: Option<sandbox::Confinement>,
}

impl WorkerArgs {
    /// Parses the arguments after the subcommand.
    pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Self, String> {
        let mut library = None;
        let mut memory_limit = None;
        let mut sandbox = None;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.to_str() {
                Some("--library") => library = args.next().map(PathBuf::from),
                Some("--memory-limit") => {
                    let value = args.next().unwrap_or_default();
                    let bytes = value
                        .to_str()
                        .and_then(|v| v.parse::<u64>().ok())
                        .ok_or_else(|| {
                            format!("--memory-limit takes a number of bytes, not {value:?}")
                        })?;
                    memory_limit = (bytes > 0).then_some(bytes);
                }
                Some("--sandbox") => {
                    let value = args.next().unwrap_or_default();
                    let text = value
                        .to_str()
                        .ok_or("--sandbox takes a JSON confinement, not a non-UTF-8 string")?;
                    sandbox = Some(
                        serde_json::from_str(text)
                            .map_err(|e| format!("--sandbox is not a confinement: {e}"))?,
                    );
                }
                _ => return Err(format!("unknown plugin-worker argument {arg:?}")),
            }
        }
        Ok(WorkerArgs {
            library: library.ok_or("plugin-worker needs --library PATH")?,
            memory_limit,
            sandbox,
        })
    }
}

/// Runs a worker until the host hangs up; returns the process exit code. Started by a host,
/// never by hand: its fd 0 must be the host's socket.
pub fn run(args: WorkerArgs) -> i32 {
    if let Some(limit) = args.memory_limit {
        let rlimit = rustix::process::Rlimit {
            current: Some(limit),
            maximum: Some(limit),
        };
        if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::As, rlimit) {
            eprintln!("plugin-worker: cannot set the memory limit: {e}");
            return 2;
        }
    }
    let socket = match take_socket() {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "plugin-worker: fd 0 is not a host socket ({e}); workers are started by a host"
            );
            return 2;
        }
    };
    {
        use std::os::fd::AsRawFd;
        // Whatever the host's process leaked to its children is not the plugin's (first:
        // from here on, descriptors are this process's own).
        sandbox::close_descriptors_except(socket.as_raw_fd());
    }
    let writer = match socket.try_clone() {
        Ok(w) => Arc::new(Mutex::new(w)),
        Err(e) => {
            eprintln!("plugin-worker: {e}");
            return 2;
        }
    };
    let out = Out(writer);
    let enforcement = match args.sandbox.as_ref().map(sandbox::confine_self) {
        None => None,
        Some(Ok(enforcement)) => Some(enforcement),
        Some(Err(e)) => {
            let refusal = Refusal::SandboxFailed {
                detail: e.to_string(),
            };
            let _ = out.send(&FromWorker::Refused { refusal });
            return 5;
        }
    };
    let module = match crate::library::open(&args.library) {
        Ok(lib) => {
            let ready = FromWorker::Ready {
                protocol: PROTOCOL_VERSION,
                inspection: lib.inspection(),
                sandbox: enforcement,
            };
            if out.send(&ready).is_err() {
                return 0;
            }
            lib.module
        }
        Err(refusal) => {
            let _ = out.send(&FromWorker::Refused { refusal });
            return 3;
        }
    };
    let worker = Arc::new(Worker {
        module,
        out,
        calls: Mutex::new(HashMap::new()),
        waiting: Mutex::new(HashMap::new()),
        next_request: AtomicU64::new(1),
        pool: Pool::new(),
    });
    let mut input = BufReader::new(socket);
    loop {
        match read_frame::<ToWorker>(&mut input) {
            Ok(Some(message)) => worker.handle(message),
            // The host hung up (or broke the protocol): nothing left to serve.
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("plugin-worker: protocol error from the host: {e}");
                return 4;
            }
        }
    }
}

/// Moves the socket off fd 0 (close-on-exec, so a tool's child processes do not hold it)
/// and points fd 0 at `/dev/null`.
fn take_socket() -> io::Result<UnixStream> {
    use std::os::fd::AsFd;
    let stdin = io::stdin();
    let fd = rustix::io::fcntl_dupfd_cloexec(stdin.as_fd(), 3)?;
    let socket = UnixStream::from(fd);
    // Fails unless it is a socket.
    socket.local_addr()?;
    let null = std::fs::File::open("/dev/null")?;
    rustix::stdio::dup2_stdin(&null)?;
    Ok(socket)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shared writer: one frame per lock.
#[derive(Clone)]
struct Out(Arc<Mutex<UnixStream>>);

impl Out {
    fn send(&self, message: &FromWorker) -> io::Result<()> {
        write_frame(&mut *lock(&self.0), message)
    }
}

/// A running call: its cancel flag and, once made, its tool instance.
struct Running {
    cancelled: Arc<AtomicBool>,
    tool: Option<Arc<AbiToolBox>>,
}

struct Worker {
    module: PluginModRef,
    out: Out,
    calls: Mutex<HashMap<u64, Running>>,
    /// Host callbacks waiting for their reply, by request number.
    waiting: Mutex<HashMap<u64, SyncSender<Result<HostAnswer, WireError>>>>,
    next_request: AtomicU64,
    pool: Pool,
}

impl Worker {
    fn handle(self: &Arc<Self>, message: ToWorker) {
        match message {
            ToWorker::Execute {
                call,
                tool,
                input,
                identity,
                log_level,
            } => {
                let cancelled = Arc::new(AtomicBool::new(false));
                lock(&self.calls).insert(
                    call,
                    Running {
                        cancelled: cancelled.clone(),
                        tool: None,
                    },
                );
                let worker = self.clone();
                // Every call, inline ones too, runs on a pool thread: this thread must stay
                // free to read the host's replies to the call's file operations.
                self.pool.run(Box::new(move || {
                    let result =
                        worker.execute(call, &tool, &input, identity, log_level, cancelled);
                    lock(&worker.calls).remove(&call);
                    let _ = worker.out.send(&FromWorker::Done { call, result });
                }));
            }
            ToWorker::Cancel { call } => {
                let tool = lock(&self.calls).get(&call).and_then(|r| {
                    r.cancelled.store(true, Ordering::SeqCst);
                    r.tool.clone()
                });
                if let Some(tool) = tool {
                    tool.cancel();
                }
            }
            ToWorker::HostReply {
                request, result, ..
            } => {
                if let Some(waiter) = lock(&self.waiting).remove(&request) {
                    let _ = waiter.send(result);
                }
            }
            ToWorker::PluginExt {
                request,
                name,
                payload,
            } => {
                let result = match (self.module.extension())(
                    RStr::from(name.as_str()),
                    RStr::from(payload.as_str()),
                ) {
                    RResult::ROk(answer) => Ok(answer.into_string()),
                    RResult::RErr(e) => Err(wire(e)),
                };
                let _ = self
                    .out
                    .send(&FromWorker::PluginExtReply { request, result });
            }
        }
    }

    fn execute(
        self: &Arc<Self>,
        call: u64,
        tool: &str,
        input: &serde_json::Value,
        identity: CallIdentity,
        log_level: u8,
        cancelled: Arc<AtomicBool>,
    ) -> Result<tool_api::ToolOutput, WireError> {
        let instance = match (self.module.new_tool())(RStr::from(tool)) {
            RResult::ROk(t) => Arc::new(t),
            RResult::RErr(e) => return Err(wire(e)),
        };
        if let Some(running) = lock(&self.calls).get_mut(&call) {
            running.tool = Some(instance.clone());
        }
        if cancelled.load(Ordering::SeqCst) {
            instance.cancel();
        }
        let json = serde_json::to_string(input).map_err(|e| WireError {
            code: ERROR_INTERNAL,
            message: e.to_string(),
        })?;
        let host = WorkerHost {
            worker: self.clone(),
            call,
            identity: Arc::new(identity),
            log_level,
            cancelled,
        };
        let ctx: HostCtx = HostContext_TO::from_ptr(RArc::new(host), TD_Opaque);
        match instance.execute(RStr::from(json.as_str()), ctx) {
            RResult::ROk(out) => Ok(out.into()),
            RResult::RErr(e) => Err(wire(e)),
        }
    }

    /// Sends a host callback and waits for its answer (or for the host to go away).
    fn ask(&self, call: u64, op: HostOp) -> Result<HostAnswer, AbiError> {
        let request = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        lock(&self.waiting).insert(request, tx);
        let sent = self.out.send(&FromWorker::Host { call, request, op });
        let answer = match sent {
            Ok(()) => rx.recv().ok(),
            Err(_) => None,
        };
        lock(&self.waiting).remove(&request);
        match answer {
            Some(Ok(a)) => Ok(a),
            Some(Err(e)) => Err(AbiError {
                code: e.code,
                message: e.message.into(),
            }),
            None => Err(AbiError {
                code: ERROR_INTERNAL,
                message: "the host went away".into(),
            }),
        }
    }
}

fn wire(e: AbiError) -> WireError {
    WireError {
        code: e.code,
        message: e.message.into_string(),
    }
}

/// One call's context inside the worker: identity and cancellation answered here, file
/// access and extension operations answered by the host.
#[derive(Clone)]
struct WorkerHost {
    worker: Arc<Worker>,
    call: u64,
    identity: Arc<CallIdentity>,
    log_level: u8,
    cancelled: Arc<AtomicBool>,
}

impl WorkerHost {
    fn ask(&self, op: HostOp) -> Result<HostAnswer, AbiError> {
        self.worker.ask(self.call, op)
    }

    fn unexpected(answer: HostAnswer) -> AbiError {
        AbiError {
            code: ERROR_INTERNAL,
            message: format!("the host answered a callback with {answer:?}").into(),
        }
    }

    fn unit(&self, op: HostOp) -> RResult<(), AbiError> {
        match self.ask(op) {
            Ok(HostAnswer::Unit) => RResult::ROk(()),
            Ok(other) => RResult::RErr(Self::unexpected(other)),
            Err(e) => RResult::RErr(e),
        }
    }

    fn text(&self, op: HostOp) -> RResult<RString, AbiError> {
        match self.ask(op) {
            Ok(HostAnswer::Text(t)) => RResult::ROk(t.into()),
            Ok(other) => RResult::RErr(Self::unexpected(other)),
            Err(e) => RResult::RErr(e),
        }
    }
}

impl HostContext for WorkerHost {
    fn session_id(&self) -> RStr<'_> {
        self.identity.session_id.as_str().into()
    }
    fn turn_id(&self) -> RStr<'_> {
        self.identity.turn_id.as_str().into()
    }
    fn tool_use_id(&self) -> RStr<'_> {
        self.identity.tool_use_id.as_str().into()
    }
    fn workspace_root(&self) -> RStr<'_> {
        self.identity.workspace_root.as_str().into()
    }
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
    fn log_enabled(&self, level: u8) -> bool {
        level <= self.log_level
    }
    fn log(&self, level: u8, message: RStr<'_>) {
        if level <= self.log_level {
            let _ = self.worker.out.send(&FromWorker::Log {
                call: self.call,
                level,
                message: message.as_str().to_string(),
            });
        }
    }
    fn fs_read(&self, path: RStr<'_>) -> RResult<RString, AbiError> {
        self.text(HostOp::Read {
            path: path.to_string(),
        })
    }
    fn fs_read_bytes(&self, path: RStr<'_>) -> RResult<RVec<u8>, AbiError> {
        match self.ask(HostOp::ReadBytes {
            path: path.to_string(),
        }) {
            Ok(HostAnswer::Bytes(b)) => RResult::ROk(b.into()),
            Ok(other) => RResult::RErr(Self::unexpected(other)),
            Err(e) => RResult::RErr(e),
        }
    }
    fn fs_write(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        self.unit(HostOp::Write {
            path: path.to_string(),
            data: content.to_vec(),
        })
    }
    fn fs_append(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        self.unit(HostOp::Append {
            path: path.to_string(),
            data: content.to_vec(),
        })
    }
    fn fs_exists(&self, path: RStr<'_>) -> RResult<bool, AbiError> {
        match self.ask(HostOp::Exists {
            path: path.to_string(),
        }) {
            Ok(HostAnswer::Bool(b)) => RResult::ROk(b),
            Ok(other) => RResult::RErr(Self::unexpected(other)),
            Err(e) => RResult::RErr(e),
        }
    }
    fn fs_list(&self, path: RStr<'_>) -> RResult<RVec<RString>, AbiError> {
        match self.ask(HostOp::List {
            path: path.to_string(),
        }) {
            Ok(HostAnswer::Names(n)) => RResult::ROk(n.into_iter().map(RString::from).collect()),
            Ok(other) => RResult::RErr(Self::unexpected(other)),
            Err(e) => RResult::RErr(e),
        }
    }
    fn fs_delete(&self, path: RStr<'_>) -> RResult<(), AbiError> {
        self.unit(HostOp::Delete {
            path: path.to_string(),
        })
    }
    fn fs_patch(&self, path: RStr<'_>, old: RStr<'_>, new: RStr<'_>) -> RResult<(), AbiError> {
        self.unit(HostOp::Patch {
            path: path.to_string(),
            old: old.to_string(),
            new: new.to_string(),
        })
    }
    fn extension(&self, op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError> {
        if op.as_str() == OP_OUTPUT_DELTA {
            // Live output does not wait for the host.
            let _ = self.worker.out.send(&FromWorker::Output {
                call: self.call,
                chunk: payload.to_string(),
            });
            return RResult::ROk(RString::new());
        }
        self.text(HostOp::Extension {
            name: op.to_string(),
            payload: payload.to_string(),
        })
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Threads that run calls: a call takes an idle thread, or a new one when every thread is
/// busy (so a call never waits behind another, even one that never returns); threads stay
/// for the next calls.
struct Pool {
    jobs: Mutex<mpsc::Sender<Job>>,
    queue: Arc<Mutex<Receiver<Job>>>,
    /// Threads waiting for a job and not yet promised one.
    idle: Arc<AtomicUsize>,
}

impl Pool {
    fn new() -> Pool {
        let (tx, rx) = mpsc::channel::<Job>();
        Pool {
            jobs: Mutex::new(tx),
            queue: Arc::new(Mutex::new(rx)),
            idle: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn run(&self, job: Job) {
        // Every queued job has a thread promised to it: an idle one, or one started now.
        let promised = self
            .idle
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !promised {
            let queue = self.queue.clone();
            let idle = self.idle.clone();
            let spawned = std::thread::Builder::new()
                .name("plugin-call".into())
                .spawn(move || {
                    loop {
                        let next = lock(&queue).recv();
                        match next {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                        idle.fetch_add(1, Ordering::SeqCst);
                    }
                });
            if let Err(e) = spawned {
                eprintln!("plugin-worker: cannot start a call thread: {e}");
            }
        }
        let _ = lock(&self.jobs).send(job);
    }
}
