//! The plugin side of the ABI: what [`crate::export_plugin!`] expands to. It adapts an
//! author's [`Tool`] and [`DefinedTool`] types to the frozen [`crate::abi`] types and
//! contains every panic on the way.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use crate::abi::{
    AbiError, AbiOutput, AbiTool, AbiTool_TO, AbiToolBox, ERROR_FAILED, ERROR_INTERNAL, HostCtx,
    OP_CONCURRENCY_SAFE, OP_REQUIREMENTS, PluginInfo, RResult, RStr, RString, TD_Opaque,
    TOOL_API_VERSION, contained, panic_message, unsupported,
};
use crate::context::ToolContext;
use crate::definition::ToolDefinition;
use crate::output::ToolError;
use crate::tool::{DefinedTool, Tool};

/// Adapts an author's [`Tool`] to [`AbiTool`], containing panics.
struct Exported<T>(T);

impl<T: Tool> AbiTool for Exported<T> {
    fn execute(&self, input_json: RStr<'_>, ctx: HostCtx) -> RResult<AbiOutput, AbiError> {
        contained("execute", || {
            let ctx = ToolContext::from_host(ctx);
            match self.0.execute_text(input_json.as_str(), &ctx) {
                Ok(out) => RResult::ROk(out.into()),
                Err(e) => RResult::RErr(e.into()),
            }
        })
    }

    fn cancel(&self) -> bool {
        catch_unwind(AssertUnwindSafe(|| self.0.cancel())).unwrap_or(false)
    }

    fn extension(&self, op: RStr<'_>, _payload: RStr<'_>) -> RResult<RString, AbiError> {
        RResult::RErr(unsupported(op.as_str(), "tool"))
    }
}

/// Wraps a tool instance as an ABI object (used by the export machinery and by tests).
pub fn abi_tool<T: Tool + 'static>(tool: T) -> AbiToolBox {
    AbiTool_TO::from_value(Exported(tool), TD_Opaque)
}

/// One tool type a plugin exports. Built by [`crate::export_plugin!`].
pub struct ToolEntry {
    definition: fn() -> ToolDefinition,
    create: fn() -> AbiToolBox,
    concurrency_safe: fn(&serde_json::Value) -> Option<bool>,
}

impl ToolEntry {
    /// The entry for tool type `T`.
    pub const fn of<T: DefinedTool>() -> ToolEntry {
        ToolEntry {
            definition: T::definition,
            create: create_boxed::<T>,
            concurrency_safe: <T as DefinedTool>::is_concurrency_safe,
        }
    }
}

fn create_boxed<T: DefinedTool>() -> AbiToolBox {
    abi_tool(T::default())
}

/// What a plugin exports, in plain Rust; [`crate::export_plugin!`] builds one as a static and
/// points the root module's functions at it.
pub struct PluginExport {
    name: &'static str,
    version: &'static str,
    requires: &'static str,
    unwinds: bool,
    tools: &'static [ToolEntry],
    names: OnceLock<Result<Vec<String>, String>>,
}

impl PluginExport {
    /// Describes a plugin. `requires` is the oldest tool-api version the plugin needs from
    /// its host; `unwinds` must be `cfg!(panic = "unwind")` evaluated in the plugin.
    pub const fn new(
        name: &'static str,
        version: &'static str,
        requires: &'static str,
        unwinds: bool,
        tools: &'static [ToolEntry],
    ) -> Self {
        PluginExport {
            name,
            version,
            requires,
            unwinds,
            tools,
            names: OnceLock::new(),
        }
    }

    /// The plugin name `export_plugin!` was given.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The plugin version `export_plugin!` was given.
    pub fn version(&self) -> &str {
        self.version
    }

    /// Every tool's definition, in export order; a panic in a definition is an error.
    pub fn tool_definitions(&self) -> Result<Vec<ToolDefinition>, String> {
        catch_unwind(|| self.tools.iter().map(|t| (t.definition)()).collect())
            .map_err(|p| format!("a tool's definition() panicked: {}", panic_message(&*p)))
    }

    /// The plugin's metadata.
    pub fn info(&self) -> PluginInfo {
        PluginInfo {
            name: self.name.into(),
            version: self.version.into(),
            tool_api_version: TOOL_API_VERSION.into(),
            unwinds: self.unwinds,
        }
    }

    /// Answers a plugin extension operation ([`OP_REQUIREMENTS`]: the oldest tool-api
    /// version a host must provide; [`OP_CONCURRENCY_SAFE`]: a tool's per-call answer).
    pub fn extension(&self, op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError> {
        match op.as_str() {
            OP_REQUIREMENTS => RResult::ROk(self.requires.into()),
            OP_CONCURRENCY_SAFE => contained("is_concurrency_safe", || {
                self.concurrency_safe(payload.as_str())
            }),
            other => RResult::RErr(unsupported(other, "plugin")),
        }
    }

    /// The tool names, in export order (computed once; a panic in a definition is an error).
    fn names(&self) -> Result<&[String], AbiError> {
        let names = self.names.get_or_init(|| {
            catch_unwind(|| self.tools.iter().map(|t| (t.definition)().name).collect())
                .map_err(|p| panic_message(&*p))
        });
        match names {
            Ok(n) => Ok(n),
            Err(m) => Err(AbiError {
                code: ERROR_INTERNAL,
                message: format!("plugin panicked in definitions: {m}").into(),
            }),
        }
    }

    fn concurrency_safe(&self, payload: &str) -> RResult<RString, AbiError> {
        #[derive(serde::Deserialize)]
        struct Payload {
            tool: String,
            input: serde_json::Value,
        }
        let p: Payload = match serde_json::from_str(payload) {
            Ok(p) => p,
            Err(e) => return RResult::RErr(ToolError::InvalidInput(e.to_string()).into()),
        };
        let names = match self.names() {
            Ok(n) => n,
            Err(e) => return RResult::RErr(e),
        };
        let entry = names
            .iter()
            .position(|n| *n == p.tool)
            .map(|i| &self.tools[i]);
        let answer = match entry.map(|t| (t.concurrency_safe)(&p.input)) {
            Some(Some(true)) => "true",
            Some(Some(false)) => "false",
            Some(None) => "",
            None => {
                return RResult::RErr(AbiError {
                    code: ERROR_FAILED,
                    message: format!("plugin '{}' has no tool '{}'", self.name, p.tool).into(),
                });
            }
        };
        RResult::ROk(answer.into())
    }

    /// All definitions as a JSON array; a panic in a definition becomes an error.
    pub fn definitions(&self) -> RResult<RString, AbiError> {
        contained("definitions", || {
            let defs: Vec<ToolDefinition> = self.tools.iter().map(|t| (t.definition)()).collect();
            match serde_json::to_string(&defs) {
                Ok(s) => RResult::ROk(s.into()),
                Err(e) => RResult::RErr(ToolError::internal(e.to_string()).into()),
            }
        })
    }

    /// A fresh instance of the named tool; a panic in the factory becomes an error.
    pub fn new_tool(&self, name: RStr<'_>) -> RResult<AbiToolBox, AbiError> {
        contained("new_tool", || {
            let names = match self.names() {
                Ok(n) => n,
                Err(e) => return RResult::RErr(e),
            };
            match names.iter().position(|n| n == name.as_str()) {
                Some(i) => RResult::ROk((self.tools[i].create)()),
                None => RResult::RErr(AbiError {
                    code: ERROR_FAILED,
                    message: format!(
                        "plugin '{}' has no tool '{}' (it has: {})",
                        self.name,
                        name,
                        names.join(", ")
                    )
                    .into(),
                }),
            }
        })
    }
}

/// Re-exports the export macro needs; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use abi_stable::library::{
        __call_root_module_loader, CheckTypeLayout, LibHeader, RootModuleResult,
    };
    pub use abi_stable::prefix_type::PrefixTypeTrait;
    pub use abi_stable::std_types::{RResult, RStr, RString};
}
