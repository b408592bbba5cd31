//! `cargo xtask plugin …`: the author's commands of [`plugin_dev`] (which the installed
//! `toolhost plugin …` runs too), run from this checkout: cargo without what `cargo run`
//! set for this tool, a child inspector that is this tool, scaffolds that take `tool-api`
//! from this checkout, components built from their sources.

use std::path::{Path, PathBuf};

pub use plugin_dev::{
    Inspector, Installed, inspect_here, install, keygen, package_library, sign, verify,
};

use crate::steps::{Result, cargo, root};

/// This tool in a child process: it answers `__inspect` and `__verify`.
pub fn inspector() -> Inspector {
    Inspector::this_program()
}

/// `plugin new NAME [--path DIR]`: the scaffold, with `tool-api` taken from this checkout
/// (a `[patch.crates-io]` its comment says how to remove) until it is on crates.io.
pub fn new(name: &str, path: Option<&Path>) -> Result<PathBuf> {
    plugin_dev::new(name, path, Some(&root().join("tool-api")))
}

/// `plugin build PATH [--release]`: the crate built; its library.
pub fn build(path: &Path, release: bool) -> Result<PathBuf> {
    plugin_dev::build(cargo(), path, release)
}

/// The version cargo resolves for the crate at `path`.
pub fn crate_version(path: &Path) -> Result<String> {
    plugin_dev::crate_version(cargo(), path)
}

/// `plugin package PATH`: built (release unless `release` is false), checked, packed into
/// `out_dir`.
pub fn package_crate(path: &Path, out_dir: &Path, release: bool) -> Result<PathBuf> {
    plugin_dev::package_crate(cargo, path, out_dir, &inspector(), release)
}

/// The verification report of a package, its components' compiled code cached where the
/// tests keep theirs (the child side of `plugin verify`).
pub fn verify_here(package: &Path) -> std::result::Result<String, String> {
    plugin_dev::verify_here(package, Some(&crate::steps::fixtures_dir().join("cache")))
}

/// `plugin publish PACKAGE REF`, on a runtime of its own.
pub fn publish(package: &Path, reference: &str) -> Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .or_else(|e| crate::steps::fail("publish the package", e))?;
    runtime.block_on(plugin_dev::publish(package, reference))
}

/// The plugin library (`cdylib`) `built` made for the crate of `manifest` (the demo builds
/// the examples with toolhost, in one cargo run).
pub fn library_of(built: &xtask_launcher::Built, manifest: &Path) -> Option<PathBuf> {
    let this = manifest.canonicalize().ok();
    built
        .artifacts
        .iter()
        .filter(|a| a.kinds.iter().any(|k| k == "cdylib"))
        .filter(|a| a.manifest_path.canonicalize().ok() == this)
        .flat_map(|a| &a.filenames)
        .find(|p| {
            p.extension()
                .is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
        })
        .cloned()
}
