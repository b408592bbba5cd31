//! What a running tool sees of its call: [`ToolContext`], its [`Logger`] and the
//! workspace-scoped [`WorkspaceFiles`] API.

use std::fmt::Display;

use abi_stable::std_types::{RResult, RSlice, RStr, RString};

use crate::abi::{AbiError, HostCtx};
use crate::extensions::Extensions;
use crate::output::ToolError;

/// Log levels a tool can log at, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Level {
    /// Something failed.
    Error = 1,
    /// Something looks wrong.
    Warn = 2,
    /// Progress worth knowing.
    Info = 3,
    /// Detail for debugging.
    Debug = 4,
    /// Very verbose detail.
    Trace = 5,
}

impl Level {
    /// The level for a wire code; unknown codes read as `Trace`.
    pub fn from_code(code: u8) -> Level {
        match code {
            1 => Level::Error,
            2 => Level::Warn,
            3 => Level::Info,
            4 => Level::Debug,
            _ => Level::Trace,
        }
    }
}

/// The session-scoped view a tool gets of its call.
///
/// It carries the call's identity, a cancellation flag to poll, a [`Logger`] that reaches the
/// host's log under the call's span, and the workspace-scoped file API. A plugin gets the
/// same type as a built-in: behind it are host callbacks, never raw host pointers.
#[derive(Clone)]
pub struct ToolContext {
    host: HostCtx,
    extensions: Extensions,
}

impl ToolContext {
    /// Wraps the host's callbacks. Hosts call this; tools receive a ready context.
    pub fn from_host(host: HostCtx) -> Self {
        ToolContext {
            host,
            extensions: Extensions::new(),
        }
    }

    /// This context with what the host attached to the call ([`Extensions`]). Hosts call
    /// this for the tools they run in their own process; across the plugin ABI the map is
    /// always empty.
    #[must_use]
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// What the host attached to this call, of type `T` (see [`Extensions`]): `None` when
    /// it attached none, and always in a plugin, which the map never reaches. For tools a
    /// host builds in (an MCP server's tools learn there who calls and how to reach the
    /// calling client).
    ///
    /// ```
    /// use tool_api::{Extensions, testing::TestHost};
    /// struct Caller(&'static str);
    /// let ctx = TestHost::new().context().with_extensions(Extensions::new().with(Caller("alice")));
    /// assert_eq!(ctx.extension::<Caller>().map(|c| c.0), Some("alice"));
    /// ```
    pub fn extension<T: std::any::Any + Send + Sync>(&self) -> Option<&T> {
        self.extensions.get()
    }

    /// Everything the host attached to this call.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The host callbacks behind this context (used by hosts to pass it across the ABI).
    pub fn host(&self) -> &HostCtx {
        &self.host
    }

    /// The session the call belongs to.
    pub fn session_id(&self) -> &str {
        self.host.session_id().as_str()
    }

    /// The turn the call belongs to.
    pub fn turn_id(&self) -> &str {
        self.host.turn_id().as_str()
    }

    /// The id of the tool_use block being executed.
    pub fn tool_use_id(&self) -> &str {
        self.host.tool_use_id().as_str()
    }

    /// Absolute path of the session's workspace root.
    pub fn workspace_root(&self) -> &str {
        self.host.workspace_root().as_str()
    }

    /// Whether the host asked this call to stop. Long-running tools poll this and return
    /// [`ToolError::Cancelled`] (or a partial output) soon after it turns `true`.
    pub fn is_cancelled(&self) -> bool {
        self.host.is_cancelled()
    }

    /// `Err(ToolError::Cancelled)` once cancellation was requested; handy with `?` in loops.
    pub fn check_cancelled(&self) -> Result<(), ToolError> {
        if self.is_cancelled() {
            Err(ToolError::Cancelled("the call was cancelled".into()))
        } else {
            Ok(())
        }
    }

    /// Streams a chunk of live output to the host while the call runs (tool-api 1.2): the
    /// host shows it as a `tool.output_delta` event (over MCP, a progress notification).
    /// Live output is a preview for people watching; the model sees only the final
    /// [`crate::ToolOutput`], so put everything it needs there too. A host older than 1.2
    /// ignores the chunk.
    ///
    /// ```
    /// let host = tool_api::testing::TestHost::new();
    /// let ctx = host.context();
    /// ctx.output("compiling…\n");
    /// assert_eq!(host.output(), ["compiling…\n"]);
    /// ```
    pub fn output(&self, chunk: &str) {
        if !chunk.is_empty() {
            let _ = self
                .host
                .extension(crate::abi::OP_OUTPUT_DELTA.into(), chunk.into());
        }
    }

    /// Whether anyone follows this call's live output (tool-api 1.7): an MCP client that
    /// asked for progress, a console, an event subscriber. When nobody does, what
    /// [`ToolContext::output`] sends goes nowhere, and a tool may skip making it (a gateway
    /// asks the server it calls for no progress). `true` from a host older than 1.7, which
    /// cannot say.
    ///
    /// ```
    /// let host = tool_api::testing::TestHost::new();
    /// assert!(host.context().output_wanted());
    /// ```
    pub fn output_wanted(&self) -> bool {
        match self
            .host
            .extension(crate::abi::OP_OUTPUT_WANTED.into(), "".into())
        {
            RResult::ROk(answer) => answer.as_str() != "false",
            RResult::RErr(_) => true,
        }
    }

    /// Asks the user a yes/no question about this call, through the host's confirmation
    /// channel (a terminal prompt, an MCP client's form, the web console): the same
    /// broker, events (`tool.confirmation_requested` / `_resolved`) and timeout as the
    /// host's own confirmations. Blocks until answered. For tools that learn mid-call that
    /// they need consent (an upstream server asking for it, say); the side-effect policy
    /// already asked before the call started. "Always" counts as [`UserAnswer::Allowed`]
    /// once: it grants nothing for later calls.
    ///
    /// Errors: the call was cancelled while waiting (`cancelled`), the tool runs `inline`
    /// (it may not block), or the host is older than tool-api 1.4 (`internal`, naming the
    /// operation).
    ///
    /// ```
    /// use tool_api::{UserAnswer, testing::TestHost};
    /// let host = TestHost::new().answering(UserAnswer::Allowed);
    /// let ctx = host.context();
    /// assert_eq!(ctx.ask_user("Upload build.log to the tracker?").unwrap(), UserAnswer::Allowed);
    /// assert_eq!(host.questions(), ["Upload build.log to the tracker?"]);
    /// ```
    pub fn ask_user(&self, question: &str) -> Result<UserAnswer, ToolError> {
        let payload = serde_json::json!({ "question": question }).to_string();
        let answer = lift(
            self.host
                .extension(crate::abi::OP_USER_CONFIRM.into(), payload.as_str().into()),
            |s| s.into_string(),
        )?;
        let v: serde_json::Value = serde_json::from_str(&answer).map_err(|e| {
            ToolError::internal(format!("bad user.confirm answer from the host: {e}"))
        })?;
        match v.get("answer").and_then(serde_json::Value::as_str) {
            Some("allow") => Ok(UserAnswer::Allowed),
            Some("deny") => Ok(UserAnswer::Denied),
            Some("no_answer") => Ok(UserAnswer::NoAnswer),
            _ => Err(ToolError::internal(format!(
                "bad user.confirm answer from the host: {answer}"
            ))),
        }
    }

    /// How the programs this call starts are to be confined (tool-api 1.5): the mode the
    /// host granted the call (`host`, `read-only`, `workspace-write`), whether they may use
    /// the network, and the host's readable and writable roots. A tool that starts
    /// programs confines them accordingly (the `sandbox` crate does it on Linux) and
    /// refuses to start them where it cannot, unless `allow_unsandboxed` says otherwise. A
    /// host older than 1.5 answers nothing: the default (`workspace-write`, no network)
    /// applies.
    ///
    /// ```
    /// use tool_api::{ProcessSandbox, SandboxMode, testing::TestHost};
    /// let host = TestHost::new();
    /// assert_eq!(host.context().process_sandbox().mode, SandboxMode::WorkspaceWrite);
    /// host.set_process_sandbox(ProcessSandbox { mode: SandboxMode::ReadOnly, ..ProcessSandbox::default() });
    /// assert_eq!(host.context().process_sandbox().mode, SandboxMode::ReadOnly);
    /// ```
    pub fn process_sandbox(&self) -> crate::sandbox::ProcessSandbox {
        match self
            .host
            .extension(crate::abi::OP_PROCESS_SANDBOX.into(), "".into())
        {
            RResult::ROk(answer) => serde_json::from_str(answer.as_str()).unwrap_or_default(),
            RResult::RErr(_) => crate::sandbox::ProcessSandbox::default(),
        }
    }

    /// The host's whole sandbox settings (tool-api 1.6), as JSON: the `sandbox` crate's
    /// `Settings` (the `[sandbox]` table: the deny list, writable caches, the network's
    /// allow list, the environment policy), which a tool that starts programs confines them
    /// with, beside the call's grant ([`ToolContext::process_sandbox`]). `None` from an
    /// older host: confine with that crate's defaults.
    pub fn sandbox_settings(&self) -> Option<serde_json::Value> {
        match self
            .host
            .extension(crate::abi::OP_PROCESS_SANDBOX.into(), "".into())
        {
            RResult::ROk(answer) => serde_json::from_str::<serde_json::Value>(answer.as_str())
                .ok()?
                .get_mut(crate::sandbox::SANDBOX_SETTINGS_KEY)
                .map(serde_json::Value::take),
            RResult::RErr(_) => None,
        }
    }

    /// The call's logger.
    pub fn log(&self) -> Logger<'_> {
        Logger { host: &self.host }
    }

    /// The workspace-scoped file API.
    pub fn files(&self) -> WorkspaceFiles<'_> {
        WorkspaceFiles { host: &self.host }
    }
}

/// The user's answer to [`ToolContext::ask_user`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserAnswer {
    /// Go ahead.
    Allowed,
    /// Do not.
    Denied,
    /// Nobody answered within the host's confirmation timeout.
    NoAnswer,
}

/// Logs into the host's `tracing` subscriber, under the call's span.
///
/// Messages are formatted only when the host records the level, so
/// `ctx.log().debug(format_args!("{big:?}"))` costs nothing when debug is off.
pub struct Logger<'a> {
    host: &'a HostCtx,
}

impl Logger<'_> {
    /// Whether a message at `level` would be recorded.
    pub fn enabled(&self, level: Level) -> bool {
        self.host.log_enabled(level as u8)
    }

    /// Records `message` at `level` if enabled.
    pub fn log(&self, level: Level, message: impl Display) {
        if self.enabled(level) {
            let text = message.to_string();
            self.host.log(level as u8, RStr::from(text.as_str()));
        }
    }

    /// Logs at error level.
    pub fn error(&self, message: impl Display) {
        self.log(Level::Error, message)
    }

    /// Logs at warn level.
    pub fn warn(&self, message: impl Display) {
        self.log(Level::Warn, message)
    }

    /// Logs at info level.
    pub fn info(&self, message: impl Display) {
        self.log(Level::Info, message)
    }

    /// Logs at debug level.
    pub fn debug(&self, message: impl Display) {
        self.log(Level::Debug, message)
    }

    /// Logs at trace level.
    pub fn trace(&self, message: impl Display) {
        self.log(Level::Trace, message)
    }
}

fn lift<T, U>(r: RResult<T, AbiError>, f: impl FnOnce(T) -> U) -> Result<U, ToolError> {
    match r {
        RResult::ROk(v) => Ok(f(v)),
        RResult::RErr(e) => Err(e.into()),
    }
}

/// What [`WorkspaceFiles::metadata`] tells about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    /// It is a directory.
    pub is_dir: bool,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Last modification, when known.
    pub modified: Option<std::time::SystemTime>,
}

/// File access confined to the session's workspace.
///
/// Paths are relative to the workspace root, or absolute inside it; `..` is resolved while
/// checking, and a path (or a symlink on the way) that leads outside is refused with
/// [`ToolError::PermissionDenied`]. Writes are atomic: a reader sees the old or the new file,
/// never half of one.
pub struct WorkspaceFiles<'a> {
    host: &'a HostCtx,
}

impl WorkspaceFiles<'_> {
    /// Reads a UTF-8 file, whole. toolhost returns up to 1 GiB; a larger file is an error
    /// that says so, before anything is read.
    pub fn read(&self, path: &str) -> Result<String, ToolError> {
        lift(self.host.fs_read(path.into()), |s| s.into_string())
    }

    /// Reads a file's bytes, whole, with the limits of [`WorkspaceFiles::read`].
    pub fn read_bytes(&self, path: &str) -> Result<Vec<u8>, ToolError> {
        lift(self.host.fs_read_bytes(path.into()), |b| b.into_vec())
    }

    /// Creates or replaces a file with `content`, creating parent directories.
    pub fn write(&self, path: &str, content: &str) -> Result<(), ToolError> {
        self.write_bytes(path, content.as_bytes())
    }

    /// Creates or replaces a file with `content`, creating parent directories.
    pub fn write_bytes(&self, path: &str, content: &[u8]) -> Result<(), ToolError> {
        lift(
            self.host.fs_write(path.into(), RSlice::from_slice(content)),
            |_| (),
        )
    }

    /// Appends `content` to a file, creating it if needed.
    pub fn append(&self, path: &str, content: &str) -> Result<(), ToolError> {
        lift(
            self.host
                .fs_append(path.into(), RSlice::from_slice(content.as_bytes())),
            |_| (),
        )
    }

    /// Whether the path exists (a path outside the workspace is an error, not `false`).
    pub fn exists(&self, path: &str) -> Result<bool, ToolError> {
        lift(self.host.fs_exists(path.into()), |b| b)
    }

    /// The names in a directory, sorted; directories end with `/`.
    pub fn list(&self, path: &str) -> Result<Vec<String>, ToolError> {
        // Within one binary (a built-in tool) the list and its strings are taken over as
        // they are; from another, copied.
        lift(self.host.fs_list(path.into()), |v| {
            v.into_vec().into_iter().map(RString::into_string).collect()
        })
    }

    /// Deletes a file.
    pub fn delete(&self, path: &str) -> Result<(), ToolError> {
        lift(self.host.fs_delete(path.into()), |_| ())
    }

    /// Kind, size and modification time of a path (tool-api 1.1; a plugin that uses it
    /// should declare `requires: "1.1.0"` in [`crate::export_plugin!`]).
    pub fn metadata(&self, path: &str) -> Result<Metadata, ToolError> {
        let payload = serde_json::json!({ "path": path }).to_string();
        let answer = lift(
            self.host
                .extension(crate::abi::OP_FS_METADATA.into(), payload.as_str().into()),
            |s| s.into_string(),
        )?;
        let m: crate::abi::FsMetadata = serde_json::from_str(&answer).map_err(|e| {
            ToolError::internal(format!("bad fs.metadata answer from the host: {e}"))
        })?;
        Ok(Metadata {
            is_dir: m.is_dir,
            size: m.size,
            modified: (m.modified_unix_ms > 0).then(|| {
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(m.modified_unix_ms)
            }),
        })
    }

    /// Replaces the one occurrence of `old` with `new`; zero or several occurrences are an
    /// error that says how many were found.
    pub fn patch(&self, path: &str, old: &str, new: &str) -> Result<(), ToolError> {
        lift(
            self.host.fs_patch(path.into(), old.into(), new.into()),
            |_| (),
        )
    }
}
