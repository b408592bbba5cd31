//! The host side of [`tool_api::ToolContext`]: the callbacks a tool (built in or plugin)
//! reaches through its context, bound to one call.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tool_api::abi::{AbiError, HostContext, HostContext_TO, HostCtx, TD_Opaque};
use tool_api::abi::{RArc, RResult, RSlice, RStr, RString, RVec};
use tool_api::{Level, ToolContext, ToolError};
use tracing::Span;

use crate::workspace::{FsError, Workspace};

/// Everything one call's callbacks need.
pub(crate) struct CallHost {
    pub(crate) session_id: Arc<str>,
    pub(crate) turn_id: Arc<str>,
    pub(crate) tool_use_id: Arc<str>,
    pub(crate) workspace: Arc<Workspace>,
    pub(crate) token: CancellationToken,
    pub(crate) span: Span,
}

/// Cloneable wrapper (the ABI trait requires `Clone`).
#[derive(Clone)]
pub(crate) struct CallHostRef(pub(crate) Arc<CallHost>);

impl CallHostRef {
    pub(crate) fn context(&self) -> ToolContext {
        let host: HostCtx = HostContext_TO::from_ptr(RArc::new(self.clone()), TD_Opaque);
        ToolContext::from_host(host)
    }
}

fn fs<T, U>(r: Result<T, FsError>, f: impl FnOnce(T) -> U) -> RResult<U, AbiError> {
    match r {
        Ok(v) => RResult::ROk(f(v)),
        Err(e) => RResult::RErr(ToolError::from(e).into()),
    }
}

macro_rules! log_at {
    ($span:expr, $level:expr, $msg:expr) => {{
        let _entered = $span.enter();
        match $level {
            Level::Error => tracing::error!(target: "toolhost::tool", "{}", $msg),
            Level::Warn => tracing::warn!(target: "toolhost::tool", "{}", $msg),
            Level::Info => tracing::info!(target: "toolhost::tool", "{}", $msg),
            Level::Debug => tracing::debug!(target: "toolhost::tool", "{}", $msg),
            Level::Trace => tracing::trace!(target: "toolhost::tool", "{}", $msg),
        }
    }};
}

impl HostContext for CallHostRef {
    fn session_id(&self) -> RStr<'_> {
        RStr::from(&*self.0.session_id)
    }
    fn turn_id(&self) -> RStr<'_> {
        RStr::from(&*self.0.turn_id)
    }
    fn tool_use_id(&self) -> RStr<'_> {
        RStr::from(&*self.0.tool_use_id)
    }
    fn workspace_root(&self) -> RStr<'_> {
        RStr::from(self.0.workspace.root_str())
    }
    fn is_cancelled(&self) -> bool {
        self.0.token.is_cancelled()
    }
    fn log_enabled(&self, level: u8) -> bool {
        match Level::from_code(level) {
            Level::Error => tracing::enabled!(target: "toolhost::tool", tracing::Level::ERROR),
            Level::Warn => tracing::enabled!(target: "toolhost::tool", tracing::Level::WARN),
            Level::Info => tracing::enabled!(target: "toolhost::tool", tracing::Level::INFO),
            Level::Debug => tracing::enabled!(target: "toolhost::tool", tracing::Level::DEBUG),
            Level::Trace => tracing::enabled!(target: "toolhost::tool", tracing::Level::TRACE),
        }
    }
    fn log(&self, level: u8, message: RStr<'_>) {
        log_at!(self.0.span, Level::from_code(level), message.as_str());
    }
    fn fs_read(&self, path: RStr<'_>) -> RResult<RString, AbiError> {
        fs(self.0.workspace.read(path.as_str()), RString::from)
    }
    fn fs_read_bytes(&self, path: RStr<'_>) -> RResult<RVec<u8>, AbiError> {
        fs(self.0.workspace.read_bytes(path.as_str()), RVec::from)
    }
    fn fs_write(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        fs(
            self.0
                .workspace
                .write_bytes(path.as_str(), content.as_slice()),
            |_| (),
        )
    }
    fn fs_append(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        fs(
            self.0.workspace.append(path.as_str(), content.as_slice()),
            |_| (),
        )
    }
    fn fs_exists(&self, path: RStr<'_>) -> RResult<bool, AbiError> {
        fs(self.0.workspace.exists(path.as_str()), |b| b)
    }
    fn fs_list(&self, path: RStr<'_>) -> RResult<RVec<RString>, AbiError> {
        fs(self.0.workspace.list(path.as_str()), |names| {
            names.into_iter().map(RString::from).collect()
        })
    }
    fn fs_delete(&self, path: RStr<'_>) -> RResult<(), AbiError> {
        fs(self.0.workspace.delete(path.as_str()), |_| ())
    }
    fn fs_patch(&self, path: RStr<'_>, old: RStr<'_>, new: RStr<'_>) -> RResult<(), AbiError> {
        fs(
            self.0
                .workspace
                .patch(path.as_str(), old.as_str(), new.as_str()),
            |_| (),
        )
    }
}
