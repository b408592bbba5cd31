//! What an isolated plugin's worker may do directly, and the OS sandbox that holds it.
//!
//! A worker hosts one package, so it gets one grant for all the package's tools: the
//! smallest that covers every tool's declared class ([`WorkerGrant::covering`]):
//!
//! | declared class | what the worker may do itself |
//! |---|---|
//! | `none`, `read`, `write` | nothing beyond its context: every file operation goes through the host, which checks the class |
//! | `network` | connections through its egress proxy only, in a network namespace of its own, to the hosts its `http_hosts` (else `[sandbox.network] allow`) names (on `tcp_ports` only, if set); CA files readable |
//! | `execute` | start programs, which run under the `workspace-write` command sandbox (read everything but the deny list, write the workspaces, a private temporary directory, the writable roots and caches, no network) |
//!
//! Beyond the grant the worker reads its own library and what the loader needs, nothing
//! else, and writes nothing (an `execute` worker: as above). Its environment holds nothing
//! of the host's. A host setting may narrow the grant, or widen it (logged).
//!
//! Where the kernel cannot enforce a worker's sandbox, its package is refused
//! ([`Refusal::Sandbox`]) unless the host accepts the risk (`allow_unsandboxed`): then it
//! runs unconfined, logged and reported as such. A plugin may also be run unconfined on
//! purpose ([`PluginSandbox::unconfined`]), logged and reported the same way.

use std::fmt;
use std::path::{Path, PathBuf};

use sandbox::egress::Rules;
use sandbox::{Confinement, HostList, LOADER_READ, Limits, Network, RESOLVER_READ, Settings};
use serde::{Deserialize, Serialize};
use tool_api::SideEffect;

use crate::Refusal;

/// What a worker may do beyond its context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorkerGrant {
    /// Open outbound connections (`network` tools).
    pub network: bool,
    /// Start programs (`execute` tools).
    pub execute: bool,
}

impl WorkerGrant {
    /// What a tool of class `class` needs.
    pub fn of(class: SideEffect) -> WorkerGrant {
        WorkerGrant {
            network: class == SideEffect::Network,
            execute: class == SideEffect::Execute,
        }
    }

    /// The smallest grant that covers every class.
    pub fn covering(classes: impl IntoIterator<Item = SideEffect>) -> WorkerGrant {
        classes
            .into_iter()
            .map(WorkerGrant::of)
            .fold(WorkerGrant::default(), |a, b| a.union(b))
    }

    /// Both grants together.
    pub fn union(self, other: WorkerGrant) -> WorkerGrant {
        WorkerGrant {
            network: self.network || other.network,
            execute: self.execute || other.execute,
        }
    }

    /// Whether this grant allows everything `other` does.
    pub fn covers(self, other: WorkerGrant) -> bool {
        (self.network || !other.network) && (self.execute || !other.execute)
    }
}

impl fmt::Display for WorkerGrant {
    /// `context only`, `network`, `execute` or `network, execute`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.network, self.execute) {
            (false, false) => "context only",
            (true, false) => "network",
            (false, true) => "execute",
            (true, true) => "network, execute",
        })
    }
}

/// How a host confines its workers: its sandbox settings record (`[sandbox]`) and the
/// workspaces of its sessions. The default: no workspace, the default settings, never
/// unconfined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerSandbox {
    /// The workspaces an `execute` worker's programs may write (the host's sessions').
    pub workspaces: Vec<PathBuf>,
    /// The settings: the deny list, writable roots and caches for an `execute` worker's
    /// programs; the network's lists for a `network` worker; `allow_unsandboxed`.
    pub settings: Settings,
}

/// One plugin's sandbox settings (`[plugins.NAME]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSandbox {
    /// Its worker's grant instead of the one its tools' classes call for: narrower, or
    /// wider (logged).
    pub grant: Option<WorkerGrant>,
    /// With network: the only TCP ports it may connect to.
    pub tcp_ports: Option<Vec<u16>>,
    /// The hosts its `network` tools may reach: a WebAssembly component's HTTP requests
    /// (none by default), an isolated native worker's connections through its egress
    /// proxy (default: `[sandbox.network] allow`). A library loaded in process, which no
    /// sandbox confines, with any is refused.
    pub http_hosts: HostList,
    /// Where its sandbox cannot be enforced, run it unconfined (logged).
    pub allow_unsandboxed: bool,
    /// Run its worker with no OS sandbox at all, wherever it could be enforced (logged at
    /// WARN and reported UNSANDBOXED): for a plugin trusted not to be hostile that needs
    /// more than any class grants, isolated for its faults only.
    pub unconfined: bool,
}

/// How one package's worker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPlan {
    /// What the worker may do beyond its context.
    pub grant: WorkerGrant,
    /// Its confinement, or why it runs unconfined (allowed by `allow_unsandboxed`).
    pub confinement: Result<Confinement, String>,
    /// Where its connections may go through its egress proxy (a `network` grant).
    pub egress: Option<Rules>,
}

impl WorkerPlan {
    /// The plan for a package named `plugin` whose tools declare `classes`, with the host's
    /// and the plugin's settings, on this kernel. A sandbox the kernel cannot enforce
    /// refuses the package unless one of the settings allows running it unconfined.
    pub fn new(
        plugin: &str,
        library: &Path,
        classes: impl IntoIterator<Item = SideEffect>,
        host: &WorkerSandbox,
        own: &PluginSandbox,
    ) -> Result<WorkerPlan, Refusal> {
        let declared = WorkerGrant::covering(classes);
        let grant = match own.grant {
            Some(set) if !set.covers(declared) => {
                tracing::info!(plugin, declared = %declared, granted = %set, "plugin sandbox narrowed by configuration: tools that need more fail when they try");
                set
            }
            Some(set) if set != declared => {
                tracing::warn!(plugin, declared = %declared, granted = %set, "plugin sandbox widened by configuration beyond what its tools declare");
                set
            }
            Some(set) => set,
            None => declared,
        };
        if own.unconfined {
            tracing::warn!(
                plugin,
                "plugin runs UNSANDBOXED by configuration ([plugins.{plugin}] sandbox = \"unconfined\"): it can do whatever you can"
            );
            return Ok(WorkerPlan {
                grant,
                confinement: Err(format!(
                    "unconfined by configuration ([plugins.{plugin}] sandbox = \"unconfined\")"
                )),
                egress: None,
            });
        }
        let egress = grant.network.then(|| {
            let (allow, setting) = if own.http_hosts.is_empty() {
                (
                    host.settings.network.allow.clone(),
                    "[sandbox.network] allow".to_string(),
                )
            } else {
                (
                    own.http_hosts.clone(),
                    format!("[plugins.{plugin}] http_hosts"),
                )
            };
            let mut rules = Rules::new(allow, host.settings.network.deny.clone(), setting);
            rules.ports = own.tcp_ports.clone();
            rules
        });
        let confinement = confinement(library, grant, host);
        match sandbox::probe().check(&confinement) {
            Ok(_) => Ok(WorkerPlan {
                grant,
                confinement: Ok(confinement),
                egress,
            }),
            Err(missing) if own.allow_unsandboxed || host.settings.allow_unsandboxed => {
                tracing::warn!(
                    plugin,
                    "plugin runs UNSANDBOXED (allow_unsandboxed = true): {missing}"
                );
                Ok(WorkerPlan {
                    grant,
                    confinement: Err(format!("allow_unsandboxed = true; {missing}")),
                    egress: None,
                })
            }
            Err(missing) => Err(Refusal::Sandbox {
                name: plugin.to_string(),
                grant: grant.to_string(),
                missing: missing.missing.join("; "),
            }),
        }
    }

    /// The environment the worker starts with (nothing of the host's): where its
    /// programs find programs, and its private temporary directory.
    pub(crate) fn environment(&self, tmp: Option<&Path>) -> Vec<(&'static str, String)> {
        let mut env = vec![
            // Fewer malloc arenas: the address-space limit measures what the plugin uses.
            ("MALLOC_ARENA_MAX", "2".to_string()),
            // A crash explains itself in a few lines (kept for the call's error), unless
            // the user asked for backtraces as a panic's note says (`RUST_BACKTRACE=1`
            // in toolhost's environment).
            (
                "RUST_BACKTRACE",
                std::env::var("RUST_BACKTRACE").unwrap_or_else(|_| "0".to_string()),
            ),
            ("LANG", "C.UTF-8".to_string()),
        ];
        if self.grant.execute {
            env.push(("PATH", "/usr/local/bin:/usr/bin:/bin".to_string()));
        }
        if self.egress.is_some() && self.confinement.is_ok() {
            env.extend(sandbox::egress::proxy_env());
        }
        if let Some(tmp) = tmp {
            let tmp = tmp.display().to_string();
            env.push(("TMPDIR", tmp.clone()));
            env.push(("HOME", tmp));
        }
        env
    }

    /// Whether the worker needs a private temporary directory (it starts programs).
    pub(crate) fn needs_tmp(&self) -> bool {
        self.grant.execute
    }

    /// One line for reports: the grant and what holds it.
    pub fn describe(&self) -> String {
        match &self.confinement {
            Ok(_) => format!("sandbox: {}", self.grant),
            Err(why) => format!("UNSANDBOXED ({}): {why}", self.grant),
        }
    }
}

/// The placeholder for the worker's private temporary directory in a confinement, replaced
/// when the worker starts.
pub(crate) const TMP_PLACEHOLDER: &str = "/nonexistent/toolhost-worker-tmp";

/// The confinement of a worker with this grant.
fn confinement(library: &Path, grant: WorkerGrant, host: &WorkerSandbox) -> Confinement {
    let mut c = Confinement::nothing()
        .reading(LOADER_READ.iter().map(PathBuf::from))
        .reading([library.to_path_buf()]);
    c.limits = Limits {
        open_files: Some(256),
        ..Limits::default()
    };
    if grant.network {
        // The CA files, for TLS through its proxy.
        c = c.reading(RESOLVER_READ.iter().map(PathBuf::from));
        c.network = Network::Proxied;
    }
    if grant.execute {
        let settings = &host.settings;
        let hidden = host
            .workspaces
            .first()
            .map(|w| settings.hidden(w).paths)
            .unwrap_or_else(|| settings.hidden(Path::new("/nonexistent")).paths);
        c = c
            .reading([PathBuf::from("/")])
            .writing(host.workspaces.iter().cloned())
            .writing(settings.writable_roots.iter().cloned())
            .writing(settings.caches())
            .writing([PathBuf::from(TMP_PLACEHOLDER)])
            .with_devices();
        c.hide = hidden;
        c.exec = true;
    }
    c
}

/// `c` with its private temporary directory in place.
pub(crate) fn with_tmp(c: &Confinement, tmp: &Path) -> Confinement {
    let mut c = c.clone();
    for path in &mut c.write {
        if path == Path::new(TMP_PLACEHOLDER) {
            *path = tmp.to_path_buf();
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_gets_the_smallest_grant_covering_its_tools() {
        use SideEffect::*;
        let grant = |classes: &[SideEffect]| WorkerGrant::covering(classes.iter().copied());
        assert_eq!(grant(&[None, Read, Write]), WorkerGrant::default());
        assert_eq!(grant(&[Read, Network]).to_string(), "network");
        assert_eq!(grant(&[Execute, Network]).to_string(), "network, execute");
    }

    #[test]
    fn a_context_only_worker_reads_its_library_and_the_loader_and_writes_nothing() {
        let c = confinement(
            Path::new("/p/lib.so"),
            WorkerGrant::default(),
            &WorkerSandbox::default(),
        );
        assert!(c.read.contains(&PathBuf::from("/p/lib.so")));
        assert!(!c.read.iter().any(|p| p == Path::new("/etc")));
        assert!(c.write.is_empty() && !c.exec);
        assert_eq!(c.network, Network::None);
    }

    #[test]
    fn an_execute_worker_writes_the_workspaces_and_its_temp_dir() {
        let host = WorkerSandbox {
            workspaces: vec!["/w".into()],
            settings: Settings {
                writable_caches: Vec::new(),
                ..Settings::default()
            },
        };
        let grant = WorkerGrant {
            network: false,
            execute: true,
        };
        let c = with_tmp(
            &confinement(Path::new("/p/lib.so"), grant, &host),
            Path::new("/t"),
        );
        assert_eq!(c.write, [PathBuf::from("/w"), "/t".into()]);
        assert!(c.exec);
        assert_eq!(c.network, Network::None);
    }

    #[test]
    fn a_network_worker_goes_out_through_its_proxy_to_its_hosts() {
        let own = PluginSandbox {
            http_hosts: HostList::new(["api.example.com"]).unwrap(),
            tcp_ports: Some(vec![443]),
            ..PluginSandbox::default()
        };
        let plan = WorkerPlan::new(
            "fetcher",
            Path::new("/p/lib.so"),
            [SideEffect::Network],
            &WorkerSandbox::default(),
            &own,
        )
        .unwrap();
        assert_eq!(plan.confinement.unwrap().network, Network::Proxied);
        let rules = plan.egress.unwrap();
        assert_eq!(rules.allow.entries(), ["api.example.com"]);
        assert_eq!(rules.ports, Some(vec![443]));
    }
}
