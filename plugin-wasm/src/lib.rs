//! # plugin-wasm: tools written as WebAssembly components
//!
//! A component built for WASI 0.2 against the `plugin` world of `tool-api/wit/plugin.wit`
//! describes its tools and executes calls; toolhost gives it nothing but that world's
//! `host` interface (the call's workspace files through the same [`tool_api::ToolContext`] a
//! native tool gets, logs, live output, cancellation, asking the user) and a WASI context
//! with no preopened directory, no environment and no sockets. A tool declared `network`
//! may send HTTP requests (`wasi:http`) to the hosts its plugin is allowed ([`HostList`]),
//! and to no other.
//!
//! - [`WasmRuntime`] holds one wasmtime engine and linker for a host, and caches compiled
//!   code on disk keyed by the component's SHA-256, so only a first start compiles;
//! - [`WasmRuntime::load`] reads the component's interface version (plugin-host gates it
//!   with the native ABI's rule), pre-links it and calls its `describe()`;
//! - [`WasmPlugin::factories`] registers its tools; every call instantiates the template
//!   afresh, with a memory limit ([`WasmLimits`]), and is stopped mid-loop by cancellation
//!   or its timeout. A trap ends only its call, as an `execution_error` that says why. A
//!   component that asks for it ([`WasmPlugin::reuse_instances`]) runs its calls in
//!   instances kept from earlier clean calls instead.
//!
//! plugin-host uses this crate behind its `wasm` feature for packages whose manifest says
//! `kind = "component"`.

mod bindings;
mod cache;
mod call;
mod caller;
mod error;
mod http;
mod runtime;
mod stdio;

pub use error::WasmError;
pub use http::HostList;
pub use runtime::{
    CALLS_PER_KEPT_INSTANCE, DEFAULT_MEMORY_BYTES, DESCRIBE_TIMEOUT, KEPT_INSTANCES, PROGRESS,
    WasmLimits, WasmPlugin, WasmRuntime,
};
pub use tool_api::{WIT, WIT_VERSION};
