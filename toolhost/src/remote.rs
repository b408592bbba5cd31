//! The remote host (`[remote]`): another toolhost that runs the calls routed to it
//! (`[sandbox.per_tool] NAME = "remote"`). Reached over MCP streamable HTTP with a bearer
//! token, as a mounted server whose tools are not published here: a call of a routed tool
//! keeps its validation, policy, confirmation and events here, and only its execution goes
//! there, as a `tools/call` of the same name. Its output, its live progress, its errors and
//! its cancellation travel back and forth.
//!
//! The executing instance decides again under its own policy; the call was confirmed here,
//! so it is typically set to let its caller's calls run (see docs/operations.md).
//!
//! A host that cannot be reached when toolhost starts is tried again, at most every five
//! seconds, when a routed call comes; until then such calls fail saying why.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use dispatcher_core::RemoteHost;
use dispatcher_core::Seconds;
use mcp_toolsets::{McpServerConfig, McpToolset, MemoryPins, ServerSandbox};
use tool_api::{Tool, ToolError};

use crate::config::remote::Remote;

/// How often an unreachable host is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// How long a routed call may take at the MCP level: the call's own grant timeout, applied
/// here, is what limits it.
const NO_LIMIT_THERE: Duration = Duration::from_secs(24 * 3600);

enum State {
    Up(Arc<McpToolset>),
    Down {
        why: String,
        tried: Instant,
        trying: bool,
    },
}

/// The connection to the remote host.
pub struct RemoteTools {
    url: String,
    config: McpServerConfig,
    sandbox: Arc<ServerSandbox>,
    state: Mutex<State>,
    me: Weak<RemoteTools>,
}

impl RemoteTools {
    /// Connects to the host `remote` names (once; a failure is logged and tried again
    /// when a routed call comes).
    pub async fn connect(remote: &Remote, sandbox: Arc<ServerSandbox>) -> Arc<RemoteTools> {
        let mut config = McpServerConfig::new("remote", "", "");
        config.url = Some(remote.url.clone());
        config.bearer_token_env = remote.bearer_token_env.clone();
        config.startup_timeout = remote.startup_timeout;
        config.call_timeout = Seconds(NO_LIMIT_THERE);
        config.input_schemas = mcp_toolsets::InputSchemas::AsGiven;
        let tools = Arc::new_cyclic(|me| RemoteTools {
            url: remote.url.clone(),
            config,
            sandbox,
            state: Mutex::new(State::Down {
                why: "not connected yet".into(),
                tried: Instant::now(),
                trying: true,
            }),
            me: me.clone(),
        });
        tools.attempt().await;
        tools
    }

    async fn attempt(&self) {
        let started = McpToolset::start(
            self.config.clone(),
            &self.sandbox,
            Arc::new(MemoryPins::default()),
        )
        .await;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        *state = match started {
            Ok(toolset) => {
                tracing::info!(url = %self.url, "the remote host is reached: calls routed to it run there");
                State::Up(toolset)
            }
            Err(e) => {
                tracing::warn!(url = %self.url, "the remote host cannot be reached: {e}; calls routed to it fail until it can");
                State::Down {
                    why: e.to_string(),
                    tried: Instant::now(),
                    trying: false,
                }
            }
        };
    }
}

impl RemoteHost for RemoteTools {
    fn describe(&self) -> String {
        self.url.clone()
    }

    fn instance(&self, tool: &str) -> Result<Box<dyn Tool>, ToolError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *state {
            State::Up(toolset) => toolset.instance(tool),
            State::Down { why, tried, trying } => {
                let message = format!(
                    "tool '{tool}' runs on the remote host {}, which cannot be reached: {why}",
                    self.url
                );
                if !*trying
                    && tried.elapsed() >= RETRY_EVERY
                    && let (Some(me), Ok(runtime)) =
                        (self.me.upgrade(), tokio::runtime::Handle::try_current())
                {
                    *trying = true;
                    runtime.spawn(async move { me.attempt().await });
                }
                Err(ToolError::failed(message))
            }
        }
    }
}

impl Drop for RemoteTools {
    fn drop(&mut self) {
        if let State::Up(toolset) = &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            dispatcher_core::Toolset::stop(toolset.as_ref());
        }
    }
}
