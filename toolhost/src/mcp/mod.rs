//! toolhost as an MCP server: the request handler ([`server`]), the screening every
//! incoming message passes first ([`screen`]), stateless confirmations
//! ([`request_state`]), telling clients their tool list changed ([`list_changes`]) and the
//! transports ([`stdio`]).

pub mod list_changes;
pub mod request_state;
pub mod screen;
pub mod server;
pub mod stdio;

pub use server::{
    EofNotify, McpConfirmer, McpServer, McpShared, Principal, PromptFallback, Routes, Sessions,
};
