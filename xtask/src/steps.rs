//! Running steps: named, streamed, and failing with what failed and why.

use std::path::{Path, PathBuf};
use std::process::Command;

pub use plugin_dev::{Error as StepError, Result, announce, fail, io};

/// The repository root.
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// `target/fixtures/wasm`: built components, their packages (`packages/NAME/`) and the
/// compiled-code cache the tests share (`cache/`).
pub fn fixtures_dir() -> PathBuf {
    root().join("target/fixtures/wasm")
}

/// A `cargo` command run from the repository root, without what `cargo run` set for the
/// program that runs it ([`xtask_launcher::set_by_cargo_run`]: a test runs this tool with
/// them set).
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for name in xtask_launcher::set_by_cargo_run() {
        c.env_remove(name);
    }
    c.current_dir(root());
    c
}

/// `target/xtask-state/NAME`, emptied: the `XDG_STATE_HOME` of what `cargo xtask NAME`
/// runs. What its processes pin and log in to stays out of the user's `~/.local/state`,
/// and no run reads what an earlier one left there.
pub fn fresh_state(name: &str) -> Result<PathBuf> {
    let dir = root().join("target/xtask-state").join(name);
    if dir.exists() {
        io(
            &format!("empty {}", dir.display()),
            std::fs::remove_dir_all(&dir),
        )?;
    }
    io(
        &format!("make {}", dir.display()),
        std::fs::create_dir_all(&dir),
    )?;
    Ok(dir)
}

/// Runs a command to completion, streaming its output, naming the step on failure.
pub fn run(step: &str, cmd: &mut Command) -> Result {
    announce(step);
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            return fail(
                step,
                format!("could not start {:?}: {e}", cmd.get_program()),
            );
        }
    };
    if status.success() {
        Ok(())
    } else {
        fail(step, format!("exited with {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_state_directory_keeps_nothing_an_earlier_run_left() {
        let dir = fresh_state("unit-test").unwrap();
        std::fs::create_dir_all(dir.join("toolhost")).unwrap();
        std::fs::write(dir.join("toolhost/mcp-pins.json"), "{}").unwrap();
        let again = fresh_state("unit-test").unwrap();
        assert_eq!(again, root().join("target/xtask-state/unit-test"));
        assert!(again.is_dir());
        assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0);
        std::fs::remove_dir_all(again).unwrap();
    }
}
