//! The commands of the README and docs/, run as written where a test can run them.
#![cfg(test)]

use std::path::Path;
use std::process::Command;

use toolhost_tests::docs;

#[test]
fn install_and_try_it_runs_as_written() {
    let block = docs::block("## Install and try it", "sh");
    let (install, rest) = block.split_once('\n').unwrap();
    // `cargo install` is the one line not run here: the test puts the binary it built on
    // PATH instead (a release build would take minutes).
    assert!(
        install.starts_with("cargo install --locked --path toolhost"),
        "{install}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_toolhost")).parent().unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let out = Command::new("sh")
        .args(["-e", "-x", "-c", rest])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join(".config"))
        .env("XDG_CACHE_HOME", dir.path().join(".cache"))
        .env("XDG_STATE_HOME", dir.path().join(".state"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let ws = dir.path().join("try-toolhost");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/todo.md")).unwrap(),
        "- try toolhost\n"
    );
    for shown in ["read_file", "# Hello", "todo.md", "landlock"] {
        assert!(stdout.contains(shown), "{shown} not in:\n{stdout}");
    }
}

/// Checks that toolhost reads `block` whole, as written: approving a server that is not
/// there reads the whole configuration (and starts no server), so a key it refused would be
/// named instead.
fn accepted_as_written(block: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.toml"), block).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["mcp", "approve", "not-configured"])
        .current_dir(dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join(".config"))
        .env("XDG_STATE_HOME", dir.path().join(".state"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("toolhost.toml: no MCP server 'not-configured' (its [[mcp_servers]] ids:"),
        "{block}\n{said}"
    );
}

#[test]
fn the_discovery_table_shown_is_accepted_as_written() {
    let blocks = docs::blocks("## Hundreds of tools, one small context", "toml");
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.toml"), &blocks[0]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["list", "--workspace"])
        .arg(dir.path())
        .current_dir(dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join(".config"))
        .env("XDG_STATE_HOME", dir.path().join(".state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        blocks[0],
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_mcp_server_entries_shown_are_accepted_as_written() {
    let blocks = docs::blocks("### Other MCP servers as toolsets", "toml");
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    for block in blocks {
        accepted_as_written(&block);
    }
}

#[test]
fn the_per_caller_entry_shown_is_accepted_as_written() {
    let block = docs::block("### Whose credentials a mounted server gets", "toml");
    assert!(block.contains("max_callers") && block.contains("caller_idle_timeout_secs"));
    accepted_as_written(&block);
}
