//! What this kernel can enforce, asked once per process ([`crate::probe`]), and what one
//! [`Confinement`] gets from it ([`Support::check`]).
//!
//! A confinement needs Landlock (any ABI: files) and seccomp (system calls, sockets,
//! signals to the host), and Landlock ABI 4 when it narrows TCP ports. Without them it is
//! [`Unenforceable`]: callers refuse to run what needed it, naming what is missing. What
//! an older Landlock cannot do and nothing replaces is a gap: reported
//! ([`Coverage::gaps`]), never hidden.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::policy::{Confinement, Network};

/// How far a mechanism, or a confinement, is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Everything it stands for holds.
    Enforced,
    /// Some of it holds; the detail says what does not.
    Partial,
    /// Nothing of it holds here.
    Unavailable,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Enforced => "enforced",
            State::Partial => "partial",
            State::Unavailable => "unavailable",
        })
    }
}

/// One mechanism and how far this kernel enforces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mechanism {
    /// `landlock`, `seccomp`, `no_new_privs`, `limits`.
    pub name: &'static str,
    /// Enforced, partial or unavailable.
    pub state: State,
    /// What it covers here, or why not.
    pub detail: String,
}

/// What the running kernel offers, as probed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI version, or why there is none.
    pub landlock: Result<i32, String>,
    /// Seccomp filters can be installed, or why not.
    pub seccomp: Result<(), String>,
    /// Whether this process runs as root (process limits do not bind root).
    pub root: bool,
    /// How a confined process gets mount and network namespaces of its own (to hide the
    /// deny list and to go out only through the egress proxy), or why it cannot.
    pub namespaces: Result<NamespaceSupport, String>,
}

/// How this host makes a confined process's own mount and network namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceSupport {
    /// Directly (root with `CAP_SYS_ADMIN`).
    Direct,
    /// Inside a user namespace of its own (the user mapped to itself).
    User,
}

/// The Landlock ABI that brought each feature.
pub(crate) mod abi {
    /// Renaming and linking across directories.
    pub const REFER: i32 = 2;
    /// Truncation.
    pub const TRUNCATE: i32 = 3;
    /// TCP bind and connect by port.
    pub const NET: i32 = 4;
    /// `ioctl` on device files.
    pub const IOCTL_DEV: i32 = 5;
    /// Signals and abstract UNIX sockets scoped to the sandbox.
    pub const SCOPE: i32 = 6;
}

impl Support {
    /// The Landlock ABI version, if Landlock is available.
    pub fn landlock_abi(&self) -> Option<i32> {
        self.landlock.as_ref().ok().copied()
    }

    /// Every mechanism and how far it is enforced here, for `toolhost sandbox`.
    pub fn mechanisms(&self) -> Vec<Mechanism> {
        let landlock = match &self.landlock {
            Ok(v) => {
                let mut missing = Vec::new();
                for (needed, what) in [
                    (abi::REFER, "renames across directories (refused instead)"),
                    (
                        abi::TRUNCATE,
                        "truncation (seccomp refuses truncate(2) instead)",
                    ),
                    (abi::NET, "TCP ports"),
                    (abi::IOCTL_DEV, "ioctl on devices"),
                    (abi::SCOPE, "signal and abstract-socket scoping"),
                ] {
                    if *v < needed {
                        missing.push(format!("{what}: ABI {needed}"));
                    }
                }
                if missing.is_empty() {
                    Mechanism {
                        name: "landlock",
                        state: State::Enforced,
                        detail: format!(
                            "ABI {v}: files (read, write, execute, create, remove, rename, truncate, device ioctl), TCP ports, signals and abstract sockets scoped to the sandbox, no access to other processes' /proc entries"
                        ),
                    }
                } else {
                    Mechanism {
                        name: "landlock",
                        state: State::Partial,
                        detail: format!(
                            "ABI {v}: files and /proc of other processes; this kernel lacks {}",
                            missing.join(", ")
                        ),
                    }
                }
            }
            Err(why) => Mechanism {
                name: "landlock",
                state: State::Unavailable,
                detail: why.clone(),
            },
        };
        let seccomp = match &self.seccomp {
            Ok(()) => Mechanism {
                name: "seccomp",
                state: State::Enforced,
                detail: "system call filter: no ptrace, process_vm_*, io_uring, bpf, mount, namespaces, keyctl, kernel modules; sockets, exec and signals to the host as the confinement says".into(),
            },
            Err(why) => Mechanism {
                name: "seccomp",
                state: State::Unavailable,
                detail: why.clone(),
            },
        };
        let os = cfg!(target_os = "linux");
        let namespaces = match &self.namespaces {
            Ok(how) => Mechanism {
                name: "namespaces",
                state: State::Enforced,
                detail: format!(
                    "a mount namespace per deny list hides it; a network namespace whose one way out is the egress proxy{}",
                    match how {
                        NamespaceSupport::Direct => "",
                        NamespaceSupport::User => " (inside a user namespace of its own)",
                    }
                ),
            },
            Err(why) => Mechanism {
                name: "namespaces",
                state: State::Unavailable,
                detail: why.clone(),
            },
        };
        vec![
            landlock,
            seccomp,
            namespaces,
            Mechanism {
                name: "no_new_privs",
                state: if os {
                    State::Enforced
                } else {
                    State::Unavailable
                },
                detail: if os {
                    "no privileges gained through setuid or file capabilities; capabilities dropped".into()
                } else {
                    "Linux only".into()
                },
            },
            Mechanism {
                name: "limits",
                state: match (os, self.root) {
                    (false, _) => State::Unavailable,
                    (true, true) => State::Partial,
                    (true, false) => State::Enforced,
                },
                detail: match (os, self.root) {
                    (false, _) => "Linux only".into(),
                    (true, true) => "open files and core dumps; the process limit does not bind root (running as root)".into(),
                    (true, false) => "open files, core dumps, processes".into(),
                },
            },
        ]
    }

    /// What `confinement` gets here: its [`Coverage`], or why it cannot be enforced.
    pub fn check(&self, confinement: &Confinement) -> Result<Coverage, Unenforceable> {
        let mut missing = Vec::new();
        if let Err(why) = &self.landlock {
            missing.push(format!("Landlock ({why})"));
        }
        if let Err(why) = &self.seccomp {
            missing.push(format!("seccomp ({why})"));
        }
        let narrows_ports = matches!(
            &confinement.network,
            Network::Outbound { tcp_ports: Some(_) }
        );
        if let Some(v) = self.landlock_abi()
            && narrows_ports
            && v < abi::NET
        {
            missing.push(format!(
                "TCP port rules (Landlock ABI {}, Linux 6.7; this kernel has ABI {v})",
                abi::NET
            ));
        }
        let needs_namespaces =
            !confinement.hide.is_empty() || confinement.network == Network::Proxied;
        if let (true, Err(why)) = (needs_namespaces, &self.namespaces) {
            missing.push(format!(
                "namespaces to hide secret paths and route the network through the egress proxy ({why})"
            ));
        }
        if !missing.is_empty() {
            return Err(Unenforceable { missing });
        }
        let mut gaps = Vec::new();
        if let Some(v) = self.landlock_abi()
            && confinement.exec
            && v < abi::SCOPE
        {
            gaps.push(format!(
                "programs it starts can signal other processes of this user, and threads of the host other than its first (signal scoping needs Landlock ABI {}; seccomp guards the host's pid)",
                abi::SCOPE
            ));
        }
        if self.root && confinement.exec && confinement.limits.more_processes.is_some() {
            gaps.push("the process limit does not bind root".into());
        }
        Ok(Coverage { gaps })
    }
}

/// What a confinement gets on this kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// What does not hold (empty: everything does).
    pub gaps: Vec<String>,
}

impl Coverage {
    /// Enforced when there is no gap, else partial.
    pub fn state(&self) -> State {
        if self.gaps.is_empty() {
            State::Enforced
        } else {
            State::Partial
        }
    }
}

/// A confinement this kernel cannot enforce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the sandbox cannot be enforced here: missing {}", missing.join("; "))]
pub struct Unenforceable {
    /// Each missing mechanism, with why.
    pub missing: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn support(landlock: Result<i32, String>) -> Support {
        Support {
            landlock,
            seccomp: Ok(()),
            root: false,
            namespaces: Ok(NamespaceSupport::Direct),
        }
    }

    #[test]
    fn without_landlock_nothing_is_enforceable_and_the_reason_is_named() {
        let e = support(Err("not in this kernel".into()))
            .check(&Confinement::nothing())
            .unwrap_err();
        assert!(
            e.to_string().contains("Landlock (not in this kernel)"),
            "{e}"
        );
    }

    #[test]
    fn narrowing_tcp_ports_needs_abi_4() {
        let mut c = Confinement::nothing();
        c.network = Network::Outbound {
            tcp_ports: Some(vec![443]),
        };
        let e = support(Ok(3)).check(&c).unwrap_err();
        assert!(e.to_string().contains("TCP port rules"), "{e}");
        assert_eq!(support(Ok(4)).check(&c).unwrap().state(), State::Enforced);
    }

    #[test]
    fn programs_without_signal_scoping_are_a_reported_gap() {
        let mut c = Confinement::nothing();
        c.exec = true;
        let coverage = support(Ok(5)).check(&c).unwrap();
        assert_eq!(coverage.state(), State::Partial);
        assert!(coverage.gaps[0].contains("signal"), "{coverage:?}");
        assert_eq!(support(Ok(6)).check(&c).unwrap().state(), State::Enforced);
    }

    #[test]
    fn hiding_paths_or_a_proxied_network_needs_namespaces() {
        let mut s = support(Ok(7));
        s.namespaces = Err("user namespaces refused".into());
        let mut c = Confinement::nothing();
        assert!(s.check(&c).is_ok());
        c.hide.push("/home/me/.ssh".into());
        let e = s.check(&c).unwrap_err();
        assert!(e.to_string().contains("user namespaces refused"), "{e}");
        c.hide.clear();
        c.network = Network::Proxied;
        assert!(s.check(&c).is_err());
    }

    #[test]
    fn an_older_landlock_is_reported_partial_naming_what_it_lacks() {
        let m = support(Ok(3)).mechanisms();
        assert_eq!(m[0].state, State::Partial);
        assert!(m[0].detail.contains("TCP ports: ABI 4"), "{m:?}");
        assert_eq!(support(Ok(7)).mechanisms()[0].state, State::Enforced);
    }
}
