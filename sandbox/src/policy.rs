//! What a confined process may do ([`Confinement`]), and the two command modes
//! ([`CommandMode`]): `read-only` and `workspace-write` (what they grant is
//! [`crate::Settings::confinement`]).
//!
//! A confinement is a list of grants; everything it does not grant is denied. It is plain
//! data (serializable: a host hands it to a worker process on its command line) and knows
//! nothing of tools: the caller decides what a tool's class or a command's mode is worth.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What a confined process may do. Everything not granted here is denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confinement {
    /// Files and directories (with everything beneath them) it may read; with
    /// [`Confinement::exec`], also run as programs. `/` stands for every top-level
    /// directory but `/dev` (device files only through [`Confinement::devices`]).
    pub read: Vec<PathBuf>,
    /// Directories (with everything beneath them) and files it may read, write, create in,
    /// rename in and remove from. Never device nodes.
    pub write: Vec<PathBuf>,
    /// Device files it may read and write (`/dev/null`, `/dev/urandom`…).
    pub devices: Vec<PathBuf>,
    /// Paths it cannot read, list or stat, even beneath what `read` grants: covered by
    /// empty, unreadable masks in a mount namespace of its own (made by whoever starts it:
    /// [`crate::Prepared`]).
    #[serde(default)]
    pub hide: Vec<PathBuf>,
    /// It may start programs and processes (`execve`, `fork`); its children get the same
    /// confinement.
    pub exec: bool,
    /// Which connections it may open.
    pub network: Network,
    /// Resource limits.
    pub limits: Limits,
}

/// Which connections a confined process may open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// No new sockets at all (with [`Confinement::exec`], `socketpair` for talking to its
    /// own children).
    None,
    /// Outbound TCP and UDP over IPv4 and IPv6. With `tcp_ports`, TCP connections only to
    /// those ports (UDP, e.g. DNS, is not narrowed). No listening sockets for a process that
    /// may not start programs.
    Outbound {
        /// The only TCP ports it may connect to (`None`: any).
        tcp_ports: Option<Vec<u16>>,
    },
    /// A network namespace of its own whose one reachable address is its egress listener
    /// (`127.0.0.1:`[`crate::PROXY_PORT`] there, served by [`crate::egress::Egress`]):
    /// TCP and UDP sockets, but nothing leaves except through the proxy. Made by whoever
    /// starts it ([`crate::Prepared`]).
    Proxied,
}

impl Network {
    /// Whether it may open internet sockets at all.
    pub fn sockets(&self) -> bool {
        !matches!(self, Network::None)
    }
}

/// Resource limits of a confined process (and its children).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The most file descriptors it may hold open (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// With [`Confinement::exec`]: how many more processes and threads than the whole
    /// system runs now its user may start (`RLIMIT_NPROC`, counted per user; the kernel
    /// does not apply it to root). Without `exec`, no process can be started at all.
    pub more_processes: Option<u64>,
    /// Whether a crash may write a core file (`RLIMIT_CORE`): off by default, a core holds
    /// whatever the process had in memory.
    pub core_dumps: bool,
}

impl Default for Limits {
    /// 1024 open files, 1024 more processes, no core dumps.
    fn default() -> Self {
        Limits {
            open_files: Some(1024),
            more_processes: Some(1024),
            core_dumps: false,
        }
    }
}

impl Confinement {
    /// Nothing at all: no file, no network, no programs; default limits. Grants are added
    /// to it.
    pub fn nothing() -> Self {
        Confinement {
            read: Vec::new(),
            write: Vec::new(),
            devices: Vec::new(),
            hide: Vec::new(),
            exec: false,
            network: Network::None,
            limits: Limits::default(),
        }
    }

    /// Adds paths it may read.
    pub fn reading<P: Into<PathBuf>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        self.read.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Adds paths it may write.
    pub fn writing<P: Into<PathBuf>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        self.write.extend(paths.into_iter().map(Into::into));
        self
    }

    /// The harmless device files ([`DEVICES`]).
    pub fn with_devices(mut self) -> Self {
        self.devices.extend(DEVICES.iter().map(PathBuf::from));
        self
    }
}

/// What the dynamic loader reads to open a library: its cache and the system library
/// directories (a plugin's own dependencies live there; the worker's already-loaded
/// libraries are not opened again).
pub const LOADER_READ: &[&str] = &[
    "/etc/ld.so.cache",
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
];

/// What name resolution and TLS read: resolver configuration, hosts, services and the
/// system's certificate authorities.
pub const RESOLVER_READ: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/usr/share/ca-certificates",
    "/run/systemd/resolve",
];

/// Device files any process may use: they hold nothing and reach nothing.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The two OS modes a command can run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommandMode {
    /// Reads everything but the hidden paths; writes only its private temporary directory.
    ReadOnly,
    /// Reads everything but the hidden paths; writes the workspace, its private temporary
    /// directory, the writable roots and the writable caches.
    WorkspaceWrite,
}

impl CommandMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandMode::ReadOnly => "read-only",
            CommandMode::WorkspaceWrite => "workspace-write",
        }
    }
}

impl std::fmt::Display for CommandMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confinement_crosses_a_command_line_as_json() {
        let mut c = Confinement::nothing().reading(["/"]).writing(["/w"]);
        c.hide.push("/home/me/.ssh".into());
        c.network = Network::Proxied;
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Confinement>(&text).unwrap(), c);
    }
}
