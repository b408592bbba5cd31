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
