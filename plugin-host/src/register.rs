//! Registering a package's tools in a dispatcher: all of them or none, under the source
//! `plugin:NAME`.

use std::path::Path;
use std::sync::Arc;

use dispatcher_core::Dispatcher;

use crate::checks::{compare, preflight};
use crate::report::Outcome;
use crate::{Inspection, Isolation, Library, PluginWorker, Refusal, adapter, isolated, library};

/// Verifies, opens (in process) and registers one package folder.
pub fn load_package(folder: &Path, dispatcher: &Dispatcher) -> Result<Outcome, Refusal> {
    let (manifest, library_path) = preflight(folder)?;
    if manifest.kind == crate::PackageKind::Component {
        return Err(Refusal::WrongIsolation {
            name: manifest.name,
            kind: "WebAssembly component".into(),
            isolation: "in_process".into(),
            advice:
                "load it with load_component (plugin-host's `wasm` feature), or through PluginHost"
                    .into(),
        });
    }
    let lib = library::open(&library_path)?;
    compare(&manifest, &lib)?;
    register_library(&lib, dispatcher)
}

/// Verifies, compiles (or takes from `runtime`'s cache), describes and registers one
/// component package folder; its `network` tools may send HTTP requests to `http_hosts`.
#[cfg(feature = "wasm")]
pub fn load_component(
    folder: &Path,
    runtime: &plugin_wasm::WasmRuntime,
    http_hosts: plugin_wasm::HostList,
    dispatcher: &Dispatcher,
) -> Result<(Outcome, Arc<plugin_wasm::WasmPlugin>), Refusal> {
    let (manifest, component) = preflight(folder)?;
    if manifest.kind != crate::PackageKind::Component {
        return Err(Refusal::WrongIsolation {
            name: manifest.name,
            kind: "native library".into(),
            isolation: "wasm".into(),
            advice: "load it with load_package".into(),
        });
    }
    let plugin = Arc::new(
        runtime
            .load(&component, &manifest.sha256, http_hosts)?
            .reuse_instances(manifest.instances == crate::Instances::Reused),
    );
    let outcome = register_component(&manifest, &plugin, dispatcher)?;
    Ok((outcome, plugin))
}

/// Registers every factory or none (a clash unregisters the ones already in).
fn register_all(
    dispatcher: &Dispatcher,
    factories: Vec<Arc<dyn tool_api::ToolFactory>>,
) -> Result<(), Refusal> {
    let mut registered: Vec<String> = Vec::new();
    for factory in factories {
        let name = factory.definition().name.clone();
        if let Err(e) = dispatcher.register(factory) {
            for name in &registered {
                dispatcher.unregister(name);
            }
            return Err(Refusal::Registration(e.to_string()));
        }
        registered.push(name);
    }
    Ok(())
}

fn loaded(lib: library::Exported<'_>, isolation: Isolation) -> Outcome {
    Outcome::Loaded {
        name: lib.name.to_string(),
        version: lib.version.to_string(),
        tools: lib
            .tools
            .iter()
            .map(|d| (d.name.clone(), d.side_effects))
            .collect(),
        isolation,
        signed_by: None,
    }
}

/// Whether a library built against `tool_api` answers the per-call concurrency question.
fn per_call_safety(tool_api: &str) -> bool {
    semver::Version::parse(tool_api).is_ok_and(|v| v >= semver::Version::new(1, 2, 0))
}

/// Registers an isolated library's tools, each call going to `worker`.
pub(crate) fn register_isolated(
    lib: &Inspection,
    worker: &Arc<PluginWorker>,
    dispatcher: &Dispatcher,
) -> Result<Outcome, Refusal> {
    let source = format!("plugin:{}", lib.name);
    let factories = lib
        .tools
        .iter()
        .map(|definition| {
            let mut definition = definition.clone();
            definition.inline = false;
            Arc::new(isolated::IsolatedToolFactory {
                worker: worker.clone(),
                definition,
                source: source.clone(),
                version: lib.version.clone(),
                per_call_safety: per_call_safety(&lib.tool_api),
                answer_times: Arc::default(),
            }) as Arc<dyn tool_api::ToolFactory>
        })
        .collect();
    register_all(dispatcher, factories)?;
    Ok(loaded(lib.exported(), Isolation::Process))
}

/// Registers an opened, verified library's tools (all or none; source `plugin:NAME`).
pub fn register_library(lib: &Library, dispatcher: &Dispatcher) -> Result<Outcome, Refusal> {
    let source = format!("plugin:{}", lib.name);
    let factories = lib
        .definitions
        .iter()
        .map(|definition| {
            Arc::new(adapter::PluginToolFactory {
                module: lib.module,
                definition: definition.clone(),
                source: source.clone(),
                version: lib.version.clone(),
                per_call_safety: per_call_safety(&lib.tool_api),
            }) as Arc<dyn tool_api::ToolFactory>
        })
        .collect();
    register_all(dispatcher, factories)?;
    Ok(loaded(lib.exported(), Isolation::InProcess))
}

/// Registers a component's tools (all or none; source `plugin:NAME`) after comparing what
/// its `describe()` said with its manifest.
#[cfg(feature = "wasm")]
pub(crate) fn register_component(
    manifest: &crate::Manifest,
    plugin: &Arc<plugin_wasm::WasmPlugin>,
    dispatcher: &Dispatcher,
) -> Result<Outcome, Refusal> {
    let interface = plugin.interface.to_string();
    // A component requires the interface it was built against, which `tool_api` names:
    // the manifest's `requires_tool_api` says nothing more, so it is not compared.
    let requires = manifest.requires_tool_api.to_string();
    let exported = library::Exported {
        name: &plugin.name,
        version: &plugin.version,
        tool_api: &interface,
        requires_tool_api: &requires,
        unwinds: true,
        tools: &plugin.definitions,
    };
    crate::checks::compare_inspection(manifest, exported, false)?;
    register_all(
        dispatcher,
        plugin.factories(&format!("plugin:{}", plugin.name)),
    )?;
    Ok(loaded(exported, Isolation::Wasm))
}
