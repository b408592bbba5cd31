//! `plugin package`: a built plugin checked as a host checks it, then packed as
//! `NAME-VERSION-TARGET.tar.gz`.

use std::path::{Path, PathBuf};
use std::process::Command;

use plugin_host::{Manifest, Refusal, digest, package};

use crate::cargo_build::{build, crate_version};
use crate::error::{Result, announce, fail, io};
use crate::inspect::{Inspector, inspect};
use crate::verify::verify;

/// `plugin package PATH`: checks the crate's version, builds (in release, unless
/// `release` is false), inspects, writes `plugin.toml` with the checksum, runs every check
/// `plugin verify` runs, and packs `out_dir/NAME-VERSION-TARGET.tar.gz`. Refuses, with the
/// reason, what a host would.
///
/// `cargo` is the command cargo is run as (see [`cargo`](crate::cargo)).
pub fn package_crate(
    cargo: impl Fn() -> Command,
    path: &Path,
    out_dir: &Path,
    inspector: &Inspector,
    release: bool,
) -> Result<PathBuf> {
    if !path.join("Cargo.toml").is_file() {
        return fail(
            &format!("package {}", path.display()),
            format!(
                "no Cargo.toml in '{}': give the plugin crate's folder (or a built .wasm component)",
                path.display()
            ),
        );
    }
    let version = crate_version(cargo(), path)?;
    let library = build(cargo(), path, release)?;
    package_library(&library, out_dir, inspector, Some(&version))
}

/// Packages a built library into `out_dir`; `crate_version`, when known, must be the version
/// the library exports.
pub fn package_library(
    library: &Path,
    out_dir: &Path,
    inspector: &Inspector,
    crate_version: Option<&str>,
) -> Result<PathBuf> {
    let insp = inspect(library, inspector)?;
    let step = format!("package {} {}", insp.name, insp.version);
    announce(&step);
    if let Some(v) = crate_version.filter(|v| *v != insp.version) {
        return fail(
            &step,
            format!(
                "export_plugin! says version \"{}\" but Cargo.toml says \"{v}\": write `version: env!(\"CARGO_PKG_VERSION\")` so the two cannot differ",
                insp.version
            ),
        );
    }
    if !insp.unwinds {
        return fail(&step, Refusal::PanicAbort);
    }
    let file_name = library
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sha = io(&step, digest::sha256_file(library))?;
    let manifest = Manifest::for_library(&insp, &file_name, sha)
        .or_else(|e| fail(&step, format!("bad version in the library's metadata: {e}")))?;
    // A staging folder of this run's own: two packagings of one plugin at once (the demo
    // and a test, two terminals) must not remove each other's files.
    let scratch = io(
        &step,
        tempfile::Builder::new()
            .prefix(&format!("toolhost-package-{}-", insp.name))
            .tempdir(),
    )?;
    let staging = scratch.path().join(&insp.name);
    io(&step, package::write_folder(library, &manifest, &staging))?;
    // Everything `plugin verify` checks, before anything is written where the author looks.
    verify(&staging, inspector).or_else(|e| fail(&step, format!("not packaged: {}", e.why)))?;
    let archive = io(&step, package::pack(&staging, &manifest, out_dir))?;
    eprintln!("wrote {}", archive.display());
    for older in other_versions(out_dir, &manifest) {
        // Beside the new one it would be refused as superseded at every start.
        if std::fs::remove_file(&older).is_ok() {
            eprintln!("removed {} (another version)", older.display());
        }
    }
    Ok(archive)
}

/// The archives of other versions of `manifest`'s plugin, for the same target, in `dir`
/// (by their names: `NAME-VERSION-TARGET.tar.gz`, as `package::pack` writes them).
fn other_versions(dir: &Path, manifest: &Manifest) -> Vec<PathBuf> {
    let prefix = format!("{}-", manifest.name);
    let suffix = format!("-{}.tar.gz", manifest.target);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.as_deref()
                .and_then(|n| n.strip_prefix(&prefix)?.strip_suffix(&suffix))
                .and_then(|v| semver::Version::parse(v).ok())
                .is_some_and(|v| v != manifest.version)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_without_a_crate_is_refused_before_cargo_runs() {
        let dir = tempfile::tempdir().unwrap();
        let never = || Command::new("/nonexistent/cargo");
        let err =
            package_crate(never, dir.path(), dir.path(), &Inspector::InProcess, true).unwrap_err();
        assert!(
            err.why.contains("no Cargo.toml in") && err.why.contains(".wasm"),
            "{err}"
        );
    }
}
