//! The `[plugins]` table: `[plugins.NAME]` settings per plugin, and `[[plugins.sources]]`,
//! the OCI references plugins are installed from (`toolhost plugin install`).

use std::collections::BTreeMap;
use std::fmt;

use plugin_host::Isolation;
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};

use super::PluginGrant;

/// A `[plugins.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginConfig {
    /// Where this plugin runs, whatever `plugin_isolation` says.
    pub isolation: Option<Isolation>,
    /// What its worker may do instead of what its tools declare: narrower, or wider
    /// (logged); `unconfined`: no sandbox (logged).
    pub sandbox: Option<PluginGrant>,
    /// With network: the only TCP ports its worker may connect to.
    pub tcp_ports: Option<Vec<u16>>,
    /// The hosts its `network` tools may reach: a WebAssembly component's HTTP requests
    /// (none by default), an isolated worker's connections through its egress proxy
    /// (default: `[sandbox.network] allow`).
    pub http_hosts: ::sandbox::HostList,
    /// Where its worker's sandbox cannot be enforced, run it unconfined (logged).
    pub allow_unsandboxed: bool,
}

/// The `[plugins]` table. `sources` is a reserved name: no plugin's settings go there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plugins {
    /// `[plugins.NAME]`, by plugin name.
    pub named: BTreeMap<String, PluginConfig>,
    /// `[[plugins.sources]]`, in the file's order.
    pub sources: Vec<plugin_oci::Source>,
}

impl Plugins {
    /// The settings of every named plugin.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &PluginConfig)> {
        self.named.iter()
    }
}

impl std::ops::Index<&str> for Plugins {
    type Output = PluginConfig;

    fn index(&self, name: &str) -> &PluginConfig {
        &self.named[name]
    }
}

impl<'de> Deserialize<'de> for Plugins {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Table;
        impl<'de> Visitor<'de> for Table {
            type Value = Plugins;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table of [plugins.NAME] tables and [[plugins.sources]]")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Plugins, A::Error> {
                let mut plugins = Plugins::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "sources" {
                        plugins.sources = map.next_value()?;
                    } else {
                        let settings = map.next_value()?;
                        plugins.named.insert(key, settings);
                    }
                }
                Ok(plugins)
            }
        }
        d.deserialize_map(Table)
    }
}
