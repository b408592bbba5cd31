//! The `[sandbox]` table, and a plugin's own sandbox settings under `[plugins.NAME]`.
//!
//! ```toml
//! [sandbox]                     # or, for the mode alone: sandbox = "workspace-write"
//! mode = "workspace-write"      # host | read-only | workspace-write
//! network = false
//! readable_roots = ["~/.cargo"] # relative to this file; ~ is the home directory
//! writable_roots = []
//! allow_unsandboxed = false
//! [sandbox.per_tool]
//! shell = "read-only"           # or "remote": run on the [remote] host
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use dispatcher_core::SandboxMode;
use dispatcher_core::config::{SandboxConfig, SupportedSandbox};
use plugin_host::WorkerGrant;
use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use tool_api::SideEffect;

/// The `[sandbox]` table: where tools run and how the programs they start are confined.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    /// The mode of every call, and of stdio MCP servers (default `workspace-write`).
    pub mode: SandboxMode,
    /// Whether programs under `read-only` and `workspace-write` may use the network.
    pub network: bool,
    /// More directories programs (commands, MCP servers, `execute` plugins) may read.
    pub readable_roots: Vec<PathBuf>,
    /// More directories they may write under `workspace-write`.
    pub writable_roots: Vec<PathBuf>,
    /// Where a sandbox cannot be enforced, run unconfined (logged) instead of refusing.
    pub allow_unsandboxed: bool,
    /// Per-tool modes.
    pub per_tool: BTreeMap<String, SandboxMode>,
}

impl Default for Sandbox {
    fn default() -> Self {
        let d = SandboxConfig::default();
        Sandbox {
            mode: d.mode,
            network: d.network,
            readable_roots: d.readable_roots,
            writable_roots: d.writable_roots,
            allow_unsandboxed: d.allow_unsandboxed,
            per_tool: BTreeMap::new(),
        }
    }
}

/// The table form, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    mode: Option<SupportedSandbox>,
    #[serde(default)]
    network: Option<bool>,
    #[serde(default)]
    readable_roots: Vec<PathBuf>,
    #[serde(default)]
    writable_roots: Vec<PathBuf>,
    #[serde(default)]
    allow_unsandboxed: Option<bool>,
    #[serde(default)]
    per_tool: BTreeMap<String, ToolSandbox>,
}

/// A tool's mode: one this host provides, or `remote` (checked against `[remote]` when
/// the whole file is read).
struct ToolSandbox(SandboxMode);

impl<'de> Deserialize<'de> for ToolSandbox {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mode = SandboxMode::deserialize(d)?;
        if mode != SandboxMode::Remote {
            dispatcher_core::runtime::check_supported(mode).map_err(|e| {
                de::Error::custom(format!("{e}; or \"remote\" with a [remote] table"))
            })?;
        }
        Ok(ToolSandbox(mode))
    }
}

impl<'de> Deserialize<'de> for Sandbox {
    /// A table, or a string for the mode alone (`sandbox = "host"`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SandboxVisitor;
        impl<'de> Visitor<'de> for SandboxVisitor {
            type Value = Sandbox;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a [sandbox] table, or a mode: \"host\", \"read-only\" or \"workspace-write\"",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Sandbox, E> {
                let mode: SupportedSandbox =
                    Deserialize::deserialize(de::value::StrDeserializer::<E>::new(v))?;
                Ok(Sandbox {
                    mode: mode.0,
                    ..Sandbox::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Sandbox, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let d = Sandbox::default();
                Ok(Sandbox {
                    mode: t.mode.map_or(d.mode, |m| m.0),
                    network: t.network.unwrap_or(d.network),
                    readable_roots: t.readable_roots,
                    writable_roots: t.writable_roots,
                    allow_unsandboxed: t.allow_unsandboxed.unwrap_or(d.allow_unsandboxed),
                    per_tool: t.per_tool.into_iter().map(|(k, v)| (k, v.0)).collect(),
                })
            }
        }
        d.deserialize_any(SandboxVisitor)
    }
}

/// `~/…` under the home directory; a relative path under `base` (the config file's
/// directory).
pub fn resolve(path: &Path, base: &Path) -> PathBuf {
    let expanded = dispatcher_core::policy::expand_home(path);
    if expanded.is_absolute() {
        expanded
    } else {
        base.join(expanded)
    }
}

impl Sandbox {
    /// Its roots with `~` expanded and relative paths made absolute under `base`.
    pub fn resolve_paths(&mut self, base: &Path) {
        for path in self
            .readable_roots
            .iter_mut()
            .chain(self.writable_roots.iter_mut())
        {
            *path = resolve(path, base);
        }
    }

    /// The dispatcher's side: each call's base grant and what its context answers.
    pub fn dispatcher(&self) -> SandboxConfig {
        SandboxConfig {
            mode: self.mode,
            per_tool: self.per_tool.clone().into_iter().collect(),
            network: self.network,
            readable_roots: self.readable_roots.clone(),
            writable_roots: self.writable_roots.clone(),
            allow_unsandboxed: self.allow_unsandboxed,
        }
    }

    /// The settings stdio MCP servers start with, in `workspace`.
    pub fn servers(&self, workspace: &Path) -> mcp_toolsets::ServerSandbox {
        mcp_toolsets::ServerSandbox {
            workspace: workspace.to_path_buf(),
            mode: self.mode,
            network: self.network,
            readable_roots: self.readable_roots.clone(),
            writable_roots: self.writable_roots.clone(),
            allow_unsandboxed: self.allow_unsandboxed,
        }
    }

    /// The settings plugin workers start with, for sessions in `workspace`.
    pub fn workers(&self, workspace: &Path) -> plugin_host::WorkerSandbox {
        plugin_host::WorkerSandbox {
            workspaces: vec![workspace.to_path_buf()],
            readable_roots: self.readable_roots.clone(),
            writable_roots: self.writable_roots.clone(),
            allow_unsandboxed: self.allow_unsandboxed,
        }
    }
}

/// A plugin's `sandbox = "network"` or `sandbox = ["network", "execute"]`: the classes its
/// worker is granted, instead of what its tools declare; or `sandbox = "unconfined"`: no
/// OS sandbox at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginGrant {
    /// What the classes grant.
    Classes(WorkerGrant),
    /// No sandbox (logged at WARN, reported UNSANDBOXED).
    Unconfined,
}

impl<'de> Deserialize<'de> for PluginGrant {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct GrantVisitor;
        impl<'de> Visitor<'de> for GrantVisitor {
            type Value = PluginGrant;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a class (\"none\", \"read\", \"write\", \"network\", \"execute\"), a list of them, or \"unconfined\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PluginGrant, E> {
                if v == "unconfined" {
                    return Ok(PluginGrant::Unconfined);
                }
                let class: SideEffect =
                    Deserialize::deserialize(de::value::StrDeserializer::<E>::new(v))
                        .map_err(|e| E::custom(format!("{e}, or \"unconfined\" (no sandbox)")))?;
                Ok(PluginGrant::Classes(WorkerGrant::of(class)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PluginGrant, A::Error> {
                let mut classes = Vec::new();
                while let Some(class) = seq.next_element::<SideEffect>()? {
                    classes.push(class);
                }
                Ok(PluginGrant::Classes(WorkerGrant::covering(classes)))
            }
        }
        d.deserialize_any(GrantVisitor)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        sandbox: Sandbox,
    }

    #[derive(Deserialize)]
    struct GrantDoc {
        sandbox: PluginGrant,
    }

    fn sandbox(text: &str) -> Result<Sandbox, String> {
        toml::from_str::<Doc>(text)
            .map(|d| d.sandbox)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_mode_alone_is_the_short_form_of_the_table() {
        let s = sandbox("sandbox = \"host\"").unwrap();
        assert_eq!(s.mode, SandboxMode::Host);
        assert!(!s.network);
        let t = sandbox("[sandbox]\nmode = \"read-only\"\nnetwork = true\n[sandbox.per_tool]\nshell = \"host\"\n")
            .unwrap();
        assert_eq!(t.mode, SandboxMode::ReadOnly);
        assert!(t.network);
        assert_eq!(t.per_tool["shell"], SandboxMode::Host);
        assert_eq!(sandbox("[sandbox]\n").unwrap(), Sandbox::default());
    }

    #[test]
    fn modes_not_provided_and_unknown_keys_are_refused_by_name() {
        let e = sandbox("sandbox = \"container\"").unwrap_err();
        assert!(
            e.contains("not supported") && e.contains("host, read-only, workspace-write"),
            "{e}"
        );
        let e = sandbox("[sandbox.per_tool]\nshell = \"microvm\"\n").unwrap_err();
        assert!(e.contains("'microvm' is not supported"), "{e}");
        let e = sandbox("[sandbox]\nnetwrok = true\n").unwrap_err();
        assert!(e.contains("netwrok"), "{e}");
    }

    #[test]
    fn a_plugin_grant_is_a_class_or_a_list_of_classes() {
        let g = |t: &str| toml::from_str::<GrantDoc>(t).map(|d| d.sandbox);
        assert_eq!(
            g("sandbox = \"read\"").unwrap(),
            PluginGrant::Classes(WorkerGrant::default())
        );
        assert_eq!(
            g("sandbox = [\"network\", \"execute\"]").unwrap(),
            PluginGrant::Classes(WorkerGrant {
                network: true,
                execute: true
            })
        );
        assert_eq!(
            g("sandbox = \"unconfined\"").unwrap(),
            PluginGrant::Unconfined
        );
        let e = g("sandbox = \"everything\"").unwrap_err().to_string();
        assert!(e.contains("everything") && e.contains("unconfined"), "{e}");
    }

    #[test]
    fn roots_expand_home_and_resolve_against_the_config_file() {
        let mut s = Sandbox {
            readable_roots: vec!["~/.cargo".into(), "tools".into()],
            ..Sandbox::default()
        };
        s.resolve_paths(Path::new("/etc/th"));
        let home = PathBuf::from(std::env::var_os("HOME").unwrap());
        assert_eq!(
            s.readable_roots,
            [home.join(".cargo"), PathBuf::from("/etc/th/tools")]
        );
    }
}
