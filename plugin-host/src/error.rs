//! Why a package was refused, in words its author can act on.

use tool_api::SideEffect;

/// Why a plugin package was not loaded. Every message says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum Refusal {
    /// The plugin directory could not be read.
    #[error("cannot read plugin directory: {detail}")]
    Directory {
        /// The OS error.
        detail: String,
    },
    /// A folder or file that is not a package.
    #[error("not a plugin package: {detail}")]
    NotAPackage {
        /// What is missing.
        detail: String,
    },
    /// The archive could not be unpacked.
    #[error("bad package archive: {detail}")]
    Archive {
        /// What went wrong.
        detail: String,
    },
    /// `plugin.toml` is invalid.
    #[error("invalid plugin.toml: {detail}")]
    Manifest {
        /// The manifest error, naming file and key.
        detail: String,
    },
    /// Built for another platform.
    #[error(
        "built for target '{found}', this host is '{expected}': build the plugin for {expected}"
    )]
    WrongTarget {
        /// The package's target.
        found: String,
        /// The host's target.
        expected: String,
    },
    /// Built against an incompatible tool-api.
    #[error("built against tool-api {built}, host provides {host}: rebuild with tool-api ^{rebuild}{}", if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
    IncompatibleAbi {
        /// What the plugin was built with.
        built: String,
        /// What the host provides.
        host: String,
        /// `major.minor` to rebuild with.
        rebuild: String,
        /// The `Error:` lines of the layout check, if any.
        detail: String,
    },
    /// Needs a newer host.
    #[error(
        "needs tool-api {requires} or newer, host provides {host}: upgrade toolhost, or rebuild the plugin against tool-api ^{host} without the features it needs from {requires}"
    )]
    NeedsNewerHost {
        /// What the plugin requires.
        requires: String,
        /// What the host provides.
        host: String,
    },
    /// Built with `panic = "abort"`.
    #[error(
        "built with panic = \"abort\": one panic would kill the host; build it with panic = \"unwind\" (the default; remove `panic = \"abort\"` from its Cargo profile)"
    )]
    PanicAbort,
    /// The library file is missing.
    #[error("library '{library}' named in plugin.toml is not in the package")]
    MissingLibrary {
        /// The file name.
        library: String,
    },
    /// The library does not match its checksum.
    #[error(
        "checksum mismatch for '{library}': plugin.toml says {expected}, the file is {actual}; the package is corrupt or was modified: re-package it with `cargo xtask plugin package`"
    )]
    ChecksumMismatch {
        /// The file name.
        library: String,
        /// The manifest's digest.
        expected: String,
        /// The file's digest.
        actual: String,
    },
    /// Not a loadable library.
    #[error(
        "'{path}' is not a loadable plugin library ({detail}): build the crate with crate-type = [\"cdylib\"] for this platform"
    )]
    NotALibrary {
        /// The library.
        path: String,
        /// The loader's message.
        detail: String,
    },
    /// No root module symbol.
    #[error(
        "'{path}' has no toolhost entry point: add `tool_api::export_plugin!(…)` to the plugin crate"
    )]
    NoEntryPoint {
        /// The library.
        path: String,
    },
    /// Loading failed otherwise.
    #[error("loading '{path}' failed: {detail}")]
    LoadFailed {
        /// The library.
        path: String,
        /// What failed.
        detail: String,
    },
    /// The definitions could not be read.
    #[error("could not list the plugin's tools: {detail}")]
    BadDefinitions {
        /// What failed (a contained panic says so).
        detail: String,
    },
    /// The library disagrees with its manifest.
    #[error(
        "plugin.toml says {key} = {manifest}, the library says {library}: re-package it with `cargo xtask plugin package`"
    )]
    ManifestMismatch {
        /// The key.
        key: String,
        /// The manifest's value.
        manifest: String,
        /// The library's value.
        library: String,
    },
    /// Tool lists differ.
    #[error(
        "plugin.toml and the library disagree about the tools: {detail}; re-package it with `cargo xtask plugin package`"
    )]
    ToolListMismatch {
        /// Which tools are missing where.
        detail: String,
    },
    /// A tool's side effects differ from the manifest.
    #[error(
        "tool '{tool}' is declared {manifest} in plugin.toml but {library} by the library; re-package it"
    )]
    SideEffectMismatch {
        /// The tool.
        tool: String,
        /// Manifest's class.
        manifest: SideEffect,
        /// Library's class.
        library: SideEffect,
    },
    /// The dispatcher refused a tool (name clash, schema outside the subset, …).
    #[error("{0}")]
    Registration(String),
    /// The library's own definitions are refused (two tools with one name, a name or a
    /// schema a host does not accept); re-packaging cannot fix them, the plugin's code can.
    #[error(
        "the plugin exports tools a host refuses: {}; fix the plugin (its `tool_api::check_plugin!()` test finds these) and re-package it",
        problems.join("; ")
    )]
    Definitions {
        /// Every problem.
        problems: Vec<String>,
    },
    /// Another package holds a newer version of the same plugin; that one is loaded.
    #[error(
        "plugin '{name}' {version} is superseded by {newer} at {newer_path}, which is loaded instead; remove this one"
    )]
    Superseded {
        /// The plugin.
        name: String,
        /// This package's version.
        version: String,
        /// The version loaded instead.
        newer: String,
        /// Where that one is.
        newer_path: String,
    },
    /// The package's worker process (isolation `process`) failed before it reported.
    #[error("the plugin's worker process failed at start-up: {detail}")]
    Worker {
        /// What happened (exit status or signal, its last output).
        detail: String,
    },
    /// The package must run in a worker process, and this host has no worker program.
    #[error(
        "plugin '{name}' must run isolated (isolation = \"process\"), and no worker program is configured: set `PluginHost::worker`, or trust its signing key to load it in process"
    )]
    NoWorker {
        /// The plugin.
        name: String,
    },
    /// Signatures are required and this package has none.
    #[error(
        "plugin '{name}' is not signed and require_signatures = true: sign it with `cargo xtask plugin sign PACKAGE --key FILE` using a key listed in trusted_keys"
    )]
    Unsigned {
        /// The plugin.
        name: String,
    },
    /// The package's signature does not hold.
    #[error("plugin '{name}' has a bad signature: {detail}")]
    BadSignature {
        /// The plugin.
        name: String,
        /// What is wrong (an unknown key, a digest mismatch, an unreadable file), naming the key.
        detail: String,
    },
    /// The package's worker needs a sandbox the kernel cannot enforce here.
    #[error(
        "plugin '{name}' runs isolated in a sandbox ({grant}) that cannot be enforced here: missing {missing}. It was not run unconfined: run toolhost where Landlock and seccomp are available, load the plugin in process if you trust it (isolation = \"in_process\"), or accept the risk with `allow_unsandboxed = true` under [plugins.{name}]"
    )]
    Sandbox {
        /// The plugin.
        name: String,
        /// What its worker may do beyond its context.
        grant: String,
        /// What the kernel lacks.
        missing: String,
    },
    /// The worker could not confine itself before opening the library.
    #[error(
        "the plugin's worker could not confine itself, so its library was not opened: {detail}"
    )]
    SandboxFailed {
        /// What failed.
        detail: String,
    },
    /// A component built against an incompatible `toolhost:plugin` WIT version.
    #[error("built against toolhost:plugin@{built}, this host serves {host}: {advice}")]
    IncompatibleInterface {
        /// The package's WIT version.
        built: String,
        /// The host's.
        host: String,
        /// What to do.
        advice: String,
    },
    /// A WebAssembly component, and this host was built without wasmtime.
    #[error(
        "plugin '{name}' is a WebAssembly component, and this host was built without WebAssembly support: build it with plugin-host's `wasm` cargo feature (the toolhost binary has it)"
    )]
    NoWasm {
        /// The plugin.
        name: String,
    },
    /// The component could not be compiled, linked or described.
    #[error("{0}")]
    Component(String),
    /// A native library set to run as a component, or the reverse.
    #[error(
        "plugin '{name}' is a {kind} package and cannot run with isolation = \"{isolation}\": {advice}"
    )]
    WrongIsolation {
        /// The plugin.
        name: String,
        /// Its kind.
        kind: String,
        /// The setting.
        isolation: String,
        /// What to set instead.
        advice: String,
    },
    /// `http_hosts` set for a native library, where it cannot be enforced.
    #[error(
        "plugin '{name}' is a native library loaded in toolhost's process, where no sandbox can hold it to http_hosts: run it isolated (isolation = \"process\"), whose worker goes out only through its egress proxy to those hosts, or remove http_hosts"
    )]
    HttpHostsNative {
        /// The plugin.
        name: String,
    },
}

#[cfg(feature = "wasm")]
impl From<plugin_wasm::WasmError> for Refusal {
    fn from(e: plugin_wasm::WasmError) -> Self {
        Refusal::Component(e.to_string())
    }
}
