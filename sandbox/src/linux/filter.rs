//! A [`Confinement`]'s seccomp filters, compiled with seccompiler.
//!
//! The main filter allows by default and refuses (`EPERM`) what no confined process needs
//! and what a confinement does not grant: tracing and reading other processes, io_uring
//! (whose operations bypass system call filters), bpf, mounts and namespaces, kernel
//! keyrings and modules, terminal input injection, sockets beyond the grant, `execve` and
//! new processes without `exec`, signals to the host (to anything but itself, without
//! `exec`). A system call from another architecture's table (`int 0x80` on x86_64) kills
//! the process. `ENOSYS` answers `clone3` (whose flags a filter cannot read: the C library
//! then falls back to `clone`, whose flags the main filter checks) and every x32 system
//! call number. One filter does all of it: seccompiler's program, behind a front written
//! here ([`shortcut`]) that allows at once what the program names no rule for.

mod shortcut;

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
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

    let named: Vec<u32> = refused.keys().map(|&nr| nr as u32).collect();
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
    Ok(vec![
        shortcut::prefixed(&named, main).map_err(SandboxError::Seccomp)?,
    ])
}

#[cfg(test)]
fn insn(code: u32, jt: u8, jf: u8, k: u32) -> seccompiler::sock_filter {
    seccompiler::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `ENOSYS` for `clone3` and for every x32 system call number (bit 30 set), as a filter of
/// its own installed after seccompiler's program: what the front now does, kept as the
/// reference the tests hold it to.
#[cfg(test)]
fn enosys() -> BpfProgram {
    use shortcut::X32_BIT;
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

#[cfg(test)]
mod tests {
    use super::*;
    use seccompiler::sock_filter;

    /// `seccomp_data` as a filter reads it.
    struct Data {
        nr: u32,
        arch: u32,
        args: [u64; 6],
    }

    impl Data {
        fn word(&self, offset: u32) -> u32 {
            match offset {
                0 => self.nr,
                4 => self.arch,
                8 | 12 => 0,
                16..=63 => {
                    let arg = self.args[(offset as usize - 16) / 8];
                    if offset.is_multiple_of(8) {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                _ => panic!("a load past seccomp_data: {offset}"),
            }
        }
    }

    /// Runs one classic BPF program over `d`, as the kernel would.
    fn run(p: &[sock_filter], d: &Data) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = &p[pc];
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
            match u32::from(i.code) {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => a = d.word(i.k),
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => pc += jump(a == i.k),
                c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => pc += jump(a >= i.k),
                c if c == libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K => pc += jump(a > i.k),
                c if c == libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K => pc += jump(a & i.k != 0),
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                other => panic!("an instruction this test does not run: {other:#x}"),
            }
        }
    }

    /// What the kernel answers with `filters` installed in order: the most restrictive
    /// action, the newest filter's on a tie.
    fn kernel(filters: &[BpfProgram], d: &Data) -> u32 {
        let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
        let mut answer = libc::SECCOMP_RET_ALLOW;
        for f in filters.iter().rev() {
            let r = run(f, d);
            if action(r) < action(answer) {
                answer = r;
            }
        }
        answer
    }

    /// seccompiler's program and the separate ENOSYS filter, as installed before the front.
    fn reference(c: &Confinement, parties: Parties) -> Vec<BpfProgram> {
        let mut filters = build(c, parties).unwrap();
        let front = filters.remove(0);
        // The program follows the front's two answers; its first instruction loads the
        // architecture again.
        let start = front
            .windows(3)
            .position(|w| {
                w[0].code as u32 == libc::BPF_RET | libc::BPF_K
                    && w[0].k == libc::SECCOMP_RET_ALLOW
                    && w[1].code as u32 == libc::BPF_RET | libc::BPF_K
                    && w[2].code as u32 == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS
                    && w[2].k == 4
            })
            .unwrap()
            + 2;
        vec![front[start..].to_vec(), enosys()]
    }

    fn interesting() -> Vec<u64> {
        let host = 4000i64;
        let mut v: Vec<u64> = vec![
            0,
            1,
            2,
            9,
            u64::MAX,
            0xffff_ffff,
            host as u64,
            (-host) as u64,
            (-host) as i32 as u32 as u64,
            4242,
            4242 | (1 << 32),
            libc::TIOCSTI,
            libc::TIOCLINUX,
            libc::CLONE_THREAD as u64,
            (libc::CLONE_THREAD | libc::CLONE_NEWNET) as u64,
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
            libc::AF_NETLINK as u64,
            libc::AF_UNIX as u64,
            libc::SOCK_RAW as u64,
            (libc::SOCK_RAW | libc::SOCK_CLOEXEC) as u64,
            libc::SOCK_STREAM as u64,
        ];
        v.extend(NAMESPACES);
        v
    }

    /// The filter with its front answers every call, on every number and architecture, as
    /// seccompiler's program and the ENOSYS filter answered it.
    #[test]
    fn the_front_answers_every_call_as_the_program_and_the_enosys_filter_did() {
        let values = interesting();
        let arch = run(
            &build_default()[0],
            &Data {
                nr: 0,
                arch: 0,
                args: [0; 6],
            },
        );
        assert_eq!(
            arch,
            libc::SECCOMP_RET_KILL_PROCESS,
            "another architecture is killed"
        );
        let mut numbers: Vec<u32> = (0..=600).collect();
        numbers.extend((0..=600).map(|n| shortcut::X32_BIT + n));
        numbers.extend([0x7fff_ffff, 0xffff_ffff, libc::SYS_clone3 as u32]);
        let mut checked = 0usize;
        for exec in [true, false] {
            for network in [Network::None, Network::Proxied] {
                for own_pid in [None, Some(4242)] {
                    for landlock_truncates in [true, false] {
                        let mut c = Confinement::nothing();
                        c.exec = exec;
                        c.network = network.clone();
                        let parties = Parties {
                            own_pid,
                            host_pid: 4000,
                            host_pgid: 4000,
                            landlock_truncates,
                        };
                        let filters = build(&c, parties).unwrap();
                        assert_eq!(filters.len(), 1, "one filter");
                        assert!(filters[0].len() < 4096, "{}", filters[0].len());
                        let old = reference(&c, parties);
                        for &nr in &numbers {
                            for arch in [shortcut_arch(), 0x4000_0003, 0] {
                                for i in 0..values.len() {
                                    let args: [u64; 6] =
                                        std::array::from_fn(|j| values[(i + j * 7) % values.len()]);
                                    let d = Data { nr, arch, args };
                                    assert_eq!(
                                        kernel(&filters, &d),
                                        kernel(&old, &d),
                                        "nr {nr} arch {arch:#x} args {args:?} exec {exec} {network:?} {own_pid:?}"
                                    );
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1_000_000, "{checked}");
    }

    fn build_default() -> Vec<BpfProgram> {
        let mut c = Confinement::nothing();
        c.exec = true;
        build(
            &c,
            Parties {
                own_pid: None,
                host_pid: 4000,
                host_pgid: 4000,
                landlock_truncates: true,
            },
        )
        .unwrap()
    }

    fn shortcut_arch() -> u32 {
        build_default()[0][1].k
    }
}
