//! One call's store: what a running component can reach, and nothing else.
//!
//! The component's imports are answered by the call's [`ToolContext`], the same context a
//! native tool gets: workspace confinement, the declared-class checks and the events are
//! the host's. WASI is linked because language runtimes (Python, JavaScript) need its clocks,
//! randomness and stdio, but the context has no preopened directory, no environment, no
//! arguments and no sockets: a component that opens a file or a socket gets an error from
//! WASI, not the host's files. Outgoing HTTP (`wasi:http`) is answered for `network` tools
//! only, to the hosts the plugin is allowed ([`crate::http`]). Its stdout and stderr are
//! kept (up to a limit) and logged when the call ends.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tool_api::ToolContext;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::bindings::toolhost::plugin::{host, types};
use crate::bindings::{FileMetadata, Level, ToolError, UserAnswer};
use crate::caller::Caller;
use crate::http::HttpGate;
use crate::stdio::KeptOutput;

/// How much of a component's stdout and stderr is kept per call (the rest is dropped).
const KEPT_STDIO: usize = 64 * 1024;

/// The data of one call's store.
pub(crate) struct CallState {
    /// The call's context; `None` while describing (no call yet: every import fails).
    ctx: Option<ToolContext>,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    /// What its outgoing HTTP requests may do, and why any were refused.
    pub(crate) gate: HttpGate,
    table: ResourceTable,
    pub(crate) limits: MemoryLimit,
    /// The workspace files the call changed, in order, as it named them.
    pub(crate) files_modified: Vec<String>,
    stdout: KeptOutput,
    stderr: KeptOutput,
}

impl CallState {
    /// `cancel` is set by [`tool_api::Tool::cancel`] (the host's timeouts come this way too).
    pub(crate) fn new(
        ctx: Option<ToolContext>,
        memory_bytes: usize,
        cancel: Arc<AtomicBool>,
        caller: Caller,
    ) -> Self {
        let stdout = KeptOutput::new(KEPT_STDIO);
        let stderr = KeptOutput::new(KEPT_STDIO);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        let gate = HttpGate::new(caller, cancel, ctx.clone());
        CallState {
            ctx,
            wasi,
            http: WasiHttpCtx::new(),
            gate,
            table: ResourceTable::new(),
            limits: MemoryLimit {
                bytes: memory_bytes,
                refused: false,
            },
            files_modified: Vec::new(),
            stdout,
            stderr,
        }
    }

    /// Makes a state kept from an earlier call ready for another (a component that asked
    /// for reused instances): this call's context, cancel flag and caller, nothing
    /// recorded yet.
    pub(crate) fn begin(&mut self, ctx: ToolContext, cancel: Arc<AtomicBool>, caller: Caller) {
        self.gate = HttpGate::new(caller, cancel, Some(ctx.clone()));
        self.ctx = Some(ctx);
        self.files_modified.clear();
        self.stdout.clear();
        self.stderr.clear();
    }

    /// Lets go of the call that ended, so that a kept state holds no session's context.
    pub(crate) fn end(&mut self) {
        self.ctx = None;
        self.gate.end();
    }

    /// Whether the call should stop: cancelled by the host, through the context or
    /// [`tool_api::Tool::cancel`].
    pub(crate) fn stop_requested(&self) -> bool {
        self.gate.stop.requested()
    }

    /// What the component wrote to stdout and stderr, for the log.
    pub(crate) fn stdio(&self) -> (String, String) {
        (self.stdout.text(), self.stderr.text())
    }

    fn call(&self) -> Result<&ToolContext, ToolError> {
        self.ctx.as_ref().ok_or_else(|| {
            ToolError::Failed(
                "the host's functions are only available during a call, not in describe()".into(),
            )
        })
    }

    fn wrote(&mut self, path: &str) {
        if !self.files_modified.iter().any(|p| p == path) {
            self.files_modified.push(path.to_string());
        }
    }
}

/// The memory limit of one instance; remembers a refused grow, so that the call's error
/// can say the component ran out of memory rather than only that it trapped.
pub(crate) struct MemoryLimit {
    /// The most linear memory the instance may have.
    pub(crate) bytes: usize,
    /// Whether a grow past it was refused.
    pub(crate) refused: bool,
}

impl wasmtime::ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.bytes;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

/// tool-api's error as the component sees it.
pub(crate) fn to_wit(e: tool_api::ToolError) -> ToolError {
    match e {
        tool_api::ToolError::Failed(m) => ToolError::Failed(m),
        tool_api::ToolError::InvalidInput(m) => ToolError::InvalidInput(m),
        tool_api::ToolError::PermissionDenied(m) => ToolError::PermissionDenied(m),
        tool_api::ToolError::Cancelled(m) => ToolError::Cancelled(m),
        tool_api::ToolError::Internal(m) => ToolError::Internal(m),
    }
}

/// The component's error as tool-api's.
pub(crate) fn from_wit(e: ToolError) -> tool_api::ToolError {
    match e {
        ToolError::Failed(m) => tool_api::ToolError::Failed(m),
        ToolError::InvalidInput(m) => tool_api::ToolError::InvalidInput(m),
        ToolError::PermissionDenied(m) => tool_api::ToolError::PermissionDenied(m),
        ToolError::Cancelled(m) => tool_api::ToolError::Cancelled(m),
        ToolError::Internal(m) => tool_api::ToolError::Internal(m),
    }
}

impl types::Host for CallState {}

impl host::Host for CallState {
    fn read_file(&mut self, path: String) -> Result<Vec<u8>, ToolError> {
        self.call()?.files().read_bytes(&path).map_err(to_wit)
    }

    fn write_file(&mut self, path: String, content: Vec<u8>) -> Result<(), ToolError> {
        self.call()?
            .files()
            .write_bytes(&path, &content)
            .map_err(to_wit)?;
        self.wrote(&path);
        Ok(())
    }

    fn append_file(&mut self, path: String, content: Vec<u8>) -> Result<(), ToolError> {
        let text = String::from_utf8(content)
            .map_err(|e| ToolError::InvalidInput(format!("append-file takes UTF-8 text: {e}")))?;
        self.call()?.files().append(&path, &text).map_err(to_wit)?;
        self.wrote(&path);
        Ok(())
    }

    fn list_dir(&mut self, path: String) -> Result<Vec<String>, ToolError> {
        self.call()?.files().list(&path).map_err(to_wit)
    }

    fn exists(&mut self, path: String) -> Result<bool, ToolError> {
        self.call()?.files().exists(&path).map_err(to_wit)
    }

    fn delete_file(&mut self, path: String) -> Result<(), ToolError> {
        self.call()?.files().delete(&path).map_err(to_wit)?;
        self.wrote(&path);
        Ok(())
    }

    fn metadata(&mut self, path: String) -> Result<FileMetadata, ToolError> {
        let m = self.call()?.files().metadata(&path).map_err(to_wit)?;
        Ok(FileMetadata {
            is_dir: m.is_dir,
            size: m.size,
            modified_unix_ms: m
                .modified
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        })
    }

    fn patch_file(&mut self, path: String, old: String, new: String) -> Result<(), ToolError> {
        self.call()?
            .files()
            .patch(&path, &old, &new)
            .map_err(to_wit)?;
        self.wrote(&path);
        Ok(())
    }

    fn log(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Error => tool_api::Level::Error,
            Level::Warn => tool_api::Level::Warn,
            Level::Info => tool_api::Level::Info,
            Level::Debug => tool_api::Level::Debug,
            Level::Trace => tool_api::Level::Trace,
        };
        match &self.ctx {
            Some(ctx) => ctx.log().log(level, message),
            None => tracing::debug!(message, "component log during describe()"),
        }
    }

    fn output(&mut self, chunk: String) {
        if let Some(ctx) = &self.ctx {
            ctx.output(&chunk);
        }
    }

    fn is_cancelled(&mut self) -> bool {
        self.stop_requested()
    }

    fn ask_user(&mut self, question: String) -> Result<UserAnswer, ToolError> {
        match self.call()?.ask_user(&question).map_err(to_wit)? {
            tool_api::UserAnswer::Allowed => Ok(UserAnswer::Allowed),
            tool_api::UserAnswer::Denied => Ok(UserAnswer::Denied),
            tool_api::UserAnswer::NoAnswer => Ok(UserAnswer::NoAnswer),
        }
    }
}
