//! Every fuzz target replays its seed corpus (`fuzz/seeds/TARGET`) and any crash saved
//! under `fuzz/artifacts/TARGET` (where cargo-fuzz run by hand keeps what it finds):
//! a regression in a parser, or a target that no longer builds or runs, fails here on every
//! `cargo xtask test`, with no nightly toolchain. Built by the workspace (no `--cfg
//! fuzzing`), each target is a program that runs its body once on each file it is given
//! (`fuzz_targets/shared/target.rs`) and mutates nothing: the search for new inputs is
//! `cargo xtask fuzz`.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every target, with its binary as this build made it.
const TARGETS: [(&str, &str); 14] = [
    ("worker_frames", env!("CARGO_BIN_EXE_worker_frames")),
    ("workspace_path", env!("CARGO_BIN_EXE_workspace_path")),
    ("mcp_screen", env!("CARGO_BIN_EXE_mcp_screen")),
    ("request_state", env!("CARGO_BIN_EXE_request_state")),
    ("plugin_manifest", env!("CARGO_BIN_EXE_plugin_manifest")),
    ("upstream_lines", env!("CARGO_BIN_EXE_upstream_lines")),
    ("upstream_http", env!("CARGO_BIN_EXE_upstream_http")),
    ("oauth_tokens", env!("CARGO_BIN_EXE_oauth_tokens")),
    ("egress_request", env!("CARGO_BIN_EXE_egress_request")),
    ("oauth_callback", env!("CARGO_BIN_EXE_oauth_callback")),
    ("tool_globs", env!("CARGO_BIN_EXE_tool_globs")),
    ("docker_config", env!("CARGO_BIN_EXE_docker_config")),
    ("secrets_scan", env!("CARGO_BIN_EXE_secrets_scan")),
    ("text_tokens", env!("CARGO_BIN_EXE_text_tokens")),
];

/// The files in `dir`, sorted; none when it does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `binary` over `inputs`, failing with what it said when an input fails.
fn replay(target: &str, binary: &str, inputs: &[PathBuf]) {
    let out = Command::new(binary)
        .args(inputs)
        .output()
        .unwrap_or_else(|e| panic!("{target}: could not start {binary}: {e}"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{target} failed on the last input it names ({}):\n{said}\nrun it again with `{binary} FILE`",
        out.status,
    );
    let ran = said.matches("replaying ").count();
    assert_eq!(
        ran,
        inputs.len(),
        "{target}: ran {ran} of {} inputs:\n{said}",
        inputs.len()
    );
}

#[test]
fn every_target_replays_its_seeds_and_saved_crashes_without_failing() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (target, binary) in TARGETS {
        let mut inputs = files_in(&fuzz.join("seeds").join(target));
        assert!(
            !inputs.is_empty(),
            "{target} has no seeds in fuzz/seeds/{target}"
        );
        inputs.extend(files_in(&fuzz.join("artifacts").join(target)));
        replay(target, binary, &inputs);
    }
}

#[test]
fn every_target_binary_is_replayed() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .unwrap_or_default();
    let declared = manifest.matches("[[bin]]").count();
    assert_eq!(
        declared,
        TARGETS.len(),
        "fuzz/Cargo.toml declares {declared} targets; add the new one to TARGETS in fuzz/tests/seeds.rs"
    );
}
