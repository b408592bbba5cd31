//! The stable ABI between a host and a plugin library.
//!
//! Plugin authors never touch this module directly: [`crate::export_plugin!`] emits the root
//! module, and the host side (`plugin-host`) loads it. It is public so that hosts can load
//! plugins and so that its layout is part of tool-api's semver contract.
//!
//! # Layout and evolution rules
//!
//! abi_stable checks, when a library is loaded, that every type reachable from its root
//! module has *at least* the fields the host knows: a plugin built against an older minor
//! whose root module or vtables had fewer fields is refused ("too many fields"), even for
//! prefix types. So that plugins built against any 1.x load in any 1.y host, **the checked
//! layout is frozen at 1.0**: [`PluginMod`], [`PluginInfo`], [`AbiTool`], [`HostContext`]
//! and the data types never change within 1.x. Everything added later goes through the
//! named *extension* entry points that 1.0 already has:
//!
//! - [`HostContext::extension`]: host callbacks added after 1.0 (1.1: [`OP_FS_METADATA`];
//!   1.2: [`OP_OUTPUT_DELTA`]; 1.4: [`OP_USER_CONFIRM`]; 1.5: [`OP_PROCESS_SANDBOX`];
//!   1.7: [`OP_OUTPUT_WANTED`]);
//! - [`PluginMod::extension`]: plugin metadata added after 1.0 (1.1: [`OP_REQUIREMENTS`];
//!   1.2: [`OP_CONCURRENCY_SAFE`]);
//! - [`AbiTool::extension`]: per-tool operations (none yet; reserved).
//!
//! An operation a side does not know answers [`ERROR_UNSUPPORTED`]. A plugin that relies on
//! an operation declares the tool-api version that introduced it (`requires:` in
//! [`crate::export_plugin!`], `requires_tool_api` in `plugin.toml`), and older hosts refuse
//! it before loading. Extension payloads and answers are JSON text. Tool definitions also
//! cross as JSON, so optional definition fields can be added freely.
//!
//! Every exported function catches panics: a panic becomes an [`AbiError`] with
//! [`ERROR_INTERNAL`] and never unwinds into the host.
#![allow(non_local_definitions)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
pub use abi_stable::std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{StableAbi, declare_root_module_statics, package_version_strings, sabi_trait};

use crate::output::{Content, ToolError, ToolOutput};

/// The version of tool-api this crate is (the ABI version a plugin is built against).
pub const TOOL_API_VERSION: &str = env!("CARGO_PKG_VERSION");

pub use abi_stable::sabi_trait::TD_Opaque;

/// Error code for [`ToolError::Failed`].
pub const ERROR_FAILED: u8 = 0;
/// Error code for [`ToolError::InvalidInput`].
pub const ERROR_INVALID_INPUT: u8 = 1;
/// Error code for [`ToolError::PermissionDenied`].
pub const ERROR_PERMISSION_DENIED: u8 = 2;
/// Error code for [`ToolError::Cancelled`].
pub const ERROR_CANCELLED: u8 = 3;
/// Error code for [`ToolError::Internal`] (also used for contained panics).
pub const ERROR_INTERNAL: u8 = 4;
/// Error code of an extension operation the other side does not know.
pub const ERROR_UNSUPPORTED: u8 = 5;

/// Host extension (tool-api 1.1): `{"path": …}` → `{"is_dir", "size", "modified_unix_ms"}`.
pub const OP_FS_METADATA: &str = "fs.metadata";
/// Plugin extension (tool-api 1.1): `""` → the oldest tool-api version the plugin needs.
pub const OP_REQUIREMENTS: &str = "requirements";
/// Host extension (tool-api 1.2): a chunk of live output (the payload, as text) → `""`.
pub const OP_OUTPUT_DELTA: &str = "output.delta";
/// Host extension (tool-api 1.7): `""` → `"true"` when someone follows the call's live
/// output, `"false"` when nobody does ([`crate::ToolContext::output_wanted`]).
pub const OP_OUTPUT_WANTED: &str = "output.wanted";
/// Host extension (tool-api 1.4): `{"question": …}` → `{"answer": "allow" | "deny" |
/// "no_answer"}`, the user's answer through the host's confirmation channel
/// ([`crate::ToolContext::ask_user`]).
pub const OP_USER_CONFIRM: &str = "user.confirm";
/// Host extension (tool-api 1.5): `""` → the call's [`crate::ProcessSandbox`] as JSON: how
/// the programs it starts are to be confined ([`crate::ToolContext::process_sandbox`]).
pub const OP_PROCESS_SANDBOX: &str = "process.sandbox";
/// Plugin extension (tool-api 1.2): `{"tool": …, "input": …}` → `"true"`, `"false"`, or `""`
/// when the tool defers to its definition ([`crate::DefinedTool::is_concurrency_safe`]).
pub const OP_CONCURRENCY_SAFE: &str = "concurrency_safe";

/// The answer to an operation this side does not know.
pub fn unsupported(op: &str, side: &str) -> AbiError {
    AbiError {
        code: ERROR_UNSUPPORTED,
        message: format!(
            "extension operation '{op}' is not supported by this {side} (tool-api {})",
            TOOL_API_VERSION
        )
        .into(),
    }
}

/// The name of the symbol a plugin library exports (abi_stable's root module loader).
pub const ROOT_MODULE_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

/// An error crossing the boundary: a numeric class (the `ERROR_*` constants; unknown codes
/// read as [`ERROR_FAILED`]) and a message.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct AbiError {
    /// One of the `ERROR_*` constants.
    pub code: u8,
    /// Human-readable message.
    pub message: RString,
}

impl From<ToolError> for AbiError {
    fn from(e: ToolError) -> Self {
        AbiError {
            code: e.code(),
            message: RString::from(e.message()),
        }
    }
}

impl From<AbiError> for ToolError {
    fn from(e: AbiError) -> Self {
        ToolError::from_code(e.code, e.message.into_string())
    }
}

/// One content block crossing the boundary: `kind` 0 is text (`text`), 1 is an image
/// (`mime`, `data`).
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct AbiContent {
    /// 0 = text, 1 = image.
    pub kind: u8,
    /// The text of a text block.
    pub text: RString,
    /// MIME type of an image block.
    pub mime: RString,
    /// Bytes of an image block.
    pub data: RVec<u8>,
}

/// [`ToolOutput`] crossing the boundary; metadata travels as JSON text.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct AbiOutput {
    /// Content blocks.
    pub content: RVec<AbiContent>,
    /// Normal completion or handled failure.
    pub success: bool,
    /// `metadata` serialized as JSON.
    pub metadata_json: RString,
    /// Files modified by the call.
    pub files_modified: ROption<RVec<RString>>,
    /// Command run by the call.
    pub command_executed: ROption<RString>,
}

impl From<ToolOutput> for AbiOutput {
    fn from(o: ToolOutput) -> Self {
        let content = o
            .content
            .into_iter()
            .map(|c| match c {
                Content::Text { text } => AbiContent {
                    kind: 0,
                    text: text.into(),
                    mime: RString::new(),
                    data: RVec::new(),
                },
                Content::Image { mime, data } => AbiContent {
                    kind: 1,
                    text: RString::new(),
                    mime: mime.into(),
                    data: data.into(),
                },
            })
            .collect();
        let metadata_json = if o.metadata.is_null() {
            RString::new()
        } else {
            // Straight into bytes: `Display` goes through a formatter per piece, six times
            // the work for a small object. A `Value` always serializes.
            serde_json::to_string(&o.metadata)
                .map(RString::from)
                .unwrap_or_default()
        };
        AbiOutput {
            content,
            success: o.success,
            metadata_json,
            files_modified: o
                .files_modified
                .map(|fs| fs.into_iter().map(RString::from).collect())
                .into(),
            command_executed: o.command_executed.map(RString::from).into(),
        }
    }
}

impl From<AbiOutput> for ToolOutput {
    fn from(o: AbiOutput) -> Self {
        let content = o
            .content
            .into_iter()
            .map(|c| match c.kind {
                1 => Content::Image {
                    mime: c.mime.into_string(),
                    data: c.data.into_vec(),
                },
                _ => Content::Text {
                    text: c.text.into_string(),
                },
            })
            .collect();
        let metadata = if o.metadata_json.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&o.metadata_json)
                .unwrap_or_else(|_| serde_json::Value::String(o.metadata_json.into_string()))
        };
        ToolOutput {
            content,
            success: o.success,
            metadata,
            files_modified: o
                .files_modified
                .into_option()
                .map(|fs| fs.into_iter().map(RString::into_string).collect()),
            command_executed: o.command_executed.into_option().map(RString::into_string),
        }
    }
}

/// Plugin metadata, read by the host right after loading.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct PluginInfo {
    /// Plugin name.
    pub name: RString,
    /// Plugin version (semver).
    pub version: RString,
    /// The tool-api version the plugin was built against (semver).
    pub tool_api_version: RString,
    /// Whether the plugin was built with `panic = "unwind"` (a panic can be contained).
    pub unwinds: bool,
}

/// Host callbacks a tool reaches through its [`crate::ToolContext`].
///
/// Implemented by the host; a plugin only ever holds the trait object ([`HostCtx`]), never a
/// raw host pointer. Log levels are 1 = error, 2 = warn, 3 = info, 4 = debug, 5 = trace.
#[sabi_trait]
pub trait HostContext: Clone + Send + Sync + 'static {
    /// The session the call belongs to.
    fn session_id(&self) -> RStr<'_>;
    /// The turn the call belongs to.
    fn turn_id(&self) -> RStr<'_>;
    /// The id of the tool_use block being executed.
    fn tool_use_id(&self) -> RStr<'_>;
    /// Absolute path of the session's workspace root.
    fn workspace_root(&self) -> RStr<'_>;
    /// Whether cancellation of this call was requested.
    fn is_cancelled(&self) -> bool;
    /// Whether a message at `level` would be recorded.
    fn log_enabled(&self, level: u8) -> bool;
    /// Records a message at `level` under the call's span.
    fn log(&self, level: u8, message: RStr<'_>);
    /// Reads a UTF-8 file.
    fn fs_read(&self, path: RStr<'_>) -> RResult<RString, AbiError>;
    /// Reads a file's bytes.
    fn fs_read_bytes(&self, path: RStr<'_>) -> RResult<RVec<u8>, AbiError>;
    /// Creates or replaces a file atomically.
    fn fs_write(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError>;
    /// Appends to a file, creating it if needed.
    fn fs_append(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError>;
    /// Whether a path exists.
    fn fs_exists(&self, path: RStr<'_>) -> RResult<bool, AbiError>;
    /// Lists a directory's entry names (directories end with `/`), sorted.
    fn fs_list(&self, path: RStr<'_>) -> RResult<RVec<RString>, AbiError>;
    /// Deletes a file.
    fn fs_delete(&self, path: RStr<'_>) -> RResult<(), AbiError>;
    /// Replaces the single occurrence of `old` with `new`.
    fn fs_patch(&self, path: RStr<'_>, old: RStr<'_>, new: RStr<'_>) -> RResult<(), AbiError>;

    /// Host operations added after 1.0, by name, with JSON payloads (see the module docs).
    #[sabi(last_prefix_field)]
    fn extension(&self, op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError>;
}

/// What [`OP_FS_METADATA`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FsMetadata {
    /// The path is a directory.
    pub is_dir: bool,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Last modification, milliseconds since the Unix epoch (0 when unknown).
    pub modified_unix_ms: u64,
}

/// Serves [`OP_FS_METADATA`] for a host: parses the payload, asks `stat`, renders the answer.
pub fn fs_metadata_op(
    payload: &str,
    stat: impl FnOnce(&str) -> Result<FsMetadata, AbiError>,
) -> Result<RString, AbiError> {
    #[derive(serde::Deserialize)]
    struct Payload {
        path: String,
    }
    let p: Payload = serde_json::from_str(payload).map_err(|e| AbiError {
        code: ERROR_INVALID_INPUT,
        message: format!("fs.metadata payload must be {{\"path\": …}}: {e}").into(),
    })?;
    let m = stat(&p.path)?;
    serde_json::to_string(&m)
        .map(RString::from)
        .map_err(|e| AbiError {
            code: ERROR_INTERNAL,
            message: e.to_string().into(),
        })
}

/// The host context as a plugin holds it: a reference-counted trait object.
pub type HostCtx = HostContext_TO<RArc<()>>;

/// One tool instance behind the boundary.
#[sabi_trait]
pub trait AbiTool: Send + Sync {
    /// Runs the tool on JSON input text.
    fn execute(&self, input_json: RStr<'_>, ctx: HostCtx) -> RResult<AbiOutput, AbiError>;
    /// Requests cancellation; idempotent, called from another thread.
    fn cancel(&self) -> bool;
    /// Tool operations added after 1.0, by name (none yet: reserved for evolution).
    #[sabi(last_prefix_field)]
    fn extension(&self, op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError>;
}

/// An owned tool instance from a plugin.
pub type AbiToolBox = AbiTool_TO<'static, RBox<()>>;

/// The root module every plugin library exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(option))]
pub struct PluginMod {
    /// Plugin metadata.
    pub info: extern "C" fn() -> PluginInfo,
    /// The plugin's tool definitions, as a JSON array of [`crate::ToolDefinition`].
    pub definitions: extern "C" fn() -> RResult<RString, AbiError>,
    /// Makes a fresh instance of the named tool.
    pub new_tool: extern "C" fn(name: RStr<'_>) -> RResult<AbiToolBox, AbiError>,
    /// Plugin operations added after 1.0, by name (1.1: [`OP_REQUIREMENTS`]).
    #[sabi(last_prefix_field)]
    pub extension: extern "C" fn(op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError>,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "toolhost_plugin";
    const NAME: &'static str = "toolhost_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Turns a panic payload into a message.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into an [`ERROR_INTERNAL`] error naming `what`.
pub(crate) fn contained<T>(
    what: &str,
    f: impl FnOnce() -> RResult<T, AbiError>,
) -> RResult<T, AbiError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => RResult::RErr(AbiError {
            code: ERROR_INTERNAL,
            message: format!("plugin panicked in {what}: {}", panic_message(&*payload)).into(),
        }),
    }
}
