//! What a built plugin library exports, read in a child process so a library that crashes
//! while loading is reported, not suffered.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use plugin_host::Inspection;

use crate::error::{Result, fail};

/// How a library is inspected (and a package verified): in a child process, or in this
/// process (tests).
#[derive(Debug, Clone)]
pub enum Inspector {
    /// Run `PROGRAM ARGS… __inspect LIB` (and `… __verify PACKAGE`): a program that answers
    /// those two commands with [`inspect_here`] and [`verify_here`](crate::verify_here).
    Child {
        /// The program: the running binary, or the Python that runs the wheel's command.
        program: PathBuf,
        /// What comes before the command (`-m toolhost` for the wheel's).
        args: Vec<OsString>,
    },
    /// Open the library here.
    InProcess,
}

impl Inspector {
    /// A child process of the running binary (which must answer `__inspect` and
    /// `__verify`).
    pub fn this_program() -> Inspector {
        Inspector::Child {
            program: this_program(),
            args: Vec::new(),
        }
    }

    /// The child's command for `what` (`__inspect`, `__verify`) on `path`.
    pub(crate) fn command(program: &Path, args: &[OsString], what: &str, path: &Path) -> Command {
        let mut command = Command::new(program);
        command.args(args).arg(what).arg(path);
        command
    }
}

/// The running binary: rebuilt while it runs (a workspace build replaces the file it was
/// started from), the new file at the same path is this same program.
pub fn this_program() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("toolhost"));
    match exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
        Some(path) => PathBuf::from(path),
        None => exe,
    }
}

/// Reads what a library exports, in a child process or in this one.
pub fn inspect(library: &Path, inspector: &Inspector) -> Result<Inspection> {
    let step = format!("inspect {}", library.display());
    match inspector {
        Inspector::InProcess => plugin_host::library::open(library)
            .map(|l| l.inspection())
            .or_else(|e| fail(&step, e)),
        Inspector::Child { program, args } => {
            let out = match Inspector::command(program, args, "__inspect", library).output() {
                Ok(o) => o,
                Err(e) => return fail(&step, format!("could not start the inspector: {e}")),
            };
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                return fail(&step, describe_child_failure(out.status, stderr.trim()));
            }
            serde_json::from_slice(&out.stdout)
                .or_else(|e| fail(&step, format!("unreadable inspector output: {e}")))
        }
    }
}

pub(crate) fn describe_child_failure(status: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(sig) => format!(
            "loading the library crashed the process (signal {sig}); it would have crashed a host too{}",
            if stderr.is_empty() {
                String::new()
            } else {
                format!(": {stderr}")
            }
        ),
        None => stderr.to_string(),
    }
}

/// Prints an inspection as JSON (the child side of [`Inspector::Child`]).
pub fn inspect_here(library: &Path) -> std::result::Result<String, String> {
    let lib = plugin_host::library::open(library).map_err(|e| e.to_string())?;
    serde_json::to_string(&lib.inspection()).map_err(|e| e.to_string())
}
