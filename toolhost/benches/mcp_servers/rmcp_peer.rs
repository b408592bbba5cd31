//! What a Rust user would write instead of toolhost: a bare rmcp server with the same one
//! tool, `read_file`, written the way rmcp's documentation shows (`#[tool_router]` over a
//! typed `Parameters`, served on rmcp's own stdio transport), and no pipeline: no schema
//! check of its own, no policy, no events, no audit. The file is read as the floor server
//! reads it ([`crate::floor::read_beneath`]: `openat2` beneath the workspace), on the task
//! that serves the call.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ServiceExt, schemars, tool, tool_router};
use serde::Deserialize;

/// The one tool's input.
#[derive(Deserialize, schemars::JsonSchema)]
struct ReadFile {
    /// The file, relative to the workspace.
    path: String,
}

#[derive(Clone)]
struct Files {
    root: Arc<OwnedFd>,
}

#[tool_router(server_handler)]
impl Files {
    #[tool(description = "Reads a text file beneath the workspace")]
    fn read_file(&self, Parameters(ReadFile { path }): Parameters<ReadFile>) -> CallToolResult {
        match crate::floor::read_beneath(&self.root, &path) {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
        }
    }
}

/// Serves `read_file` over stdio for the files beneath `workspace`, until the input ends.
pub fn rmcp_server(workspace: &str) {
    let root = Arc::new(crate::floor::open_workspace(workspace));
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    runtime.block_on(async {
        let served = Files { root }
            .serve(rmcp::transport::stdio())
            .await
            .expect("the session starts");
        let _ = served.waiting().await;
    });
}
