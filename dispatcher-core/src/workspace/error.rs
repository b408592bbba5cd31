//! What a workspace file operation that failed says: [`FsError`].

use std::io;

use tool_api::ToolError;

use super::MAX_READ_BYTES;

/// A file operation that failed. Messages name the path as the tool gave it.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The path (or a symlink on it) leads outside the workspace.
    #[error("{}", tool_api::fs_error::escapes(path))]
    Escape {
        /// The path as given.
        path: String,
    },
    /// The path does not exist.
    #[error("{}", tool_api::fs_error::not_found(path))]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The path is a directory where a file was expected, or the reverse.
    #[error("'{path}' {what}")]
    WrongKind {
        /// The path as given.
        path: String,
        /// "is a directory" / "is not a directory".
        what: &'static str,
    },
    /// A part of the path before its last is a file (`a.txt` in `a.txt/x`).
    #[error("'{path}' lies under '{file}', which is a file, not a directory")]
    UnderFile {
        /// The path as given.
        path: String,
        /// The file on its way, relative to the workspace root.
        file: String,
    },
    /// A write's path names a directory by its form (`src/new/`): resolved, it would
    /// create a file where a directory was meant.
    #[error("{}", tool_api::fs_error::names_a_directory(path))]
    NamesDirectory {
        /// The path as given.
        path: String,
    },
    /// The file is not UTF-8 text.
    #[error("{}", tool_api::fs_error::not_utf8(path))]
    NotUtf8 {
        /// The path as given.
        path: String,
    },
    /// A patch's `old` text did not match exactly once.
    #[error("{why}")]
    PatchMatches {
        /// The path as given.
        path: String,
        /// How many matches there were.
        count: usize,
        /// What to do about it, with where: the lines of several matches, or of a match
        /// but for whitespace ([`tool_api::fs_error::patch_mismatch`]).
        why: String,
    },
    /// The path is not usable (empty, or contains NUL).
    #[error("invalid path '{path}': {why}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The operation is too big for an inline attempt; the host runs the call off-thread.
    #[error(
        "'{path}': {what} is over the inline budget; the host runs the call on a blocking thread"
    )]
    OverBudget {
        /// The path as given.
        path: String,
        /// What was too big.
        what: &'static str,
    },
    /// The file is marked read-only (no write permission for anyone): it is not replaced,
    /// patched or appended to, even by a user whose privileges would allow it.
    #[error(
        "'{path}' is read-only (no write permission for anyone); it was left as it is: make it writable first if it should change"
    )]
    ReadOnly {
        /// The path as given.
        path: String,
    },
    /// The file is larger than one whole-file read returns ([`MAX_READ_BYTES`]).
    #[error("{}", tool_api::fs_error::too_large(path, *size, MAX_READ_BYTES))]
    TooLarge {
        /// The path as given.
        path: String,
        /// Its size in bytes (at least: it may have grown while it was read).
        size: u64,
    },
    /// Any other OS error.
    #[error("cannot access '{path}': {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl FsError {
    pub(super) fn from_io(path: &str, e: io::Error) -> FsError {
        let path = path.to_string();
        match e.kind() {
            io::ErrorKind::NotFound => FsError::NotFound { path },
            io::ErrorKind::PermissionDenied
                if e.to_string().contains("outside of the filesystem") =>
            {
                FsError::Escape { path }
            }
            io::ErrorKind::IsADirectory => FsError::WrongKind {
                path,
                what: "is a directory",
            },
            io::ErrorKind::NotADirectory => FsError::WrongKind {
                path,
                what: "is not a directory",
            },
            _ => FsError::Io { path, source: e },
        }
    }

    /// Whether this is a boundary violation, a read-only file, or a permission the system
    /// refused (reported as `permission_denied`).
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, FsError::Escape { .. } | FsError::ReadOnly { .. })
            || matches!(self, FsError::Io { source, .. } if source.kind() == io::ErrorKind::PermissionDenied)
    }
}

impl From<FsError> for ToolError {
    fn from(e: FsError) -> Self {
        if e.is_permission_denied() {
            ToolError::PermissionDenied(e.to_string())
        } else {
            ToolError::Failed(e.to_string())
        }
    }
}
