//! # sandbox: confine a process to what it was granted, enforced by the kernel
//!
//! One place that confines a process on this OS, and knows nothing of tools. Its users say
//! what a process may do as a [`Confinement`] (files to read, write and hide, programs,
//! connections, limits) and this crate makes the kernel hold it:
//!
//! - **namespaces** of its own (a mount namespace in which the hidden paths are covered by
//!   empty, unreadable masks; a network namespace whose one way out is the egress proxy),
//!   made between `fork` and `exec` ([`Prepared`]);
//! - **Landlock** for files (read, write, execute, create, remove, rename, truncate, device
//!   `ioctl`), TCP ports (ABI 4) and the scoping of signals and abstract UNIX sockets
//!   (ABI 6); a sandboxed process also cannot reach other processes' `/proc` entries or
//!   trace them;
//! - **seccomp** (filters compiled with seccompiler) for the system calls no confined
//!   process needs and those its confinement does not grant (see [`filter`](self#filters));
//! - `no_new_privs`, every capability dropped (bounding set included), and resource limits
//!   (open files, core dumps, processes).
//!
//! What a command is granted comes from the one settings record, [`Settings`] (the
//! `[sandbox]` table): it reads everything but the deny list, writes the workspace, its
//! private temporary directory and the build caches, and reaches the network only through
//! the [`egress`] proxy, by host name. Its environment is the host's minus every secret
//! ([`EnvSettings`]).
//!
//! Two ways to apply a confinement:
//!
//! - [`confine_self`]: the calling process, which must run a single thread (a plugin
//!   worker, before it opens the plugin's library: opening a library runs its code);
//! - [`Prepared::attach`]: a child process, between `fork` and `exec` (a command, an MCP
//!   server). Everything is decided and built in the parent; the child only makes system
//!   calls.
//!
//! [`probe`] asks the kernel once what it enforces; [`Support::check`] says whether a
//! confinement can be enforced here ([`Unenforceable`] names what is missing: callers
//! refuse to run what needed it, never run it unconfined by themselves) and what it does
//! not cover on this kernel ([`Coverage::gaps`]). After applying, Landlock's own verdict is
//! checked: a ruleset the kernel enforces only in part is an error, not a success.
//!
//! ```no_run
//! use sandbox::{CommandGrant, CommandMode, Prepared, PrivateTmp, Settings};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tmp = PrivateTmp::new()?;
//! let settings = Settings::default();
//! let grant = CommandGrant { mode: CommandMode::WorkspaceWrite, network: false };
//! let workspace = std::path::Path::new("/home/me/project");
//! let prepared = Prepared::new(&settings.confinement(grant, workspace, tmp.path())?)?;
//! let mut command = std::process::Command::new("/bin/sh");
//! command.args(["-c", "make"]).current_dir(workspace);
//! settings.env.apply(&mut command);
//! command.env("TMPDIR", tmp.path());
//! prepared.attach(&mut command)?;
//! let status = command.status()?;
//! # let _ = status; Ok(()) }
//! ```
//!
//! ## Filters
//!
//! The seccomp filter allows by default and refuses with `EPERM`: `ptrace`,
//! `process_vm_readv`/`writev`, io_uring, `bpf`, `perf_event_open`, `userfaultfd`, mounts,
//! `chroot`, `unshare`, `setns` and namespace flags on `clone`, keyrings, kernel modules and
//! `kexec`, `reboot`, swap, clocks, `open_by_handle_at`, `kcmp`, `pidfd_getfd`, terminal
//! input injection (`TIOCSTI`); sockets beyond the confinement's [`Network`]; without
//! [`Confinement::exec`], `execve` and any new process (threads only); signals to the host,
//! its process group or everyone (without `exec`: to anything but itself). `clone3` and
//! x32 system calls get `ENOSYS`, a call from another architecture's table kills the
//! process.

#![cfg_attr(unix, allow(unsafe_code))]

pub mod denials;
pub mod egress;
mod env;
mod glob;
mod hosts;
mod policy;
mod settings;
mod support;

#[cfg(target_os = "linux")]
#[path = "linux/mod.rs"]
mod os;
#[cfg(not(target_os = "linux"))]
#[path = "other.rs"]
mod os;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use env::{EnvSettings, HOST_PREFIX, Inherit, SECRET_WORDS, is_secret};
/// The most entries of a workspace searched for `deny_read`'s patterns by default.
pub use glob::WALK_LIMIT as DENY_READ_LIMIT;
pub use hosts::{HostList, is_internal};
pub use os::Attached;
pub use policy::{CommandMode, Confinement, DEVICES, LOADER_READ, Limits, Network, RESOLVER_READ};
pub use settings::{
    CommandGrant, DEFAULT_ALLOW, DEFAULT_CACHES, DEFAULT_DENY_READ, Hidden, Mode, NetworkEntry,
    NetworkSettings, Settings, ToolMode, expand, home, resolve,
};
pub use support::{Coverage, Mechanism, NamespaceSupport, State, Support, Unenforceable};

/// The kernel's support, asked on first use (a few system calls) and remembered.
pub fn probe() -> &'static Support {
    static SUPPORT: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
    SUPPORT.get_or_init(|| Support {
        landlock: os::landlock_abi(),
        seccomp: os::seccomp_available(),
        root: os::is_root(),
        namespaces: os::namespaces(),
    })
}

/// The port of the egress listener inside a confined process's network namespace (every
/// such process has its own, so one fixed port serves them all): `HTTP_PROXY` is
/// `http://127.0.0.1:3128` there.
pub const PROXY_PORT: u16 = 3128;

/// Why a confinement could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The kernel lacks what it needs.
    #[error(transparent)]
    Unenforceable(#[from] Unenforceable),
    /// The process already runs more than one thread: the others would stay unconfined.
    #[error(
        "this process already runs {0} threads; a process confines itself before it starts any (the others would stay unconfined)"
    )]
    Threads(usize),
    /// Building or applying the Landlock ruleset failed.
    #[error("Landlock: {0}")]
    Landlock(String),
    /// Building or installing the seccomp filters failed.
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// A step of applying failed with an OS error.
    #[error("{step} failed: {error}")]
    Apply {
        /// The step.
        step: Step,
        /// The OS error.
        error: String,
    },
    /// A private temporary directory could not be made.
    #[error("cannot make a private temporary directory: {0}")]
    Tmp(String),
    /// The namespaces could not be prepared.
    #[error("namespaces: {0}")]
    Namespaces(String),
    /// `deny_read`'s patterns could not be matched in the whole workspace: the command is
    /// refused, never run with part of its deny list.
    #[error("the deny list could not be made whole: {0}")]
    DenyReadLimit(String),
}

/// The steps of applying a confinement, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Setting resource limits.
    Limits,
    /// Dropping capabilities.
    Capabilities,
    /// Enforcing the Landlock ruleset.
    Landlock,
    /// Landlock said the ruleset is only partly enforced.
    LandlockPartial,
    /// Installing the seccomp filters.
    Seccomp,
    /// Making the private mount and network namespaces.
    Namespaces,
    /// Covering a hidden path with its mask.
    Hiding,
    /// Making the egress listener in the private network namespace.
    Egress,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Limits => "setting resource limits",
            Step::Capabilities => "dropping capabilities",
            Step::Landlock => "enforcing the Landlock ruleset",
            Step::LandlockPartial => "Landlock enforced the ruleset only in part, so the sandbox",
            Step::Seccomp => "installing the seccomp filter",
            Step::Namespaces => "making the private mount and network namespaces",
            Step::Hiding => "covering a hidden path",
            Step::Egress => "making the egress listener",
        })
    }
}

fn applying(step: Step, errno: i32) -> SandboxError {
    SandboxError::Apply {
        step,
        error: std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

/// What a confined process got, as checked after applying.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The Landlock ABI of the kernel that enforces it.
    pub landlock_abi: i32,
    /// Enforced, or partial with [`Enforcement::gaps`].
    pub state: State,
    /// What does not hold on this kernel.
    pub gaps: Vec<String>,
    /// Granted paths that do not exist here (nothing was granted for them).
    pub skipped: Vec<PathBuf>,
}

impl Enforcement {
    /// One line: `enforced (Landlock ABI 7, seccomp)` or `partial (…): gaps`.
    pub fn summary(&self) -> String {
        let base = format!(
            "{} (Landlock ABI {}, seccomp, no_new_privs)",
            self.state, self.landlock_abi
        );
        if self.gaps.is_empty() {
            base
        } else {
            format!("{base}: {}", self.gaps.join("; "))
        }
    }
}

/// What confining a process to `c` gives on this kernel, without applying it (for reports:
/// the same verdict [`confine_self`] and [`Prepared::new`] start from; what is skipped is
/// known only once the rules are built).
pub fn expected(c: &Confinement) -> Result<Enforcement, Unenforceable> {
    let support = probe();
    let coverage = support.check(c)?;
    Ok(Enforcement {
        landlock_abi: support.landlock_abi().unwrap_or(0),
        state: coverage.state(),
        gaps: coverage.gaps,
        skipped: Vec::new(),
    })
}

/// Confines the calling process to `c`, for good, before it runs anything it does not
/// trust. It must run a single thread (threads started later inherit the confinement; one
/// started before would not). Its parent is the host: never signalled.
pub fn confine_self(c: &Confinement) -> Result<Enforcement, SandboxError> {
    let mut enforcement = expected(c)?;
    #[cfg(target_os = "linux")]
    {
        if let Some(n) = os::threads().filter(|&n| n > 1) {
            return Err(SandboxError::Threads(n));
        }
        let (host_pid, host_pgid) = os::parent();
        let (me, _) = os::me();
        let mut plan = os::Plan::new(
            c,
            probe(),
            os::Parties {
                own_pid: Some(me),
                host_pid,
                host_pgid,
                landlock_truncates: false,
            },
        )?;
        plan.apply(true).map_err(|(step, e)| applying(step, e))?;
        enforcement.skipped = std::mem::take(&mut plan.skipped);
        Ok(enforcement)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = &mut enforcement;
        Err(SandboxError::Unenforceable(os::unsupported()))
    }
}

/// A confinement built for child processes: attach it to a [`std::process::Command`] and
/// the child confines itself between `fork` and `exec`. Build one per policy and
/// [`Prepared::try_clone`] it per command: the ruleset is shared.
pub struct Prepared {
    #[cfg(target_os = "linux")]
    namespaces: Option<os::Namespaces>,
    #[cfg(target_os = "linux")]
    plan: Option<os::Plan>,
    enforcement: Enforcement,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("enforcement", &self.enforcement)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Builds the ruleset and filters of `c` (which must allow [`Confinement::exec`]: the
    /// command itself is started by `execve`). The process building it is the host: never
    /// signalled.
    pub fn new(c: &Confinement) -> Result<Prepared, SandboxError> {
        if !c.exec {
            return Err(SandboxError::Seccomp(
                "a command's confinement must allow exec: the command itself is started by execve"
                    .into(),
            ));
        }
        let mut enforcement = expected(c)?;
        #[cfg(target_os = "linux")]
        {
            let (host_pid, host_pgid) = os::me();
            let plan = os::Plan::new(
                c,
                probe(),
                os::Parties {
                    own_pid: None,
                    host_pid,
                    host_pgid,
                    landlock_truncates: false,
                },
            )?;
            enforcement.skipped = plan.skipped.clone();
            Ok(Prepared {
                namespaces: namespaces_of(c)?,
                plan: Some(plan),
                enforcement,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = &mut enforcement;
            Err(SandboxError::Unenforceable(os::unsupported()))
        }
    }

    /// Only the namespaces of `c` (its hidden paths and its network of its own), for a
    /// process that applies the rest itself with [`confine_self`] after `exec` (a plugin
    /// worker). `None` when `c` needs none.
    pub fn namespaces_only(c: &Confinement) -> Result<Option<Prepared>, SandboxError> {
        let enforcement = expected(c)?;
        #[cfg(target_os = "linux")]
        {
            Ok(namespaces_of(c)?.map(|namespaces| Prepared {
                namespaces: Some(namespaces),
                plan: None,
                enforcement,
            }))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = enforcement;
            Err(SandboxError::Unenforceable(os::unsupported()))
        }
    }

    /// What a child gets once attached (it holds when the child starts: a child that
    /// cannot apply it fails to start).
    pub fn enforcement(&self) -> &Enforcement {
        &self.enforcement
    }

    /// Another prepared confinement sharing this one's ruleset.
    pub fn try_clone(&self) -> std::io::Result<Prepared> {
        Ok(Prepared {
            #[cfg(target_os = "linux")]
            namespaces: self.namespaces.as_ref().map(os::Namespaces::duplicate),
            #[cfg(target_os = "linux")]
            plan: self.plan.as_ref().map(os::Plan::try_clone).transpose()?,
            enforcement: self.enforcement.clone(),
        })
    }

    /// Makes `command`'s child confine itself before `exec`: its namespaces (hidden paths
    /// masked, a network of its own), then limits, capabilities, Landlock and seccomp.
    /// Starting it fails (with the OS error of the step that failed) if the confinement
    /// cannot be applied in full. Once it has started, [`Attached::listener`] gives its
    /// egress listener (with [`Network::Proxied`]), to serve with
    /// [`egress::Egress::serve`].
    pub fn attach(self, command: &mut std::process::Command) -> std::io::Result<Attached> {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            let mut namespaces = self.namespaces;
            let attached = match namespaces.as_mut() {
                Some(ns) => ns.channel()?,
                None => os::Attached::none(),
            };
            let mut plan = self.plan;
            let hook = move || {
                if let Some(ns) = namespaces.as_mut() {
                    ns.apply()
                        .map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno))?;
                }
                match plan.as_mut() {
                    Some(plan) => plan
                        .apply(false)
                        .map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno)),
                    None => Ok(()),
                }
            };
            // SAFETY: the hook runs in the child between fork and exec; `Namespaces::apply`
            // and `Plan::apply` only make system calls (unshare, mount, open, write,
            // socket, sendmsg, setrlimit, prctl, capset, landlock_restrict_self, seccomp)
            // on data built before the fork, and allocate nothing.
            unsafe {
                command.pre_exec(hook);
            }
            Ok(attached)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = command;
            Ok(os::Attached)
        }
    }
}

/// The namespaces `c` needs, if any.
#[cfg(target_os = "linux")]
fn namespaces_of(c: &Confinement) -> Result<Option<os::Namespaces>, SandboxError> {
    let net = c.network == Network::Proxied;
    if c.hide.is_empty() && !net {
        return Ok(None);
    }
    let kind = probe().namespaces.clone().map_err(|why| Unenforceable {
        missing: vec![format!("namespaces ({why})")],
    })?;
    os::Namespaces::new(kind, &c.hide, net).map_err(SandboxError::Namespaces)
}

/// Makes `command`'s child leave the host's session before `exec` (`setsid`): it has no
/// controlling terminal, so a program that asks on `/dev/tty` (a password, an SSH host
/// key) fails at once instead of waiting unseen; its pid is its session's and its process
/// group's id, so signalling the group reaches everything it starts there.
#[cfg(unix)]
pub fn new_session(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of the process; the
    // child is not a group leader (it was just forked), so it cannot fail with EPERM.
    unsafe {
        command.pre_exec(|| {
            rustix::process::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
}

/// Closes every descriptor above stderr except `keep`: a process about to run code it
/// does not trust drops what it inherited. Linux only (`close_range`); elsewhere nothing is
/// closed.
pub fn close_descriptors_except(keep: std::os::fd::RawFd) {
    #[cfg(target_os = "linux")]
    os::close_descriptors_except(keep);
    #[cfg(not(target_os = "linux"))]
    let _ = keep;
}

/// A private temporary directory (mode 0700) for one confined process or command,
/// removed when dropped.
#[derive(Debug)]
pub struct PrivateTmp(tempfile::TempDir);

impl PrivateTmp {
    /// A new directory under the system's temporary directory.
    pub fn new() -> Result<PrivateTmp, SandboxError> {
        tempfile::Builder::new()
            .prefix("toolhost-sandbox-")
            .tempdir()
            .map(PrivateTmp)
            .map_err(|e| SandboxError::Tmp(e.to_string()))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}
