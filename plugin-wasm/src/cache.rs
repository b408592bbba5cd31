//! Compiled code on disk, keyed by the component's SHA-256 and the engine's settings, so
//! that a second start of a package does not compile it again.

use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

/// The cache file for a component with digest `sha256` under `engine`: the name carries a
/// hash of the engine's compatibility key (wasmtime version, target, settings), so a
/// toolhost built with another wasmtime compiles afresh rather than loading stale code.
pub(crate) fn entry(dir: &Path, engine: &Engine, sha256: &str) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    dir.join(format!("{sha256}-{:016x}.cwasm", hasher.finish()))
}

/// The compiled component from the cache, if a usable entry is there.
pub(crate) fn load(engine: &Engine, file: &Path) -> Option<Component> {
    if !file.is_file() {
        return None;
    }
    // SAFETY: `deserialize_file` maps native code compiled by wasmtime. The file is one this
    // host wrote into its own cache directory (`store`), named for the digest of the
    // component that was verified before loading and for this engine's settings; wasmtime
    // checks its header and version and refuses anything else. Whoever can change files in
    // the user's cache directory can already change the user's programs.
    #[allow(unsafe_code)]
    let loaded = unsafe { Component::deserialize_file(engine, file) };
    match loaded {
        Ok(component) => Some(component),
        Err(e) => {
            tracing::warn!(file = %file.display(), "ignoring a compiled-code cache entry that does not load ({e}); compiling afresh");
            None
        }
    }
}

/// Writes a compiled component to the cache (atomically: a reader sees all of it or none).
/// A cache that cannot be written is logged, not fatal.
pub(crate) fn store(component: &Component, file: &Path) {
    let write = || -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let dir = file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            file.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
            std::process::id()
        ));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, file)
    };
    if let Err(e) = write() {
        tracing::warn!(file = %file.display(), "cannot cache compiled code ({e}); the next start compiles again");
    }
}
