//! WebAssembly components: built from Python sources with componentize-py (from PyPI,
//! into `target/peers`), packaged like native plugins (`plugin.toml` with
//! `kind = "component"`), and the components the tests load, built once per run.

use std::path::{Path, PathBuf};
use std::process::Command;

use plugin_host::Instances;

use xtask_launcher::tool::COMPONENT_SOURCES;

use crate::steps::{Result, announce, cargo, fail, fixtures_dir, io, root};

/// The examples and the test fixtures, by package name and source folder (an `app.py`, an
/// `app.js` or a core `module.wat`).
pub const SOURCES: [(&str, &str); 5] = [
    ("text-stats", "examples/wasm/py-text-stats"),
    ("text-case", "examples/wasm/js-text-case"),
    ("faults", "tests/fixtures/wasm/faults"),
    ("wat-noop", "tests/fixtures/wasm/noop"),
    ("fetch", "tests/fixtures/wasm/fetch"),
];

/// The script that runs componentize-js's `componentize` (its JavaScript API) with Node:
/// `node build.mjs COMPONENTIZE_JS_MODULE SOURCE WIT_DIR OUT`.
const BUILD_JS: &str = r#"import { writeFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
const [module, source, wit, out] = process.argv.slice(2);
const { componentize } = await import(pathToFileURL(module).href);
// Only what a tool needs: no stdio, clocks or randomness imports; fetch() goes out through
// wasi:http (the host answers it for `network` tools, to allowed hosts only); no
// incoming-request handler.
const { component } = await componentize({
  sourcePath: source,
  witPath: wit,
  worldName: 'plugin',
  disableFeatures: ['random', 'stdio', 'clocks', 'fetch-event'],
});
await writeFile(out, component);
"#;

/// componentize-py, installed into `target/peers/componentize-py` on first use.
fn componentize_py() -> Result<PathBuf> {
    crate::peers::componentize_py(&crate::peers::dir())
        .or_else(|e| fail("install componentize-py (PyPI)", e))
}

/// Whether `out` is newer than every file it is built from.
fn up_to_date(out: &Path, inputs: &[PathBuf]) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(out) else {
        return false;
    };
    inputs
        .iter()
        .all(|i| modified(i).is_some_and(|m| m <= built))
}

/// A component's source: what language, in which file of its folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    /// `app.py`, built with componentize-py.
    Python,
    /// `app.js`, built with componentize-js.
    JavaScript,
    /// `module.wat`: a core module in the text format, exporting the `plugin` world's
    /// functions under the canonical ABI's names; the world is embedded in it and it is
    /// encoded as a component with wit-component.
    Wat,
}

impl Language {
    /// Each language and its file, as `cargo xtask` recognizes a source folder.
    const ALL: [(Language, &'static str); 3] = [
        (Language::Python, COMPONENT_SOURCES[0]),
        (Language::JavaScript, COMPONENT_SOURCES[1]),
        (Language::Wat, COMPONENT_SOURCES[2]),
    ];

    /// What builds it, for messages.
    fn toolchain(self) -> &'static str {
        match self {
            Language::Python => "componentize-py",
            Language::JavaScript => "componentize-js",
            Language::Wat => "wit-component",
        }
    }

    /// The language of the source in folder `source`, and its file.
    fn of(source: &Path) -> Option<(Language, PathBuf)> {
        Language::ALL
            .iter()
            .map(|(language, file)| (*language, source.join(file)))
            .find(|(_, file)| file.is_file())
    }
}

/// Builds the component whose source is in folder `source` (Python `app.py`, JavaScript
/// `app.js`, or `module.wat`; each implements the `plugin` world of
/// `tool-api/wit/plugin.wit`) into `out`, unless `out` is newer than its sources. The
/// toolchains come from the registries, into `target/peers`: componentize-py (PyPI),
/// componentize-js on Node 22 (npm).
pub fn build_source(source: &Path, out: &Path) -> Result<PathBuf> {
    let step = format!("build the component {}", out.display());
    let Some((language, app)) = Language::of(source) else {
        return fail(
            &step,
            format!("no app.py, app.js or module.wat in '{}'", source.display()),
        );
    };
    let wit = root().join("tool-api/wit");
    let own_world = source.join(WORLD_FILE);
    let mut inputs = vec![app.clone(), wit.join("plugin.wit")];
    if own_world.is_file() {
        inputs.push(own_world.clone());
    }
    if up_to_date(out, &inputs) {
        return Ok(out.to_path_buf());
    }
    // Toolchains are installed before the step is announced: they announce their own.
    let command = match language {
        Language::Python => {
            let mut command = Command::new(componentize_py()?);
            if own_world.is_file() {
                let dir = world_with_wasi(&own_world, out, &wit)?;
                command
                    .arg("-d")
                    .arg(dir)
                    .args(["-w", &world_name(&own_world)?]);
            } else {
                command.arg("-d").arg(&wit).args(["-w", "plugin"]);
            }
            command
                .args(["componentize", "app", "-p"])
                .arg(source)
                .arg("-o")
                .arg(out);
            Some(command)
        }
        Language::JavaScript => {
            let install = "install Node 22 and componentize-js (npm)";
            let peers = crate::peers::dir();
            let node = crate::peers::node22(&peers).or_else(|e| fail(install, e))?;
            let prefix = crate::peers::componentize_js(&peers).or_else(|e| fail(install, e))?;
            let script = prefix.join("build.mjs");
            io(install, std::fs::write(&script, BUILD_JS))?;
            let mut command = Command::new(node);
            command
                .arg(&script)
                .arg(
                    prefix
                        .join("node_modules/@bytecodealliance/componentize-js/src/componentize.js"),
                )
                .arg(&app)
                .arg(&wit)
                .arg(out);
            Some(command)
        }
        Language::Wat => None,
    };
    announce(&step);
    if let Some(dir) = out.parent() {
        io(&step, std::fs::create_dir_all(dir))?;
    }
    match command {
        Some(mut command) => crate::peers::output(&mut command)
            .map(drop)
            .or_else(|e| fail(&step, format!("{} failed: {e}", language.toolchain())))?,
        None => {
            let component = encode_wat(&app, &wit)
                .or_else(|e| fail(&step, format!("{} failed: {e}", language.toolchain())))?;
            io(&step, std::fs::write(out, component))?;
        }
    }
    Ok(out.to_path_buf())
}

/// A source folder's own world (a test fixture that also imports WASI interfaces directly,
/// to call them for real): it includes `toolhost:plugin/plugin` and names WASI 0.2
/// interfaces at `@WASI@`, the version the host's wasmtime-wasi provides.
const WORLD_FILE: &str = "world.wit";

/// The name of the world `file` defines.
fn world_name(file: &Path) -> Result<String> {
    let step = format!("read {}", file.display());
    let text = io(&step, std::fs::read_to_string(file))?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("world "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|w| w.trim_end_matches('{').to_string())
        .ok_or(())
        .or_else(|()| fail(&step, "it defines no world"))
}

/// The WASI 0.2 WIT packages of the wasmtime-wasi this workspace builds the host with (its
/// own copy, found with `cargo metadata`), and their version.
fn wasi_wit() -> Result<(PathBuf, String)> {
    let step = "find the WASI interfaces of wasmtime-wasi (cargo metadata)";
    let out = crate::peers::output(
        cargo()
            .args(["metadata", "--format-version", "1", "--manifest-path"])
            .arg(root().join("Cargo.toml")),
    )
    .or_else(|e| fail(step, e))?;
    let meta: serde_json::Value = serde_json::from_str(&out).or_else(|e| fail(step, e))?;
    let manifest = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "wasmtime-wasi")
        .and_then(|p| p["manifest_path"].as_str())
        .map(PathBuf::from);
    let Some(manifest) = manifest else {
        return fail(step, "wasmtime-wasi is not among the workspace's packages");
    };
    let deps = manifest.with_file_name("src/p2/wit/deps");
    let sockets = io(step, std::fs::read_to_string(deps.join("sockets.wit")))?;
    let version = sockets
        .lines()
        .find_map(|l| l.trim().strip_prefix("package wasi:sockets@"))
        .map(|v| v.trim_end_matches(';').to_string());
    match version {
        Some(v) => Ok((deps, v)),
        None => fail(step, format!("no package line in {}", deps.display())),
    }
}

/// A WIT folder beside `out` holding `world` (its `@WASI@` replaced by the WASI version),
/// `toolhost:plugin` and the WASI packages, for componentize-py.
fn world_with_wasi(world: &Path, out: &Path, plugin_wit: &Path) -> Result<PathBuf> {
    let (wasi, version) = wasi_wit()?;
    let step = format!("assemble the WIT of {}", world.display());
    let dir = out.with_extension("wit");
    let _ = std::fs::remove_dir_all(&dir);
    io(&step, std::fs::create_dir_all(dir.join("deps")))?;
    let text = io(&step, std::fs::read_to_string(world))?.replace("@WASI@", &format!("@{version}"));
    io(&step, std::fs::write(dir.join("world.wit"), text))?;
    io(
        &step,
        std::fs::copy(
            plugin_wit.join("plugin.wit"),
            dir.join("deps/toolhost-plugin.wit"),
        ),
    )?;
    for entry in io(&step, std::fs::read_dir(&wasi))?.flatten() {
        if entry.path().extension().is_some_and(|e| e == "wit") {
            io(
                &step,
                std::fs::copy(entry.path(), dir.join("deps").join(entry.file_name())),
            )?;
        }
    }
    Ok(dir)
}

/// The component for a core module in the text format, with the `plugin` world of the WIT
/// package in `wit` embedded.
fn encode_wat(module_file: &Path, wit: &Path) -> std::result::Result<Vec<u8>, String> {
    let mut module = wat::parse_file(module_file).map_err(|e| e.to_string())?;
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(wit).map_err(|e| format!("{e:#}"))?;
    let world = resolve
        .select_world(&[package], Some("plugin"))
        .map_err(|e| format!("{e:#}"))?;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .map_err(|e| format!("{e:#}"))?;
    wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| format!("{e:#}"))
}

/// Where compiled components are cached unless a caller says otherwise: the tests' cache.
pub fn default_compiled() -> PathBuf {
    fixtures_dir().join("cache")
}

/// `plugin package` for a component (a `.wasm` file, or a source folder: see
/// [`build_source`]): builds it if needed, then packages it as
/// [`plugin_dev::package_component`] does.
pub fn package(
    path: &Path,
    out_dir: &Path,
    instances: Instances,
    compiled: &Path,
) -> Result<PathBuf> {
    let component = if path.is_dir() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "component".into());
        build_source(
            path,
            &root().join("target/wasm").join(format!("{name}.wasm")),
        )?
    } else {
        path.to_path_buf()
    };
    plugin_dev::package_component(&component, out_dir, instances, compiled)
}

/// The components the tests load: each source built and packaged under
/// [`fixtures_dir`]`/packages/NAME`. Returns [`fixtures_dir`].
pub fn fixtures() -> Result<PathBuf> {
    let dir = fixtures_dir();
    for (name, source) in SOURCES {
        let wasm = build_source(&root().join(source), &dir.join(format!("{name}.wasm")))?;
        let dest = dir.join("packages").join(name);
        if !up_to_date(
            &dest.join(plugin_host::MANIFEST_FILE),
            std::slice::from_ref(&wasm),
        ) {
            announce(&format!("package the component {name}"));
            plugin_dev::package_component_folder(
                &wasm,
                &dest,
                Instances::Fresh,
                &default_compiled(),
            )?;
        }
    }
    Ok(dir)
}
