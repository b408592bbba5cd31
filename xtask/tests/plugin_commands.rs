//! `cargo xtask plugin …` as an author runs it: the real binary, real cargo builds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
use plugin_host::{Manifest, PluginHost, package};
use toolhost_tests::{fixtures, package_library, repo_root};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        // Share compiled dependencies with the fixture builds.
        .env("CARGO_TARGET_DIR", repo_root().join("target/fixtures"))
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn verify_reports_tools_side_effects_and_verdicts_of_a_good_package() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = package_library(&fixtures().library("good"), dir.path(), "good");
    let out = xtask(&["plugin", "verify", path_str(&pkg)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.contains("manifest: fixture-good 0.1.0"), "{report}");
    assert!(report.contains("ABI: compatible"), "{report}");
    assert!(
        report.contains("echo_upper") && report.contains("ws_write") && report.contains("write"),
        "{report}"
    );
    assert!(
        report.contains("schema ok") && report.trim_end().ends_with("verdict: OK"),
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
        text(&out.stderr).contains("checksum mismatch"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn verify_reports_a_library_that_crashes_while_loading_instead_of_crashing() {
    let dir = tempfile::tempdir().unwrap();
    let template = package_library(&fixtures().library("good"), dir.path(), "template");
    let m = Manifest::parse(
        &template.join("plugin.toml"),
        &std::fs::read_to_string(template.join("plugin.toml")).unwrap(),
    )
    .unwrap();
    let lib = fixtures().library("crash-on-load");
    let manifest = Manifest {
        name: "fixture-crash-on-load".into(),
        library: lib.file_name().unwrap().to_string_lossy().into_owned(),
        sha256: package::sha256_file(&lib).unwrap(),
        tools: vec![plugin_host::ManifestTool {
            name: "never".into(),
            side_effects: tool_api::SideEffect::None,
        }],
        ..m
    };
    let pkg = toolhost_tests::write_package(&lib, &manifest, dir.path(), "crash");
    let out = xtask(&["plugin", "verify", path_str(&pkg)]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
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
        text(&out.stderr).contains("panic = \"abort\""),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no package written"
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
    assert!(out.status.success(), "{}", text(&out.stderr));
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
        text(&test.stdout),
        text(&test.stderr)
    );
    assert!(
        text(&test.stdout).contains("1 passed"),
        "{}",
        text(&test.stdout)
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
    assert!(out.status.success(), "{}", text(&out.stderr));
    let archive = text(&out.stdout).trim().to_string();
    assert!(
        archive.ends_with(&format!(
            "demo-greeter-0.1.0-{}.tar.gz",
            plugin_host::HOST_TARGET
        )),
        "{archive}"
    );

    let installed = dir.path().join("installed");
    let out = xtask(&["plugin", "install", &archive, "--dir", path_str(&installed)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("--plugins"),
        "{}",
        text(&out.stdout)
    );

    let d = Dispatcher::new();
    let report = PluginHost::new([&installed])
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
