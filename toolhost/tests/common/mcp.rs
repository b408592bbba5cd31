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

/// `toolhost serve --mcp` over `dir`, with `config` written as its `toolhost.toml` and no
/// user configuration or state outside `dir`: the command a test's rmcp client starts.
pub fn serve_mcp(dir: &std::path::Path, config: &str) -> tokio::process::Command {
    std::fs::write(dir.join("toolhost.toml"), config).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.args(["serve", "--mcp", "--workspace"])
        .arg(dir)
        .current_dir(dir)
        .env("XDG_CONFIG_HOME", dir.join(".no-config"))
        .env("XDG_STATE_HOME", dir.join(".state"));
    cmd
}
