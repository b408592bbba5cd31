//! [`WasmError`]: why a component could not be loaded.

/// Why a component package could not be used. Each message says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WasmError {
    /// The file could not be read.
    #[error("cannot read component '{path}': {detail}")]
    Read {
        /// The component file.
        path: String,
        /// The OS error.
        detail: String,
    },
    /// wasmtime could not compile it (not a component, or invalid).
    #[error(
        "'{path}' is not a valid WebAssembly component ({detail}); build it for WASI 0.2 (wasm32-wasip2, componentize-py or jco componentize)"
    )]
    Compile {
        /// The component file.
        path: String,
        /// wasmtime's message.
        detail: String,
    },
    /// It does not export toolhost's `tools` interface.
    #[error(
        "the component does not export toolhost:plugin/tools (it exports: {found}); build it against the `plugin` world of tool-api/wit/plugin.wit"
    )]
    NotAPlugin {
        /// What it exports instead.
        found: String,
    },
    /// It imports something toolhost does not give components.
    #[error(
        "the component imports {import}, which toolhost does not give components (only toolhost:plugin/host and WASI 0.2's cli, clocks, random, io, filesystem and sockets, the last two with nothing reachable): {detail}"
    )]
    Import {
        /// The import.
        import: String,
        /// wasmtime's message.
        detail: String,
    },
    /// `describe` failed, trapped or answered something unusable.
    #[error("the component's describe() failed: {0}")]
    Describe(String),
}
