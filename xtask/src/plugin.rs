//! `cargo xtask plugin …`: new, build, package, verify, install.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use plugin_host::{Inspection, Manifest, Refusal, package};

use crate::steps::{Result, announce, cargo, fail, io, root};

/// How a library is inspected: in a child process (so a crash while loading is reported,
/// not suffered), or in this process (tests).
#[derive(Debug, Clone)]
pub enum Inspector {
    /// Run `EXE __inspect LIB`.
    Child(PathBuf),
    /// Open the library here.
    InProcess,
}

impl Inspector {
    /// A child process of the running xtask binary.
    pub fn child() -> Inspector {
        Inspector::Child(std::env::current_exe().unwrap_or_else(|_| PathBuf::from("xtask")))
    }
}

fn valid_crate_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `plugin new NAME [--path DIR]`: a plugin crate with a sample tool and its test, which
/// builds and passes `cargo test` as generated.
pub fn new(name: &str, path: Option<&Path>) -> Result<PathBuf> {
    let step = "create the plugin crate";
    if !valid_crate_name(name) {
        return fail(
            step,
            format!(
                "'{name}' is not a valid crate name: use letters, digits, '-' and '_', starting with a letter"
            ),
        );
    }
    let dir = path.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if dir.exists() && io(step, std::fs::read_dir(&dir))?.next().is_some() {
        return fail(
            step,
            format!(
                "'{}' exists and is not empty; choose another --path",
                dir.display()
            ),
        );
    }
    io(step, std::fs::create_dir_all(dir.join("src")))?;
    let tool_api = root().join("tool-api");
    let tool_name = name.replace('-', "_");
    let cargo_toml = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# cdylib: the plugin library toolhost loads; rlib: lets `cargo test` test the tools.
crate-type = ["cdylib", "rlib"]

[dependencies]
tool-api = {{ path = "{tool_api}" }}

# A plugin must unwind: hosts refuse panic = "abort" builds.
[profile.release]
panic = "unwind"

# Its own workspace, wherever it is created.
[workspace]
"#,
        tool_api = tool_api.display()
    );
    let lib_rs = format!(
        r#"//! The {name} toolhost plugin.

use tool_api::serde_json::{{Value, json}};
use tool_api::{{
    DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput,
    export_plugin,
}};

/// A sample tool: greets someone. Replace it with yours.
#[derive(Default)]
pub struct Greet;

impl DefinedTool for Greet {{
    fn definition() -> ToolDefinition {{
        ToolDefinition::new(
            "{tool_name}_greet",
            "Greet someone by name.",
            // Declare the highest capability honestly: none < read < write < execute < network.
            SideEffect::None,
            json!({{
                "type": "object",
                "properties": {{"name": {{"type": "string", "description": "Who to greet."}}}},
                "required": ["name"],
                "additionalProperties": false
            }}),
        )
        // Pure and quick, so it may run inline (no thread handoff). Remove for I/O tools.
        .inline()
    }}
}}

impl Tool for Greet {{
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {{
        // `input` was validated against the schema above before this runs.
        let name = input["name"].as_str().unwrap_or_default();
        ctx.log().debug(format_args!("greeting {{name}}"));
        Ok(ToolOutput::text(format!("Hello, {{name}}!")))
    }}
}}

export_plugin!(
    name: "{name}",
    version: env!("CARGO_PKG_VERSION"),
    tools: [Greet],
);

#[cfg(test)]
mod tests {{
    use super::*;
    use tool_api::testing::TestHost;

    #[test]
    fn greets_by_name() {{
        let out = Greet.execute(json!({{"name": "Ada"}}), &TestHost::new().context()).unwrap();
        assert_eq!(out.text_content(), "Hello, Ada!");
    }}
}}
"#
    );
    let readme = format!(
        "# {name}\n\nA toolhost plugin.\n\n```sh\ncargo test                                  # unit tests\ncargo xtask plugin package {dir}   # from the toolhost repo: -> dist/{name}-0.1.0-<target>.tar.gz\ntoolhost --plugins dist list\n```\n",
        dir = dir.display()
    );
    io(step, std::fs::write(dir.join("Cargo.toml"), cargo_toml))?;
    io(step, std::fs::write(dir.join("src/lib.rs"), lib_rs))?;
    io(step, std::fs::write(dir.join("README.md"), readme))?;
    io(step, std::fs::write(dir.join(".gitignore"), "/target\n"))?;
    Ok(dir)
}

/// `plugin build PATH [--release]`: builds the crate at PATH and returns its library.
/// `target_dir` overrides cargo's target directory.
pub fn build(path: &Path, release: bool, target_dir: Option<&Path>) -> Result<PathBuf> {
    let step = format!("build the plugin at {}", path.display());
    announce(&step);
    let manifest = path.join("Cargo.toml");
    if !manifest.is_file() {
        return fail(&step, format!("no Cargo.toml in '{}'", path.display()));
    }
    let mut cmd = cargo();
    cmd.args([
        "build",
        "--message-format=json-render-diagnostics",
        "--manifest-path",
    ])
    .arg(&manifest)
    .stdout(Stdio::piped());
    if release {
        cmd.arg("--release");
    }
    if let Some(dir) = target_dir {
        cmd.arg("--target-dir").arg(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(&step, format!("could not start cargo: {e}")),
    };
    let mut library = None;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let is_cdylib = msg["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"));
            let is_this = msg["manifest_path"]
                .as_str()
                .is_some_and(|p| Path::new(p).canonicalize().ok() == manifest.canonicalize().ok());
            if msg["reason"] == "compiler-artifact" && is_cdylib && is_this {
                library = msg["filenames"].as_array().and_then(|f| {
                    f.iter()
                        .filter_map(|v| v.as_str())
                        .map(PathBuf::from)
                        .find(|p| {
                            p.extension()
                                .is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
                        })
                });
            }
        }
    }
    let status = child.wait();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => return fail(&step, format!("cargo build exited with {s}")),
        Err(e) => return fail(&step, e),
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

/// Reads what a library exports, in a child process or in this one.
pub fn inspect(library: &Path, inspector: &Inspector) -> Result<Inspection> {
    let step = format!("inspect {}", library.display());
    match inspector {
        Inspector::InProcess => plugin_host::library::open(library)
            .map(|l| l.inspection())
            .or_else(|e| fail(&step, e)),
        Inspector::Child(exe) => {
            let out = match Command::new(exe).arg("__inspect").arg(library).output() {
                Ok(o) => o,
                Err(e) => return fail(&step, format!("could not start the inspector: {e}")),
            };
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                return fail(&step, describe_child_failure(out.status, stderr.trim()));
            }
            serde_json::from_slice(&out.stdout)
                .or_else(|e| fail(&step, format!("unreadable inspector output: {e}")))
        }
    }
}

fn describe_child_failure(status: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(sig) => format!(
            "loading the library crashed the process (signal {sig}); it would have crashed a host too{}",
            if stderr.is_empty() {
                String::new()
            } else {
                format!(": {stderr}")
            }
        ),
        None => stderr.to_string(),
    }
}

/// Prints an inspection as JSON (the child side of [`Inspector::Child`]).
pub fn inspect_here(library: &Path) -> std::result::Result<String, String> {
    let lib = plugin_host::library::open(library).map_err(|e| e.to_string())?;
    serde_json::to_string(&lib.inspection()).map_err(|e| e.to_string())
}

/// `plugin package PATH`: builds in release, inspects, writes `plugin.toml` with the
/// checksum, and packs `out_dir/NAME-VERSION-TARGET.tar.gz`.
pub fn package_crate(
    path: &Path,
    out_dir: &Path,
    inspector: &Inspector,
    target_dir: Option<&Path>,
) -> Result<PathBuf> {
    let library = build(path, true, target_dir)?;
    package_library(&library, out_dir, inspector)
}

/// Packages a built library into `out_dir`.
pub fn package_library(library: &Path, out_dir: &Path, inspector: &Inspector) -> Result<PathBuf> {
    let insp = inspect(library, inspector)?;
    let step = "write the package";
    announce(&format!("package {} {}", insp.name, insp.version));
    if !insp.unwinds {
        return fail(step, Refusal::PanicAbort);
    }
    let file_name = library
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sha = io(step, package::sha256_file(library))?;
    let manifest = Manifest::for_library(&insp, &file_name, sha)
        .or_else(|e| fail(step, format!("bad version in the library's metadata: {e}")))?;
    let staging = root().join("target/xtask-package").join(&insp.name);
    let _ = std::fs::remove_dir_all(&staging);
    io(step, package::write_folder(library, &manifest, &staging))?;
    let archive = io(step, package::pack(&staging, &manifest, out_dir))?;
    eprintln!("wrote {}", archive.display());
    Ok(archive)
}

/// A package folder for a folder or an archive (unpacked into a scratch cache).
fn package_folder(package: &Path) -> std::result::Result<PathBuf, String> {
    if package.is_dir() {
        return Ok(package.to_path_buf());
    }
    if package.is_file() {
        let cache = root().join("target/xtask-verify-cache");
        return package::unpack_cached(package, &cache).map_err(|e| e.to_string());
    }
    Err(format!("'{}' does not exist", package.display()))
}

/// The verification report of a package (the child side of `plugin verify`).
pub fn verify_here(package: &Path) -> std::result::Result<String, String> {
    use std::fmt::Write as _;
    let folder = package_folder(package)?;
    let mut out = String::new();
    let (manifest, library_path) =
        plugin_host::preflight(&folder).map_err(|e| format!("refused before loading: {e}"))?;
    let _ = writeln!(
        out,
        "manifest: {} {}, built with tool-api {} (requires {}), target {}, unwinds",
        manifest.name,
        manifest.version,
        manifest.tool_api,
        manifest.requires_tool_api,
        manifest.target
    );
    let lib =
        plugin_host::library::open(&library_path).map_err(|e| format!("{out}ABI: refused: {e}"))?;
    let _ = writeln!(
        out,
        "ABI: compatible with this host's tool-api {}",
        tool_api::TOOL_API_VERSION
    );
    let d = dispatcher_core::Dispatcher::new();
    for f in builtin_tools::factories() {
        let _ = d.register(f);
    }
    let verdict = plugin_host::compare(&manifest, &lib)
        .and_then(|()| plugin_host::register_library(&lib, &d));
    match verdict {
        Ok(_) => {
            let _ = writeln!(out, "tools:");
            for def in &lib.definitions {
                let _ = writeln!(
                    out,
                    "  {:24} {:8} {:7} schema ok",
                    def.name,
                    def.side_effects,
                    if def.inline { "inline" } else { "blocking" }
                );
            }
            let _ = writeln!(out, "verdict: OK");
            Ok(out)
        }
        Err(e) => Err(format!("{out}verdict: refused: {e}")),
    }
}

/// `plugin verify PACKAGE`: verifies in a child process and prints its report.
pub fn verify(package: &Path, inspector: &Inspector) -> Result<String> {
    let step = format!("verify {}", package.display());
    announce(&step);
    let report = match inspector {
        Inspector::InProcess => verify_here(package).or_else(|e| fail(&step, e))?,
        Inspector::Child(exe) => {
            let out = match Command::new(exe).arg("__verify").arg(package).output() {
                Ok(o) => o,
                Err(e) => return fail(&step, format!("could not start the verifier: {e}")),
            };
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                return fail(&step, describe_child_failure(out.status, stderr.trim()));
            }
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    Ok(report)
}

/// The default install directory: `$XDG_DATA_HOME/toolhost/plugins` or
/// `~/.local/share/toolhost/plugins`.
pub fn default_install_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("toolhost/plugins")
}

/// `plugin install PACKAGE [--dir DIR]`: verifies, then copies the package into DIR.
pub fn install(package: &Path, dir: Option<&Path>, inspector: &Inspector) -> Result<PathBuf> {
    verify(package, inspector)?;
    let step = "install the package";
    let dir = dir.map_or_else(default_install_dir, Path::to_path_buf);
    io(step, std::fs::create_dir_all(&dir))?;
    let Some(name) = package.file_name() else {
        return fail(step, "the package path has no file name");
    };
    let dest = dir.join(name);
    if package.is_dir() {
        let folder = package_folder(package).or_else(|e| fail(step, e))?;
        let text = io(
            step,
            std::fs::read_to_string(folder.join(plugin_host::MANIFEST_FILE)),
        )?;
        let manifest = Manifest::parse(&folder.join(plugin_host::MANIFEST_FILE), &text)
            .or_else(|e| fail(step, e))?;
        io(
            step,
            package::write_folder(&folder.join(&manifest.library), &manifest, &dest),
        )?;
    } else {
        let tmp = dir.join(format!(".{}.partial", name.to_string_lossy()));
        io(step, std::fs::copy(package, &tmp))?;
        io(step, std::fs::rename(&tmp, &dest))?;
    }
    Ok(dest)
}
