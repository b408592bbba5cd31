//! The front of the seccomp filter: a binary search over the system call numbers that
//! seccompiler's program names, which allows every other number of this architecture at
//! once (as the program would, after comparing the number with each of its entries in
//! turn), answers `ENOSYS` to `clone3` and to x32 numbers, and hands the named numbers and
//! other architectures to the program itself.
//!
//! Why: when the kernel installs a filter, it runs it for every system call number to
//! learn which ones it always allows (its action cache). Over seccompiler's linear program
//! (two comparisons per named call, 65 of them) that took about 0.3 ms for each confined
//! command, more than the rest of its confinement; through the search a number takes
//! about a dozen instructions. The program still decides every call it names, so what is
//! refused is seccompiler's decision, and a test runs both filters side by side over every
//! number.

use seccompiler::{BpfProgram, sock_filter};

/// The audit architecture of this target, as `seccomp_data.arch` carries it.
#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "riscv64")]
const ARCH: u32 = 0xC000_00F3;

/// x32 system call numbers have this bit set (x86_64 only).
pub(super) const X32_BIT: u32 = 0x4000_0000;

/// Where a jump goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// The next instruction.
    Next,
    /// Past this many instructions (to a subtree after the one that follows).
    Skip(usize),
    /// `ALLOW`.
    Allow,
    /// `ERRNO(ENOSYS)`.
    Enosys,
    /// The first instruction of seccompiler's program.
    Program,
}

#[derive(Debug, Clone, Copy)]
struct Op {
    code: u32,
    k: u32,
    jt: To,
    jf: To,
}

const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JGE: u32 = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
const JA: u32 = libc::BPF_JMP | libc::BPF_JA;
const RET: u32 = libc::BPF_RET | libc::BPF_K;

/// `seccomp_data`: the number, then the architecture.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

fn op(code: u32, k: u32, jt: To, jf: To) -> Op {
    Op { code, k, jt, jf }
}

/// `program` with the search in front of it; `named` are the numbers it has rules for.
pub(super) fn prefixed(named: &[u32], program: BpfProgram) -> Result<BpfProgram, String> {
    let mut named = named.to_vec();
    named.sort_unstable();
    named.dedup();
    let mut front = vec![
        op(LOAD, ARCH_OFFSET, To::Next, To::Next),
        op(JEQ, ARCH, To::Next, To::Program),
        op(LOAD, NR_OFFSET, To::Next, To::Next),
    ];
    if cfg!(target_arch = "x86_64") {
        front.push(op(JGE, X32_BIT, To::Enosys, To::Next));
    }
    front.push(op(JEQ, libc::SYS_clone3 as u32, To::Enosys, To::Next));
    search(&named, &mut front);
    let allow = front.len();
    let enosys = allow + 1;
    let start = allow + 2;
    // Every jump is forward: the targets follow the front.
    let target = |at: usize, to: To| -> usize {
        let index = match to {
            To::Next => at + 1,
            To::Skip(n) => at + 1 + n,
            To::Allow => allow,
            To::Enosys => enosys,
            To::Program => start,
        };
        index - at - 1
    };
    let mut out = Vec::with_capacity(start + program.len());
    for (at, o) in front.iter().enumerate() {
        let (jt, jf, k) = if o.code == JA {
            (0, 0, target(at, o.jt) as u32)
        } else if o.code & 0x07 == libc::BPF_JMP {
            let short = |to| {
                let off = target(at, to);
                u8::try_from(off).map_err(|_| {
                    format!("a jump of {off} instructions in the filter's front (at most 255)")
                })
            };
            (short(o.jt)?, short(o.jf)?, o.k)
        } else {
            (0, 0, o.k)
        };
        out.push(sock_filter {
            code: o.code as u16,
            jt,
            jf,
            k,
        });
    }
    for (code, k) in [
        (RET, libc::SECCOMP_RET_ALLOW),
        (RET, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ] {
        out.push(sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        });
    }
    out.extend(program);
    Ok(out)
}

/// A binary search for the loaded number among `named` (sorted): to the program if it is
/// one of them, else `ALLOW`.
fn search(named: &[u32], out: &mut Vec<Op>) {
    if named.len() <= 3 {
        for &nr in named {
            out.push(op(JEQ, nr, To::Program, To::Next));
        }
        out.push(op(JA, 0, To::Allow, To::Allow));
        return;
    }
    let mid = named.len() / 2;
    let mut below = Vec::new();
    search(&named[..mid], &mut below);
    out.push(op(JGE, named[mid], To::Skip(below.len()), To::Next));
    out.extend(below);
    search(&named[mid..], out);
}
