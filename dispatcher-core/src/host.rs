//! The host side of [`tool_api::ToolContext`]: the callbacks a tool (built in or plugin)
//! reaches through its context, bound to one call.

use std::sync::Arc;

use tool_api::abi::{AbiError, HostContext, HostContext_TO, HostCtx, TD_Opaque};
use tool_api::abi::{RArc, RResult, RSlice, RStr, RString, RVec};
use tool_api::{Level, SandboxMode, SideEffect, ToolContext, ToolError};
use tracing::Span;

use crate::call::CallHeader;
use crate::events::{EventKind, EventSink};
use crate::session::InFlight;
use crate::workspace::{FsError, InlineBudget, Workspace};

/// Everything one call's callbacks need (cheap to clone: the ABI trait requires `Clone`).
#[derive(Clone)]
pub(crate) struct CallHost {
    /// The call's identity.
    pub(crate) call: Arc<CallHeader>,
    pub(crate) workspace: Arc<Workspace>,
    /// The call's granted sandbox: `read-only` refuses writes here, and the programs the
    /// tool starts run in it ([`tool_api::ToolContext::process_sandbox`]).
    pub(crate) sandbox: SandboxMode,
    /// Whether those programs may use the network.
    pub(crate) network: bool,
    /// The call's cancellation signal; `None` for an inline call, which cannot be
    /// interrupted.
    pub(crate) inflight: Option<Arc<InFlight>>,
    /// The call's span, entered around logs; `Span::none()` when the tool runs on the
    /// thread that is already inside it.
    pub(crate) span: Span,
    /// Where live output goes (`tool.output_delta`); `None` for an inline call (it has
    /// nothing to stream).
    pub(crate) output: Option<EventSink>,
    /// The live output's secret redaction (`None`: the tool's results are not scanned).
    pub(crate) live: Option<Arc<crate::redaction::LiveOutput>>,
    /// Set for an inline attempt of an `inline_when_small` tool: file work over it fails
    /// and sends the call to a blocking thread.
    pub(crate) budget: Option<Arc<InlineBudget>>,
    /// Where the tool's questions to the user go ([`tool_api::ToolContext::ask_user`]):
    /// the broker and confirmers; `None` for an inline call, which must not block its
    /// thread.
    pub(crate) asker: Option<Arc<crate::engine::Engine>>,
}

impl CallHost {
    pub(crate) fn into_context(self) -> ToolContext {
        let extensions = self.call.extensions.clone();
        let host: HostCtx = HostContext_TO::from_ptr(RArc::new(self), TD_Opaque);
        ToolContext::from_host(host).with_extensions(extensions)
    }
}

/// What a file operation needs of the call's declared class.
#[derive(Clone, Copy)]
enum Access {
    /// read, read_bytes, exists, list, metadata: `read` or higher.
    Read,
    /// write, write_bytes, append, delete, patch: `write` or higher.
    Write,
}

impl CallHost {
    /// Refuses an operation the call's declared class does not cover: a `none` tool gets
    /// no file access, a `read` tool reads and lists only; `write`, `execute` and `network`
    /// tools get both. The declaration is what the confirmation policy judged, so it is
    /// also what the tool may do.
    fn permit(&self, access: Access, op: &str, path: &str) -> Result<(), AbiError> {
        if matches!(access, Access::Write) && self.sandbox == SandboxMode::ReadOnly {
            return Err(ToolError::PermissionDenied(format!(
                "tool '{}' was granted sandbox 'read-only' for this call, so it may not change workspace files ({op} '{path}')",
                self.call.tool_name
            ))
            .into());
        }
        let class = self.call.side_effects.unwrap_or(SideEffect::None);
        let (needed, what) = match access {
            Access::Read => (SideEffect::Read, "read workspace files"),
            Access::Write => (SideEffect::Write, "change workspace files"),
        };
        if class >= needed {
            return Ok(());
        }
        Err(ToolError::PermissionDenied(format!(
            "tool '{}' declares side effects '{class}', so it may not {what} ({op} '{path}'); a tool that does must declare '{needed}'",
            self.call.tool_name
        ))
        .into())
    }

    /// Writes go to disk (and sync): never in an inline attempt.
    fn not_inline(&self, path: &str, what: &'static str) -> Result<(), FsError> {
        match &self.budget {
            Some(budget) => Err(budget.refuse(path, what)),
            None => Ok(()),
        }
    }

    /// Runs a workspace operation if the declared class allows it.
    fn checked<T, U>(
        &self,
        access: Access,
        op: &str,
        path: &str,
        run: impl FnOnce() -> Result<T, FsError>,
        f: impl FnOnce(T) -> U,
    ) -> RResult<U, AbiError> {
        match self.permit(access, op, path) {
            Ok(()) => fs(run(), f),
            Err(e) => RResult::RErr(e),
        }
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
        let p = path.as_str();
        let run = || self.workspace.read_within(p, self.budget.as_deref());
        self.checked(Access::Read, "read", p, run, RString::from)
    }
    fn fs_read_bytes(&self, path: RStr<'_>) -> RResult<RVec<u8>, AbiError> {
        let p = path.as_str();
        let run = || self.workspace.read_bytes_within(p, self.budget.as_deref());
        self.checked(Access::Read, "read_bytes", p, run, RVec::from)
    }
    fn fs_write(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        let p = path.as_str();
        let run = || {
            self.not_inline(p, "a write")?;
            self.workspace.write_bytes(p, content.as_slice())
        };
        self.checked(Access::Write, "write", p, run, |_| ())
    }
    fn fs_append(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        let p = path.as_str();
        let run = || {
            self.not_inline(p, "an append")?;
            self.workspace.append(p, content.as_slice())
        };
        self.checked(Access::Write, "append", p, run, |_| ())
    }
    fn fs_exists(&self, path: RStr<'_>) -> RResult<bool, AbiError> {
        let p = path.as_str();
        self.checked(
            Access::Read,
            "exists",
            p,
            || self.workspace.exists(p),
            |b| b,
        )
    }
    fn fs_list(&self, path: RStr<'_>) -> RResult<RVec<RString>, AbiError> {
        let p = path.as_str();
        self.checked(
            Access::Read,
            "list",
            p,
            || {
                self.workspace
                    .list_within::<RString>(p, self.budget.as_deref())
            },
            RVec::from,
        )
    }
    fn fs_delete(&self, path: RStr<'_>) -> RResult<(), AbiError> {
        let p = path.as_str();
        self.checked(
            Access::Write,
            "delete",
            p,
            || self.workspace.delete(p),
            |_| (),
        )
    }
    fn fs_patch(&self, path: RStr<'_>, old: RStr<'_>, new: RStr<'_>) -> RResult<(), AbiError> {
        let p = path.as_str();
        let run = || {
            self.workspace
                .patch_within(p, old.as_str(), new.as_str(), self.budget.as_deref())
        };
        self.checked(Access::Write, "patch", p, run, |_| ())
    }
    fn extension(&self, op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError> {
        match op.as_str() {
            tool_api::abi::OP_FS_METADATA => {
                tool_api::abi::fs_metadata_op(payload.as_str(), |path| {
                    self.permit(Access::Read, "metadata", path)?;
                    self.workspace
                        .metadata(path)
                        .map_err(|e| ToolError::from(e).into())
                })
                .into()
            }
            tool_api::abi::OP_OUTPUT_DELTA => {
                if let Some(sink) = self.output.as_ref().filter(|s| s.wanted()) {
                    let chunk = match &self.live {
                        Some(live) => live.push(payload.as_str()),
                        None => payload.as_str().to_string(),
                    };
                    if !chunk.is_empty() {
                        sink.emit(&self.call, EventKind::OutputDelta { chunk });
                    }
                }
                RResult::ROk(RString::new())
            }
            tool_api::abi::OP_OUTPUT_WANTED => {
                let wanted = self.output.as_ref().is_some_and(|s| s.wanted());
                RResult::ROk(if wanted { "true" } else { "false" }.into())
            }
            tool_api::abi::OP_USER_CONFIRM => self.ask_user(payload.as_str()).into(),
            tool_api::abi::OP_PROCESS_SANDBOX => RResult::ROk(self.process_sandbox().into()),
            other => RResult::RErr(tool_api::abi::unsupported(other, "host")),
        }
    }
}

impl CallHost {
    /// The call's [`tool_api::ProcessSandbox`], as JSON: its granted mode and network, the
    /// 1.5 summary of the host's settings, and (tool-api 1.6,
    /// [`tool_api::ToolContext::sandbox_settings`]) the whole settings record. An inline
    /// call (which may not start programs) gets the defaults.
    fn process_sandbox(&self) -> String {
        let roots = |paths: &[std::path::PathBuf]| -> Vec<String> {
            paths.iter().map(|p| p.display().to_string()).collect()
        };
        let config = self.asker.as_ref().map(|e| e.config());
        let settings = config.as_ref().map(|c| &c.sandbox);
        let answer = tool_api::ProcessSandbox {
            mode: self.sandbox,
            network: self.network,
            readable_roots: settings.map_or_else(Vec::new, |s| roots(&s.allow_read)),
            writable_roots: settings.map_or_else(Vec::new, |s| roots(&s.writable_roots)),
            allow_unsandboxed: settings.is_some_and(|s| s.allow_unsandboxed),
        };
        let mut value = serde_json::to_value(&answer).unwrap_or_default();
        if let (Some(settings), Some(map)) = (settings, value.as_object_mut()) {
            map.insert(
                tool_api::SANDBOX_SETTINGS_KEY.into(),
                serde_json::to_value(settings).unwrap_or_default(),
            );
        }
        value.to_string()
    }

    /// A tool's own question: the same broker, confirmers, events and timeout as the
    /// pipeline's confirmation; "always" allows this once and grants nothing.
    fn ask_user(&self, payload: &str) -> Result<RString, AbiError> {
        let question = serde_json::from_str::<serde_json::Value>(payload)
            .ok()
            .and_then(|v| v.get("question")?.as_str().map(String::from))
            .ok_or_else(|| {
                AbiError::from(ToolError::invalid_input(
                    "user.confirm needs {\"question\": \"…\"}",
                ))
            })?;
        let runtime = tokio::runtime::Handle::try_current().ok();
        let (Some(engine), Some(runtime), Some(entry), Some(sink)) =
            (&self.asker, runtime, &self.inflight, &self.output)
        else {
            return Err(ToolError::internal(format!(
                "tool '{}' runs inline (on the host's own thread), so it may not wait for a person; \
                 declare it without `inline` to ask the user",
                self.call.tool_name
            ))
            .into());
        };
        let emit = |kind| sink.emit(&self.call, kind);
        let resolution = runtime.block_on(crate::engine::ask(
            engine,
            &self.call,
            &emit,
            (question, Vec::new(), "asked by the tool".to_string()),
            true,
            engine.config().timeouts.confirmation,
            entry.cancelled(),
        ));
        use crate::confirmation::{Decision, Resolution};
        let answer = match resolution {
            Resolution::Answered(Decision::Allow | Decision::AlwaysAllow, _) => "allow",
            Resolution::Answered(Decision::Deny, _) => "deny",
            Resolution::TimedOut => "no_answer",
            Resolution::Cancelled => {
                return Err(ToolError::Cancelled(
                    "the call was cancelled while it waited for the user's answer".into(),
                )
                .into());
            }
        };
        Ok(serde_json::json!({ "answer": answer }).to_string().into())
    }
}
