//! # builtin-tools: the five tools every toolhost session has
//!
//! | tool | side effects | what it does |
//! |---|---|---|
//! | `read_file` | read | read a text file (optionally a range of lines) |
//! | `list_dir` | read | list a directory (directories end with `/`) |
//! | `write_file` | write | create or replace a file, atomically |
//! | `patch_file` | write | replace exactly one occurrence of a string in a file |
//! | `shell` | execute | run a shell command in the workspace directory |
//!
//! They are written against `tool-api` exactly like a plugin (file access goes through the
//! workspace-scoped API of [`tool_api::ToolContext`]), only statically linked. Register them
//! all with [`factories`].

mod files;
mod hints;
mod shell;

use std::sync::Arc;

use tool_api::{ToolFactory, factory};

pub use files::{ListDir, PatchFile, ReadFile, WriteFile};
pub use shell::{KILL_AFTER, OUTPUT_CAP, Shell};

/// Factories of all five built-in tools.
pub fn factories() -> Vec<Arc<dyn ToolFactory>> {
    vec![
        factory::<ReadFile>(),
        factory::<ListDir>(),
        factory::<WriteFile>(),
        factory::<PatchFile>(),
        factory::<Shell>(),
    ]
}
