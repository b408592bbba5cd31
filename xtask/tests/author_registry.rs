//! A plugin authored outside this repository, against `tool-api` from a registry: the
//! packaged crate served by a directory source that stands in for crates.io (its
//! dependencies vendored from the machine's cargo cache), the scaffold's checkout patch
//! deleted as its comment says, `cargo test` run where an author's repository would be.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use toolhost_tests::{repo_root, text};

/// cargo in `dir`, without what `cargo test` set for this test (not the author's).
fn cargo(dir: &Path, args: &[&str]) -> Output {
    xtask::steps::cargo()
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn succeeded(what: &str, out: Output) -> String {
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{what}: {said}");
    said
}

/// `tool-api` as `cargo package` makes it, unpacked into `vendor` as a directory source
/// holds a crate.
fn packaged_tool_api(scratch: &Path, vendor: &Path) -> PathBuf {
    let target = scratch.join("package-target");
    succeeded(
        "cargo package -p tool-api",
        cargo(
            &repo_root(),
            &[
                "package",
                "-p",
                "tool-api",
                "--allow-dirty",
                "--no-verify",
                "--quiet",
                "--target-dir",
                target.to_str().unwrap(),
            ],
        ),
    );
    let version = tool_api::TOOL_API_VERSION;
    let crate_file = target.join(format!("package/tool-api-{version}.crate"));
    let unpacked = vendor.join(format!("tool-api-{version}"));
    std::fs::create_dir_all(vendor).unwrap();
    succeeded(
        "tar xzf",
        Command::new("tar")
            .arg("xzf")
            .arg(&crate_file)
            .current_dir(vendor)
            .output()
            .unwrap(),
    );
    let digest = plugin_host::digest::sha256_file(&crate_file).unwrap();
    std::fs::write(
        unpacked.join(".cargo-checksum.json"),
        format!(r#"{{"files":{{}},"package":"{digest}"}}"#),
    )
    .unwrap();
    unpacked
}

#[test]
fn a_scaffolded_plugin_builds_and_passes_its_tests_against_tool_api_from_a_registry() {
    let scratch = tempfile::tempdir().unwrap();
    let author = scratch.path().join("author");
    let plugin = author.join("greeter");
    let vendor = scratch.path().join("registry");
    let made = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["plugin", "new", "greeter", "--path"])
        .arg(&plugin)
        .output()
        .unwrap();
    succeeded("cargo xtask plugin new", made);
    let manifest = std::fs::read_to_string(plugin.join("Cargo.toml")).unwrap();
    let (major, minor) = {
        let v = semver::Version::parse(tool_api::TOOL_API_VERSION).unwrap();
        (v.major, v.minor)
    };
    assert!(
        manifest.contains(&format!("tool-api = \"{major}.{minor}\"")),
        "the dependency names a version only:\n{manifest}"
    );
    // The registry's other crates: what the scaffold needs, vendored from the machine's
    // cargo cache while the checkout's patch still resolves tool-api.
    succeeded(
        "cargo vendor",
        cargo(
            &plugin,
            &[
                "vendor",
                "--quiet",
                "--versioned-dirs",
                vendor.to_str().unwrap(),
            ],
        ),
    );
    packaged_tool_api(scratch.path(), &vendor);
    // The author deletes the patch, as its comment says, and points crates.io at the
    // stand-in registry.
    let (kept, patch) = manifest
        .split_once("\n# Made by a toolhost checkout")
        .unwrap();
    assert!(patch.contains("[patch.crates-io]"), "{patch}");
    std::fs::write(plugin.join("Cargo.toml"), format!("{kept}\n")).unwrap();
    let _ = std::fs::remove_file(plugin.join("Cargo.lock"));
    std::fs::create_dir_all(author.join(".cargo")).unwrap();
    std::fs::write(
        author.join(".cargo/config.toml"),
        format!(
            "[source.crates-io]\nreplace-with = \"stand-in\"\n\n[source.stand-in]\ndirectory = \"{}\"\n",
            vendor.display()
        ),
    )
    .unwrap();
    let tested = succeeded(
        "cargo test in the author's repository",
        cargo(&plugin, &["test", "--offline"]),
    );
    assert!(tested.contains("2 passed"), "{tested}");
    let lock = std::fs::read_to_string(plugin.join("Cargo.lock")).unwrap();
    let entry = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"tool-api\""))
        .unwrap();
    assert!(
        entry.contains("source = \"registry+https://github.com/rust-lang/crates.io-index\""),
        "tool-api came from the registry, not a path:\n{entry}"
    );
}
