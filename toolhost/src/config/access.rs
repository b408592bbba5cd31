//! `[[access]]`: which tools each caller of `serve --http` sees and calls, and modes that
//! narrow the policy for them; and `[http]`, how callers prove who they are.

use std::collections::BTreeMap;

use dispatcher_core::{ClassOverrides, Mode, Narrowing, SessionSpec, Visibility};
use mcp_server::Principal;
use serde::{Deserialize, Deserializer};

/// The `[http]` table: settings of `serve --http` beyond its command line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// OAuth access tokens from an identity provider ([`oauth::Settings`]).
    pub auth: Option<oauth::Settings>,
}

/// One `[[access]]` rule. The first rule that matches a caller applies to it; when rules
/// are given, a caller that none matches sees no tool.
///
/// ```toml
/// [[access]]
/// groups = ["contractors"]          # callers in any of these groups (from [http.auth] groups_claim)
/// tools = ["read_*", "list_dir"]    # what they see and may call: names and globs
/// toolsets = ["github"]             # and every tool of these toolsets
/// modes = { write = "deny", network = "prompt" }   # narrower than [tool_confirmation], never wider
/// per_tool = { shell = "deny" }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessRule {
    /// Callers in any of these groups or roles.
    pub groups: Vec<String>,
    /// These callers, by principal (`ISSUER#SUBJECT`, or `token-…` for a bearer token).
    pub principals: Vec<String>,
    /// The tools they see and may call (names and globs); with `toolsets` left out too,
    /// every tool.
    pub tools: Option<Vec<String>>,
    /// Toolsets whose every tool they see.
    pub toolsets: Option<Vec<String>>,
    /// Modes per side-effect class: `prompt` or `deny`, applied where stricter than the
    /// policy's.
    pub modes: ClassNarrowing,
    /// Modes per tool: `prompt` or `deny`.
    pub per_tool: BTreeMap<String, Narrow>,
}

/// A mode a rule may set: only ever narrower than the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Narrow(pub Mode);

impl<'de> Deserialize<'de> for Narrow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Mode::deserialize(d)? {
            Mode::Auto => Err(serde::de::Error::custom(
                "an [[access]] rule only narrows the policy: \"auto\" would widen it; use \"prompt\" or \"deny\" (what runs without asking is [tool_confirmation]'s to say)",
            )),
            mode => Ok(Narrow(mode)),
        }
    }
}

/// A rule's `modes`: per side-effect class, `prompt` or `deny`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassNarrowing {
    /// For `none` tools.
    pub none: Option<Narrow>,
    /// For `read` tools.
    pub read: Option<Narrow>,
    /// For `write` tools.
    pub write: Option<Narrow>,
    /// For `execute` tools.
    pub execute: Option<Narrow>,
    /// For `network` tools.
    pub network: Option<Narrow>,
}

impl AccessRule {
    /// Whether the rule applies to `caller`: it is named, or in one of the groups; a rule
    /// naming neither applies to every caller.
    pub fn matches(&self, caller: &Principal) -> bool {
        if self.groups.is_empty() && self.principals.is_empty() {
            return true;
        }
        self.principals.contains(&caller.id)
            || caller.groups.iter().any(|g| self.groups.contains(g))
    }

    fn visibility(&self) -> Visibility {
        if self.tools.is_none() && self.toolsets.is_none() {
            return Visibility::All;
        }
        Visibility::Matching {
            tools: self.tools.clone().unwrap_or_default(),
            toolsets: self.toolsets.clone().unwrap_or_default(),
        }
    }

    fn narrowing(&self, index: usize) -> Narrowing {
        let m = |c: Option<Narrow>| c.map(|n| n.0);
        Narrowing {
            rule: format!("access[{index}]"),
            classes: ClassOverrides {
                none: m(self.modes.none),
                read: m(self.modes.read),
                write: m(self.modes.write),
                execute: m(self.modes.execute),
                network: m(self.modes.network),
            },
            per_tool: self
                .per_tool
                .iter()
                .map(|(t, n)| (t.clone(), n.0))
                .collect(),
        }
    }
}

/// What serde cannot check of `[http.auth]`, `[[access]]` and the mounted servers'
/// `credentials`, which depend on each other: the first problem, as its dotted key and what
/// is wrong.
pub(super) fn check(config: &super::Config) -> Result<(), (String, String)> {
    use mcp_toolsets::Credentials;
    if let Some(auth) = &config.http.auth
        && let Err(e) = auth.check()
    {
        let (key, message) = e.0.split_once(": ").unwrap_or(("", &e.0));
        let key = format!("http.auth.{key}").trim_end_matches('.').to_string();
        return Err((key, message.to_string()));
    }
    for (i, server) in config.mcp_servers.iter().enumerate() {
        let auth = config.http.auth.as_ref();
        let needs = match server.credentials {
            Credentials::Caller if auth.is_none() => {
                "its callers' tokens come from an identity provider: add [http.auth]"
            }
            Credentials::Exchange if auth.is_none_or(|a| a.client.is_none()) => {
                "tokens are exchanged at the identity provider as toolhost's own client: add [http.auth] with [http.auth.client]"
            }
            _ => continue,
        };
        return Err((
            format!("mcp_servers[{i}].credentials"),
            format!("\"{}\": {needs}", server.credentials.name()),
        ));
    }
    let toolsets: Vec<&str> = config.mcp_servers.iter().map(|s| s.id.as_str()).collect();
    for (i, rule) in config.access.iter().enumerate() {
        if let Some(unknown) = rule
            .toolsets
            .iter()
            .flatten()
            .find(|t| !toolsets.contains(&t.as_str()))
        {
            return Err((
                format!("access[{i}].toolsets"),
                format!("no [[mcp_servers]] entry has the id {unknown:?} (ids: {toolsets:?})"),
            ));
        }
    }
    Ok(())
}

/// `spec` for `caller` under `rules`: the first matching rule's tools and modes; no tool
/// at all when rules are given and none matches. Unchanged without rules.
pub fn apply(rules: &[AccessRule], caller: &Principal, spec: SessionSpec) -> SessionSpec {
    if rules.is_empty() {
        return spec;
    }
    match rules.iter().enumerate().find(|(_, r)| r.matches(caller)) {
        Some((index, rule)) => {
            tracing::debug!(target: "toolhost::auth", principal = %caller.id, rule = index, "access rule");
            spec.visibility(rule.visibility())
                .narrowing(rule.narrowing(index))
        }
        None => {
            tracing::info!(target: "toolhost::auth", principal = %caller.id, groups = ?caller.groups,
                "no [[access]] rule matches this caller: it sees no tool");
            spec.visibility(Visibility::Only(Default::default()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatcher_core::glob_matches;

    fn rules(text: &str) -> Result<Vec<AccessRule>, String> {
        #[derive(Deserialize)]
        struct File {
            access: Vec<AccessRule>,
        }
        toml::from_str::<File>(text)
            .map(|f| f.access)
            .map_err(|e| e.to_string())
    }

    fn caller(id: &str, groups: &[&str]) -> Principal {
        Principal {
            id: id.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            own_calls_only: true,
            token: None,
            claims: Default::default(),
        }
    }

    #[test]
    fn the_first_rule_that_matches_applies_and_an_unmatched_caller_sees_nothing() {
        let rules = rules(
            r#"
            [[access]]
            groups = ["admins"]
            [[access]]
            groups = ["dev"]
            principals = ["https://idp#bob"]
            tools = ["read_*"]
            modes = { write = "deny" }
            "#,
        )
        .unwrap();
        let spec = |c: &Principal| apply(&rules, c, SessionSpec::new("s", "/"));
        assert_eq!(
            spec(&caller("x", &["admins", "dev"])).visibility,
            Visibility::All
        );
        let dev = spec(&caller("https://idp#alice", &["dev"]));
        assert!(dev.visibility.allows("read_file") && !dev.visibility.allows("shell"));
        assert_eq!(dev.narrowing.as_ref().unwrap().rule, "access[1]");
        assert_eq!(dev.narrowing.unwrap().classes.write, Some(Mode::Deny));
        assert!(
            spec(&caller("https://idp#bob", &[]))
                .visibility
                .allows("read_dir")
        );
        let nobody = spec(&caller("https://idp#eve", &["guests"]));
        assert!(!nobody.visibility.allows("read_file"));
        assert!(glob_matches("read_*", "read_file"));
    }

    #[test]
    fn a_rule_cannot_widen_the_policy() {
        let e = rules("[[access]]\nmodes = { write = \"auto\" }").unwrap_err();
        assert!(e.contains("only narrows") && e.contains("prompt"), "{e}");
        let e = rules("[[access]]\nper_tool = { shell = \"auto\" }").unwrap_err();
        assert!(e.contains("only narrows"), "{e}");
    }

    #[test]
    fn an_unknown_key_in_a_rule_is_refused() {
        let e = rules("[[access]]\ngroup = [\"dev\"]").unwrap_err();
        assert!(e.contains("unknown field `group`"), "{e}");
    }
}
