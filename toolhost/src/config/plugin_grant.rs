//! A plugin's own sandbox grant under `[plugins.NAME]` (`sandbox = "network"`, a list of
//! classes, or `"unconfined"`). The `[sandbox]` table itself is the `sandbox` crate's
//! [`::sandbox::Settings`], which the config deserializes into as it is.

use std::fmt;

use plugin_host::WorkerGrant;
use serde::Deserialize;
use serde::de::{self, SeqAccess, Visitor};
use tool_api::SideEffect;

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
    use super::*;

    #[derive(Deserialize)]
    struct GrantDoc {
        sandbox: PluginGrant,
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
}
