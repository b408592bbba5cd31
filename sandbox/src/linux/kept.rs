//! Mount namespaces kept per hide list: made once by a helper process (mounts private, the
//! masks over the hidden paths), held open by descriptor, and entered with `setns(2)` by
//! each confined child, which then neither copies the mount table nor tears its copy down
//! when it exits (an RCU grace period the host's `wait` sat through).
//!
//! A kept namespace is used only while it still hides what a new one would:
//! - its key is the hidden paths with the file each led to when it was made (its handle:
//!   the inode and its generation, and the mount), so a hidden file replaced since (a new
//!   `.env`, whose inode number may be the old one's: the mask on the old one was undone
//!   with it) or a hidden path that appeared since gets a namespace of its own;
//! - the host's mount table is watched (`poll` on `/proc/self/mountinfo` reports every
//!   change): after any mount or unmount the kept namespaces are dropped and remade, so a
//!   command sees the mounts of the moment it starts, as one that made its own did.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use crate::NamespaceSupport as Kind;
use crate::Step;

/// How many kept namespaces one process holds (one per distinct hide list: sessions with
/// different workspaces, plugins, servers); the least recently used is dropped first.
const KEPT: usize = 8;

/// A hidden path and what it led to when the namespace was made: the file's handle
/// (`name_to_handle_at`: its inode with the generation that tells a new file from an
/// old one that had the same number) and its mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hidden {
    pub(crate) path: CString,
    pub(crate) id: Vec<u8>,
}

impl Hidden {
    /// `path` and what it leads to now; `None` where its file system gives no handles
    /// (then no namespace is kept for a list that hides it).
    pub(crate) fn of(path: CString) -> Option<Hidden> {
        const SIZE: usize = libc::MAX_HANDLE_SZ as usize;
        // A `file_handle` (two 4-byte fields) followed by room for its bytes.
        let mut buffer = [0u32; 2 + SIZE / 4];
        buffer[0] = SIZE as u32;
        let mut mount = 0;
        // SAFETY: `buffer` is a file_handle whose handle_bytes says how much room follows
        // it; the kernel writes no more. `path` is NUL-terminated.
        let got = unsafe {
            libc::name_to_handle_at(
                libc::AT_FDCWD,
                path.as_ptr(),
                buffer.as_mut_ptr().cast(),
                &mut mount,
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if got < 0 {
            return None;
        }
        let bytes = (buffer[0] as usize).min(SIZE);
        let mut id: Vec<u8> = buffer[1].to_ne_bytes().to_vec();
        id.extend(mount.to_ne_bytes());
        id.extend(buffer[2..].iter().flat_map(|w| w.to_ne_bytes()).take(bytes));
        Some(Hidden { path, id })
    }
}

/// What a kept namespace was made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) kind: Kind,
    pub(crate) hidden: Vec<Hidden>,
}

/// A kept mount namespace (and, made without root, the user namespace that owns it).
pub(crate) struct Kept {
    mnt: OwnedFd,
    user: Option<OwnedFd>,
}

impl Kept {
    /// In the child, between `fork` and `exec`: enters the namespace, keeping the working
    /// directory by path (`setns` moves it to the namespace's root). `cwd` is room for
    /// the path, made before the fork. Only system calls.
    pub(crate) fn enter(&self, cwd: &mut [u8]) -> Result<(), (Step, i32)> {
        // SAFETY: getcwd writes at most `cwd.len()` bytes into `cwd`, NUL included.
        let n = unsafe { libc::syscall(libc::SYS_getcwd, cwd.as_mut_ptr(), cwd.len()) };
        if n <= 0 || cwd.first() != Some(&b'/') {
            return Err((Step::Namespaces, errno_or(libc::ENOENT)));
        }
        if let Some(user) = &self.user {
            // SAFETY: a descriptor this value owns; setns reads nothing else.
            check(unsafe { libc::setns(user.as_raw_fd(), libc::CLONE_NEWUSER) })?;
        }
        // SAFETY: as above.
        check(unsafe { libc::setns(self.mnt.as_raw_fd(), libc::CLONE_NEWNS) })?;
        // SAFETY: `cwd` holds the NUL-terminated path getcwd wrote.
        check(unsafe { libc::chdir(cwd.as_ptr().cast()) })
    }
}

struct Cache {
    /// The host's mount table, polled for changes.
    mounts: Option<File>,
    /// Least recently used first.
    entries: Vec<(Key, Arc<Kept>)>,
}

/// Why no namespace can be kept in this process, once that was found.
static CANNOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    mounts: None,
    entries: Vec::new(),
});

/// The kept namespace for `key`. When there is none (or the host's mounts changed), one is
/// made: `prepare` makes what its mounts are made from, and `make`, run with it in a forked
/// helper, makes the namespaces and the mounts (system calls only); what `prepare` made is
/// dropped once they are. An error says why none could be kept: the caller then makes one
/// per process.
pub(crate) fn kept<T>(
    key: Key,
    prepare: impl FnOnce() -> Result<T, String>,
    make: impl FnOnce(&T) -> Result<(), (Step, i32)>,
) -> Result<Arc<Kept>, String> {
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let changed = cache.mounts.as_ref().is_none_or(changed);
    if changed {
        cache.entries.clear();
        cache.mounts = Some(
            File::open("/proc/self/mountinfo")
                .map_err(|e| format!("cannot watch the mount table: {e}"))?,
        );
    }
    if let Some(at) = cache.entries.iter().position(|(k, _)| *k == key) {
        let entry = cache.entries.remove(at);
        let kept = entry.1.clone();
        cache.entries.push(entry);
        return Ok(kept);
    }
    if let Some(why) = CANNOT.get() {
        return Err(why.clone());
    }
    let holds = prepare()?;
    let made = made(key.kind, || make(&holds));
    // Made, the mounts need nothing of what they were made from: the masks' directory is
    // removed now (its mount in the namespace goes with it; the masks bound over the
    // hidden paths stay), rather than never, as the cache is static and never dropped.
    drop(holds);
    let kept = match made {
        Ok(kept) => Arc::new(kept),
        Err(why) => {
            // What refuses one (setns, unshare) refuses them all: each child makes its
            // own from now on, without a helper forked per command to find that out.
            let _ = CANNOT.set(why.clone());
            return Err(why);
        }
    };
    if cache.entries.len() == KEPT {
        cache.entries.remove(0);
    }
    cache.entries.push((key, kept.clone()));
    Ok(kept)
}

/// Whether the mount table changed since `mounts` was opened (or last reported a change).
fn changed(mounts: &File) -> bool {
    let mut fd = libc::pollfd {
        fd: mounts.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack; a zero timeout returns at once.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    // The table is always readable (POLLIN); a change adds POLLPRI and POLLERR.
    n < 0 || fd.revents & (libc::POLLPRI | libc::POLLERR) != 0
}

/// Forks a helper that runs `make` and waits; opens its namespaces; lets it exit. Then
/// checks that a child can enter them.
fn made(kind: Kind, make: impl FnOnce() -> Result<(), (Step, i32)>) -> Result<Kept, String> {
    let (ready_read, ready_write) = pipe()?;
    let (done_read, done_write) = pipe()?;
    // SAFETY: the child only makes system calls (those of `make`, write, read, _exit) on
    // data made before the fork; the parent waits for it below.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop_in_child(&ready_read);
        drop_in_child(&done_write);
        let report: [i32; 2] = match make() {
            Ok(()) => [0, 0],
            Err((_, errno)) => [1, errno],
        };
        // SAFETY: writes the 8 bytes of `report`, then blocks until the parent closes its
        // end of `done` (read returns 0) and exits without running anything of Rust's.
        unsafe {
            libc::write(ready_write.as_raw_fd(), report.as_ptr().cast(), 8);
            let mut byte = 0u8;
            libc::read(done_read.as_raw_fd(), (&raw mut byte).cast(), 1);
            libc::_exit(0);
        }
    }
    if pid < 0 {
        return Err(format!("cannot fork: {}", io::Error::last_os_error()));
    }
    drop(ready_write);
    drop(done_read);
    let mut report = [0i32; 2];
    // SAFETY: reads at most 8 bytes into `report`.
    let n = unsafe { libc::read(ready_read.as_raw_fd(), report.as_mut_ptr().cast(), 8) };
    let opened = if n != 8 {
        Err("the helper ended before it reported".to_string())
    } else if report[0] != 0 {
        Err(format!(
            "the helper could not make them: {}",
            io::Error::from_raw_os_error(report[1])
        ))
    } else {
        let open = |ns: &str| -> Result<OwnedFd, String> {
            File::open(format!("/proc/{pid}/ns/{ns}"))
                .map(OwnedFd::from)
                .map_err(|e| format!("cannot open the helper's {ns} namespace: {e}"))
        };
        open("mnt").and_then(|mnt| {
            let user = match kind {
                Kind::User => Some(open("user")?),
                Kind::Direct => None,
            };
            Ok(Kept { mnt, user })
        })
    };
    drop(done_write);
    reap(pid);
    let kept = opened?;
    entered(&kept)?;
    Ok(kept)
}

/// Whether a forked child can enter `kept` (`setns` needs capabilities a process can hold
/// without: then every child would fail to start).
fn entered(kept: &Kept) -> Result<(), String> {
    let mut cwd = [0u8; 4096];
    // SAFETY: the child only makes system calls (getcwd, setns, chdir, _exit).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = match kept.enter(&mut cwd) {
            Ok(()) => 0,
            Err(_) => 1,
        };
        // SAFETY: exits without running anything of Rust's.
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        return Err(format!("cannot fork: {}", io::Error::last_os_error()));
    }
    match reap(pid) {
        Some(0) => Ok(()),
        _ => Err("a child cannot enter them (setns refused)".into()),
    }
}

/// Waits for `pid`; its exit code if it exited.
fn reap(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(format!(
            "cannot make a pipe: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: both descriptors were just made and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Closes the child's copy of a descriptor it does not use (without running `Drop`
/// logic beyond the close).
fn drop_in_child(fd: &OwnedFd) {
    // SAFETY: the child's own copy of the descriptor; the child never uses it again and
    // exits with _exit, so the parent's `OwnedFd` is not closed twice in one process.
    unsafe { libc::close(fd.as_raw_fd()) };
}

fn errno_or(default: i32) -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(default)
}

fn check(result: libc::c_int) -> Result<(), (Step, i32)> {
    if result < 0 {
        Err((Step::Namespaces, errno_or(libc::EPERM)))
    } else {
        Ok(())
    }
}
