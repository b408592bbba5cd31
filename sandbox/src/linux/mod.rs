//! Linux: Landlock for files, TCP ports and scoping; seccomp for system calls;
//! `no_new_privs`; capabilities dropped; resource limits.
//!
//! Everything that allocates, opens or decides happens in [`Plan::new`], in the process
//! that starts the confined one. [`Plan::apply`] only makes system calls, so it may run
//! between `fork` and `exec` (where allocating could deadlock), and the same plan serves a
//! process confining itself.

mod filter;
mod kept;
mod namespaces;
mod rules;

use std::io;
use std::path::PathBuf;

use landlock::{RulesetCreated, RulesetStatus};
use rustix::process::{Resource, Rlimit};
use rustix::thread::{CapabilitySet, CapabilitySets};
use seccompiler::BpfProgram;

use crate::policy::Confinement;
use crate::support::{Support, abi};
use crate::{SandboxError, Step};

pub(crate) use filter::Parties;
pub use namespaces::Attached;
pub(crate) use namespaces::Namespaces;

/// How children get namespaces of their own here, probed once by a forked child.
pub(crate) fn namespaces() -> Result<crate::NamespaceSupport, String> {
    namespaces::probe()
}

/// The Landlock ABI version of the running kernel, or why there is none.
pub(crate) fn landlock_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0, this flag only asks the kernel for
    // its ABI version; no memory is read or written.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version > 0 {
        return Ok(i32::try_from(version).unwrap_or(i32::MAX));
    }
    let errno = io::Error::last_os_error();
    Err(match errno.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no Landlock (it needs Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK), or a container's seccomp policy hides it".into(),
        Some(libc::EOPNOTSUPP) => "Landlock is built into this kernel but not enabled: add `landlock` to the `lsm=` kernel boot parameter".into(),
        _ => format!("the Landlock system calls are refused here ({errno}): a container or seccomp policy blocks them"),
    })
}

/// Whether seccomp filters can be installed.
pub(crate) fn seccomp_available() -> Result<(), String> {
    match rustix::thread::secure_computing_mode() {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "this kernel has no seccomp (CONFIG_SECCOMP_FILTER): {e}"
        )),
    }
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// How many tasks (processes and threads) the whole system runs now, from
/// `/proc/loadavg`.
fn system_tasks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

/// The highest capability number this kernel knows.
fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The resource limits of a confinement, bounded by the current hard limits.
fn limits(c: &Confinement) -> [Option<(Resource, Rlimit)>; 3] {
    let capped = |resource: Resource, wanted: u64| {
        let hard = rustix::process::getrlimit(resource).maximum;
        let value = hard.map_or(wanted, |h| h.min(wanted));
        (
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
    };
    let open = c.limits.open_files.map(|n| capped(Resource::Nofile, n));
    let core = (!c.limits.core_dumps).then(|| capped(Resource::Core, 0));
    let processes = if c.exec {
        c.limits
            .more_processes
            .and_then(|more| Some(capped(Resource::Nproc, system_tasks()? + more)))
    } else {
        // Without `exec`, the filter allows threads only.
        None
    };
    [open, core, processes]
}

/// A confinement made ready to apply.
pub(crate) struct Plan {
    ruleset: Option<RulesetCreated>,
    filters: Vec<BpfProgram>,
    limits: [Option<(Resource, Rlimit)>; 3],
    /// The process holds capabilities (root): drop them all, bounding set included.
    drop_capabilities: bool,
    last_capability: u32,
    /// Granted paths that do not exist.
    pub(crate) skipped: Vec<PathBuf>,
}

impl Plan {
    /// Builds the ruleset and filters of `c` for this kernel. `support` must have Landlock
    /// and seccomp ([`Support::check`] passed).
    pub(crate) fn new(
        c: &Confinement,
        support: &Support,
        parties: Parties,
    ) -> Result<Plan, SandboxError> {
        let landlock = support.landlock_abi().ok_or_else(|| {
            SandboxError::Landlock("Landlock is not available on this kernel".into())
        })?;
        let built = rules::build(c, landlock)?;
        let filters = filter::build(
            c,
            Parties {
                landlock_truncates: landlock >= abi::TRUNCATE,
                ..parties
            },
        )?;
        let held = rustix::thread::capabilities(None).map_or(true, |sets| {
            !(sets.effective.is_empty() && sets.permitted.is_empty())
        });
        Ok(Plan {
            ruleset: Some(built.ruleset),
            filters,
            limits: limits(c),
            drop_capabilities: held,
            last_capability: last_capability(),
            skipped: built.skipped,
        })
    }

    /// Another plan sharing this one's ruleset (a duplicated descriptor) and filters.
    pub(crate) fn try_clone(&self) -> io::Result<Plan> {
        Ok(Plan {
            ruleset: self.ruleset.as_ref().map(|r| r.try_clone()).transpose()?,
            filters: self.filters.clone(),
            limits: self.limits,
            drop_capabilities: self.drop_capabilities,
            last_capability: self.last_capability,
            skipped: self.skipped.clone(),
        })
    }

    /// Applies the plan to the calling thread (and what it starts later): limits,
    /// capabilities, Landlock, seccomp, in that order. Only system calls and no allocation:
    /// it may run between `fork` and `exec`. `all_threads` installs the filters on every
    /// thread of the process.
    pub(crate) fn apply(&mut self, all_threads: bool) -> Result<(), (Step, i32)> {
        let errno = |step: Step, e: rustix::io::Errno| (step, e.raw_os_error());
        for (resource, limit) in self.limits.iter().flatten() {
            rustix::process::setrlimit(*resource, *limit).map_err(|e| errno(Step::Limits, e))?;
        }
        if self.drop_capabilities {
            for n in 0..=self.last_capability.min(63) {
                // EINVAL past the kernel's last; EPERM without CAP_SETPCAP: nothing to drop.
                let _ = rustix::thread::remove_capability_from_bounding_set(
                    CapabilitySet::from_bits_retain(1 << n),
                );
            }
            let _ = rustix::thread::clear_ambient_capability_set();
            rustix::thread::set_capabilities(
                None,
                CapabilitySets {
                    effective: CapabilitySet::empty(),
                    permitted: CapabilitySet::empty(),
                    inheritable: CapabilitySet::empty(),
                },
            )
            .map_err(|e| errno(Step::Capabilities, e))?;
        }
        let ruleset = self.ruleset.take().ok_or((Step::Landlock, libc::EBADF))?;
        let status = ruleset
            .restrict_self()
            .map_err(|e| (Step::Landlock, os_errno(&e)))?;
        if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
            return Err((Step::LandlockPartial, libc::EPERM));
        }
        for program in &self.filters {
            let installed = if all_threads {
                seccompiler::apply_filter_all_threads(program)
            } else {
                seccompiler::apply_filter(program)
            };
            installed.map_err(|e| (Step::Seccomp, os_errno(&e)))?;
        }
        Ok(())
    }
}

/// The OS error number behind an error, if one is in its chain (else `EPERM`).
fn os_errno(e: &(dyn std::error::Error + 'static)) -> i32 {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(code) = err
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return code;
        }
        current = err.source();
    }
    libc::EPERM
}

/// How many threads this process runs, from `/proc/self/status`.
pub(crate) fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

/// This process's parent and its process group.
pub(crate) fn parent() -> (i32, i32) {
    let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    let group = rustix::process::getppid()
        .and_then(|p| rustix::process::getpgid(Some(p)).ok())
        .map_or(0, |g| g.as_raw_nonzero().get());
    (parent, group)
}

/// This process and its process group.
pub(crate) fn me() -> (i32, i32) {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let group = rustix::process::getpgrp().as_raw_nonzero().get();
    (pid, group)
}

/// Closes every descriptor above stderr except `keep`.
pub(crate) fn close_descriptors_except(keep: std::os::fd::RawFd) {
    let close = |first: u32, last: u32| {
        if first <= last {
            // SAFETY: close_range only closes descriptors; the caller has just said none of
            // these is owned by anything it still uses.
            unsafe {
                libc::syscall(libc::SYS_close_range, first, last, 0u32);
            }
        }
    };
    let keep = u32::try_from(keep).unwrap_or(u32::MAX);
    if keep >= 3 {
        close(3, keep - 1);
        close(keep.saturating_add(1), u32::MAX);
    } else {
        close(3, u32::MAX);
    }
}
