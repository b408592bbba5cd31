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
        judge_concurrency(
            &self.definition,
            self.per_call_safety,
            input,
            |payload| match (self.module.extension())(
                RStr::from(tool_api::abi::OP_CONCURRENCY_SAFE),
                RStr::from(payload.as_str()),
            ) {
                RResult::ROk(answer) => Some(answer.into_string()),
                RResult::RErr(e) => {
                    tracing::warn!(
                        tool = %self.definition.name,
                        "plugin could not judge a call's concurrency safety ({}); using its definition",
                        e.message
                    );
                    None
                }
            },
        )
    }
}

/// A plugin's per-call concurrency judgment: `ask` gets the `concurrency_safe` payload and
/// returns the plugin's answer; no answer, an empty one, or a plugin older than tool-api
/// 1.2 (`per_call_safety` false) defers to the definition.
pub(crate) fn judge_concurrency(
    definition: &ToolDefinition,
    per_call_safety: bool,
    input: &Value,
    ask: impl FnOnce(String) -> Option<String>,
) -> bool {
    let default = definition.is_concurrency_safe();
    if !per_call_safety {
        return default;
    }
    let payload = serde_json::json!({"tool": definition.name, "input": input}).to_string();
    match ask(payload).as_deref() {
        Some("true") => true,
        Some("false") => false,
        _ => default,
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
