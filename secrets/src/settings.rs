//! The `[secrets]` table: what happens to a secret found in a result, per tool, and to one
//! found in a call's arguments.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use crate::scan::RuleSpec;

/// What happens to a result that carries a secret.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Each secret replaced by `[REDACTED kind]` (the default).
    #[default]
    Redact,
    /// The result withheld: the call fails, naming the kinds found and the key that
    /// allows them.
    Block,
    /// Not scanned: for a tool whose job is to return a secret.
    Off,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::Redact => "redact",
            Action::Block => "block",
            Action::Off => "off",
        })
    }
}

/// What happens to a call whose arguments carry a secret of a known shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgumentsAction {
    /// Not scanned (the default).
    #[default]
    Off,
    /// The user is asked before it runs.
    Ask,
    /// It is refused, naming the kinds found.
    Refuse,
}

/// The `[secrets]` table.
///
/// ```
/// let s: secrets::Settings = toml::from_str(r#"
/// action = "redact"
/// arguments = "refuse"
/// [per_tool]
/// "vault__*" = "off"
/// shell = "block"
/// "#).unwrap();
/// assert_eq!(s.per_tool["shell"], secrets::Action::Block);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// For every tool not named in `per_tool` (default `redact`).
    #[serde(default)]
    pub action: Action,
    /// Per tool: a tool's name, or a glob over names (`github__*`: a mounted server's
    /// tools, a toolset's), the exact name winning over a glob and a longer glob over a
    /// shorter one.
    #[serde(default)]
    pub per_tool: BTreeMap<String, Action>,
    /// Secrets in a call's arguments (default `off`).
    #[serde(default)]
    pub arguments: ArgumentsAction,
    /// Rules of the user's own, tried after the built-in ones.
    #[serde(default)]
    pub rules: Vec<RuleSpec>,
}

impl Settings {
    /// The action for `tool`, with `matches(pattern, name)` the host's glob, and the key
    /// that set it (`[secrets] action` or `[secrets.per_tool] "pattern"`: the key is
    /// told only when a result is withheld, and the usual one is not made for every call).
    pub fn action_for(
        &self,
        tool: &str,
        matches: impl Fn(&str, &str) -> bool,
    ) -> (Action, Cow<'static, str>) {
        if let Some(a) = self.per_tool.get(tool) {
            return (*a, format!("[secrets.per_tool] \"{tool}\"").into());
        }
        let glob = self
            .per_tool
            .iter()
            .filter(|(p, _)| p.contains('*') && matches(p, tool))
            .max_by_key(|(p, _)| p.len());
        match glob {
            Some((p, a)) => (*a, format!("[secrets.per_tool] \"{p}\"").into()),
            None => (self.action, Cow::Borrowed("[secrets] action")),
        }
    }
}
