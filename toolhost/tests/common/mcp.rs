//! Calling toolhost's tools over MCP with rmcp's client, and reading their results.

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService, Service};
use serde_json::Value;

/// Calls `name` with `args` (a JSON object) through `client`.
pub async fn call<S: Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
    name: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("a tool's arguments are a JSON object, not {args}")
    };
    client
        .peer()
        .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args))
        .await
        .unwrap()
}

/// A result's text blocks, one per line.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}
