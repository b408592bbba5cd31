//! A [`Confinement`]'s Landlock ruleset: the files it may touch, the TCP ports it may
//! connect to, and the scoping of its signals and abstract sockets.
//!
//! The ruleset asks for exactly what the running kernel's ABI offers (capped at the newest
//! ABI this crate was tested with), in hard-requirement mode: anything the kernel refuses
//! is an error here, never a silently weaker sandbox. What an older ABI lacks is reported
//! by [`crate::Support::check`] as a gap.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

use crate::SandboxError;
use crate::policy::{Confinement, Network};
use crate::support::abi;

/// The newest Landlock ABI whose rights this crate asks for (signal and abstract-socket
/// scoping); a newer kernel is asked for these.
const TESTED: i32 = abi::SCOPE;

/// A ruleset ready to be enforced, and the granted paths that do not exist (skipped).
pub(crate) struct Built {
    pub(crate) ruleset: RulesetCreated,
    pub(crate) skipped: Vec<PathBuf>,
}

fn landlock_error(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Landlock(e.to_string())
}

/// The rights a grant gives on `path`: a file gets only the file rights among them.
fn rights_for(path: &Path, rights: BitFlags<AccessFs>, abi: ABI) -> Option<BitFlags<AccessFs>> {
    let meta = std::fs::metadata(path).ok()?;
    Some(if meta.is_dir() {
        rights
    } else {
        rights & AccessFs::from_file(abi)
    })
}

/// Every entry of `/` but `/dev`.
fn top_level() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p != Path::new("/dev"))
        .collect()
}

/// Builds the ruleset of `c` for a kernel with Landlock ABI `kernel_abi`.
pub(crate) fn build(c: &Confinement, kernel_abi: i32) -> Result<Built, SandboxError> {
    let level = kernel_abi.min(TESTED);
    let abi = ABI::from(level);
    let all = AccessFs::from_all(abi);
    let exec = if c.exec {
        BitFlags::from(AccessFs::Execute)
    } else {
        BitFlags::EMPTY
    };
    let read = (AccessFs::ReadFile | AccessFs::ReadDir | exec) & all;
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::Execute) | exec;
    let device = (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev) & all;

    // TCP rules: ports to connect to when narrowed; no listening socket for a process that
    // may not start programs (seccomp refuses `listen` too, on any kernel).
    let tcp_ports = match &c.network {
        Network::Outbound {
            tcp_ports: Some(ports),
        } => Some(ports.as_slice()),
        _ => None,
    };
    let mut net = BitFlags::<AccessNet>::EMPTY;
    if level >= abi::NET {
        if tcp_ports.is_some() {
            net |= AccessNet::ConnectTcp;
        }
        if !c.exec && c.network.sockets() {
            net |= AccessNet::BindTcp;
        }
    }

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(landlock_error)?;
    if !net.is_empty() {
        ruleset = ruleset.handle_access(net).map_err(landlock_error)?;
    }
    if level >= abi::SCOPE {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(landlock_error)?;
    }
    let mut created = ruleset.create().map_err(landlock_error)?;
    let mut skipped = Vec::new();
    let mut read_paths = Vec::new();
    for path in &c.read {
        if path == Path::new("/") {
            // Listing any directory; reading and running beneath every top-level entry
            // but /dev, whose device files only `devices` grants.
            created = created
                .add_rule(PathBeneath::new(
                    PathFd::new("/").map_err(landlock_error)?,
                    AccessFs::ReadDir,
                ))
                .map_err(|e| SandboxError::Landlock(format!("/: {e}")))?;
            read_paths.extend(top_level());
        } else {
            read_paths.push(path.clone());
        }
    }
    let grants = read_paths
        .iter()
        .map(|p| (p, read))
        .chain(c.write.iter().map(|p| (p, write)))
        .chain(c.devices.iter().map(|p| (p, device)));
    for (path, rights) in grants {
        let Some(rights) = rights_for(path, rights, abi) else {
            skipped.push(path.clone());
            continue;
        };
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            Err(_) => {
                skipped.push(path.clone());
                continue;
            }
        };
        created = created
            .add_rule(PathBeneath::new(fd, rights))
            .map_err(|e| SandboxError::Landlock(format!("{}: {e}", path.display())))?;
    }
    if net.contains(AccessNet::ConnectTcp) {
        for port in tcp_ports.unwrap_or_default() {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(landlock_error)?;
        }
    }
    Ok(Built {
        ruleset: created,
        skipped,
    })
}
