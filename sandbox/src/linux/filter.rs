//! A [`Confinement`]'s seccomp filters, compiled with seccompiler.
//!
//! The main filter allows by default and refuses (`EPERM`) what no confined process needs
//! and what a confinement does not grant: tracing and reading other processes, io_uring
//! (whose operations bypass system call filters), bpf, mounts and namespaces, kernel
//! keyrings and modules, terminal input injection, sockets beyond the grant, `execve` and
//! new processes without `exec`, signals to the host (to anything but itself, without
//! `exec`). A system call from another architecture's table (`int 0x80` on x86_64) kills
//! the process. A second, hand-written filter of four instructions answers `ENOSYS` to
//! `clone3` (whose flags a filter cannot read: the C library then falls back to `clone`,
//! whose flags the main filter checks) and to every x32 system call number.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch, sock_filter,
};

use crate::SandboxError;
use crate::policy::{Confinement, Network};

/// Who the filters protect and whom they let the process signal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parties {
    /// The confined process itself, when known (a process confining itself): without
    /// `exec` it may signal only itself.
    pub(crate) own_pid: Option<i32>,
    /// The host that started it: never signalled.
    pub(crate) host_pid: i32,
    /// The host's process group: never signalled as a group.
    pub(crate) host_pgid: i32,
    /// Landlock controls truncation (ABI 3): else `truncate(2)` is refused here.
    pub(crate) landlock_truncates: bool,
}

fn seccomp_error(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Seccomp(e.to_string())
}

/// Refuses a system call whatever its arguments.
fn always(nr: libc::c_long, rules: &mut BTreeMap<i64, Vec<SeccompRule>>) {
    rules.insert(nr, Vec::new());
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<Cond, SandboxError> {
    Cond::new(arg, len, op, value).map_err(seccomp_error)
}

fn rule(conditions: Vec<Cond>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conditions).map_err(seccomp_error)
}

/// A 32-bit argument equal to `value` (pids and signals are `int`s: only the low half of
/// the register counts).
fn arg_is(arg: u8, value: i64) -> Result<Cond, SandboxError> {
    cond(arg, Len::Dword, Op::Eq, u64::from(value as i32 as u32))
}

fn arg_is_not(arg: u8, value: i64) -> Result<Cond, SandboxError> {
    cond(arg, Len::Dword, Op::Ne, u64::from(value as i32 as u32))
}

/// System calls no confined process may make.
const NEVER: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_fanotify_init,
    libc::SYS_kcmp,
    libc::SYS_pidfd_getfd,
    libc::SYS_vhangup,
    libc::SYS_tkill,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_modify_ldt,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
    #[cfg(target_arch = "x86_64")]
    libc::SYS__sysctl,
];

/// Namespace flags that `clone` may not carry.
const NAMESPACES: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// The filters of `c`, in the order they are installed.
pub(crate) fn build(c: &Confinement, parties: Parties) -> Result<Vec<BpfProgram>, SandboxError> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in NEVER {
        always(nr, &mut refused);
    }
    if !parties.landlock_truncates {
        always(libc::SYS_truncate, &mut refused);
    }

    // Terminal input injection on an inherited terminal.
    refused.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![arg_is(1, libc::TIOCSTI as i64)?])?,
            rule(vec![arg_is(1, libc::TIOCLINUX as i64)?])?,
        ],
    );

    // New processes: threads only without `exec`; never new namespaces.
    let mut clone = Vec::new();
    for flag in NAMESPACES {
        clone.push(rule(vec![cond(
            0,
            Len::Qword,
            Op::MaskedEq(*flag),
            *flag,
        )?])?);
    }
    if !c.exec {
        clone.push(rule(vec![cond(
            0,
            Len::Qword,
            Op::MaskedEq(libc::CLONE_THREAD as u64),
            0,
        )?])?);
        always(libc::SYS_execve, &mut refused);
        always(libc::SYS_execveat, &mut refused);
        #[cfg(target_arch = "x86_64")]
        {
            always(libc::SYS_fork, &mut refused);
            always(libc::SYS_vfork, &mut refused);
        }
    }
    refused.insert(libc::SYS_clone, clone);

    // Signals.
    let host = i64::from(parties.host_pid);
    match (c.exec, parties.own_pid) {
        (false, Some(me)) => {
            // Only itself (0: its own process group, which is its own).
            let me = i64::from(me);
            refused.insert(
                libc::SYS_kill,
                vec![rule(vec![arg_is_not(0, me)?, arg_is_not(0, 0)?])?],
            );
            for nr in [
                libc::SYS_tgkill,
                libc::SYS_rt_sigqueueinfo,
                libc::SYS_rt_tgsigqueueinfo,
            ] {
                refused.insert(nr, vec![rule(vec![arg_is_not(0, me)?])?]);
            }
            always(libc::SYS_pidfd_open, &mut refused);
            always(libc::SYS_pidfd_send_signal, &mut refused);
        }
        _ => {
            // Never the host, its group, or everything at once.
            let mut kill = vec![rule(vec![arg_is(0, host)?])?, rule(vec![arg_is(0, -1)?])?];
            if parties.host_pgid > 1 {
                kill.push(rule(vec![arg_is(0, -i64::from(parties.host_pgid))?])?);
            }
            refused.insert(libc::SYS_kill, kill);
            for nr in [
                libc::SYS_tgkill,
                libc::SYS_rt_sigqueueinfo,
                libc::SYS_rt_tgsigqueueinfo,
                libc::SYS_pidfd_open,
            ] {
                refused.insert(nr, vec![rule(vec![arg_is(0, host)?])?]);
            }
        }
    }

    // Sockets.
    match &c.network {
        Network::None => {
            always(libc::SYS_socket, &mut refused);
            if !c.exec {
                always(libc::SYS_socketpair, &mut refused);
            }
        }
        Network::Outbound { .. } | Network::Proxied => {
            let domain_not = |d: i32| arg_is_not(0, i64::from(d));
            let raw = |domain: i32| -> Result<SeccompRule, SandboxError> {
                rule(vec![
                    arg_is(0, i64::from(domain))?,
                    cond(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_RAW as u64)?,
                ])
            };
            refused.insert(
                libc::SYS_socket,
                vec![
                    rule(vec![
                        domain_not(libc::AF_INET)?,
                        domain_not(libc::AF_INET6)?,
                        domain_not(libc::AF_NETLINK)?,
                    ])?,
                    // Netlink only for the routing table (getaddrinfo asks it).
                    rule(vec![
                        arg_is(0, i64::from(libc::AF_NETLINK))?,
                        arg_is_not(2, i64::from(libc::NETLINK_ROUTE))?,
                    ])?,
                    raw(libc::AF_INET)?,
                    raw(libc::AF_INET6)?,
                ],
            );
            if !c.exec {
                always(libc::SYS_socketpair, &mut refused);
                always(libc::SYS_listen, &mut refused);
            }
        }
    }

    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(seccomp_error)?;
    let main: BpfProgram = SeccompFilter::new(
        refused,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(seccomp_error)?
    .try_into()
    .map_err(seccomp_error)?;
    Ok(vec![main, enosys()])
}

fn insn(code: u32, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `ENOSYS` for `clone3` and for every x32 system call number (bit 30 set); the main filter
/// already kills a call from another architecture's table.
fn enosys() -> BpfProgram {
    const X32_BIT: u32 = 0x4000_0000;
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    vec![
        // The system call number is the first word of `seccomp_data`.
        insn(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
        insn(libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K, 2, 0, X32_BIT),
        insn(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            1,
            0,
            libc::SYS_clone3 as u32,
        ),
        insn(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        insn(libc::BPF_RET | libc::BPF_K, 0, 0, enosys),
    ]
}
