//! A plugin's tools as the dispatcher sees them: [`tool_api::ToolFactory`]s.

use abi_stable::std_types::{RResult, RStr};
use serde_json::Value;
use tool_api::abi::{AbiToolBox, PluginModRef};
use tool_api::{Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput};

/// Makes instances of one plugin tool through the plugin's `new_tool`.
pub(crate) struct PluginToolFactory {
    pub(crate) module: PluginModRef,
    pub(crate) definition: ToolDefinition,
    pub(crate) source: String,
    /// Built against tool-api 1.2 or newer: the plugin can answer
    /// [`tool_api::abi::OP_CONCURRENCY_SAFE`] per call.
    pub(crate) per_call_safety: bool,
}

impl ToolFactory for PluginToolFactory {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        match (self.module.new_tool())(RStr::from(self.definition.name.as_str())) {
            RResult::ROk(inner) => Ok(Box::new(PluginTool { inner })),
            RResult::RErr(e) => Err(e.into()),
        }
    }

    fn source(&self) -> &str {
        &self.source
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        let default = self.definition.is_concurrency_safe();
        if !self.per_call_safety {
            return default;
        }
        let payload = serde_json::json!({"tool": self.definition.name, "input": input}).to_string();
        match (self.module.extension())(
            RStr::from(tool_api::abi::OP_CONCURRENCY_SAFE),
            RStr::from(payload.as_str()),
        ) {
            RResult::ROk(answer) => match answer.as_str() {
                "true" => true,
                "false" => false,
                _ => default,
            },
            RResult::RErr(e) => {
                tracing::warn!(
                    tool = %self.definition.name,
                    "plugin could not judge a call's concurrency safety ({}); using its definition",
                    e.message
                );
                default
            }
        }
    }
}

/// One plugin tool instance; input crosses as JSON text, the context as host callbacks.
struct PluginTool {
    inner: AbiToolBox,
}

impl Tool for PluginTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let json = serde_json::to_string(&input).map_err(|e| ToolError::internal(e.to_string()))?;
        match self
            .inner
            .execute(RStr::from(json.as_str()), ctx.host().clone())
        {
            RResult::ROk(out) => Ok(out.into()),
            RResult::RErr(e) => Err(e.into()),
        }
    }

    fn cancel(&self) -> bool {
        self.inner.cancel()
    }
}
