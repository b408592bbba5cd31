//! A confined process's own view of the system, made between `fork` and `exec`: a private
//! mount namespace in which the hidden paths are covered by empty, read-only, unreadable
//! masks, and a private network namespace whose one way out is the egress listener it
//! hands to its parent.
//!
//! As root the namespaces are made directly; otherwise inside a user namespace of its own
//! (the user mapped to itself), as bubblewrap does without setuid. Mounts are made private
//! first, so nothing done here reaches the host's view.
//!
//! Masks: the parent makes an empty directory once; in the child a small tmpfs is mounted
//! on it, an empty file and an empty directory (both mode 000) are made in it, and it is
//! remounted read-only. Each hidden directory gets the empty directory bind-mounted over
//! it, each hidden file the empty file: a command sees an unreadable, unlistable,
//! unwritable empty entry where the secret was, and cannot unmount it (mounts are refused
//! by Landlock and seccomp, and it holds no capability).

use std::ffi::CString;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::Step;

use crate::PROXY_PORT;

use crate::NamespaceSupport as Kind;

use super::kept::{self, Hidden, Kept, Key};

/// Whether (and how) this process's children can get private mount and network
/// namespaces: tried once in a forked child that exits at once.
pub(crate) fn probe() -> Result<Kind, String> {
    let direct = libc::CLONE_NEWNS | libc::CLONE_NEWNET;
    if try_unshare(direct) {
        return Ok(Kind::Direct);
    }
    if try_unshare(direct | libc::CLONE_NEWUSER) {
        return Ok(Kind::User);
    }
    Err("private mount and network namespaces cannot be made here: as another user than root they need unprivileged user namespaces, which this kernel or a security module refuses (Ubuntu 23.10 and later: kernel.apparmor_restrict_unprivileged_userns; an AppArmor profile granting `userns` to toolhost allows them, see docs/sandbox.md, Platforms)".into())
}

/// Forks a child that tries `unshare(flags)` and a private remount of `/`, and reports.
fn try_unshare(flags: libc::c_int) -> bool {
    // SAFETY: the child only makes system calls (unshare, mount, _exit) and touches no
    // memory shared with the parent's other threads; the parent waits for it.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let ok = libc::unshare(flags) == 0
                && libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
        if pid < 0 {
            return false;
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

fn cstring(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", path.display()))
}

/// The namespaces of one confinement, ready to apply in a child.
pub(crate) struct Namespaces {
    kind: Kind,
    net: bool,
    /// `uid_map` and `gid_map` lines (user namespaces only).
    maps: Option<(Vec<u8>, Vec<u8>)>,
    /// The masks, made by the child itself (where no namespace could be kept).
    mask: Option<Masks>,
    /// The kept mount namespace the child enters, masks made.
    kept: Option<Arc<Kept>>,
    /// Room for the working directory's path, kept across `setns`.
    cwd: Vec<u8>,
    /// The child's end of the channel the egress listener is sent over.
    channel: Option<Arc<OwnedFd>>,
    /// Room for the control message that carries it.
    control: Vec<u8>,
}

struct Masks {
    /// The empty directory the masks are made on, one per prepared confinement (removed
    /// with the last copy; for a kept namespace, as soon as the namespace is made).
    _dir: Arc<tempfile::TempDir>,
    dir: CString,
    file: CString,
    empty: CString,
    hide_dirs: Vec<CString>,
    hide_files: Vec<CString>,
}

/// The parent's end: where the egress listener arrives once the child has started.
#[derive(Debug)]
pub struct Attached {
    channel: Option<UnixStream>,
}

impl Attached {
    /// Nothing to receive: no network namespace.
    pub(crate) fn none() -> Attached {
        Attached { channel: None }
    }

    /// Once the command has started: its egress listener (`127.0.0.1:`[`PROXY_PORT`] in its
    /// network namespace, its one way out), or `None` when it has no network of its own.
    /// Hand it to [`crate::egress::Egress::serve`].
    pub fn listener(self) -> io::Result<Option<TcpListener>> {
        let Some(channel) = self.channel else {
            return Ok(None);
        };
        channel.set_read_timeout(Some(Duration::from_secs(10)))?;
        receive_fd(&channel).map(|fd| Some(TcpListener::from(fd)))
    }

    /// Once the command has started: its egress proxy, serving its listener under `rules`
    /// ([`crate::egress::Egress::serve`]), or `None` when it has no network of its own.
    pub fn serve(
        self,
        rules: crate::egress::Rules,
        on_refusal: Option<crate::egress::OnRefusal>,
    ) -> io::Result<Option<crate::egress::Egress>> {
        match self.listener()? {
            Some(listener) => crate::egress::Egress::serve(listener, rules, on_refusal).map(Some),
            None => Ok(None),
        }
    }
}

impl Namespaces {
    /// The namespaces hiding `hide` (paths that exist; one beneath another is covered by
    /// it) and, with `net`, a network of its own. `None` when neither is needed.
    pub(crate) fn new(
        kind: Kind,
        hide: &[PathBuf],
        net: bool,
    ) -> Result<Option<Namespaces>, String> {
        let mut hidden: Vec<&PathBuf> = hide.iter().collect();
        hidden.sort();
        hidden.dedup();
        let mut kept: Vec<&PathBuf> = Vec::new();
        for path in hidden {
            if !kept.iter().any(|k| path.starts_with(k)) {
                kept.push(path);
            }
        }
        let mut hide_dirs = Vec::new();
        let mut hide_files = Vec::new();
        for path in kept {
            // The mask covers what the path leads to: a directory or a regular file. A
            // link to a device (`~/.bash_history -> /dev/null`, a common way to keep no
            // history), a socket or a pipe holds no secret, and covering it would cover
            // the device for the whole command.
            match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => hide_dirs.push(cstring(path)?),
                Ok(m) if m.is_file() => hide_files.push(cstring(path)?),
                // Gone, a link to nothing, or not a file: nothing to hide.
                _ => {}
            }
        }
        // What each leads to now: `None` where a file system gives no handles.
        let hidden: Option<Vec<Hidden>> = hide_dirs
            .iter()
            .chain(&hide_files)
            .map(|p| Hidden::of(p.clone()))
            .collect();
        let none_hidden = hide_dirs.is_empty() && hide_files.is_empty();
        if none_hidden && !net {
            return Ok(None);
        }
        let maps = (kind == Kind::User).then(|| {
            // SAFETY: getuid and getgid cannot fail and touch no memory.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            (
                format!("{uid} {uid} 1\n").into_bytes(),
                format!("{gid} {gid} 1\n").into_bytes(),
            )
        });
        // The masks made once, in a namespace each child enters; where none can be kept,
        // each child makes its own.
        let mut kept = None;
        let mut mask = None;
        if !none_hidden {
            let flags = own_flags(kind, false);
            let masks = || Masks::new(hide_dirs.clone(), hide_files.clone());
            kept = hidden.and_then(|hidden| {
                let key = Key { kind, hidden };
                kept::kept(key, masks, |m| own_mounts(flags, maps.as_ref(), Some(m))).ok()
            });
            if kept.is_none() {
                mask = Some(masks()?);
            }
        }
        Ok(Some(Namespaces {
            kind,
            net,
            maps,
            mask,
            kept,
            cwd: vec![0u8; libc::PATH_MAX as usize + 1],
            channel: None,
            // SAFETY: CMSG_SPACE only computes a size.
            control: vec![0u8; unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize],
        }))
    }

    /// Another with the same masks (the directory is shared).
    pub(crate) fn duplicate(&self) -> Namespaces {
        Namespaces {
            kind: self.kind,
            net: self.net,
            maps: self.maps.clone(),
            mask: self.mask.as_ref().map(|m| Masks {
                _dir: m._dir.clone(),
                dir: m.dir.clone(),
                file: m.file.clone(),
                empty: m.empty.clone(),
                hide_dirs: m.hide_dirs.clone(),
                hide_files: m.hide_files.clone(),
            }),
            kept: self.kept.clone(),
            cwd: self.cwd.clone(),
            channel: None,
            control: self.control.clone(),
        }
    }

    /// The channel the listener will come back on: the parent's end, in an [`Attached`].
    pub(crate) fn channel(&mut self) -> io::Result<Attached> {
        if !self.net {
            return Ok(Attached::none());
        }
        let (parent, child) = UnixStream::pair()?;
        self.channel = Some(Arc::new(OwnedFd::from(child)));
        Ok(Attached {
            channel: Some(parent),
        })
    }

    /// In the child: enters the kept mount namespace, or makes its own with the masks;
    /// then its network and the egress listener. Only system calls on data made before
    /// the fork.
    pub(crate) fn apply(&mut self) -> Result<(), (Step, i32)> {
        match &self.kept {
            Some(kept) => {
                kept.enter(&mut self.cwd)?;
                if self.net {
                    // SAFETY: unshare takes no pointer.
                    check(Step::Namespaces, unsafe {
                        libc::unshare(libc::CLONE_NEWNET)
                    })?;
                }
            }
            None => own_mounts(
                own_flags(self.kind, self.net),
                self.maps.as_ref(),
                self.mask.as_ref(),
            )?,
        }
        if self.net {
            lo_up()?;
            let listener = listen()?;
            let sent = match &self.channel {
                Some(channel) => send_fd(channel.as_raw_fd(), listener, &mut self.control),
                None => Err((Step::Egress, libc::EBADF)),
            };
            // SAFETY: `listener` is this child's own descriptor, sent (or not) and done.
            unsafe { libc::close(listener) };
            sent?;
        }
        Ok(())
    }
}

/// The namespaces a process makes itself: a mount namespace, a network one with `net`,
/// inside a user namespace of its own without root.
fn own_flags(kind: Kind, net: bool) -> libc::c_int {
    let mut flags = libc::CLONE_NEWNS;
    if net {
        flags |= libc::CLONE_NEWNET;
    }
    if kind == Kind::User {
        flags |= libc::CLONE_NEWUSER;
    }
    flags
}

/// Makes the calling process's own namespaces (`flags`), maps its user (`maps`), makes
/// its mounts private and covers the hidden paths (`mask`). Only system calls.
fn own_mounts(
    flags: libc::c_int,
    maps: Option<&(Vec<u8>, Vec<u8>)>,
    mask: Option<&Masks>,
) -> Result<(), (Step, i32)> {
    // SAFETY: unshare takes no pointer.
    check(Step::Namespaces, unsafe { libc::unshare(flags) })?;
    if let Some((uid_map, gid_map)) = maps {
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", uid_map)?;
        write_file(c"/proc/self/gid_map", gid_map)?;
    }
    // SAFETY: a null source, type and data with a static target: only flags change.
    check(Step::Namespaces, unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })?;
    if let Some(mask) = mask {
        mask.apply()?;
    }
    Ok(())
}

impl Masks {
    /// Masks for `hide_dirs` and `hide_files`, made on a new empty directory.
    fn new(hide_dirs: Vec<CString>, hide_files: Vec<CString>) -> Result<Masks, String> {
        let dir = tempfile::Builder::new()
            .prefix("toolhost-masks-")
            .tempdir()
            .map_err(|e| format!("cannot make the masks' directory: {e}"))?;
        let path = dir.path().to_path_buf();
        Ok(Masks {
            dir: cstring(&path)?,
            file: cstring(&path.join("f"))?,
            empty: cstring(&path.join("d"))?,
            _dir: Arc::new(dir),
            hide_dirs,
            hide_files,
        })
    }

    fn apply(&self) -> Result<(), (Step, i32)> {
        let tmpfs = c"tmpfs";
        let options = c"size=16k,nr_inodes=8,mode=0700";
        let locked = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        // SAFETY: every pointer is a NUL-terminated string made before the fork.
        unsafe {
            check(
                Step::Hiding,
                libc::mount(
                    tmpfs.as_ptr(),
                    self.dir.as_ptr(),
                    tmpfs.as_ptr(),
                    locked,
                    options.as_ptr().cast(),
                ),
            )?;
            let fd = libc::open(
                self.file.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0,
            );
            check(Step::Hiding, fd)?;
            libc::close(fd);
            check(
                Step::Hiding,
                libc::fchmodat(libc::AT_FDCWD, self.file.as_ptr(), 0, 0),
            )?;
            check(Step::Hiding, libc::mkdir(self.empty.as_ptr(), 0))?;
            check(Step::Hiding, libc::chmod(self.empty.as_ptr(), 0))?;
            check(
                Step::Hiding,
                libc::mount(
                    std::ptr::null(),
                    self.dir.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REMOUNT | libc::MS_RDONLY | locked,
                    options.as_ptr().cast(),
                ),
            )?;
            for (sources, source) in [
                (&self.hide_dirs, &self.empty),
                (&self.hide_files, &self.file),
            ] {
                for target in sources {
                    check(
                        Step::Hiding,
                        libc::mount(
                            source.as_ptr(),
                            target.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND,
                            std::ptr::null(),
                        ),
                    )?;
                }
            }
        }
        Ok(())
    }
}

fn check(step: Step, result: libc::c_int) -> Result<(), (Step, i32)> {
    if result < 0 {
        Err((
            step,
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EPERM),
        ))
    } else {
        Ok(())
    }
}

fn write_file(path: &std::ffi::CStr, content: &[u8]) -> Result<(), (Step, i32)> {
    // SAFETY: a NUL-terminated path and a buffer of `content.len()` bytes.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(Step::Namespaces, fd)?;
        let written = libc::write(fd, content.as_ptr().cast(), content.len());
        libc::close(fd);
        if written < 0 {
            return Err((
                Step::Namespaces,
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EPERM),
            ));
        }
    }
    Ok(())
}

/// Brings the loopback interface of the new network namespace up.
fn lo_up() -> Result<(), (Step, i32)> {
    // SAFETY: an ifreq on the stack, named "lo", read and written by the two ioctls.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        check(Step::Egress, sock)?;
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let got = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req);
        if got >= 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        }
        let set = if got >= 0 {
            libc::ioctl(sock, libc::SIOCSIFFLAGS, &req)
        } else {
            got
        };
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EPERM);
        libc::close(sock);
        if set < 0 {
            return Err((Step::Egress, errno));
        }
    }
    Ok(())
}

/// A TCP listener on `127.0.0.1:PROXY_PORT` in the new network namespace.
fn listen() -> Result<RawFd, (Step, i32)> {
    // SAFETY: a sockaddr_in on the stack, passed with its size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        check(Step::Egress, fd)?;
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = PROXY_PORT.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let bound = libc::bind(
            fd,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        if bound < 0 || libc::listen(fd, 128) < 0 {
            let errno = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EPERM);
            libc::close(fd);
            return Err((Step::Egress, errno));
        }
        Ok(fd)
    }
}

/// Sends `fd` over `channel` (`SCM_RIGHTS`), in `control` (sized by the parent).
fn send_fd(channel: RawFd, fd: RawFd, control: &mut [u8]) -> Result<(), (Step, i32)> {
    // SAFETY: the message header points at a one-byte payload and at `control`, whose
    // size (CMSG_SPACE of one descriptor) holds the one control message written into it.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err((Step::Egress, libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err((
                Step::Egress,
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EPIPE),
            ));
        }
    }
    Ok(())
}

/// Receives one descriptor sent with [`send_fd`].
fn receive_fd(channel: &UnixStream) -> io::Result<OwnedFd> {
    // SAFETY: as in `send_fd`: a one-byte payload and a control buffer sized for one
    // descriptor; the descriptor is taken only from an SCM_RIGHTS message of that size.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = vec![0u8; libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
        let n = libc::recvmsg(channel.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n == 0
            || cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the confined process sent no egress listener",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
