//! Running steps: named, streamed, and failing with what failed and why.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A failed step: what was being done and why it failed.
#[derive(Debug)]
pub struct StepError {
    /// The step.
    pub step: String,
    /// Why it failed.
    pub why: String,
}

impl std::fmt::Display for StepError {
    /// One line for a one-line reason; a report of several lines keeps its lines, indented
    /// under the step.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = self.why.trim_end();
        if why.contains('\n') {
            write!(f, "step '{}' failed:", self.step)?;
            for line in why.lines() {
                write!(f, "\n  {line}")?;
            }
            Ok(())
        } else {
            write!(f, "step '{}' failed: {why}", self.step)
        }
    }
}

/// The result of a step.
pub type Result<T = ()> = std::result::Result<T, StepError>;

/// Makes a [`StepError`].
pub fn fail<T>(step: &str, why: impl std::fmt::Display) -> Result<T> {
    Err(StepError {
        step: step.into(),
        why: why.to_string(),
    })
}

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

/// Announces a step on stderr (progress for long commands).
pub fn announce(step: &str) {
    eprintln!("\n==> {step}");
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

/// Maps an I/O error into a step error.
pub fn io<T>(step: &str, r: std::io::Result<T>) -> Result<T> {
    r.or_else(|e| fail(step, e))
}
