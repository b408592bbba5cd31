//! toolhost as an MCP server: the request handler ([`server`]), the screening every
//! incoming message passes first ([`screen`]), and the transports ([`stdio`]).

pub mod screen;
pub mod server;
pub mod stdio;

pub use server::{ElicitingConfirmer, EofNotify, McpServer, PeerSlot, PromptFallback};
