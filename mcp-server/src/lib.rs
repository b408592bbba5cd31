//! # mcp-server
//!
//! toolhost as an MCP server, over a [`dispatcher_core::Dispatcher`] the program built:
//! the request handler ([`server`]), a `tools/call` (`call`: who
//! sent it, `caller`, and how it ended, `answer`), the screening every
//! incoming message passes first ([`screen`]), one call's way to its user, carried by the
//! call (`route`), how the user is asked ([`confirm`]) and
//! stateless confirmations ([`request_state`]), where calls run ([`sessions`]), live output
//! ([`progress`]), what mounted servers ask the user, put to the calling client (`relay`),
//! telling clients their tool list changed ([`list_changes`]), mounted servers' notifications
//! passed on (`passthrough`) and the
//! transports: [`stdio`], and streamable HTTP with the control API and the web console
//! ([`http`]).
//!
//! The program (`toolhost`: its command line, configuration and telemetry) depends on this
//! crate, never the reverse: what the server needs from it comes in as values (a
//! [`Sessions`], [`TaskSettings`], [`http::HttpOptions`]) or small traits
//! ([`http::control::MetricsExposition`]).

mod answer;
mod caller;
pub mod confirm;
pub mod discovery;
mod era;
pub mod gateway;
pub mod http;
pub mod list_changes;
pub mod own_logs;
mod passthrough;
pub mod progress;
mod relay;
pub mod request_state;
mod route;
pub mod screen;
pub mod server;
pub mod sessions;
pub mod stdio;
pub mod tasks;
pub mod tasks_2025;
#[cfg(test)]
mod wake_count;

pub(crate) use caller::Caller;
pub use confirm::{Consoles, McpConfirmer, PromptFallback};
pub use discovery::{Discovery, DiscoveryMode};
pub use gateway::Upstreams;
pub use server::{McpServer, McpShared};
pub(crate) use sessions::principal_of_parts;
pub use sessions::{CallerToken, Principal, Sessions};
pub use stdio::EofNotify;
pub use tasks::{TaskSettings, Tasks};
