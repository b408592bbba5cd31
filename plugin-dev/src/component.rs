//! `plugin package` for a WebAssembly component: a built `.wasm` loaded as a host loads it,
//! its `plugin.toml` written from what it describes, then packed.

use std::path::{Path, PathBuf};

use plugin_host::plugin_wasm::{HostList, WasmLimits, WasmPlugin, WasmRuntime};
use plugin_host::{
    COMPONENT_TARGET, Instances, Manifest, ManifestTool, PackageKind, digest, package,
};

use crate::error::{Result, announce, fail, io};

/// Loads a component as a host would (compiled, linked, described; its compiled code cached
/// in `compiled`) and returns it.
pub fn describe(
    component: &Path,
    sha256: &str,
    compiled: &Path,
) -> std::result::Result<WasmPlugin, String> {
    let runtime = WasmRuntime::new(Some(compiled.to_path_buf()), WasmLimits::default())?;
    runtime
        .load(component, sha256, HostList::none())
        .map_err(|e| e.to_string())
}

/// `plugin.toml` for a component, from what its `describe()` says.
fn manifest_for(plugin: &WasmPlugin, file_name: &str, sha256: String) -> Result<Manifest> {
    let step = format!("package {} {}", plugin.name, plugin.version);
    let version = semver::Version::parse(&plugin.version).or_else(|e| {
        fail(
            &step,
            format!("its version '{}' is not semver: {e}", plugin.version),
        )
    })?;
    Ok(Manifest {
        name: plugin.name.clone(),
        version,
        tool_api: plugin.interface.clone(),
        requires_tool_api: plugin.interface.clone(),
        kind: PackageKind::Component,
        target: COMPONENT_TARGET.into(),
        library: file_name.into(),
        sha256,
        unwinds: false,
        instances: Instances::Fresh,
        tools: plugin
            .definitions
            .iter()
            .map(|d| ManifestTool {
                name: d.name.clone(),
                side_effects: d.side_effects,
            })
            .collect(),
    })
}

/// Packages a built component: a folder at `dest` (replaced) with the component and its
/// `plugin.toml` (asking for `instances`), its compiled code cached in `compiled`. Returns
/// the manifest.
pub fn package_component_folder(
    component: &Path,
    dest: &Path,
    instances: Instances,
    compiled: &Path,
) -> Result<Manifest> {
    let step = format!("package {}", component.display());
    let sha = io(&step, digest::sha256_file(component))?;
    announce(&format!(
        "load {} as a host would (compiling it takes seconds the first time; cached in {})",
        component.display(),
        compiled.display()
    ));
    let plugin = describe(component, &sha, compiled).or_else(|e| fail(&step, e))?;
    let problems = tool_api::testing::definition_problems(&plugin.definitions);
    if !problems.is_empty() {
        return fail(
            &step,
            format!("it describes tools a host refuses: {}", problems.join("; ")),
        );
    }
    let file_name = component
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "component.wasm".into());
    let manifest = Manifest {
        instances,
        ..manifest_for(&plugin, &file_name, sha)?
    };
    let _ = std::fs::remove_dir_all(dest);
    io(&step, package::write_folder(component, &manifest, dest))?;
    Ok(manifest)
}

/// `plugin package` for a built component (a `.wasm` file): packages and verifies it, and
/// packs `out_dir/NAME-VERSION-wasm32-wasip2.tar.gz`; its manifest asks for `instances`.
/// The compiled code is cached in `compiled` (a host that caches there starts it at once).
pub fn package_component(
    component: &Path,
    out_dir: &Path,
    instances: Instances,
    compiled: &Path,
) -> Result<PathBuf> {
    // A staging folder of this run's own: two packagings at once must not share one.
    let step = format!("package {}", component.display());
    let scratch = io(
        &step,
        tempfile::Builder::new()
            .prefix("toolhost-package-component-")
            .tempdir(),
    )?;
    let staging = scratch.path().join("package");
    let manifest = package_component_folder(component, &staging, instances, compiled)?;
    let step = format!("package {} {}", manifest.name, manifest.version);
    announce(&step);
    crate::verify::verify_here(&staging, Some(compiled))
        .or_else(|e| fail(&step, format!("not packaged: {e}")))?;
    let archive = io(&step, package::pack(&staging, &manifest, out_dir))?;
    eprintln!("wrote {}", archive.display());
    Ok(archive)
}
