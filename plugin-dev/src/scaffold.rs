//! `plugin new`: a native plugin crate an author builds, tests and ships from a repository
//! of their own, with its clippy rules, README and CI workflow.

use std::path::{Path, PathBuf};

use crate::error::{Result, fail, io};

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
///
/// It depends on `tool-api` by version (from crates.io, or the registry that stands in for
/// it in the author's cargo config); `tool_api_path`, when given, adds a
/// `[patch.crates-io]` that takes it from that folder instead (a toolhost checkout's
/// `tool-api`), with a comment saying how to remove it.
pub fn new(name: &str, path: Option<&Path>, tool_api_path: Option<&Path>) -> Result<PathBuf> {
    let step = "create the plugin crate";
    let (name, dir) = scaffold_dir(step, name, path)?;
    let name = name.as_str();
    io(step, std::fs::create_dir_all(dir.join("src")))?;
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
{patch}"#,
        api_version = api_version,
        api_major = api_major,
        patch = tool_api_path.map(checkout_patch).unwrap_or_default(),
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
    let readme = format!(
        "# {name}\n\nA toolhost plugin.\n\n```sh\n\
         cargo test                       # its tests, including what a host would refuse\n\
         cargo clippy                     # warns where a tool reaches around its context (clippy.toml)\n\
         toolhost plugin package .        # -> dist/{name}-0.1.0-<target>.tar.gz, checked as a host checks it\n\
         toolhost --plugins dist call {tool_name}_greet --input '{{\"name\": \"Ada\"}}'\n\
         ```\n\n\
         `toolhost` is the one command for running tools and for authoring them: `uvx toolhost-mcp` \
         runs it without installing (or take a release archive, or `cargo install toolhost`).\n\n\
         ## Shipping it\n\n```sh\n\
         toolhost plugin keygen ~/.config/toolhost/signing.key   # once; keep it private\n\
         toolhost plugin sign dist/{name}-0.1.0-<target>.tar.gz --key ~/.config/toolhost/signing.key\n\
         toolhost plugin publish dist/{name}-0.1.0-<target>.tar.gz ghcr.io/YOU/{name}:0.1.0\n\
         ```\n\n\
         Users install it with `toolhost plugin install ghcr.io/YOU/{name}:0.1.0`; those who list \
         your public key (`signing.key.pub`) in `trusted_keys` run it in process, the others in its \
         sandboxed worker. Publish each target's package to the same reference: one artifact \
         holds them all.\n\n\
         `.github/workflows/ci.yml` builds, tests and packages it for Linux x86_64 and aarch64 and \
         macOS on GitHub Actions.\n"
    );
    io(step, std::fs::write(dir.join("Cargo.toml"), cargo_toml))?;
    io(step, std::fs::write(dir.join("src/lib.rs"), lib_rs))?;
    io(step, std::fs::write(dir.join("README.md"), readme))?;
    io(step, std::fs::write(dir.join("clippy.toml"), CLIPPY_TOML))?;
    io(
        step,
        std::fs::write(dir.join(".gitignore"), "/target\n/dist\n"),
    )?;
    io(step, std::fs::create_dir_all(dir.join(".github/workflows")))?;
    io(
        step,
        std::fs::write(dir.join(".github/workflows/ci.yml"), ci_workflow()),
    )?;
    Ok(dir)
}

/// The `[patch.crates-io]` that takes `tool-api` from a checkout's folder.
fn checkout_patch(tool_api: &Path) -> String {
    format!(
        r#"
# Made by a toolhost checkout: tool-api comes from it (the same version). Delete this
# comment and the two lines below to take it from a registry (crates.io, or one your team
# runs), or when the checkout moves.
[patch.crates-io]
tool-api = {{ path = "{}" }}
"#,
        tool_api.display()
    )
}

/// The scaffold's GitHub Actions workflow: clippy, the tests, and a checked package for each
/// target, the `toolhost` that packages it installed once per runner and cached.
fn ci_workflow() -> String {
    let version = env!("CARGO_PKG_VERSION");
    format!(
        r#"# Builds, tests and packages this plugin for Linux (x86_64, aarch64) and macOS (arm64).
# Written by `toolhost plugin new`. Each runner packages for its own target: the package is
# checked by loading the library, as a host would. The packages are the run's artifacts;
# publish them with `toolhost plugin publish` (each to the same reference).
name: ci

on:
  push:
    branches: [main]
    tags: ["v*"]
  pull_request:

jobs:
  plugin:
    strategy:
      fail-fast: false
      matrix:
        os: [ubuntu-24.04, ubuntu-24.04-arm, macos-15]
    runs-on: ${{{{ matrix.os }}}}
    env:
      TOOLHOST_VERSION: "{version}"
    steps:
      - uses: actions/checkout@v5
      - uses: dtolnay/rust-toolchain@stable
        with:
          components: clippy
      - uses: actions/cache@v4
        with:
          path: |
            ~/.cargo/registry
            ~/.cargo/bin/toolhost
            target
          key: ${{{{ matrix.os }}}}-${{{{ hashFiles('Cargo.toml', 'Cargo.lock') }}}}-toolhost-${{{{ env.TOOLHOST_VERSION }}}}
      - run: cargo clippy --all-targets -- -D warnings
      - run: cargo test
      - name: toolhost, which packages the plugin
        run: command -v toolhost || cargo install --locked toolhost --version "$TOOLHOST_VERSION" --no-default-features
      - run: toolhost plugin package . --out dist
      - uses: actions/upload-artifact@v4
        with:
          name: ${{{{ github.event.repository.name }}}}-${{{{ matrix.os }}}}
          path: dist/*.tar.gz
"#
    )
}
