//! # toolhost
//!
//! The `toolhost` program as a library: its command line ([`cli::main`], which the binary
//! runs), and the host its configuration describes ([`build_host`]), for programs that
//! embed toolhost the way the CLI runs it (the Python wheel, `toolhost-py`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolhost::UsageError> {
//! let (config, file) = toolhost::load_config(None)?;
//! let sources = toolhost::Sources {
//!     config: &config,
//!     file: &file,
//!     extra_plugin_dirs: &[],
//!     worker: None,
//! };
//! let host = toolhost::build_host(&sources, std::path::Path::new("."), None).await?;
//! let session = host.open_session_in("my-session", std::path::Path::new("."))?;
//! # drop(session); Ok(()) }
//! ```

mod audit;
mod authoring;
pub mod cli;
mod config;
mod error;
mod guardrail;
mod host;
mod login;
mod mcp_add;
mod plugin_sources;
mod policy_files;
pub mod quiet;
mod reload;
mod remote;
mod sandbox_report;
mod self_mount;
mod serve;
mod server_json;
mod telemetry;
mod terminal;
mod text_model;

pub use config::Config;
pub use error::UsageError;
pub use host::{Host, PLUGIN_WORKER, SessionArgs, Sources, build_host, load_config};
pub use terminal::question as confirmation_question;

/// The tracing layer that passes toolhost's own log messages to MCP clients
/// (`[mcp] client_logs`): a program that sets up its own subscriber adds it.
pub use mcp_server::own_logs::layer as client_log_layer;
