//! `cargo xtask dist`: the release archive, unpacked and run as a user would.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::Command;

use toolhost_tests::{repo_root, text};

/// The debug `toolhost` the test run built (`cargo xtask test` builds the workspace first),
/// without its debug information (half its size, half the time to compress), in `dir`:
/// the archive step is the same for the dist profile's, which takes minutes to build.
fn built_toolhost(dir: &Path) -> PathBuf {
    let binary = repo_root().join("target/debug/toolhost");
    assert!(
        binary.is_file(),
        "{} is not built: run `cargo build -p toolhost` (cargo xtask test builds it)",
        binary.display()
    );
    let stripped = dir.join("toolhost");
    run(
        Path::new("strip"),
        &["-o", stripped.to_str().unwrap(), binary.to_str().unwrap()],
        dir,
    );
    stripped
}

fn run(program: &Path, args: &[&str], dir: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn the_archive_unpacks_into_an_empty_folder_checks_its_sum_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let made = run(
        Path::new(env!("CARGO_BIN_EXE_xtask")),
        &[
            "dist",
            "--binary",
            built_toolhost(dir.path()).to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    let archive = PathBuf::from(made.lines().next().unwrap());
    let name = archive.file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(
        name,
        format!(
            "toolhost-{}-{}.tar.gz",
            toolhost_version(),
            plugin_host::HOST_TARGET
        )
    );
    // The sum file is sha256sum's own format.
    run(
        Path::new("sha256sum"),
        &["-c", &format!("{name}.sha256")],
        &out,
    );

    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    run(
        Path::new("tar"),
        &["xzf", archive.to_str().unwrap()],
        &unpacked,
    );
    let folder = unpacked.join(name.trim_end_matches(".tar.gz"));
    let mut files: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["LICENSE-APACHE", "LICENSE-MIT", "README.md", "toolhost"]
    );
    let license = std::fs::read_to_string(folder.join("LICENSE-MIT")).unwrap();
    assert!(license.starts_with("MIT License"), "{license}");

    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("README.md"), "# Hello\n").unwrap();
    std::fs::write(workspace.join("toolhost.toml"), "").unwrap();
    let binary = folder.join("toolhost");
    assert_eq!(
        run(&binary, &["--version"], &workspace).trim(),
        format!("toolhost {}", toolhost_version())
    );
    let read = run(
        &binary,
        &["call", "read_file", "--input", r#"{"path": "README.md"}"#],
        &workspace,
    );
    assert!(read.contains("# Hello"), "{read}");
}

#[test]
fn a_binary_that_is_not_toolhost_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["dist", "--binary", "/bin/true", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("/bin/true") && stderr.contains("not `toolhost VERSION`"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The version of the `toolhost` package, as cargo resolves it.
fn toolhost_version() -> String {
    xtask::plugin::crate_version(&repo_root().join("toolhost")).unwrap()
}
