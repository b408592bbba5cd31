//! The workspace-scoped file API: every path a tool touches stays under the session's root.
//!
//! # Rules
//!
//! 1. A relative path is resolved against the root.
//! 2. An absolute path is accepted only if it lies inside the root (as given, or after
//!    `realpath`), and is then treated as relative to it.
//! 3. `..` is resolved while checking, lexically: `sub/../../etc/passwd` is refused, it is
//!    never handed to the OS.
//! 4. The path is then opened *under the root directory handle* (cap-std), which refuses any
//!    symlink — on any component — that leads outside. Checking and using are one step, so a
//!    symlink swapped in between cannot redirect the access (no check-then-use race).
//!    Symlinks with absolute targets are refused even when they point back inside.
//!
//! Writes go to a temporary file next to the target and are renamed over it, so a reader
//! sees the old or the new content, never half of it.
//!
//! # Small reads without a thread handoff
//!
//! A tool declared `inline_when_small` (the built-in `read_file` and `list_dir`) first runs
//! on the async thread with an [`InlineBudget`]: a read of a regular file of at most
//! [`INLINE_BYTES`] (64 KiB), a listing of at most [`INLINE_ENTRIES`] (1,024) entries, and
//! the cheap operations (exists, metadata, delete) run there. Anything bigger, a file that
//! is not a regular file (a FIFO or a device, opened non-blocking so the open itself never
//! waits), a write or an append, and everything on a network or FUSE filesystem (checked
//! once, when the workspace opens) is *over budget*: the operation fails before it does
//! anything and the host runs the call again on a blocking thread. So the bound is bytes
//! and entries on a local filesystem, and the worst an inline attempt costs is reading
//! 64 KiB or 1,024 directory entries from the page cache.
//!
//! Such a call's path is checked before it runs (a symlink escape is refused before any
//! hook or prompt). When nothing stands between that check and the run (no pre-use hook,
//! the policy asks nobody, a place was free), the check opens the path read-only and
//! non-blocking beneath the root, and the read or listing uses that handle
//! ([`Workspace::check_opening`], [`Opened`]): one `openat2` where there were two, and the
//! file checked is the file read. Otherwise the handle is dropped and the run opens the
//! path again, as it is then.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use tool_api::ToolError;

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
    fn from_io(path: &str, e: io::Error) -> FsError {
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

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The most one whole-file read returns (1 GiB): a larger file is refused with
/// [`FsError::TooLarge`] before anything is read, and a stream without end (a device) is
/// cut there, so no tool can make the host hold more for one read.
pub const MAX_READ_BYTES: u64 = 1 << 30;

/// The largest regular file an inline attempt reads (64 KiB).
pub const INLINE_BYTES: u64 = 64 * 1024;

/// The most directory entries an inline attempt lists (1,024).
pub const INLINE_ENTRIES: usize = 1024;

/// A path the call's scope check opened (read-only, non-blocking) beneath the root, kept
/// for the call's first read or listing of that same path: checking and using the path
/// are then one open, not two ([`Workspace::check_opening`]).
#[derive(Debug)]
pub struct Opened {
    rel: PathBuf,
    fd: OwnedFd,
}

/// Marks an inline attempt: operations over its limits fail with [`FsError::OverBudget`]
/// and record that they did, so the host reruns the call off-thread.
#[derive(Debug, Default)]
pub struct InlineBudget {
    exceeded: AtomicBool,
    /// What the scope check opened, until a read or a listing of that path takes it.
    opened: Mutex<Option<Opened>>,
}

impl InlineBudget {
    /// An inline attempt that starts with what the scope check opened, if anything.
    pub fn with_opened(opened: Option<Opened>) -> InlineBudget {
        InlineBudget {
            exceeded: AtomicBool::new(false),
            opened: Mutex::new(opened),
        }
    }

    /// The handle opened for `rel`, once.
    fn take_opened(&self, rel: &Path) -> Option<OwnedFd> {
        let mut slot = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|o| o.rel == rel) {
            slot.take().map(|o| o.fd)
        } else {
            None
        }
    }

    /// Whether an operation went over the budget.
    pub fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }

    /// Refuses an operation an inline attempt must not do (a write).
    pub fn refuse(&self, path: &str, what: &'static str) -> FsError {
        self.over(path, what)
    }

    fn over(&self, path: &str, what: &'static str) -> FsError {
        self.exceeded.store(true, Ordering::Relaxed);
        FsError::OverBudget {
            path: path.into(),
            what,
        }
    }
}

/// Reads the entries of an open directory (`getdents64`, into a buffer on the stack),
/// without `.` and `..`, and hands each to `each` as `(name, is a directory)`: the kind
/// comes with the entry, or from an `lstat` where the filesystem does not say. A symlink
/// is not a directory, whatever it points to. Each name is copied once, by `each`.
fn each_entry(
    fd: &OwnedFd,
    mut each: impl FnMut(&[u8], bool) -> Result<(), FsError>,
    io_err: impl Fn(io::Error) -> FsError,
) -> Result<(), FsError> {
    use rustix::fs::FileType;
    // Room for at least 30 of the longest entries (a name of 255 bytes and its header).
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = rustix::fs::RawDir::new(fd, &mut buf);
    while let Some(entry) = entries.next() {
        let entry = entry.map_err(|e| io_err(e.into()))?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => {
                let stat = rustix::fs::statat(fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| io_err(e.into()))?;
                FileType::from_raw_mode(stat.st_mode)
            }
            known => known,
        };
        each(name.to_bytes(), kind == FileType::Directory)?;
    }
    Ok(())
}

/// Filesystems where even a small operation may wait on the network: no inline attempts.
fn is_remote_filesystem(root: &Path) -> bool {
    // NFS, SMB/CIFS (three magics), FUSE, 9p, Ceph, AFS, Coda, GFS2, OCFS2, Lustre.
    const REMOTE: [u64; 12] = [
        0x6969,
        0x517b,
        0xff53_4d42,
        0xfe53_4d42,
        0x6573_5546,
        0x0102_1997,
        0x00c3_6400,
        0x5346_414f,
        0x7375_7245,
        0x0116_1970,
        0x7461_636f,
        0x0bd0_0bd0,
    ];
    match rustix::fs::statfs(root) {
        #[allow(clippy::unnecessary_cast)]
        Ok(fs) => REMOTE.contains(&(fs.f_type as u64)),
        Err(_) => true,
    }
}

/// A session's workspace: its root directory, opened once, and the file API over it.
pub struct Workspace {
    dir: Dir,
    root: PathBuf,
    given_root: PathBuf,
    root_str: String,
    /// On a local filesystem: small operations may run inline.
    local: bool,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("root", &self.root)
            .finish()
    }
}

impl Workspace {
    /// Opens the directory at `root` (which must exist) as a workspace.
    pub fn open(root: impl AsRef<Path>) -> io::Result<Workspace> {
        let given_root = std::path::absolute(root.as_ref())?;
        let root = std::fs::canonicalize(&given_root)?;
        let dir = Dir::open_ambient_dir(&root, ambient_authority())?;
        let root_str = root.to_string_lossy().into_owned();
        let local = !is_remote_filesystem(&root);
        Ok(Workspace {
            dir,
            root,
            given_root,
            root_str,
            local,
        })
    }

    /// Whether small file operations may run inline here (a local filesystem).
    pub fn allows_inline(&self) -> bool {
        self.local
    }

    /// The canonical absolute root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical absolute root as text.
    pub fn root_str(&self) -> &str {
        &self.root_str
    }

    /// Resolves `path` lexically to a path relative to the root (`.` for the root itself),
    /// refusing anything that leaves it. Does not touch the filesystem.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, FsError> {
        if path.contains('\0') {
            return Err(FsError::InvalidPath {
                path: path.into(),
                why: "contains a NUL byte",
            });
        }
        if path.is_empty() {
            return Err(FsError::InvalidPath {
                path: path.into(),
                why: "empty path",
            });
        }
        let p = Path::new(path);
        let rel = if p.is_absolute() {
            p.strip_prefix(&self.root)
                .or_else(|_| p.strip_prefix(&self.given_root))
                .map_err(|_| FsError::Escape { path: path.into() })?
        } else {
            p
        };
        let mut out = PathBuf::new();
        for component in rel.components() {
            match component {
                Component::Normal(c) => out.push(c),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(FsError::Escape { path: path.into() });
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(FsError::Escape { path: path.into() });
                }
            }
        }
        if out.as_os_str().is_empty() {
            out.push(".");
        }
        Ok(out)
    }

    /// Resolves `path` and checks that the part of it that exists does not lead outside
    /// through a symlink. Used to refuse a call before it runs; the file operations repeat
    /// the check atomically when they open the path.
    pub fn check(&self, path: &str) -> Result<PathBuf, FsError> {
        let rel = self.resolve(path)?;
        for ancestor in rel.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            match self.exists_beneath(ancestor) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.error_at(path, e)),
            }
        }
        Ok(rel)
    }

    /// [`Workspace::check`] for a path the call is about to read or list: the path itself
    /// is opened read-only and non-blocking beneath the root (one `openat2`, as the check
    /// makes anyway), and the handle is returned for that read to use. Where that open
    /// fails (not found, not readable, no `openat2`), the verdict is `check`'s and there is
    /// no handle.
    pub fn check_opening(&self, path: &str) -> Result<Option<Opened>, FsError> {
        let rel = self.resolve(path)?;
        let flags =
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        match self.open_beneath(&rel, flags) {
            Ok(fd) => Ok(Some(Opened { rel, fd })),
            Err(_) => self.check(path).map(|_| None),
        }
    }

    /// Opens `rel` beneath the root, refusing any symlink that leads outside, with `openat2`
    /// (Linux 5.6+; `NOSYS` or `PERM` elsewhere, for the caller to fall back on cap-std).
    fn open_beneath(
        &self,
        rel: &Path,
        flags: rustix::fs::OFlags,
    ) -> Result<OwnedFd, rustix::io::Errno> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        rustix::fs::openat2(
            &self.dir,
            rel,
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
    }

    /// Whether `rel` exists, resolved beneath the root with no symlink leading outside (an
    /// escape is cap-std's "outside of the filesystem" error). One `openat2` of an `O_PATH`
    /// descriptor where the kernel has it (Linux 5.6+), else cap-std's confined stat.
    fn exists_beneath(&self, rel: &Path) -> io::Result<()> {
        match self.open_beneath(rel, rustix::fs::OFlags::PATH) {
            Ok(_fd) => Ok(()),
            Err(rustix::io::Errno::XDEV) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a path led outside of the filesystem",
            )),
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                self.dir.metadata(rel).map(|_| ())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Classifies a failed operation. An OS error other than "not found" may come from a
    /// symlink on the way that leads outside (creating a parent through one says "File
    /// exists"), so the path is checked again and such a failure named as the escape it is.
    /// Only the error path pays for the check; the operations are confined on their own.
    fn io_error(&self, path: &str, e: io::Error) -> FsError {
        let error = self.error_at(path, e);
        if matches!(
            error,
            FsError::Escape { .. } | FsError::NotFound { .. } | FsError::UnderFile { .. }
        ) {
            return error;
        }
        match self.check(path) {
            Err(escape @ FsError::Escape { .. }) => escape,
            _ => error,
        }
    }

    /// [`FsError::from_io`], with the file on the way named when a part of the path that
    /// should be a directory is not.
    fn error_at(&self, path: &str, e: io::Error) -> FsError {
        if e.kind() == io::ErrorKind::NotADirectory
            && let Some(file) = self.file_on_the_way(path)
        {
            return FsError::UnderFile {
                path: path.into(),
                file,
            };
        }
        FsError::from_io(path, e)
    }

    /// The first part of `path` before its last that is a file, not a directory (`a.txt`
    /// for `a.txt/x`), as the workspace-relative path it resolves to.
    fn file_on_the_way(&self, path: &str) -> Option<String> {
        let rel = self.resolve(path).ok()?;
        let mut at = PathBuf::new();
        let parts: Vec<_> = rel.components().collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            at.push(part);
            match self.dir.metadata(&at) {
                Ok(m) if !m.is_dir() => return Some(at.display().to_string()),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// Reads a UTF-8 file.
    pub fn read(&self, path: &str) -> Result<String, FsError> {
        self.read_within(path, None)
    }

    /// Reads a UTF-8 file, within `budget` if given.
    pub fn read_within(
        &self,
        path: &str,
        budget: Option<&InlineBudget>,
    ) -> Result<String, FsError> {
        let bytes = self.read_bytes_within(path, budget)?;
        String::from_utf8(bytes).map_err(|_| FsError::NotUtf8 { path: path.into() })
    }

    /// Reads a file's bytes.
    pub fn read_bytes(&self, path: &str) -> Result<Vec<u8>, FsError> {
        self.read_bytes_within(path, None)
    }

    /// Reads a file's bytes, within `budget` if given: then only a regular file of at most
    /// [`INLINE_BYTES`], opened non-blocking. Without a budget, the whole file, up to
    /// [`MAX_READ_BYTES`]: a larger file is refused before anything is read, and a stream
    /// with no end (a device) stops at the limit. A named pipe is read as it is written,
    /// to its writer's end, like a slow file.
    pub fn read_bytes_within(
        &self,
        path: &str,
        budget: Option<&InlineBudget>,
    ) -> Result<Vec<u8>, FsError> {
        let rel = self.resolve(path)?;
        match budget {
            None => self.read_whole(path, &rel),
            Some(budget) => self.read_inline(path, &rel, budget),
        }
    }

    /// [`Workspace::read_bytes_within`] without a budget.
    fn read_whole(&self, path: &str, rel: &Path) -> Result<Vec<u8>, FsError> {
        let io_err = |e| self.io_error(path, e);
        let too_large = |size| FsError::TooLarge {
            path: path.into(),
            size,
        };
        let file = self.dir.open(rel).map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if meta.is_dir() {
            return Err(FsError::WrongKind {
                path: path.into(),
                what: "is a directory",
            });
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(too_large(meta.len()));
        }
        let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        // A file that grows while it is read, or a device without end, stops one byte past
        // the limit.
        (&file)
            .take(MAX_READ_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(io_err)?;
        if buf.len() as u64 > MAX_READ_BYTES {
            return Err(too_large(buf.len() as u64));
        }
        Ok(buf)
    }

    /// [`Workspace::read_bytes_within`] within `budget`: a small regular file, or
    /// [`FsError::OverBudget`].
    fn read_inline(
        &self,
        path: &str,
        rel: &Path,
        budget: &InlineBudget,
    ) -> Result<Vec<u8>, FsError> {
        let io_err = |e| self.io_error(path, e);
        let file = match budget.take_opened(rel) {
            Some(fd) => cap_std::fs::File::from_std(std::fs::File::from(fd)),
            None => self.open_nonblocking(rel).map_err(io_err)?,
        };
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(budget.over(path, "a file that is not a regular file"));
        }
        if meta.len() > INLINE_BYTES {
            return Err(budget.over(path, "a file over 64 KiB"));
        }
        // The size just read: one read for the whole file, into memory it does not
        // zero first, with no second stat and no probe for the end (a file that
        // changes meanwhile is read as far as it was long).
        let len = usize::try_from(meta.len()).unwrap_or(0);
        let mut buf = Vec::with_capacity(len);
        while buf.len() < len {
            match rustix::io::read(&file, rustix::buffer::spare_capacity(&mut buf)) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(io_err(e.into())),
            }
        }
        Ok(buf)
    }

    /// Opens `rel` for reading, non-blocking and without taking a controlling terminal.
    fn open_nonblocking(&self, rel: &Path) -> io::Result<cap_std::fs::File> {
        let mut options = OpenOptions::new();
        options.read(true);
        #[allow(clippy::cast_possible_wrap)]
        options.custom_flags(
            (rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY).bits() as i32,
        );
        self.dir.open_with(rel, &options)
    }

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

    /// Whether the path exists. A path outside the workspace is an error, not `false`.
    pub fn exists(&self, path: &str) -> Result<bool, FsError> {
        let rel = self.resolve(path)?;
        match self.dir.metadata(&rel) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io_error(path, e)),
        }
    }

    /// Whether the path is an existing directory.
    pub fn is_dir(&self, path: &str) -> Result<bool, FsError> {
        let rel = self.resolve(path)?;
        match self.dir.metadata(&rel) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io_error(path, e)),
        }
    }

    /// Kind, size and modification time of a path (symlinks inside the workspace followed).
    pub fn metadata(&self, path: &str) -> Result<tool_api::abi::FsMetadata, FsError> {
        let rel = self.resolve(path)?;
        let m = self
            .dir
            .metadata(&rel)
            .map_err(|e| self.io_error(path, e))?;
        let modified_unix_ms = m
            .modified()
            .ok()
            .map(|t| t.into_std())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(tool_api::abi::FsMetadata {
            is_dir: m.is_dir(),
            size: if m.is_dir() { 0 } else { m.len() },
            modified_unix_ms,
        })
    }

    /// The entry names of a directory, sorted; directories end with `/`.
    pub fn list(&self, path: &str) -> Result<Vec<String>, FsError> {
        self.list_within(path, None)
    }

    /// The entry names of a directory, within `budget` if given (at most
    /// [`INLINE_ENTRIES`]).
    pub fn list_within(
        &self,
        path: &str,
        budget: Option<&InlineBudget>,
    ) -> Result<Vec<String>, FsError> {
        let rel = self.resolve(path)?;
        let io_err = |e| self.io_error(path, e);
        let mut names = Vec::new();
        let mut push = |name: &[u8], is_dir: bool| {
            if let Some(budget) = budget
                && names.len() == INLINE_ENTRIES
            {
                return Err(budget.over(path, "a directory of over 1,024 entries"));
            }
            let mut owned = String::with_capacity(name.len() + usize::from(is_dir));
            owned.push_str(&String::from_utf8_lossy(name));
            if is_dir {
                owned.push('/');
            }
            names.push(owned);
            Ok(())
        };
        if let Some(fd) = budget.and_then(|b| b.take_opened(&rel)) {
            each_entry(&fd, &mut push, io_err)?;
        } else {
            for entry in self.dir.read_dir(&rel).map_err(io_err)? {
                let entry = entry.map_err(io_err)?;
                let is_dir = entry.file_type().map_err(io_err)?.is_dir();
                push(entry.file_name().as_encoded_bytes(), is_dir)?;
            }
        }
        // Names in one directory differ, so an unstable sort gives the one order.
        names.sort_unstable();
        Ok(names)
    }

    /// Deletes a file (not a directory).
    pub fn delete(&self, path: &str) -> Result<(), FsError> {
        let rel = self.resolve(path)?;
        if self.is_dir(path)? {
            return Err(FsError::WrongKind {
                path: path.into(),
                what: "is a directory",
            });
        }
        self.dir
            .remove_file(&rel)
            .map_err(|e| self.io_error(path, e))
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
