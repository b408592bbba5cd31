//! `plugin verify`: a package loaded as a host loads it, with every check a host makes, and
//! a report of its tools, signature and sandbox.

use std::path::{Path, PathBuf};

use plugin_host::{Manifest, package};

use crate::error::{Result, announce, fail};
use crate::inspect::{Inspector, describe_child_failure};

/// A package's folder: the folder given, or an archive unpacked into a scratch folder that
/// lives as long as this value.
pub(crate) struct PackageFolder {
    /// The folder.
    pub(crate) path: PathBuf,
    _scratch: Option<tempfile::TempDir>,
}

impl PackageFolder {
    /// The folder of `package`, a folder or an archive.
    pub(crate) fn of(package: &Path) -> std::result::Result<PackageFolder, String> {
        if package.is_dir() {
            return Ok(PackageFolder {
                path: package.to_path_buf(),
                _scratch: None,
            });
        }
        if package.is_file() {
            let scratch = tempfile::Builder::new()
                .prefix("toolhost-verify-")
                .tempdir()
                .map_err(|e| format!("could not make a scratch folder to unpack it in: {e}"))?;
            let path = package::unpack_cached(package, scratch.path())
                .map_err(|e| format!("{}: {e}", package.display()))?;
            return Ok(PackageFolder {
                path,
                _scratch: Some(scratch),
            });
        }
        Err(format!("'{}' does not exist", package.display()))
    }
}

/// The verification report of a package (the child side of `plugin verify`): loaded as a
/// host loads it, every check a host makes, its tools and what its sandbox allows; a
/// component's compiled code cached in `compiled` (none: compiled afresh).
pub fn verify_here(package: &Path, compiled: Option<&Path>) -> std::result::Result<String, String> {
    use std::fmt::Write as _;
    let unpacked = PackageFolder::of(package)?;
    let folder = unpacked.path.as_path();
    let mut out = String::new();
    let (manifest, library_path) =
        plugin_host::preflight(folder).map_err(|e| format!("refused before loading: {e}"))?;
    if manifest.kind == plugin_host::PackageKind::Component {
        let _ = writeln!(
            out,
            "manifest: {} {}, a WebAssembly component built against toolhost:plugin@{}, target {}",
            manifest.name, manifest.version, manifest.tool_api, manifest.target
        );
        return verify_component(folder, &manifest, out, compiled);
    }
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
        "signature: {}",
        signature(folder, &manifest.library)
            .map_err(|why| format!("{out}signature: refused: {why}"))?
    );
    let _ = writeln!(
        out,
        "ABI: compatible with this host's tool-api {}",
        tool_api::TOOL_API_VERSION
    );
    let problems = tool_api::testing::definition_problems(&lib.definitions);
    if !problems.is_empty() {
        return Err(format!(
            "{out}definitions:\n  - {}\nverdict: refused: the library exports definitions a host refuses (fix them; `tool_api::check_plugin!()` in the plugin's tests finds these too)",
            problems.join("\n  - ")
        ));
    }
    let d = dispatcher_core::Dispatcher::new();
    for f in builtin_tools::factories() {
        let _ = d.register(f);
    }
    let verdict = plugin_host::compare(&manifest, &lib)
        .and_then(|()| plugin_host::register_library(&lib, &d));
    match verdict {
        Ok(_) => {
            let _ = writeln!(out, "tools:");
            let _ = writeln!(out, "  {:24} {:8} {:8} SCHEMA", "NAME", "CLASS", "RUNS");
            for def in &lib.definitions {
                let _ = writeln!(
                    out,
                    "  {:24} {:8} {:8} ok",
                    def.name,
                    def.side_effects,
                    if def.inline { "inline" } else { "blocking" }
                );
            }
            let grant =
                plugin_host::WorkerGrant::covering(lib.definitions.iter().map(|d| d.side_effects));
            let _ = writeln!(out, "sandbox: {}", sandbox_allows(grant));
            let _ = writeln!(out, "verdict: OK");
            Ok(out)
        }
        Err(e) => Err(format!("{out}verdict: refused: {e}")),
    }
}

/// The rest of `verify_here` for a WebAssembly component: compiled, linked, described and
/// registered as a host would.
#[cfg(feature = "wasm")]
fn verify_component(
    folder: &Path,
    manifest: &Manifest,
    mut out: String,
    compiled: Option<&Path>,
) -> std::result::Result<String, String> {
    use std::fmt::Write as _;
    let signed = signature(folder, &manifest.library)
        .map_err(|why| format!("{out}signature: refused: {why}"))?;
    let _ = writeln!(
        out,
        "signature: {}",
        if signed.starts_with("none") {
            "none (a component runs in the WebAssembly sandbox, signed or not)"
        } else {
            &signed
        }
    );
    let runtime = plugin_host::plugin_wasm::WasmRuntime::new(
        compiled.map(Path::to_path_buf),
        plugin_host::plugin_wasm::WasmLimits::default(),
    )?;
    let d = dispatcher_core::Dispatcher::new();
    for f in builtin_tools::factories() {
        let _ = d.register(f);
    }
    let (_, plugin) = plugin_host::load_component(
        folder,
        &runtime,
        plugin_host::plugin_wasm::HostList::none(),
        &d,
    )
    .map_err(|e| format!("{out}verdict: refused: {e}"))?;
    let _ = writeln!(
        out,
        "interface: toolhost:plugin@{}, compatible with this host's {}",
        plugin.interface,
        tool_api::WIT_VERSION
    );
    let _ = writeln!(out, "tools:");
    let _ = writeln!(out, "  {:24} {:8} SCHEMA", "NAME", "CLASS");
    for def in &plugin.definitions {
        let _ = writeln!(out, "  {:24} {:8} ok", def.name, def.side_effects);
    }
    let _ = writeln!(
        out,
        "sandbox: WebAssembly; only the toolhost:plugin host interface (workspace files as its classes allow, logs, output, questions); no other files, no programs; HTTP only for network tools, to the hosts a host's [plugins.{}] http_hosts lists",
        plugin.name
    );
    let _ = writeln!(
        out,
        "instances: {}",
        if plugin.reuses_instances() {
            "reused (it asks for it: a call may see what earlier calls left in its memory)"
        } else {
            "fresh for every call"
        }
    );
    let _ = writeln!(out, "verdict: OK");
    Ok(out)
}

/// Without the component tooling, a component's verification says how to get it.
#[cfg(not(feature = "wasm"))]
fn verify_component(
    _folder: &Path,
    _manifest: &Manifest,
    out: String,
    _compiled: Option<&Path>,
) -> std::result::Result<String, String> {
    Err(format!(
        "{out}verdict: not checked: this program was built without WebAssembly components (the `wasm` feature of toolhost-plugin-dev; toolhost's default features include it)"
    ))
}

/// What an isolated worker with `grant` (what its tools' classes call for) may do, in
/// `plugin verify`'s words.
fn sandbox_allows(grant: plugin_host::WorkerGrant) -> String {
    let mut beyond = Vec::new();
    if grant.execute {
        beyond.push("start programs, which may write only the workspace (the `execute` tools)");
    }
    if grant.network {
        beyond.push("open outbound connections (the `network` tools)");
    }
    let context = "isolated (unsigned, or signed by a key a host does not trust), its worker \
                   reaches workspace files only through its context, as each tool's class \
                   allows";
    if beyond.is_empty() {
        format!(
            "{context}; the kernel refuses any other file access, programs and connections \
             (a tool that needs them must declare `execute` or `network`)"
        )
    } else {
        format!(
            "{context}; it may also {}; the kernel refuses the rest",
            beyond.join(" and ")
        )
    }
}

/// What a package's signature says, checked against the key it names.
fn signature(folder: &Path, library: &str) -> std::result::Result<String, String> {
    let Some(file) = plugin_host::trust::read_signature(folder)? else {
        return Ok("none (a host runs it isolated unless told otherwise)".into());
    };
    match plugin_host::trust::verify(folder, library, &[file.key]) {
        plugin_host::Verdict::Trusted(key) => Ok(format!(
            "valid, by key {} ({key}); hosts that list it in trusted_keys load it in process",
            key.id()
        )),
        plugin_host::Verdict::Bad(why) | plugin_host::Verdict::Untrusted(why) => Err(why),
        plugin_host::Verdict::Unsigned => Ok("none".into()),
    }
}

/// `plugin verify PACKAGE`: verifies in a child process and prints its report.
pub fn verify(package: &Path, inspector: &Inspector) -> Result<String> {
    let step = format!("verify {}", package.display());
    announce(&step);
    let report = match inspector {
        Inspector::InProcess => verify_here(package, None).or_else(|e| fail(&step, e))?,
        Inspector::Child { program, args } => {
            let out = match Inspector::command(program, args, "__verify", package).output() {
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
