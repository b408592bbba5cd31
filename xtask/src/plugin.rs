//! `cargo xtask plugin …`: new, build, package, verify, install.

use std::path::{Path, PathBuf};
use std::process::Command;

use plugin_host::{Inspection, Manifest, Refusal, digest, package};

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
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("xtask"));
        // Rebuilt while it runs (`cargo xtask test` builds the workspace, this tool
        // included), the file it was started from is replaced: the new one at the same
        // path is this same tool, rebuilt from the same sources.
        let exe = match exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
            Some(path) => PathBuf::from(path),
            None => exe,
        };
        Inspector::Child(exe)
    }
}

/// The scaffold's `clippy.toml`: `cargo clippy` warns where a tool reaches around its
/// context.
const CLIPPY_TOML: &str = r#"# `cargo clippy` warns where code reaches files, programs or the network around the
# tool's context. Run isolated (the default for a plugin not signed by a key the user
# trusts), the worker's OS sandbox refuses what the tools' declared classes do not grant:
#   none, read, write: nothing beyond the context (files through ctx.files(), confined to
#                      the workspace and recorded);
#   execute:           programs, and files through them, within the workspace;
#   network:           outbound connections.
# Remove the entries a tool's declared class grants. `tool_api::check_plugin!()` in the
# crate's tests checks the same against the declared classes.
disallowed-methods = [
    { path = "std::fs::read", reason = "read workspace files with ctx.files().read_bytes(): the sandbox refuses direct access" },
    { path = "std::fs::read_to_string", reason = "read workspace files with ctx.files().read(): the sandbox refuses direct access" },
    { path = "std::fs::write", reason = "write workspace files with ctx.files().write() (declare `write`): the sandbox refuses direct access" },
    { path = "std::fs::read_dir", reason = "list workspace folders with ctx.files().list(): the sandbox refuses direct access" },
    { path = "std::fs::remove_file", reason = "delete workspace files with ctx.files().delete() (declare `write`): the sandbox refuses direct access" },
    { path = "std::fs::create_dir_all", reason = "ctx.files().write() creates parent folders (declare `write`): the sandbox refuses direct access" },
]
disallowed-types = [
    { path = "std::fs::File", reason = "reach workspace files through ctx.files(): the sandbox refuses direct access" },
    { path = "std::fs::OpenOptions", reason = "reach workspace files through ctx.files(): the sandbox refuses direct access" },
    { path = "std::process::Command", reason = "starting programs needs a tool declared `execute`" },
    { path = "std::net::TcpStream", reason = "connections need a tool declared `network`" },
    { path = "std::net::UdpSocket", reason = "connections need a tool declared `network`" },
]
"#;

fn valid_crate_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The crate name and folder for a new scaffold (`cargo new`'s rules: NAME may be a path
/// whose last part is the name), refused when the name is invalid or the folder is not
/// empty.
pub(crate) fn scaffold_dir(
    step: &str,
    name: &str,
    path: Option<&Path>,
) -> Result<(String, PathBuf)> {
    let (name, dir) = match path {
        Some(path) => (name, path.to_path_buf()),
        None => {
            let last = Path::new(name)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(name);
            (last, PathBuf::from(name))
        }
    };
    if !valid_crate_name(name) {
        return fail(
            step,
            format!(
                "'{name}' is not a valid crate name: use letters, digits, '-' and '_', starting with a letter"
            ),
        );
    }
    if dir.exists() && io(step, std::fs::read_dir(&dir))?.next().is_some() {
        return fail(
            step,
            format!(
                "'{}' exists and is not empty; choose another --path",
                dir.display()
            ),
        );
    }
    Ok((name.to_string(), dir))
}

/// `plugin new NAME [--path DIR]`: a plugin crate with a sample tool and its test, which
/// builds and passes `cargo test` as generated. As with `cargo new`, NAME may be a path
/// (`../plugins/my-tool`): the crate is created there and named after its last part.
pub fn new(name: &str, path: Option<&Path>) -> Result<PathBuf> {
    let step = "create the plugin crate";
    let (name, dir) = scaffold_dir(step, name, path)?;
    let name = name.as_str();
    io(step, std::fs::create_dir_all(dir.join("src")))?;
    let tool_api = root().join("tool-api");
    let tool_name = name.replace('-', "_");
    // `MAJOR.MINOR`: the minor that introduced what the scaffold uses; cargo takes the
    // newest compatible one.
    let (api_version, api_major) = match semver::Version::parse(tool_api::TOOL_API_VERSION) {
        Ok(v) => (format!("{}.{}", v.major, v.minor), v.major.to_string()),
        Err(_) => (tool_api::TOOL_API_VERSION.to_owned(), "1".to_owned()),
    };
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
# The plugin ABI's version: a plugin built against {api_version} loads in any host of
# {api_major}.x from {api_version} on.
tool-api = "{api_version}"
serde = {{ version = "1", features = ["derive"] }}

# A plugin must unwind: hosts refuse panic = "abort" builds.
[profile.release]
panic = "unwind"

# Its own workspace, wherever it is created.
[workspace]

# Made by a toolhost checkout: tool-api comes from it (the same version) until it is on
# crates.io. Delete this comment and the two lines below to take it from a registry
# (crates.io, or one your team runs), or when the checkout moves.
[patch.crates-io]
tool-api = {{ path = "{tool_api}" }}
"#,
        api_version = api_version,
        api_major = api_major,
        tool_api = tool_api.display()
    );
    let lib_rs = format!(
        r#"//! The {name} toolhost plugin.

use serde::Deserialize;
use tool_api::schemars::{{self, JsonSchema}};
use tool_api::{{
    SideEffect, ToolContext, ToolDefinition, ToolError, ToolOutput, TypedTool, export_plugin,
}};

/// What `{tool_name}_greet` takes. Its JSON Schema (what the model sees) is generated from
/// this type, doc comments included, so it cannot drift from the code.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GreetInput {{
    /// Who to greet.
    name: String,
}}

/// A sample tool: greets someone. Replace it with yours.
#[derive(Default)]
pub struct Greet;

impl TypedTool for Greet {{
    type Input = GreetInput;

    fn definition() -> ToolDefinition {{
        ToolDefinition::typed(
            "{tool_name}_greet",
            "Greet someone by name.",
            // Declare the highest capability honestly: none < read < write < execute < network.
            SideEffect::None,
        )
        // Pure and quick, so it may run inline (no thread handoff). Remove for I/O tools.
        .inline()
    }}

    fn run(&self, input: GreetInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {{
        ctx.log().debug(format_args!("greeting {{}}", input.name));
        Ok(ToolOutput::text(format!("Hello, {{}}!", input.name)))
    }}
}}

// Every tool of the plugin, once each. The version is Cargo.toml's.
export_plugin!(
    name: "{name}",
    version: env!("CARGO_PKG_VERSION"),
    tools: [Greet],
);

#[cfg(test)]
mod tests {{
    use super::*;
    use tool_api::Tool;
    use tool_api::serde_json::json;
    use tool_api::testing::TestHost;

    /// What a host would refuse (names, schemas, duplicates, the version), a tool type
    /// left out of export_plugin!, and file, program or network access around the context
    /// that no declared class grants (the sandbox would refuse it): caught here.
    #[test]
    fn exports_what_a_host_accepts() {{
        let tools = tool_api::check_plugin!().unwrap_or_else(|e| panic!("{{e}}"));
        assert!(tools.iter().any(|t| t.name == "{tool_name}_greet"));
    }}

    #[test]
    fn greets_by_name() {{
        let out = Greet.execute(json!({{"name": "Ada"}}), &TestHost::new().context()).unwrap();
        assert_eq!(out.text_content(), "Hello, Ada!");
    }}
}}
"#
    );
    let abs = std::path::absolute(&dir).unwrap_or_else(|_| dir.clone());
    let readme = format!(
        "# {name}\n\nA toolhost plugin.\n\n```sh\n\
         cargo test                                   # its tests, including what a host would refuse\n\
         cargo clippy                                 # warns where a tool reaches around its context (clippy.toml)\n\
         # in the toolhost checkout ({root}):\n\
         cargo xtask plugin package {abs}             # -> {abs}/dist/{name}-0.1.0-<target>.tar.gz\n\
         cargo install --locked --path toolhost --profile dist   # puts `toolhost` on PATH (once)\n\
         # back here:\n\
         toolhost --plugins dist list\n\
         toolhost --plugins dist call {tool_name}_greet --input '{{\"name\": \"Ada\"}}'\n```\n",
        root = root().display(),
        abs = abs.display()
    );
    io(step, std::fs::write(dir.join("Cargo.toml"), cargo_toml))?;
    io(step, std::fs::write(dir.join("src/lib.rs"), lib_rs))?;
    io(step, std::fs::write(dir.join("README.md"), readme))?;
    io(step, std::fs::write(dir.join("clippy.toml"), CLIPPY_TOML))?;
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
    let mut args: Vec<std::ffi::OsString> = vec!["--manifest-path".into(), manifest.clone().into()];
    if release {
        args.push("--release".into());
    }
    if let Some(dir) = target_dir {
        args.push("--target-dir".into());
        args.push(dir.into());
    }
    let what = format!(
        "{} ({})",
        path.file_name().unwrap_or_default().to_string_lossy(),
        if release { "release" } else { "debug" }
    );
    let built = xtask_launcher::build(&what, "the plugin library to package", &args)
        .or_else(|e| fail(&step, e))?;
    match library_of(&built, &manifest) {
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

/// The plugin library (`cdylib`) `built` made for the crate of `manifest`.
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

/// The version cargo resolves for the crate at `path` (workspace inheritance included).
pub fn crate_version(path: &Path) -> Result<String> {
    let step = format!("read the version of {}", path.display());
    let manifest = path.join("Cargo.toml");
    let out = cargo()
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output();
    let out = io(&step, out)?;
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

/// `plugin package PATH`: checks the crate's version, builds (in release, unless
/// `release` is false), inspects, writes `plugin.toml` with the checksum, runs every check
/// `plugin verify` runs, and packs `out_dir/NAME-VERSION-TARGET.tar.gz`. Refuses, with the
/// reason, what a host would.
pub fn package_crate(
    path: &Path,
    out_dir: &Path,
    inspector: &Inspector,
    target_dir: Option<&Path>,
    release: bool,
) -> Result<PathBuf> {
    let version = crate_version(path)?;
    let library = build(path, release, target_dir)?;
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
    let parent = root().join("target/xtask-package");
    io(&step, std::fs::create_dir_all(&parent))?;
    let scratch = io(
        &step,
        tempfile::Builder::new()
            .prefix(&format!("{}-", insp.name))
            .tempdir_in(&parent),
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
    verify_here_with(package, &crate::steps::fixtures_dir().join("cache"))
}

/// [`verify_here`], a component's compiled code cached in `compiled`.
pub fn verify_here_with(package: &Path, compiled: &Path) -> std::result::Result<String, String> {
    use std::fmt::Write as _;
    let folder = package_folder(package)?;
    let mut out = String::new();
    let (manifest, library_path) =
        plugin_host::preflight(&folder).map_err(|e| format!("refused before loading: {e}"))?;
    if manifest.kind == plugin_host::PackageKind::Component {
        let _ = writeln!(
            out,
            "manifest: {} {}, a WebAssembly component built against toolhost:plugin@{}, target {}",
            manifest.name, manifest.version, manifest.tool_api, manifest.target
        );
        return verify_component(&folder, &manifest, out, compiled);
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
        signature(&folder, &manifest.library)
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
#[cfg(feature = "components")]
fn verify_component(
    folder: &Path,
    manifest: &Manifest,
    mut out: String,
    compiled: &Path,
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
        Some(compiled.to_path_buf()),
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
#[cfg(not(feature = "components"))]
fn verify_component(
    _folder: &Path,
    _manifest: &Manifest,
    out: String,
    _compiled: &Path,
) -> std::result::Result<String, String> {
    Err(format!(
        "{out}verdict: not checked: this xtask was built without the WebAssembly component tooling (its `components` feature); run it as `cargo xtask plugin verify …`, which builds that in when it is given a component"
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

/// `plugin keygen FILE`: a new signing key in FILE (mode 0600, never overwritten) and its
/// public key in FILE.pub; returns the public key.
pub fn keygen(file: &Path) -> Result<plugin_host::PublicKey> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let step = format!("generate a signing key in {}", file.display());
    announce(&step);
    let mut seed = [0u8; 32];
    if let Err(e) = getrandom::fill(&mut seed) {
        return fail(&step, format!("the OS random source failed: {e}"));
    }
    let key = plugin_host::trust::SecretKey::from_seed(seed);
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        io(&step, std::fs::create_dir_all(parent))?;
    }
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file);
    let mut out = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return fail(
                &step,
                format!(
                    "{} already exists; a key is never overwritten (choose another file)",
                    file.display()
                ),
            );
        }
        Err(e) => return fail(&step, e),
    };
    io(&step, out.write_all(key.to_file_text().as_bytes()))?;
    let public = key.public();
    let mut pub_file = file.as_os_str().to_owned();
    pub_file.push(".pub");
    io(&step, std::fs::write(&pub_file, format!("{public}\n")))?;
    Ok(public)
}

/// `plugin sign PACKAGE --key FILE`: writes `plugin.sig` into a package folder, or into an
/// archive (re-packed in place). Returns the signing key's public half.
pub fn sign(package: &Path, key_file: &Path) -> Result<plugin_host::PublicKey> {
    let step = format!("sign {}", package.display());
    announce(&step);
    let key = plugin_host::trust::SecretKey::read(key_file).or_else(|e| fail(&step, e))?;
    if package.is_dir() {
        plugin_host::trust::sign(package, &key).or_else(|e| fail(&step, e))?;
        return Ok(key.public());
    }
    if !package.is_file() {
        return fail(&step, format!("'{}' does not exist", package.display()));
    }
    // A scratch folder of this run's own: two signings of one archive at once unpack to
    // the same digest, and one must not remove the other's files.
    let parent = root().join("target/xtask-sign");
    io(&step, std::fs::create_dir_all(&parent))?;
    let scratch_dir = io(
        &step,
        tempfile::Builder::new().prefix("sign-").tempdir_in(&parent),
    )?;
    let scratch = scratch_dir.path();
    let folder = package::unpack_cached(package, scratch).or_else(|e| fail(&step, e))?;
    let text = io(
        &step,
        std::fs::read_to_string(folder.join(plugin_host::MANIFEST_FILE)),
    )?;
    let manifest = Manifest::parse(&folder.join(plugin_host::MANIFEST_FILE), &text)
        .or_else(|e| fail(&step, e))?;
    plugin_host::trust::sign(&folder, &key).or_else(|e| fail(&step, e))?;
    let out_dir = scratch.join("out");
    let packed = io(&step, package::pack(&folder, &manifest, &out_dir))?;
    io(&step, std::fs::rename(&packed, package))?;
    Ok(key.public())
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

/// What `plugin install` did.
#[derive(Debug)]
pub struct Installed {
    /// Where the package is now.
    pub path: PathBuf,
    /// The verification report.
    pub report: String,
    /// Other versions of the same plugin it replaced.
    pub replaced: Vec<(String, PathBuf)>,
}

impl std::fmt::Display for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.report)?;
        for (version, path) in &self.replaced {
            writeln!(f, "replaced {version} ({})", path.display())?;
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        writeln!(f, "installed {}", self.path.display())?;
        writeln!(
            f,
            "load it with: toolhost --plugins {} list   (or plugin_dirs = [\"{}\"] in toolhost.toml)",
            dir.display(),
            dir.display()
        )
    }
}

/// The plugin name and version of each package in `dir` (folders and archives), by path.
fn installed_packages(dir: &Path) -> Vec<(PathBuf, Manifest)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .filter_map(|p| {
            let folder = package_folder(&p).ok()?;
            let file = folder.join(plugin_host::MANIFEST_FILE);
            let manifest = Manifest::parse(&file, &std::fs::read_to_string(&file).ok()?).ok()?;
            Some((p, manifest))
        })
        .collect()
}

/// `plugin install PACKAGE [--dir DIR]`: verifies, then copies the package into DIR (a temp
/// name, then a rename), and removes other versions of the same plugin there, which would
/// otherwise clash with it; a newer version already installed is not replaced.
pub fn install(package: &Path, dir: Option<&Path>, inspector: &Inspector) -> Result<Installed> {
    let report = verify(package, inspector)?;
    let step = "install the package";
    let dir = dir.map_or_else(default_install_dir, Path::to_path_buf);
    io(step, std::fs::create_dir_all(&dir))?;
    let Some(name) = package.file_name() else {
        return fail(step, "the package path has no file name");
    };
    let folder = package_folder(package).or_else(|e| fail(step, e))?;
    let manifest_file = folder.join(plugin_host::MANIFEST_FILE);
    let text = io(step, std::fs::read_to_string(&manifest_file))?;
    let manifest = Manifest::parse(&manifest_file, &text).or_else(|e| fail(step, e))?;
    let dest = dir.join(name);
    let others: Vec<(PathBuf, Manifest)> = installed_packages(&dir)
        .into_iter()
        .filter(|(p, m)| m.name == manifest.name && *p != dest)
        .collect();
    if let Some((path, newer)) = others.iter().find(|(_, m)| m.version > manifest.version) {
        return fail(
            step,
            format!(
                "plugin '{}' {} is already installed at {}, newer than {}: remove it first to go back",
                manifest.name,
                newer.version,
                path.display(),
                manifest.version
            ),
        );
    }
    let partial = dir.join(format!(".{}.partial", name.to_string_lossy()));
    let _ = std::fs::remove_dir_all(&partial);
    let _ = std::fs::remove_file(&partial);
    if package.is_dir() {
        io(
            step,
            package::write_folder(&folder.join(&manifest.library), &manifest, &partial),
        )?;
        let _ = std::fs::remove_dir_all(&dest);
    } else {
        io(step, std::fs::copy(package, &partial))?;
    }
    io(step, std::fs::rename(&partial, &dest))?;
    let mut replaced = Vec::new();
    for (path, old) in others {
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        io(step, removed)?;
        replaced.push((old.version.to_string(), path));
    }
    Ok(Installed {
        path: dest,
        report,
        replaced,
    })
}
