//! `cargo xtask plugin …` as an author runs it: the real binary, real cargo builds.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
use plugin_host::{Manifest, PluginHost};
use toolhost_tests::{fixtures, package_library, repo_root};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        // Share compiled dependencies with the fixture builds.
        .env("CARGO_TARGET_DIR", repo_root().join("target/fixtures"))
        .output()
        .unwrap()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn verify_reports_tools_side_effects_and_verdicts_of_a_good_package() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = package_library(&fixtures().library("good"), dir.path(), "good");
    let out = xtask(&["plugin", "verify", path_str(&pkg)]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let report = toolhost_tests::text(&out.stdout);
    assert!(report.contains("manifest: fixture-good 0.1.0"), "{report}");
    assert!(report.contains("ABI: compatible"), "{report}");
    assert!(
        report.contains("echo_upper") && report.contains("ws_write") && report.contains("write"),
        "{report}"
    );
    assert!(report.trim_end().ends_with("verdict: OK"), "{report}");
    // One column per field, whatever the values (a blocking tool's row lines up too).
    let rows: Vec<&str> = report
        .lines()
        .skip_while(|l| *l != "tools:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(rows.len() > 2, "{report}");
    let schema_column = rows[0].find("SCHEMA").unwrap();
    for row in &rows[1..] {
        assert_eq!(row.rfind("ok"), Some(schema_column), "{report}");
    }
    // What the sandbox allows its classes: context only (none, read, write tools).
    assert!(
        report.contains("sandbox: isolated")
            && report.contains("the kernel refuses any other file access"),
        "{report}"
    );
}

#[test]
fn verify_names_the_reason_a_package_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = package_library(&fixtures().library("good"), dir.path(), "good");
    let path = pkg.join("plugin.toml");
    let mut m = Manifest::parse(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    m.sha256 = "a".repeat(64);
    std::fs::write(&path, m.to_toml()).unwrap();
    let out = xtask(&["plugin", "verify", path_str(&pkg)]);
    assert!(!out.status.success());
    assert!(
        toolhost_tests::text(&out.stderr).contains("checksum mismatch"),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
}

#[test]
fn verify_reports_a_library_that_crashes_while_loading_instead_of_crashing() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = toolhost_tests::package_crash_on_load(dir.path(), "crash");
    let out = xtask(&["plugin", "verify", path_str(&pkg)]);
    assert!(!out.status.success());
    let err = toolhost_tests::text(&out.stderr);
    assert!(err.contains("crashed the process (signal 6)"), "{err}");
}

#[test]
fn package_refuses_a_panic_abort_build() {
    let dir = tempfile::tempdir().unwrap();
    let out = xtask(&[
        "plugin",
        "package",
        path_str(&repo_root().join("tests/fixtures/abort")),
        "--out",
        path_str(dir.path()),
    ]);
    assert!(!out.status.success());
    assert!(
        toolhost_tests::text(&out.stderr).contains("panic = \"abort\""),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no package written"
    );
}

#[test]
fn new_takes_a_path_as_cargo_new_does_and_names_the_crate_after_its_last_part() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("plugins/my-tool");
    let out = xtask(&["plugin", "new", path_str(&crate_dir)]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"my-tool\""), "{manifest}");
    let bad = xtask(&["plugin", "new", path_str(&dir.path().join("plugins/9bad"))]);
    assert!(!bad.status.success());
    assert!(
        toolhost_tests::text(&bad.stderr).contains("'9bad' is not a valid crate name"),
        "{}",
        toolhost_tests::text(&bad.stderr)
    );
}

/// `cargo xtask plugin package SOURCE --out DIR EXTRA…` for a component source folder of
/// this repository: the output folder (kept while in use) and the archive named `archive`
/// in it, asserted written.
fn packaged(source: &str, extra: &[&str], archive: &str) -> (tempfile::TempDir, PathBuf) {
    let out = tempfile::tempdir().unwrap();
    let source = repo_root().join(source);
    let mut args = vec![
        "plugin",
        "package",
        path_str(&source),
        "--out",
        path_str(out.path()),
    ];
    args.extend_from_slice(extra);
    let run = xtask(&args);
    assert!(
        run.status.success(),
        "{}",
        toolhost_tests::text(&run.stderr)
    );
    let archive = out.path().join(archive);
    assert!(archive.is_file(), "{}", toolhost_tests::text(&run.stdout));
    (out, archive)
}

/// `cargo xtask plugin verify ARCHIVE`'s report, asserted to succeed.
fn verified(archive: &Path) -> String {
    let verify = xtask(&["plugin", "verify", path_str(archive)]);
    let report = toolhost_tests::text(&verify.stdout);
    assert!(
        verify.status.success(),
        "{report}{}",
        toolhost_tests::text(&verify.stderr)
    );
    report
}

/// A JavaScript folder is built with componentize-js, described, verified and packed, and
/// the archive verifies and installs (the toolchains are those `cargo xtask test`
/// installed for the test components).
#[test]
fn a_javascript_component_folder_packages_verifies_and_installs() {
    if toolhost_tests::peer("TOOLHOST_TEST_COMPONENTS").is_none() {
        return;
    }
    let (_out, archive) = packaged(
        "examples/wasm/js-text-case",
        &[],
        "text-case-0.1.0-wasm32-wasip2.tar.gz",
    );
    // The README's next two commands, on that archive.
    let report = verified(&archive);
    assert!(
        report.contains("a WebAssembly component built against toolhost:plugin@1.0.0"),
        "{report}"
    );
    assert!(report.contains("verdict: OK"), "{report}");
    let installed = tempfile::tempdir().unwrap();
    let install = xtask(&[
        "plugin",
        "install",
        path_str(&archive),
        "--dir",
        path_str(installed.path()),
    ]);
    assert!(
        install.status.success(),
        "{}",
        toolhost_tests::text(&install.stderr)
    );
    assert!(
        installed
            .path()
            .join("text-case-0.1.0-wasm32-wasip2.tar.gz")
            .is_file()
    );
}

/// `--reuse-instances` writes `instances = "reused"` into a component's manifest, which
/// `verify` reports; on a native plugin crate it is refused before anything is built.
#[test]
fn reuse_instances_is_asked_for_by_a_component_package_and_refused_for_a_native_one() {
    if toolhost_tests::peer("TOOLHOST_TEST_COMPONENTS").is_none() {
        return;
    }
    let (_out, archive) = packaged(
        "tests/fixtures/wasm/noop",
        &["--reuse-instances"],
        "wat-noop-1.0.0-wasm32-wasip2.tar.gz",
    );
    let report = verified(&archive);
    assert!(
        report.contains("instances: reused (it asks for it"),
        "{report}"
    );
    let native = xtask(&[
        "plugin",
        "package",
        path_str(&repo_root().join("examples/plugins/text-tools")),
        "--reuse-instances",
    ]);
    assert!(!native.status.success());
    assert!(
        toolhost_tests::text(&native.stderr)
            .contains("--reuse-instances applies to WebAssembly components only"),
        "{}",
        toolhost_tests::text(&native.stderr)
    );
}

/// This machine has no `wasm32-wasip2` target, so the component scaffold is checked for
/// the host: its bindings are generated from the WIT it carries and type-check everywhere,
/// which proves the sample tool matches the interface.
#[test]
fn new_wasm_scaffolds_a_rust_component_that_type_checks_against_the_wit() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("wasm-greeter");
    let out = xtask(&[
        "plugin",
        "new",
        "wasm-greeter",
        "--path",
        path_str(&crate_dir),
        "--wasm",
    ]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(crate_dir.join("wit/plugin.wit")).unwrap(),
        tool_api::WIT
    );
    let readme = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
    assert!(
        readme.contains("rustup target add wasm32-wasip2"),
        "{readme}"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let check = Command::new(cargo)
        .args([
            "check",
            "--quiet",
            "--manifest-path",
            path_str(&crate_dir.join("Cargo.toml")),
        ])
        .env(
            "CARGO_TARGET_DIR",
            repo_root().join("target/fixtures/wasm-scaffold"),
        )
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        toolhost_tests::text(&check.stderr)
    );
}

#[test]
fn new_plugin_builds_passes_its_test_packages_installs_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("demo-greeter");
    let out = xtask(&[
        "plugin",
        "new",
        "demo-greeter",
        "--path",
        path_str(&crate_dir),
    ]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    // The scaffold passes its own test out of the box.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let test = Command::new(cargo)
        .args([
            "test",
            "--quiet",
            "--manifest-path",
            path_str(&crate_dir.join("Cargo.toml")),
        ])
        .env("CARGO_TARGET_DIR", repo_root().join("target/fixtures"))
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        toolhost_tests::text(&test.stdout),
        toolhost_tests::text(&test.stderr)
    );
    assert!(
        toolhost_tests::text(&test.stdout).contains("2 passed"),
        "{}",
        toolhost_tests::text(&test.stdout)
    );
    // Refuses to overwrite.
    assert!(
        !xtask(&[
            "plugin",
            "new",
            "demo-greeter",
            "--path",
            path_str(&crate_dir)
        ])
        .status
        .success()
    );
    assert!(!xtask(&["plugin", "new", "9bad name"]).status.success());

    let dist = dir.path().join("dist");
    let out = xtask(&[
        "plugin",
        "package",
        path_str(&crate_dir),
        "--out",
        path_str(&dist),
    ]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let archive = toolhost_tests::text(&out.stdout).trim().to_string();
    assert!(
        archive.ends_with(&format!(
            "demo-greeter-0.1.0-{}.tar.gz",
            plugin_host::HOST_TARGET
        )),
        "{archive}"
    );

    let installed = dir.path().join("installed");
    let out = xtask(&["plugin", "install", &archive, "--dir", path_str(&installed)]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert!(
        toolhost_tests::text(&out.stdout).contains("--plugins"),
        "{}",
        toolhost_tests::text(&out.stdout)
    );
    assert!(
        toolhost_tests::text(&out.stdout).contains("verdict: OK"),
        "install shows the verification report: {}",
        toolhost_tests::text(&out.stdout)
    );

    let d = Dispatcher::new();
    let report = PluginHost::new([&installed])
        .isolation(plugin_host::Isolation::InProcess)
        .cache_dir(dir.path().join("cache"))
        .load_into(&d);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let ws = tempfile::tempdir().unwrap();
    let session = d.open_session(SessionSpec::new("s", ws.path())).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(d.dispatch(
        ToolUse::new(
            "tu",
            "demo_greeter_greet",
            serde_json::json!({"name": "Ada"}),
        ),
        &session,
    ));
    assert_eq!(r.text(), "Hello, Ada!");
}

/// Runs `cargo test` in a plugin crate.
fn cargo_test(crate_dir: &Path) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    Command::new(cargo)
        .args(["test", "--quiet", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", repo_root().join("target/fixtures"))
        .output()
        .unwrap()
}

/// Runs a plugin crate's tests, which must fail; returns what they said.
fn failed_test(crate_dir: &Path) -> String {
    let test = cargo_test(crate_dir);
    let said = toolhost_tests::text(&test.stdout) + &toolhost_tests::text(&test.stderr);
    assert!(!test.status.success(), "{said}");
    said
}

/// A tool an author wrote and forgot to export.
const FORGOTTEN_TOOL: &str = r#"
#[derive(Default)]
pub struct Forgotten;
impl tool_api::DefinedTool for Forgotten {
    fn definition() -> ToolDefinition {
        ToolDefinition::new("forgotten", "Never exported.", SideEffect::None, tool_api::serde_json::json!({"type": "object"}))
    }
}
impl tool_api::Tool for Forgotten {
    fn execute(&self, _: tool_api::serde_json::Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(""))
    }
}
"#;

/// Replaces `from` with `to` in a file (the test fails if `from` is not there).
fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(from), "{from:?} not in {}", file.display());
    std::fs::write(file, text.replacen(from, to, 1)).unwrap();
}

/// Two raw tools named alike with different classes, one of them with a `oneOf` and a
/// `patternProperties` schema: what a new author might write.
const FLAWED_TOOLS: &str = r#"
use tool_api::{DefinedTool, Tool};
use tool_api::serde_json::{Value, json};

#[derive(Default)]
pub struct ReadNotes;
impl DefinedTool for ReadNotes {
    fn definition() -> ToolDefinition {
        ToolDefinition::new("notes", "Read notes.", SideEffect::Read, json!({
            "type": "object",
            "properties": {"id": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
            "patternProperties": {"^x-": {"type": "string"}}
        }))
    }
}
impl Tool for ReadNotes {
    fn execute(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(""))
    }
}

#[derive(Default)]
pub struct WriteNotes;
impl DefinedTool for WriteNotes {
    fn definition() -> ToolDefinition {
        ToolDefinition::new("notes", "Write notes.", SideEffect::Write, json!({"type": "object"}))
    }
}
impl Tool for WriteNotes {
    fn execute(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(""))
    }
}
"#;

#[test]
fn the_author_path_catches_mistakes_before_shipping() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("notes-plugin");
    let out = xtask(&[
        "plugin",
        "new",
        "notes-plugin",
        "--path",
        path_str(&crate_dir),
    ]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let lib = crate_dir.join("src/lib.rs");
    let package = |extra: &[&str]| {
        let mut args = vec!["plugin", "package", path_str(&crate_dir)];
        args.extend_from_slice(extra);
        xtask(&args)
    };

    // A tool that reads files around its context: its test names the line, and clippy
    // (the scaffold's clippy.toml) warns at the call.
    let reach = "        let _ = std::fs::read_to_string(\"/etc/hostname\");\n";
    edit(
        &lib,
        "        Ok(ToolOutput::text(format!(",
        &format!("{reach}        Ok(ToolOutput::text(format!("),
    );
    let said = failed_test(&crate_dir);
    assert!(
        said.contains("src/lib.rs:") && said.contains("reaches the filesystem directly"),
        "{said}"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let clippy = Command::new(cargo)
        .args(["clippy", "--quiet", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", repo_root().join("target/fixtures"))
        .output()
        .unwrap();
    let warned = toolhost_tests::text(&clippy.stderr);
    assert!(
        warned.contains("disallowed method `std::fs::read_to_string`")
            && warned.contains("ctx.files().read()"),
        "{warned}"
    );
    edit(&lib, reach, "");

    // A tool defined but left out of export_plugin!: its test names it.
    std::fs::write(
        &lib,
        std::fs::read_to_string(&lib).unwrap() + FORGOTTEN_TOOL,
    )
    .unwrap();
    let said = failed_test(&crate_dir);
    assert!(
        said.contains("`Forgotten` is a tool but not in export_plugin!'s tools"),
        "{said}"
    );
    edit(&lib, FORGOTTEN_TOOL, "");

    // An export_plugin! version that is not Cargo.toml's: the test and package refuse it.
    edit(
        &lib,
        "version: env!(\"CARGO_PKG_VERSION\")",
        "version: \"0.0.9\"",
    );
    let test = cargo_test(&crate_dir);
    assert!(!test.status.success());
    let said = toolhost_tests::text(&test.stdout) + &toolhost_tests::text(&test.stderr);
    assert!(
        said.contains("export_plugin! says version \"0.0.9\" but Cargo.toml says \"0.1.0\""),
        "{said}"
    );
    let out = package(&[]);
    assert!(!out.status.success());
    let err = toolhost_tests::text(&out.stderr);
    assert!(
        err.contains("export_plugin! says version \"0.0.9\" but Cargo.toml says \"0.1.0\""),
        "{err}"
    );
    assert!(!crate_dir.join("dist").exists(), "nothing packaged");
    edit(
        &lib,
        "version: \"0.0.9\"",
        "version: env!(\"CARGO_PKG_VERSION\")",
    );

    // Two tools with one name, and schemas outside the subset.
    std::fs::write(
        &lib,
        std::fs::read_to_string(&lib)
            .unwrap()
            .replace("tools: [Greet],", "tools: [Greet, ReadNotes, WriteNotes],")
            + FLAWED_TOOLS,
    )
    .unwrap();
    let test = cargo_test(&crate_dir);
    assert!(!test.status.success());
    let said = toolhost_tests::text(&test.stdout) + &toolhost_tests::text(&test.stderr);
    for expected in [
        "two exported tools are named 'notes' (declaring read and write)",
        "uses patternProperties at /patternProperties, which is outside the supported subset",
    ] {
        assert!(said.contains(expected), "{expected:?} missing in:\n{said}");
    }
    let out = package(&[]);
    assert!(!out.status.success());
    let err = toolhost_tests::text(&out.stderr);
    assert!(err.contains("not packaged"), "{err}");
    assert!(
        err.contains("two exported tools are named 'notes'") && err.contains("patternProperties"),
        "{err}"
    );
    assert!(
        err.lines().count() > 3,
        "the report keeps its lines, one problem per line:\n{err}"
    );
    assert!(!crate_dir.join("dist").exists(), "nothing packaged");

    // Fixed: packaged into the crate's own dist/ by default, installed; a newer version
    // replaces it, and the older one is not installed back over the newer.
    edit(
        &lib,
        "tools: [Greet, ReadNotes, WriteNotes],",
        "tools: [Greet],",
    );
    let out = package(&[]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let v1 = toolhost_tests::text(&out.stdout).trim().to_string();
    assert!(
        Path::new(&v1).starts_with(crate_dir.join("dist")),
        "default output is the plugin's own dist/: {v1}"
    );
    let installed = dir.path().join("installed");
    let out = xtask(&["plugin", "install", &v1, "--dir", path_str(&installed)]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    // Kept aside: packaging the next version removes it from dist/.
    let kept = dir.path().join(Path::new(&v1).file_name().unwrap());
    std::fs::copy(&v1, &kept).unwrap();
    let v1 = path_str(&kept).to_string();
    edit(
        &crate_dir.join("Cargo.toml"),
        "version = \"0.1.0\"",
        "version = \"0.2.0\"",
    );
    let out = package(&[]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let v2 = toolhost_tests::text(&out.stdout).trim().to_string();
    // The package's own dist/ keeps the current archive only (the older one would be
    // refused as superseded by `toolhost --plugins dist`).
    let in_dist: Vec<_> = std::fs::read_dir(crate_dir.join("dist"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        in_dist,
        [PathBuf::from(&v2)],
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert!(
        toolhost_tests::text(&out.stderr).contains("removed"),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let out = xtask(&["plugin", "install", &v2, "--dir", path_str(&installed)]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    assert!(
        toolhost_tests::text(&out.stdout).contains("replaced 0.1.0"),
        "{}",
        toolhost_tests::text(&out.stdout)
    );
    assert_eq!(
        std::fs::read_dir(&installed).unwrap().count(),
        1,
        "one version installed"
    );
    let out = xtask(&["plugin", "install", &v1, "--dir", path_str(&installed)]);
    assert!(!out.status.success());
    let err = toolhost_tests::text(&out.stderr);
    assert!(err.contains("0.2.0 is already installed"), "{err}");
}

#[test]
fn an_unknown_fuzz_target_is_refused_naming_the_targets() {
    let out = xtask(&["fuzz", "no_such_target", "--seconds", "1"]);
    assert!(!out.status.success());
    let err = toolhost_tests::text(&out.stderr);
    assert!(
        err.contains("no fuzz target 'no_such_target'") && err.contains("worker_frames"),
        "{err}"
    );
}

#[test]
fn help_works_at_every_level_and_lists_the_commands() {
    let top = xtask(&["--help"]);
    assert!(
        top.status.success(),
        "{}",
        toolhost_tests::text(&top.stderr)
    );
    for command in ["test", "ci", "demo", "fuzz", "plugin"] {
        assert!(
            toolhost_tests::text(&top.stdout).contains(command),
            "{}",
            toolhost_tests::text(&top.stdout)
        );
    }
    let plugin = xtask(&["plugin", "--help"]);
    assert!(
        plugin.status.success(),
        "{}",
        toolhost_tests::text(&plugin.stderr)
    );
    for command in ["new", "build", "package", "verify", "install"] {
        assert!(
            toolhost_tests::text(&plugin.stdout).contains(command),
            "{}",
            toolhost_tests::text(&plugin.stdout)
        );
    }
    for command in ["new", "build", "package", "verify", "install"] {
        let out = xtask(&["plugin", command, "--help"]);
        assert!(
            out.status.success(),
            "plugin {command} --help: {}",
            toolhost_tests::text(&out.stderr)
        );
        assert!(
            toolhost_tests::text(&out.stdout).contains("Usage: cargo xtask plugin"),
            "{}",
            toolhost_tests::text(&out.stdout)
        );
    }
    let unknown = xtask(&["plugin", "frobnicate"]);
    assert!(!unknown.status.success());
    assert!(
        toolhost_tests::text(&unknown.stderr).contains("unrecognized subcommand"),
        "{}",
        toolhost_tests::text(&unknown.stderr)
    );
}

#[test]
fn the_publish_path_of_the_readme_runs_as_written_against_a_registry() {
    let Some(registry) = toolhost_tests::oci_registry::OciRegistry::start() else {
        return;
    };
    let toolhost = repo_root().join("target/debug/toolhost");
    assert!(
        toolhost.is_file(),
        "{} is not built: `cargo xtask test` builds the workspace first (or: cargo build -p toolhost)",
        toolhost.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = xtask(&[
        "plugin",
        "new",
        "my-tools",
        "--path",
        path_str(&dir.path().join("my-tools")),
    ]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );
    let env = |c: &mut Command| {
        c.current_dir(&work)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("DOCKER_CONFIG", home.join(".docker"))
            .env("CARGO_TARGET_DIR", repo_root().join("target/fixtures"));
    };
    // The key the README makes once, before its four commands.
    let mut keygen = Command::new(&toolhost);
    keygen
        .args(["plugin", "keygen"])
        .arg(home.join(".config/toolhost/signing.key"));
    env(&mut keygen);
    let out = keygen.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );

    // The block as written, in the plugin's folder; only the program is this build's and
    // the registry is the one on loopback.
    let block = format!(
        "\n{}",
        toolhost_tests::docs::block("### Publish your plugin", "sh")
    )
    .replace("\ntoolhost ", &format!("\n{} ", toolhost.display()))
    .replace("ghcr.io/acme", &format!("{}/acme", registry.host()));
    assert!(
        !block.contains("xtask"),
        "the author's path needs no checkout: {block}"
    );
    let mut sh = Command::new("sh");
    sh.args(["-e", "-x", "-c", &block]);
    env(&mut sh);
    sh.current_dir(dir.path().join("my-tools"));
    let out = sh.output().unwrap();
    let said = format!(
        "{}{}",
        toolhost_tests::text(&out.stdout),
        toolhost_tests::text(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "published my-tools 0.1.0 ({})",
            plugin_host::HOST_TARGET
        )),
        "{said}"
    );
    assert!(said.contains("signed by"), "{said}");

    let config = home.join(".config/toolhost/toolhost.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains(&format!(
            "oci = \"{}/acme/my-tools:0.1.0\"",
            registry.host()
        )),
        "{text}"
    );
    assert!(home.join(".config/toolhost/toolhost.lock").is_file());
    let mut list = Command::new(&toolhost);
    list.args(["list"]);
    env(&mut list);
    let out = list.output().unwrap();
    let listed = toolhost_tests::text(&out.stdout);
    assert!(
        listed.contains("my_tools_greet"),
        "{listed}{}",
        toolhost_tests::text(&out.stderr)
    );
}

#[test]
fn two_signings_of_one_archive_at_once_both_sign() {
    // The demo and a terminal (or two tests) may sign copies of one archive at the same
    // moment: they unpack to the same digest, and neither may remove the other's files.
    let dir = tempfile::tempdir().unwrap();
    let folder = package_library(&fixtures().library("good"), dir.path(), "good");
    let manifest_file = folder.join(plugin_host::MANIFEST_FILE);
    let manifest = Manifest::parse(
        &manifest_file,
        &std::fs::read_to_string(&manifest_file).unwrap(),
    )
    .unwrap();
    let archive = plugin_host::package::pack(&folder, &manifest, &dir.path().join("out")).unwrap();
    let key = dir.path().join("signing.key");
    let out = xtask(&["plugin", "keygen", path_str(&key)]);
    assert!(
        out.status.success(),
        "{}",
        toolhost_tests::text(&out.stderr)
    );

    let copies: Vec<PathBuf> = (0..4)
        .map(|i| {
            let copy_dir = dir.path().join(format!("copy{i}"));
            std::fs::create_dir_all(&copy_dir).unwrap();
            let copy = copy_dir.join(archive.file_name().unwrap());
            std::fs::copy(&archive, &copy).unwrap();
            copy
        })
        .collect();
    let children: Vec<_> = copies
        .iter()
        .map(|copy| {
            Command::new(env!("CARGO_BIN_EXE_xtask"))
                .args(["plugin", "sign", path_str(copy), "--key", path_str(&key)])
                .env("CARGO_TARGET_DIR", repo_root().join("target/fixtures"))
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            toolhost_tests::text(&out.stderr)
        );
    }
    for copy in &copies {
        let out = xtask(&["plugin", "verify", path_str(copy)]);
        let report = toolhost_tests::text(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            toolhost_tests::text(&out.stderr)
        );
        assert!(report.contains("signature: valid"), "{report}");
    }
}
