//! The workspace-scoped file API ([`Workspace`]).

mod budget;
mod entries;
mod error;
mod writes;

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

pub use budget::{INLINE_BYTES, INLINE_ENTRIES, InlineBudget, Opened};
use entries::{each_entry, owned_name, sorted};
pub use error::FsError;

/// The most one whole-file read returns (1 GiB): a larger file is refused with
/// [`FsError::TooLarge`] before anything is read, and a stream without end (a device) is
/// cut there, so no tool can make the host hold more for one read.
pub const MAX_READ_BYTES: u64 = 1 << 30;

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

/// The workspace-scoped file API: every path a tool touches stays under the session's root.
///
/// # Rules
///
/// 1. A relative path is resolved against the root.
/// 2. An absolute path is accepted only if it lies inside the root (as given, or after
///    `realpath`), and is then treated as relative to it.
/// 3. `..` is resolved while checking, lexically: `sub/../../etc/passwd` is refused, it is
///    never handed to the OS.
/// 4. The path is then opened *under the root directory handle* (cap-std), which refuses any
///    symlink — on any component — that leads outside. Checking and using are one step, so a
///    symlink swapped in between cannot redirect the access (no check-then-use race).
///    Symlinks with absolute targets are refused even when they point back inside.
///
/// Writes go to a temporary file next to the target and are renamed over it, so a reader
/// sees the old or the new content, never half of it.
///
/// # Small reads without a thread handoff
///
/// A tool declared `inline_when_small` (the built-in `read_file` and `list_dir`) first runs
/// on the async thread with an [`InlineBudget`]: a read of a regular file of at most
/// [`INLINE_BYTES`] (64 KiB), a listing of at most [`INLINE_ENTRIES`] (1,024) entries, and
/// the cheap operations (exists, metadata, delete) run there. Anything bigger, a file that
/// is not a regular file (a FIFO or a device, opened non-blocking so the open itself never
/// waits), a write or an append, and everything on a network or FUSE filesystem (checked
/// once, when the workspace opens) is *over budget*: the operation fails before it does
/// anything and the host runs the call again on a blocking thread. So the bound is bytes
/// and entries on a local filesystem, and the worst an inline attempt costs is reading
/// 64 KiB or 1,024 directory entries from the page cache.
///
/// Such a call's path is checked before it runs (a symlink escape is refused before any
/// hook or prompt). When nothing stands between that check and the run (no pre-use hook,
/// the policy asks nobody, a place was free), the check opens the path read-only and
/// non-blocking beneath the root, and the read or listing uses that handle
/// ([`Workspace::check_opening`], [`Opened`]): one `openat2` where there were two, and the
/// file checked is the file read. Otherwise the handle is dropped and the run opens the
/// path again, as it is then.
///
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
        // The common case, a plain relative path (`src/main.rs`): nothing to normalize.
        let plain = !path.starts_with('/')
            && path
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..");
        if plain {
            return Ok(PathBuf::from(path));
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
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                match self.open_name(&rel, flags) {
                    Some(fd) => Ok(Some(Opened { rel, fd })),
                    None => self.check(path).map(|_| None),
                }
            }
            Err(_) => self.check(path).map(|_| None),
        }
    }

    /// Where the kernel has no `openat2` (before Linux 5.6, a seccomp filter that refuses
    /// it, valgrind): `rel` opened when it is one name in the root, with `openat` and
    /// `O_NOFOLLOW`. Nothing on the way can lead outside (there is no way), and the name
    /// itself is not followed: a symlink fails (`ELOOP`) and takes the confined path, as
    /// does every longer path.
    fn open_name(&self, rel: &Path, flags: rustix::fs::OFlags) -> Option<OwnedFd> {
        use rustix::fs::{Mode, OFlags};
        let mut parts = rel.components();
        let (Some(Component::Normal(_)), None) = (parts.next(), parts.next()) else {
            return None;
        };
        rustix::fs::openat(
            &self.dir,
            rel,
            flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .ok()
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
    /// [`INLINE_ENTRIES`]), each made the caller's string type as it takes its place in
    /// the sorted list (a tool host's ABI string, with no second list to convert).
    pub fn list_within<N: From<String>>(
        &self,
        path: &str,
        budget: Option<&InlineBudget>,
    ) -> Result<Vec<N>, FsError> {
        let rel = self.resolve(path)?;
        let io_err = |e| self.io_error(path, e);
        // Room for a small directory's names without growing (32 of them in 768 bytes).
        let mut names = Vec::with_capacity(32);
        let mut push = |name: &[u8], is_dir: bool| {
            if let Some(budget) = budget
                && names.len() == INLINE_ENTRIES
            {
                return Err(budget.over(path, "a directory of over 1,024 entries"));
            }
            names.push(owned_name(name, is_dir));
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
        Ok(sorted(names))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_openat2_only_a_plain_name_in_the_root_is_opened_directly() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "abc").unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/b.txt"), "b").unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink("a.txt", dir.path().join("in")).unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK;
        let opened = ws
            .open_name(Path::new("a.txt"), flags)
            .expect("a plain name opens");
        let mut text = String::new();
        std::fs::File::from(opened)
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "abc");
        // A symlink, in or out, and a longer path take the confined walk instead.
        for rel in ["out", "in", "src/b.txt", "missing"] {
            assert!(ws.open_name(Path::new(rel), flags).is_none(), "{rel}");
        }
    }

    #[test]
    fn paths_resolve_lexically_inside_the_root_and_escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let root = ws.root().to_path_buf();
        let inside = [
            ("a.txt", "a.txt"),
            ("src/main.rs", "src/main.rs"),
            ("./src/main.rs", "src/main.rs"),
            ("src//main.rs", "src/main.rs"),
            ("src/./lib/../main.rs", "src/main.rs"),
            ("src/", "src"),
            (".", "."),
            ("a/..", "."),
            ("..x/y", "..x/y"),
            ("a\\b", "a\\b"),
        ];
        for (path, expected) in inside {
            assert_eq!(ws.resolve(path).unwrap(), Path::new(expected), "{path}");
        }
        let absolute = root.join("src/main.rs");
        assert_eq!(
            ws.resolve(absolute.to_str().unwrap()).unwrap(),
            Path::new("src/main.rs")
        );
        for escape in ["..", "../x", "a/../../x", "/etc/passwd", "", "a\0b"] {
            assert!(ws.resolve(escape).is_err(), "{escape:?}");
        }
    }
}
