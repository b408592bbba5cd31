//! [`WasmRuntime`]: one wasmtime engine and linker for every component a host loads, and
//! [`WasmPlugin`]: one loaded component, ready to make a fresh instance per call.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tool_api::{SideEffect, ToolDefinition};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store, Trap, UpdateDeadline};

use crate::bindings::{self, PluginInfo, PluginPre};
use crate::call::CallState;
use crate::caller::Caller;
use crate::{HostList, WasmError, cache};

mod tool;

pub use tool::{CALLS_PER_KEPT_INSTANCE, KEPT_INSTANCES};

/// The most memory one instance may have unless the host says otherwise: 256 MiB.
pub const DEFAULT_MEMORY_BYTES: usize = 256 * 1024 * 1024;

/// How long a component's `describe()` may run when its package loads.
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The `tracing` target of what a host says while it waits (a first compile): a program
/// that shows only warnings lets this target through at `info`.
pub const PROGRESS: &str = "toolhost::progress";

/// The WIT package name components import and export.
const PACKAGE: &str = "toolhost:plugin";

/// Limits for every instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmLimits {
    /// The most linear memory an instance may grow to, in bytes; a grow past it fails
    /// inside the component (an allocation error there), which ends only that call.
    pub memory_bytes: usize,
}

impl Default for WasmLimits {
    fn default() -> Self {
        WasmLimits {
            memory_bytes: DEFAULT_MEMORY_BYTES,
        }
    }
}

/// The engine, linker and compiled-code cache shared by a host's components. Cheap to
/// clone.
#[derive(Clone)]
pub struct WasmRuntime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    linker: Linker<CallState>,
    cache_dir: Option<PathBuf>,
    pub(crate) limits: WasmLimits,
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmRuntime")
            .field("cache_dir", &self.inner.cache_dir)
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl WasmRuntime {
    /// A runtime that caches compiled code in `cache_dir` (`None`: compile at every start)
    /// and gives every instance `limits`.
    pub fn new(cache_dir: Option<PathBuf>, limits: WasmLimits) -> Result<WasmRuntime, String> {
        let mut config = Config::new();
        // Cancellation and timeouts interrupt running code at its next loop back-edge or
        // function entry: the host bumps the engine's epoch, each store checks its call.
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool(&limits)));
        let engine = Engine::new(&config).map_err(|e| format!("cannot start wasmtime: {e}"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| format!("cannot link WASI: {e}"))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)
            .map_err(|e| format!("cannot link wasi:http: {e}"))?;
        bindings::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| format!("cannot link toolhost:plugin/host: {e}"))?;
        Ok(WasmRuntime {
            inner: Arc::new(Inner {
                engine,
                linker,
                cache_dir,
                limits,
            }),
        })
    }

    /// Compiles (or takes from the cache) the component at `path`, whose SHA-256 the caller
    /// verified, reads its interface version (the caller gates it, as plugin-host does from
    /// the manifest), links it and asks it for its tools. Its `network` tools may send HTTP
    /// requests to `http_hosts` only.
    pub fn load(
        &self,
        path: &Path,
        sha256: &str,
        http_hosts: HostList,
    ) -> Result<WasmPlugin, WasmError> {
        let inner = &self.inner;
        let component = self.compiled(path, sha256)?;
        let interface = interface_version(&inner.engine, &component)?;
        let instance_pre = inner.linker.instantiate_pre(&component).map_err(|e| {
            let detail = format!("{e:#}");
            WasmError::Import {
                import: missing_import(&detail),
                detail,
            }
        })?;
        let pre = PluginPre::new(instance_pre).map_err(|e| WasmError::NotAPlugin {
            found: format!("{e:#}"),
        })?;
        let http_hosts = Arc::new(http_hosts);
        let info = describe(inner, &pre, path, &http_hosts)?;
        let definitions = definitions(&info)?;
        Ok(WasmPlugin {
            name: info.name,
            version: info.version,
            interface,
            definitions,
            pre,
            http_hosts,
            kept: None,
            runtime: self.inner.clone(),
        })
    }

    fn compiled(&self, path: &Path, sha256: &str) -> Result<Component, WasmError> {
        let engine = &self.inner.engine;
        let cached = self
            .inner
            .cache_dir
            .as_ref()
            .map(|dir| cache::entry(dir, engine, sha256));
        if let Some(file) = &cached
            && let Some(component) = cache::load(engine, file)
        {
            return Ok(component);
        }
        let bytes = std::fs::read(path).map_err(|e| WasmError::Read {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        // Compiling takes seconds for a component with a language runtime in it: said before
        // it starts, so that a first load does not sit silent.
        tracing::info!(
            target: PROGRESS,
            "compiling the WebAssembly component {} ({:.1} MiB){}",
            path.display(),
            bytes.len() as f64 / (1 << 20) as f64,
            if cached.is_some() { "; cached for the next start" } else { "" }
        );
        let component = Component::new(engine, &bytes).map_err(|e| WasmError::Compile {
            path: path.display().to_string(),
            detail: format!("{e:#}"),
        })?;
        if let Some(file) = &cached {
            cache::store(&component, file);
        }
        Ok(component)
    }
}

/// How many component instances may exist at once: one per call running, with room to
/// spare. Past it a call fails at once, saying so (see [`tool`]).
pub const POOLED_INSTANCES: u32 = 256;

/// Instances come from a pool of slots reserved once, not from fresh mappings: a call's
/// memory is a slot reset with `madvise`, not an `mmap` and a `munmap`, whose TLB
/// shootdowns interrupt every core of the process (on the 2-core CI machine the lean
/// component's no-op cost 60 µs with fresh mappings). The per-component counts leave room
/// for language runtimes made of several core modules (componentize-py links a dozen).
fn pool(limits: &WasmLimits) -> wasmtime::PoolingAllocationConfig {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(POOLED_INSTANCES)
        .total_core_instances(POOLED_INSTANCES * 16)
        .total_memories(POOLED_INSTANCES * 2)
        .total_tables(POOLED_INSTANCES * 16)
        .max_core_instances_per_component(64)
        .max_memories_per_component(8)
        .max_tables_per_component(64)
        .table_elements(1 << 20)
        .max_component_instance_size(1 << 20)
        .max_core_instance_size(1 << 20)
        .max_memory_size(limits.memory_bytes)
        // The first pages of a reused slot are zeroed in place instead of faulted in again.
        .linear_memory_keep_resident(64 * 1024)
        .table_keep_resident(64 * 1024);
    pool
}

/// The version of `toolhost:plugin/tools` a component exports.
fn interface_version(engine: &Engine, component: &Component) -> Result<semver::Version, WasmError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let prefix = format!("{PACKAGE}/tools@");
    exports
        .iter()
        .find_map(|name| name.strip_prefix(&prefix))
        .and_then(|v| semver::Version::parse(v).ok())
        .ok_or_else(|| WasmError::NotAPlugin {
            found: if exports.is_empty() {
                "nothing".into()
            } else {
                exports.join(", ")
            },
        })
}

/// The import named in a link error, for the refusal's first words.
fn missing_import(detail: &str) -> String {
    detail
        .split(['`', '"'])
        .nth(1)
        .map_or_else(|| "an interface".to_string(), |s| format!("`{s}`"))
}

/// Runs `describe()` in a fresh instance, stopped after [`DESCRIBE_TIMEOUT`].
fn describe(
    inner: &Inner,
    pre: &PluginPre<CallState>,
    path: &Path,
    hosts: &Arc<HostList>,
) -> Result<PluginInfo, WasmError> {
    let cancel = Arc::new(AtomicBool::new(false));
    let caller = Caller {
        plugin: path.display().to_string(),
        tool: None,
        hosts: hosts.clone(),
    };
    let mut store = new_store(
        inner,
        CallState::new(None, inner.limits.memory_bytes, cancel.clone(), caller),
    );
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let engine = inner.engine.clone();
    let flag = cancel.clone();
    let watchdog = std::thread::spawn(move || {
        if wait.recv_timeout(DESCRIBE_TIMEOUT) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            flag.store(true, Ordering::Release);
            engine.increment_epoch();
        }
    });
    let result = pre
        .instantiate(&mut store)
        .and_then(|plugin| plugin.toolhost_plugin_tools().call_describe(&mut store));
    let _ = done.send(());
    let _ = watchdog.join();
    result.map_err(|e| {
        if cancel.load(Ordering::Acquire) {
            WasmError::Describe(format!(
                "it did not answer within {} s",
                DESCRIBE_TIMEOUT.as_secs()
            ))
        } else {
            WasmError::Describe(trap_message(&e, store.data()))
        }
    })
}

/// A store for one call (or one `describe()`), with the memory limit and the epoch check.
pub(crate) fn new_store(inner: &Inner, state: CallState) -> Store<CallState> {
    let mut store = Store::new(&inner.engine, state);
    store.limiter(|s| &mut s.limits);
    store.epoch_deadline_callback(|cx| {
        if cx.data().stop_requested() {
            Err(Trap::Interrupt.into())
        } else {
            Ok(UpdateDeadline::Continue(1))
        }
    });
    store.set_epoch_deadline(1);
    store
}

/// A trap or host error in words a reader can act on, with the last line the component
/// wrote to stderr (a Python or JavaScript exception usually says what went wrong there).
pub(crate) fn trap_message(e: &wasmtime::Error, state: &CallState) -> String {
    if state.limits.refused {
        return format!(
            "it ran out of memory (the limit is {} MiB per instance; raise wasm_memory_limit_mib if the tool needs more)",
            state.limits.bytes >> 20
        );
    }
    let what = match e.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => e.to_string(),
    };
    let (_, stderr) = state.stdio();
    match last_error_line(&stderr) {
        Some(line) => format!("{what}; it reported: {line}"),
        None => what,
    }
}

/// The line of a component's stderr that says what went wrong: the last one before a
/// language runtime's own panic report (a Python traceback's exception line, a JavaScript
/// error), else the last non-empty one.
fn last_error_line(stderr: &str) -> Option<&str> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let report = lines
        .iter()
        .position(|l| l.starts_with("thread '") && l.contains("panicked at"))
        .unwrap_or(lines.len());
    lines[..report].last().or(lines.last()).copied()
}

fn definitions(info: &PluginInfo) -> Result<Vec<ToolDefinition>, WasmError> {
    if info.tools.is_empty() {
        return Err(WasmError::Describe("it lists no tools".into()));
    }
    if semver::Version::parse(&info.version).is_err() {
        return Err(WasmError::Describe(format!(
            "its version '{}' is not semver (write it as 1.2.3)",
            info.version
        )));
    }
    info.tools
        .iter()
        .map(|t| {
            let schema: serde_json::Value = serde_json::from_str(&t.input_schema).map_err(|e| {
                WasmError::Describe(format!("tool '{}': input-schema is not JSON: {e}", t.name))
            })?;
            if !schema.is_object() {
                return Err(WasmError::Describe(format!(
                    "tool '{}': input-schema must be a JSON object",
                    t.name
                )));
            }
            let mut d = ToolDefinition::new(
                t.name.clone(),
                t.description.clone(),
                side_effect(t.side_effects),
                schema,
            );
            d.concurrency_safe = t.concurrency_safe;
            d.timeout_ms = t.timeout_ms;
            d.path_params = t.path_params.clone();
            Ok(d)
        })
        .collect()
}

fn side_effect(s: bindings::SideEffect) -> SideEffect {
    match s {
        bindings::SideEffect::None => SideEffect::None,
        bindings::SideEffect::Read => SideEffect::Read,
        bindings::SideEffect::Write => SideEffect::Write,
        bindings::SideEffect::Execute => SideEffect::Execute,
        bindings::SideEffect::Network => SideEffect::Network,
    }
}

/// A loaded component: its tools, and a pre-linked template each call instantiates afresh
/// (or, for a component that asked for it, [`WasmPlugin::reuse_instances`], takes from the
/// instances kept after earlier calls).
pub struct WasmPlugin {
    /// Plugin name, as `describe()` said.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// The `toolhost:plugin` version it was built against.
    pub interface: semver::Version,
    /// Its tools.
    pub definitions: Vec<ToolDefinition>,
    pub(crate) pre: PluginPre<CallState>,
    /// Where its `network` tools may send HTTP requests.
    pub(crate) http_hosts: Arc<HostList>,
    /// Instances kept after clean calls, when the component asked for reuse.
    pub(crate) kept: Option<std::sync::Mutex<Vec<tool::Kept>>>,
    pub(crate) runtime: Arc<Inner>,
}

impl std::fmt::Debug for WasmPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmPlugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("interface", &self.interface)
            .finish_non_exhaustive()
    }
}
