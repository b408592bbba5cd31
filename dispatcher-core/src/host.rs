//! The host side of [`tool_api::ToolContext`]: the callbacks a tool (built in or plugin)
//! reaches through its context, bound to one call.

use std::sync::Arc;

use tool_api::abi::{AbiError, HostContext, HostContext_TO, HostCtx, TD_Opaque};
use tool_api::abi::{RArc, RResult, RSlice, RStr, RString, RVec};
use tool_api::{Level, ToolContext, ToolError};
use tracing::Span;

use crate::call::CallHeader;
use crate::events::{EventKind, EventSink};
use crate::session::InFlight;
use crate::workspace::{FsError, Workspace};

/// Everything one call's callbacks need (cheap to clone: the ABI trait requires `Clone`).
#[derive(Clone)]
pub(crate) struct CallHost {
    /// The call's identity.
    pub(crate) call: Arc<CallHeader>,
    pub(crate) workspace: Arc<Workspace>,
    /// The call's cancellation signal; `None` for an inline call, which cannot be
    /// interrupted.
    pub(crate) inflight: Option<Arc<InFlight>>,
    /// The call's span, entered around logs; `Span::none()` when the tool runs on the
    /// thread that is already inside it.
    pub(crate) span: Span,
    /// Where live output goes (`tool.output_delta`); `None` for an inline call (it has
    /// nothing to stream).
    pub(crate) output: Option<EventSink>,
}

impl CallHost {
    pub(crate) fn into_context(self) -> ToolContext {
        let host: HostCtx = HostContext_TO::from_ptr(RArc::new(self), TD_Opaque);
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

impl HostContext for CallHost {
    fn session_id(&self) -> RStr<'_> {
        RStr::from(&*self.call.session_id)
    }
    fn turn_id(&self) -> RStr<'_> {
        RStr::from(&*self.call.turn_id)
    }
    fn tool_use_id(&self) -> RStr<'_> {
        RStr::from(&*self.call.tool_use_id)
    }
    fn workspace_root(&self) -> RStr<'_> {
        RStr::from(self.workspace.root_str())
    }
    fn is_cancelled(&self) -> bool {
        self.inflight.as_ref().is_some_and(|f| f.is_cancelled())
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
        log_at!(self.span, Level::from_code(level), message.as_str());
    }
    fn fs_read(&self, path: RStr<'_>) -> RResult<RString, AbiError> {
        fs(self.workspace.read(path.as_str()), RString::from)
    }
    fn fs_read_bytes(&self, path: RStr<'_>) -> RResult<RVec<u8>, AbiError> {
        fs(self.workspace.read_bytes(path.as_str()), RVec::from)
    }
    fn fs_write(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        fs(
            self.workspace
                .write_bytes(path.as_str(), content.as_slice()),
            |_| (),
        )
    }
    fn fs_append(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        fs(
            self.workspace.append(path.as_str(), content.as_slice()),
            |_| (),
        )
    }
    fn fs_exists(&self, path: RStr<'_>) -> RResult<bool, AbiError> {
        fs(self.workspace.exists(path.as_str()), |b| b)
    }
    fn fs_list(&self, path: RStr<'_>) -> RResult<RVec<RString>, AbiError> {
        fs(self.workspace.list(path.as_str()), |names| {
            names.into_iter().map(RString::from).collect()
        })
    }
    fn fs_delete(&self, path: RStr<'_>) -> RResult<(), AbiError> {
        fs(self.workspace.delete(path.as_str()), |_| ())
    }
    fn fs_patch(&self, path: RStr<'_>, old: RStr<'_>, new: RStr<'_>) -> RResult<(), AbiError> {
        fs(
            self.workspace
                .patch(path.as_str(), old.as_str(), new.as_str()),
            |_| (),
        )
    }
    fn extension(&self, op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError> {
        match op.as_str() {
            tool_api::abi::OP_FS_METADATA => {
                tool_api::abi::fs_metadata_op(payload.as_str(), |path| {
                    self.workspace
                        .metadata(path)
                        .map_err(|e| ToolError::from(e).into())
                })
                .into()
            }
            tool_api::abi::OP_OUTPUT_DELTA => {
                if let Some(sink) = self.output.as_ref().filter(|s| s.wanted()) {
                    let chunk = payload.as_str().to_string();
                    sink.emit(&self.call, EventKind::OutputDelta { chunk });
                }
                RResult::ROk(RString::new())
            }
            other => RResult::RErr(tool_api::abi::unsupported(other, "host")),
        }
    }
}
