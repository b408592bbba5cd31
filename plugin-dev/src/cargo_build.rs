//! Building a plugin crate with cargo, and what cargo says about it: the library it made,
//! the version it resolves.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Result, announce, fail, io};

/// The `cargo` an author's commands run: `$CARGO` when set (the cargo that runs a cargo
/// subcommand or a build script), else `cargo` on PATH.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `plugin build PATH [--release]`: builds the crate at PATH with `cargo` (its progress
/// and diagnostics on stderr) and returns its library. cargo runs in PATH, so the author's
/// `.cargo/config.toml` (a registry, a target directory) applies.
pub fn build(cargo: Command, path: &Path, release: bool) -> Result<PathBuf> {
    let step = format!("build the plugin at {}", path.display());
    announce(&step);
    let manifest = path.join("Cargo.toml");
    if !manifest.is_file() {
        return fail(&step, format!("no Cargo.toml in '{}'", path.display()));
    }
    let mut cargo = cargo;
    cargo
        .args([
            "build",
            "--message-format=json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(&manifest)
        .current_dir(path)
        .stdout(Stdio::piped());
    if release {
        cargo.arg("--release");
    }
    let mut child = match cargo.spawn() {
        Ok(child) => child,
        Err(e) => return fail(&step, not_started(&cargo, &e)),
    };
    let wanted = manifest.canonicalize().ok();
    let mut library = None;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = io(&step, line)?;
            if let Some(found) = cdylib_of(&line, wanted.as_deref()) {
                library = Some(found);
            }
        }
    }
    let status = io(&step, child.wait())?;
    if !status.success() {
        return fail(
            &step,
            format!("cargo build exited with {status} (its errors are above)"),
        );
    }
    match library {
        Some(lib) => {
            eprintln!("built {}", lib.display());
            Ok(lib)
        }
        None => fail(
            &step,
            "the crate produced no cdylib: set crate-type = [\"cdylib\", \"rlib\"] under [lib]",
        ),
    }
}

/// Why `cargo` could not be started, and what to do.
fn not_started(cargo: &Command, e: &std::io::Error) -> String {
    format!(
        "could not run {}: {e} (is Rust installed? https://rustup.rs)",
        Path::new(cargo.get_program()).display()
    )
}

/// The plugin library a line of cargo's JSON messages reports, if it is a `cdylib` of the
/// crate whose manifest is `manifest`.
fn cdylib_of(line: &str, manifest: Option<&Path>) -> Option<PathBuf> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let kinds = message["target"]["kind"].as_array()?;
    if !kinds.iter().any(|k| k == "cdylib") {
        return None;
    }
    let of = message["manifest_path"].as_str().map(Path::new)?;
    if of.canonicalize().ok().as_deref() != manifest {
        return None;
    }
    message["filenames"]
        .as_array()?
        .iter()
        .filter_map(|f| f.as_str())
        .map(PathBuf::from)
        .find(|p| {
            p.extension()
                .is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
        })
}

/// The version cargo resolves for the crate at `path` (workspace inheritance included).
pub fn crate_version(cargo: Command, path: &Path) -> Result<String> {
    let step = format!("read the version of {}", path.display());
    let manifest = path.join("Cargo.toml");
    let mut cargo = cargo;
    let out = cargo
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(&manifest)
        .current_dir(path.parent().unwrap_or(path))
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => return fail(&step, not_started(&cargo, &e)),
    };
    if !out.status.success() {
        return fail(&step, String::from_utf8_lossy(&out.stderr).trim());
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).or_else(|e| fail(&step, e))?;
    let wanted = manifest.canonicalize().ok();
    meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| {
            p["manifest_path"]
                .as_str()
                .is_some_and(|m| Path::new(m).canonicalize().ok() == wanted)
        })
        .and_then(|p| p["version"].as_str())
        .map(str::to_string)
        .map_or_else(|| fail(&step, "cargo metadata does not list the crate"), Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(kind: &str, manifest: &Path, file: &str) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "manifest_path": manifest,
            "target": {"kind": [kind], "name": "greeter"},
            "filenames": [file, "/t/libgreeter.rlib"],
        })
        .to_string()
    }

    #[test]
    fn a_cargo_that_cannot_start_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        let missing = || Command::new("/nonexistent/cargo");
        for err in [
            build(missing(), dir.path(), false).unwrap_err(),
            crate_version(missing(), dir.path()).unwrap_err(),
        ] {
            assert!(
                err.why.contains("/nonexistent/cargo") && err.why.contains("is Rust installed?"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_library_is_the_cdylib_of_the_crate_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("Cargo.toml");
        let theirs = dir.path().join("dep/Cargo.toml");
        std::fs::create_dir_all(dir.path().join("dep")).unwrap();
        std::fs::write(&ours, "").unwrap();
        std::fs::write(&theirs, "").unwrap();
        let wanted = ours.canonicalize().unwrap();
        let lib = format!("/t/libgreeter.{}", std::env::consts::DLL_EXTENSION);
        let cases = [
            (artifact("cdylib", &ours, &lib), Some(PathBuf::from(&lib))),
            (artifact("cdylib", &theirs, &lib), None),
            (artifact("lib", &ours, &lib), None),
            (r#"{"reason":"build-finished","success":true}"#.into(), None),
            ("not json".into(), None),
        ];
        for (line, expected) in cases {
            assert_eq!(cdylib_of(&line, Some(&wanted)), expected, "{line}");
        }
    }
}
