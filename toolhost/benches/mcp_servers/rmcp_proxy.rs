//! The floor of a gateway: a bare pass-through proxy written on rmcp, client and server, the
//! way its documentation shows, that forwards one tool of the server it starts. It serves
//! over stdio, starts the upstream with rmcp's child-process transport, lists its tools
//! once, publishes the one named under the name the gateway would give it (`PREFIX__NAME`),
//! and hands each `tools/call` to the upstream as it came (`call_tool_once`) and its answer
//! back as it went. No schema check, no policy, no sandbox, no events, no audit: what any
//! proxy spends, against which toolhost's own CPU per call is judged.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer};
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};

/// The proxy's one tool: published as `published`, called upstream as `upstream`.
#[derive(Clone)]
struct Proxy {
    peer: Peer<RoleClient>,
    published: Tool,
    upstream: String,
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![
            self.published.clone(),
        ]))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != self.published.name {
            return Err(McpError::invalid_params(
                format!("no tool {}", request.name),
                None,
            ));
        }
        request.name = self.upstream.clone().into();
        self.peer
            .call_tool_once(request)
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))
    }
}

/// Serves `published` over stdio, forwarding it to tool `upstream` of the server `command`
/// starts, until the input ends.
pub fn rmcp_proxy(published: &str, upstream: &str, command: &[String]) {
    let (program, args) = command.split_first().expect("an upstream command");
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    runtime.block_on(async {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args);
        let transport = TokioChildProcess::new(cmd).expect("the upstream starts");
        let client = ().serve(transport).await.expect("the upstream initializes");
        let tools = client
            .peer()
            .list_all_tools()
            .await
            .expect("the upstream lists its tools");
        let mut tool = tools
            .into_iter()
            .find(|t| t.name == upstream)
            .unwrap_or_else(|| panic!("the upstream has no tool {upstream}"));
        tool.name = published.to_string().into();
        let proxy = Proxy {
            peer: client.peer().clone(),
            published: tool,
            upstream: upstream.to_string(),
        };
        let served = proxy
            .serve(rmcp::transport::stdio())
            .await
            .expect("the session starts");
        let _ = served.waiting().await;
        let _ = client.cancel().await;
    });
}
