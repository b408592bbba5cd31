//! # mcp-toolsets: other MCP servers as toolhost toolsets
//!
//! [`McpToolset::start`] spawns a server (`command` + `args`, with `env` and `cwd`) and
//! speaks MCP to it over its stdin/stdout, or reaches one over streamable HTTP (`url`, with
//! an optional bearer token from the environment variable `bearer_token_env`); it
//! initializes within the startup timeout, lists its tools and offers them as a
//! [`Toolset`]; the host publishes them under the configured prefix.
//!
//! - **Both protocol eras over HTTP.** The client probes with `server/discover` and speaks
//!   2026-07-28 to a server that knows it, 2025-11-25 (`initialize`) to one that does not.
//!   What a server asks the user while a call runs (a 2025 server's `elicitation/create`
//!   and `sampling/createMessage`, a 2026 server's `input_required` result) goes to the
//!   client that made the call when the host relays to one that can take it
//!   ([`ClientRelay`], carried by the call in its [`Origin`]), else through the host's
//!   confirmation channel ([`tool_api::ToolContext::ask_user`]: the same broker, prompts
//!   and console as toolhost's own confirmations; see [`input`] for what each kind of
//!   request gets). A 2026 call is retried with the answers and the server's
//!   `requestState`, up to [`MAX_INPUT_ROUNDS`] rounds.
//!
//! - **Side effects are not taken on trust.** A tool without annotations counts as
//!   `execute`; `readOnlyHint: true` → `read`; otherwise `openWorldHint` (true unless said
//!   false) → `network`; a closed-world tool with `destructiveHint: false` → `write`; else
//!   `execute`. Per-tool overrides in the configuration win over all of that.
//! - **A server that dies**: its calls fail with `execution_error` naming the server and its
//!   exit status; the next call restarts it, with a backoff that doubles from 1 s up to 30 s
//!   between failed attempts.
//! - `notifications/tools/list_changed` from the server re-lists its tools and republishes
//!   them, through the [`ToolsetHandle`] the dispatcher gave the toolset when it was
//!   registered (shared) or started for a session (per session). A 2026-07-28 server that
//!   declares `tools.listChanged` sends it on a `subscriptions/listen` stream the client
//!   opens once connected.
//! - **Tasks.** toolhost declares the tasks extension (`io.modelcontextprotocol/tasks`) to
//!   the servers it mounts; a call the server makes a task of is followed to its end
//!   (`tasks/get`, its `inputRequests` asked through the host's task for the call when the
//!   host made one, [`ClientRelay::became_task`], else like any question; `tasks/cancel` on
//!   cancel), so it keeps the shape of a call. A 2025-era server's tool that runs only as a
//!   2025-11-25 task is called as one (`params.task`, then `tasks/result`).
//! - Cancelling a call sends `notifications/cancelled` to the server.
//! - The server's stderr is logged (target `toolhost::mcp_server`, DEBUG) and its last
//!   lines explain a failure to start, or are logged at WARN when it exits on its own;
//!   once toolhost stops it ([`Toolset::stop`] kills it) nothing it writes is logged.
//! - **A stdio server runs in an OS sandbox** ([`ServerSandbox`]: the host's `[sandbox]`
//!   settings under its entry's keys; `workspace-write` unless they say otherwise): it
//!   reads everything but the deny list, writes the workspace, a private temporary
//!   directory, the writable roots and the build caches; with network it goes out only
//!   through the egress proxy, to the hosts its allow list names; its environment holds no
//!   secret but what its entry's `env` gives it. Where that cannot be enforced it is not
//!   started ([`UpstreamError::Sandbox`]) unless `allow_unsandboxed`. A server that fails
//!   to start is told with its last error output and what its sandbox refused it.

mod call;
pub mod callers;
mod cancel;
mod config;
mod confine;
mod error;
pub mod input;
mod mailbox;
pub mod pace;
pub mod pins;
pub mod relay;
mod task;
mod upstream;

pub use call::{ERROR_META, MAX_INPUT_ROUNDS, RESULT_META};
pub use callers::{CallerCredential, ExchangeFuture, TokenExchange};
pub use config::{
    Credentials, DEFAULT_CALL_TIMEOUT, DEFAULT_CALLER_IDLE, DEFAULT_MAX_CALLERS,
    DEFAULT_MAX_CONCURRENCY, DEFAULT_STARTUP_TIMEOUT, InputSchemas, MAX_NESTING, McpServerConfig,
    NESTING_ENV, nesting,
};
pub use confine::ServerSandbox;
pub use error::UpstreamError;
pub use pins::{FilePins, MemoryPins, OnChange, PinStore};
pub use relay::{ClientRelay, Origin, RelayFuture, Relayed, Resume};
pub use upstream::events::{ServerEvent, level_rank};
pub use upstream::http_client::install_tls_provider;
pub use upstream::offers::Offers;

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use dispatcher_core::{Toolset, ToolsetHandle};
use serde_json::Value;
use tool_api::{SideEffect, ToolDefinition, ToolFactory};

use crate::call::McpToolFactory;
use crate::upstream::Upstream;

/// The class of an MCP tool: annotations read conservatively, config overrides win.
pub fn side_effects_of(
    tool: &rmcp::model::Tool,
    overrides: &BTreeMap<String, SideEffect>,
) -> SideEffect {
    if let Some(class) = overrides.get(tool.name.as_ref()) {
        return *class;
    }
    let Some(a) = &tool.annotations else {
        return SideEffect::Execute;
    };
    if a.read_only_hint == Some(true) {
        SideEffect::Read
    } else if a.open_world_hint != Some(false) {
        SideEffect::Network
    } else if a.destructive_hint == Some(false) {
        SideEffect::Write
    } else {
        SideEffect::Execute
    }
}

/// A running MCP server offered as a toolset.
pub struct McpToolset {
    server: Arc<Upstream>,
}

impl std::fmt::Debug for McpToolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolset")
            .field("id", &self.server.config.id)
            .finish_non_exhaustive()
    }
}

impl McpToolset {
    /// Starts the server (a stdio server in its sandbox: `host`'s settings under its own
    /// entry's, [`ServerSandbox::for_server`]), initializes it within its startup timeout
    /// and lists its tools. Refused when this process is already [`MAX_NESTING`] toolhosts
    /// deep.
    ///
    /// Its tools are checked against `pins` ([`pins`]): a tool whose definition changed
    /// since it was first seen is withheld (listed in [`McpToolset::left_out`]) or, with
    /// `on_change = "warn"`, published with a warning.
    pub async fn start(
        config: McpServerConfig,
        host: &ServerSandbox,
        pins: Arc<dyn PinStore>,
    ) -> Result<Arc<McpToolset>, UpstreamError> {
        let sandbox = host.for_server(&config);
        Upstream::start(config, sandbox, pins)
            .await
            .map(|server| Arc::new(McpToolset { server }))
    }

    /// What its process runs in: `workspace-write`, `read-only, network`, `host
    /// (unconfined)`, `unsandboxed (…)`, or `remote (…)` for a server reached over HTTP.
    pub fn confinement(&self) -> String {
        self.server.confinement()
    }

    /// The server's tools that are left out, each with why (the message names the tool): an
    /// input schema the dispatcher would refuse (outside the subset model providers accept,
    /// or not a valid schema), or a definition changed since it was pinned (withheld until
    /// approved). One such tool does not cost the server its other tools.
    pub fn left_out(&self) -> Vec<(String, String)> {
        self.server
            .left_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many callers' own connections (processes, over stdio) are open now: an entry
    /// with `credentials = "caller"` or `"exchange"` opens one per caller, at most
    /// `max_callers`, each closed after `caller_idle_timeout_secs` without a call.
    pub fn caller_connections(&self) -> usize {
        self.server.per_caller.len()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &McpServerConfig {
        &self.server.config
    }

    /// A call of the server's tool `name`, as a tool instance of its own (for a host that
    /// routes calls of its tools to this server: [`dispatcher_core::RemoteHost`]). Refused,
    /// naming what the server offers, when it does not offer `name`.
    pub fn instance(&self, name: &str) -> Result<Box<dyn tool_api::Tool>, tool_api::ToolError> {
        let server = &self.server;
        let offered: Vec<String> = server
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        if !offered.iter().any(|t| t == name) {
            return Err(tool_api::ToolError::failed(format!(
                "the host at {} does not offer tool '{name}' (it offers: {})",
                server.config.url.as_deref().unwrap_or(&server.config.id),
                if offered.is_empty() {
                    "nothing".to_string()
                } else {
                    offered.join(", ")
                }
            )));
        }
        Ok(Box::new(call::McpTool::new(server.clone(), name)))
    }
}

impl Toolset for McpToolset {
    fn tools(&self) -> Vec<Arc<dyn ToolFactory>> {
        let server = &self.server;
        let tools = server
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let unpinned = server
            .unpinned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let version = server
            .version
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        tools
            .iter()
            .map(|t| {
                let schema = Value::Object((*t.input_schema).clone());
                let mut def = ToolDefinition::new(
                    t.name.to_string(),
                    t.description.as_deref().unwrap_or("").to_string(),
                    side_effects_of(t, &server.config.side_effects),
                    schema,
                );
                def.timeout_ms = Some(
                    u64::try_from(server.config.call_timeout().as_millis()).unwrap_or(u64::MAX),
                );
                Arc::new(McpToolFactory {
                    server: server.clone(),
                    pinned: !unpinned.contains(t.name.as_ref()),
                    version: version.clone(),
                    definition: def,
                    source: format!("mcp:{}", server.config.id),
                }) as Arc<dyn ToolFactory>
            })
            .collect()
    }

    fn bind(&self, handle: ToolsetHandle) {
        *self
            .server
            .handle
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(handle);
    }

    fn stop(&self) {
        self.server.stop();
    }

    fn own_cap(&self) -> Option<usize> {
        Some(self.server.config.max_concurrency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{Tool, ToolAnnotations};

    fn tool(annotations: Option<ToolAnnotations>) -> Tool {
        let t = Tool::new(
            "t".to_string(),
            "T.".to_string(),
            Arc::new(Default::default()),
        );
        match annotations {
            Some(a) => t.annotate(a),
            None => t,
        }
    }

    #[test]
    fn annotations_are_read_conservatively_and_overrides_win() {
        let table = [
            (None, SideEffect::Execute),
            (Some(ToolAnnotations::new()), SideEffect::Network),
            (
                Some(ToolAnnotations::new().read_only(true)),
                SideEffect::Read,
            ),
            (
                Some(ToolAnnotations::new().open_world(true)),
                SideEffect::Network,
            ),
            (
                Some(ToolAnnotations::new().open_world(false).destructive(false)),
                SideEffect::Write,
            ),
            (
                Some(ToolAnnotations::new().open_world(false)),
                SideEffect::Execute,
            ),
        ];
        for (annotations, want) in table {
            assert_eq!(
                side_effects_of(&tool(annotations.clone()), &BTreeMap::new()),
                want,
                "{annotations:?}"
            );
        }
        let overrides = BTreeMap::from([("t".to_string(), SideEffect::None)]);
        assert_eq!(side_effects_of(&tool(None), &overrides), SideEffect::None);
    }

    #[test]
    fn a_config_entry_names_what_is_wrong() {
        let e = toml::from_str::<McpServerConfig>(
            "id = \"a\"\nprefix = \"bad prefix\"\ncommand = \"x\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("prefix 'bad prefix' must be 1-32") && e.contains("\"\" for none"),
            "{e}"
        );
        let c: McpServerConfig =
            toml::from_str("id = \"a\"\nprefix = \"\"\ncommand = \"x\"\non_change = \"warn\"\n")
                .unwrap();
        assert_eq!((c.prefix.as_str(), c.on_change), ("", OnChange::Warn));
    }
}
