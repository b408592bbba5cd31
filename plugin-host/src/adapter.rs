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
    /// The plugin's version.
    pub(crate) version: String,
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

    fn version(&self) -> Option<&str> {
        Some(&self.version)
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

/// The largest scratch buffer a thread keeps between calls; a call with a larger input
/// allocates its own, which is freed after it.
const MAX_KEPT_INPUT_TEXT: usize = 64 * 1024;

thread_local! {
    /// Where [`PluginTool::execute_written`] has the input's JSON text written.
    static INPUT_TEXT: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `input` as JSON text, written into `buf`.
fn write_json(buf: &mut Vec<u8>, input: &Value) -> Result<(), ToolError> {
    serde_json::to_writer(buf, input).map_err(|e| ToolError::internal(e.to_string()))
}

/// The JSON text [`write_json`] wrote.
fn as_text(buf: &[u8]) -> Result<&str, ToolError> {
    // serde_json writes UTF-8; the check is a formality the compiler cannot skip.
    std::str::from_utf8(buf).map_err(|e| ToolError::internal(e.to_string()))
}

/// One plugin tool instance; input crosses as JSON text, the context as host callbacks.
struct PluginTool {
    inner: AbiToolBox,
}

impl PluginTool {
    /// The plugin's `execute` with the input as JSON text.
    fn execute_text(&self, text: &str, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        match self.inner.execute(RStr::from(text), ctx.host().clone()) {
            RResult::ROk(out) => Ok(out.into()),
            RResult::RErr(e) => Err(e.into()),
        }
    }

    /// The plugin's `execute` with the input's JSON text, which `write` puts into this
    /// thread's scratch buffer: one allocation less per call. Taken out while in use, so a
    /// call made from inside the plugin (through the host) gets a buffer of its own.
    fn execute_written(
        &self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), ToolError>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let mut json = INPUT_TEXT.take();
        json.clear();
        let result = write(&mut json)
            .and_then(|()| as_text(&json))
            .and_then(|text| self.execute_text(text, ctx));
        if json.capacity() <= MAX_KEPT_INPUT_TEXT {
            INPUT_TEXT.set(json);
        }
        result
    }
}

impl Tool for PluginTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        // The input is dropped once written, before the plugin runs.
        self.execute_written(move |buf| write_json(buf, &input), ctx)
    }

    fn execute_ref(&self, input: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.execute_written(|buf| write_json(buf, input), ctx)
    }

    fn cancel(&self) -> bool {
        self.inner.cancel()
    }
}

#[cfg(test)]
mod tests {

    use serde_json::json;
    use tool_api::testing::TestHost;

    use super::*;

    /// Answers with the input it received, as JSON text.
    struct Echo;

    impl Tool for Echo {
        fn execute(&self, input: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text(input.to_string()))
        }
    }

    fn echoed(tool: &PluginTool, input: Value) -> Value {
        let out = tool.execute(input, &TestHost::new().context()).unwrap();
        serde_json::from_str(&out.text_content()).unwrap()
    }

    #[test]
    fn each_call_gets_exactly_its_own_input_across_the_reused_buffer() {
        let tool = PluginTool {
            inner: tool_api::export::abi_tool(Echo),
        };
        let long = "é".repeat(MAX_KEPT_INPUT_TEXT);
        let inputs = [
            json!({"text": "a longer first input", "n": 12345}),
            json!({"a": 1}),
            json!({"text": long}),
            json!({}),
            json!({"text": "short"}),
        ];
        for input in inputs {
            assert_eq!(echoed(&tool, input.clone()), input);
            // Borrowed (a host that may run the call again), the same input crosses.
            let out = tool
                .execute_ref(&input, &TestHost::new().context())
                .unwrap();
            assert_eq!(
                serde_json::from_str::<Value>(&out.text_content()).unwrap(),
                input
            );
        }
    }
}
