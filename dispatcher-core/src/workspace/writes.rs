//! Writes: atomic replacement, appends and patches, each refusing a path that names a
//! directory by its form.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::OpenOptions;

use super::{FsError, InlineBudget, Workspace};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Workspace {
    /// Creates or atomically replaces a file, creating parent directories.
    pub fn write(&self, path: &str, content: &str) -> Result<(), FsError> {
        self.write_bytes(path, content.as_bytes())
    }

    /// Creates or atomically replaces a file, creating parent directories: the content goes
    /// to a temporary file in the same directory, is synced, and is renamed over the target.
    /// An existing file keeps its permissions; a read-only one is refused
    /// ([`FsError::ReadOnly`]). A symlink inside the workspace is written through: the file
    /// it leads to is replaced and the link stays.
    pub fn write_bytes(&self, path: &str, content: &[u8]) -> Result<(), FsError> {
        refuse_directory_name(path)?;
        let (rel, found) = self.link_target(path, self.resolve(path)?)?;
        let io_err = |e| self.io_error(path, e);
        let Some(name) = rel.file_name() else {
            return Err(FsError::WrongKind {
                path: path.into(),
                what: "is a directory",
            });
        };
        let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            self.dir.create_dir_all(parent).map_err(io_err)?;
        }
        let existing = match found {
            Ok(m) if m.is_dir() => {
                return Err(FsError::WrongKind {
                    path: path.into(),
                    what: "is a directory",
                });
            }
            Ok(m) if m.permissions().readonly() => {
                // Replacing it through a rename would pass over the mark: refuse instead.
                return Err(FsError::ReadOnly { path: path.into() });
            }
            Ok(m) => Some(m.permissions()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(e)),
        };
        let tmp_name = format!(
            ".{}.toolhost-{}-{}.tmp",
            name.to_string_lossy(),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = parent.map_or_else(|| PathBuf::from(&tmp_name), |p| p.join(&tmp_name));
        let result = (|| {
            let mut file = self
                .dir
                .open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
            file.write_all(content)?;
            if let Some(perms) = existing {
                file.set_permissions(perms)?;
            }
            file.sync_all()?;
            self.dir.rename(&tmp, &self.dir, &rel)
        })();
        if let Err(e) = result {
            let _ = self.dir.remove_file(&tmp);
            return Err(io_err(e));
        }
        Ok(())
    }

    /// Where a write to `rel` lands: `rel` itself, or, when it is a symlink, the file it
    /// leads to (link after link, at most 40), so that replacing a file through a rename
    /// replaces what the link points at and the link stays. A link that leads outside the
    /// workspace is an escape, as everywhere; a dangling link leads to the file a write
    /// creates. Returned with what a look at that path found (its metadata, or why there
    /// is none), so that the write need not look again.
    fn link_target(
        &self,
        path: &str,
        mut rel: PathBuf,
    ) -> Result<(PathBuf, io::Result<cap_std::fs::Metadata>), FsError> {
        for _ in 0..40 {
            match self.dir.symlink_metadata(&rel) {
                Ok(m) if m.file_type().is_symlink() => {}
                found => return Ok((rel, found)),
            }
            let target = self
                .dir
                .read_link_contents(&rel)
                .map_err(|e| self.io_error(path, e))?;
            let next = if target.is_absolute() {
                target
            } else {
                rel.parent().unwrap_or(Path::new("")).join(target)
            };
            rel = self
                .resolve(&next.to_string_lossy())
                .map_err(|_| FsError::Escape { path: path.into() })?;
        }
        Err(self.io_error(
            path,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many levels of symbolic links",
            ),
        ))
    }

    /// Appends to a file, creating it (and its parent directories) if needed.
    pub fn append(&self, path: &str, content: &[u8]) -> Result<(), FsError> {
        refuse_directory_name(path)?;
        let rel = self.resolve(path)?;
        let io_err = |e| self.io_error(path, e);
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.dir.create_dir_all(parent).map_err(io_err)?;
        }
        let mut file = self
            .dir
            .open_with(&rel, OpenOptions::new().append(true).create(true))
            .map_err(io_err)?;
        // Opening succeeds on a read-only file for a privileged user: the mark still holds.
        if file.metadata().map_err(io_err)?.permissions().readonly() {
            return Err(FsError::ReadOnly { path: path.into() });
        }
        file.write_all(content).map_err(io_err)
    }

    /// Replaces the single occurrence of `old` with `new`, atomically. Zero or several
    /// occurrences leave the file untouched and say how many there were.
    pub fn patch(&self, path: &str, old: &str, new: &str) -> Result<(), FsError> {
        self.patch_within(path, old, new, None)
    }

    /// [`Workspace::patch`]; an inline attempt never writes (a write syncs to disk), so
    /// with a budget it is over it before it reads anything.
    pub fn patch_within(
        &self,
        path: &str,
        old: &str,
        new: &str,
        budget: Option<&InlineBudget>,
    ) -> Result<(), FsError> {
        if let Some(budget) = budget {
            return Err(budget.over(path, "a write"));
        }
        let text = self.read(path)?;
        let count = tool_api::fs_error::patch_match_count(&text, old);
        if count != 1 {
            return Err(FsError::PatchMatches {
                path: path.into(),
                count,
                why: tool_api::fs_error::patch_mismatch(path, &text, old),
            });
        }
        self.write(path, &text.replacen(old, new, 1))
    }
}

/// A path that names a directory by its form (`src/new/`, `src/new/.`, `src/new/..`) is
/// refused for a write: resolved, it loses that form, and the write would create a file
/// where the caller meant a directory.
fn refuse_directory_name(path: &str) -> Result<(), FsError> {
    if tool_api::fs_error::is_directory_form(path) {
        return Err(FsError::NamesDirectory { path: path.into() });
    }
    Ok(())
}
