//! Rules over whole calls (who calls, which tool, what its arguments say): [`CallRules`],
//! and what they see of a call.
//!
//! A dispatcher may have one set of rules ([`crate::Dispatcher::set_rules`]). They only
//! ever narrow what the confirmation policy and a caller's access rule decided: a call the
//! tables let run may be asked about or refused, never the other way round. Listings
//! ([`crate::Dispatcher::listing_for_session`], search) leave out a tool no call of the
//! session's caller could run ([`CallRules::lists`]).

use std::sync::Arc;

use serde_json::{Map, Value};
use tool_api::{SideEffect, ToolDefinition};

use crate::policy::Mode;

/// What a host knows of a session's caller beyond its principal: its groups and the
/// claims of the token it called with ([`crate::SessionSpec::caller`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallerFacts {
    /// Its groups or roles.
    pub groups: Vec<String>,
    /// Its token's claims, as the identity provider wrote them (empty without a token).
    pub claims: Map<String, Value>,
}

/// How a call reached the host, attached to the call by the host that took it
/// ([`crate::Invocation::extend`]); a call without it was made by an embedder directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts {
    /// The protocol era: `2025` (sessions) or `2026` (stateless).
    pub era: &'static str,
    /// The transport: `stdio` or `http`.
    pub transport: &'static str,
}

/// The caller of a session, as rules see it.
#[derive(Debug, Clone, Copy)]
pub struct RuleCaller<'a> {
    /// Who the session acts for ([`crate::SessionSpec::principal`]).
    pub principal: &'a str,
    /// Its groups and claims.
    pub facts: &'a CallerFacts,
}

/// A tool as rules see it.
#[derive(Debug, Clone, Copy)]
pub struct RuleTool<'a> {
    /// Its published name.
    pub name: &'a str,
    /// A number that changes whenever a tool of this name is registered again (a toolset
    /// re-listed it, a plugin was upgraded): what a rule set checked against this
    /// definition may key its checks by.
    pub serial: u64,
    /// Its definition as published (its input schema among it).
    pub definition: &'a ToolDefinition,
    /// Its class.
    pub side_effects: SideEffect,
    /// The toolset (a mounted server's id) it belongs to, if any.
    pub toolset: Option<&'a str>,
    /// Where it comes from (`builtin`, `plugin:NAME`, `mcp:ID`, …).
    pub source: &'a str,
    /// The version of the plugin or server it comes from, when known.
    pub version: Option<&'a str>,
    /// Whether its definition is held to a pinned digest.
    pub pinned: bool,
}

/// One call as rules see it: validated, its path arguments scoped to the workspace.
#[derive(Debug, Clone, Copy)]
pub struct RuleCall<'a> {
    /// Who calls.
    pub caller: RuleCaller<'a>,
    /// Which tool.
    pub tool: RuleTool<'a>,
    /// The arguments as validated, each path argument as the workspace resolves it:
    /// relative to the root, `..` and `.` taken out (`deploy/../x` is `x`; the root is `.`).
    pub arguments: &'a Value,
    /// How the call came, if the host said.
    pub request: Option<&'a RequestFacts>,
}

/// What rules decided of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleVerdict {
    /// Run, ask or refuse.
    pub mode: Mode,
    /// What decided, as a reader finds it: e.g. `policy "no-curl" (policies/shell.cedar:3)`.
    pub rule: Arc<str>,
    /// For a refusal, what allows the call (`change or remove that policy to allow it`);
    /// a refused call's message is `Tool 'NAME' was refused by RULE: ADVICE.`
    pub advice: Arc<str>,
}

/// Rules over whole calls. One job: say, for a call, whether it runs, is asked about or is
/// refused, naming the rule that said so; and whether a caller could run a tool at all.
pub trait CallRules: Send + Sync {
    /// The verdict on one call. A verdict only narrows: the dispatcher takes the stricter
    /// of it and the tables' decision.
    fn decide(&self, call: &RuleCall<'_>) -> RuleVerdict;

    /// Whether some call of `tool` by `caller` could run; `false` leaves the tool out of
    /// the caller's listings.
    fn lists(&self, caller: &RuleCaller<'_>, tool: &RuleTool<'_>) -> bool;
}

/// The call's arguments with each path argument resolved by `resolve` (a path that does
/// not resolve is left as given: scoping refuses the call before it runs). `None` when
/// the tool has no path arguments, so the arguments are used as they are.
pub(crate) fn scoped_arguments(
    path_params: &[String],
    input: &Value,
    resolve: impl Fn(&str) -> Option<String>,
) -> Option<Value> {
    if path_params.is_empty() {
        return None;
    }
    let mut scoped = input.clone();
    let object = scoped.as_object_mut()?;
    for param in path_params {
        match object.get_mut(param) {
            Some(Value::String(path)) => {
                if let Some(resolved) = resolve(path) {
                    *path = resolved;
                }
            }
            Some(Value::Array(items)) => {
                for item in items {
                    if let Value::String(path) = item
                        && let Some(resolved) = resolve(path)
                    {
                        *path = resolved;
                    }
                }
            }
            _ => {}
        }
    }
    Some(scoped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_declared_path_arguments_are_resolved() {
        let resolve = |p: &str| Some(format!("<{p}>"));
        let params = ["path".to_string(), "paths".to_string()];
        let scoped = scoped_arguments(
            &params,
            &json!({"path": "a", "paths": ["b", 3], "other": "c"}),
            resolve,
        );
        assert_eq!(
            scoped,
            Some(json!({"path": "<a>", "paths": ["<b>", 3], "other": "c"}))
        );
        assert_eq!(scoped_arguments(&[], &json!({"path": "a"}), resolve), None);
    }
}
