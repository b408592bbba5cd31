//! Policies checked against one tool: the Cedar schema made from its input schema, the
//! validator's verdict on every policy that can apply to it, and the policy sets its calls
//! are decided by.

use std::sync::Arc;

use cedar_policy::{Effect, Policy, PolicySet, Schema, ValidationMode, Validator};
use serde_json::{Value, json};

use crate::error::Problem;
use crate::load::{Loaded, offset_of};
use crate::shape::{Record, Shape};

/// What a policy sees of a tool (`resource`): its attributes, always present.
pub(crate) const TOOL_ATTRIBUTES: [(&str, &str); 6] = [
    ("name", "String"),
    ("toolset", "String"),
    ("source", "String"),
    ("side_effect", "String"),
    ("version", "String"),
    ("pinned", "Boolean"),
];

/// What a policy sees of the request (`context.request`).
pub(crate) const REQUEST_ATTRIBUTES: [(&str, &str); 7] = [
    ("era", "String"),
    ("transport", "String"),
    ("unix", "Long"),
    ("date", "String"),
    ("hour", "Long"),
    ("minute", "Long"),
    ("weekday", "Long"),
];

/// The policies in force for one tool.
pub(crate) struct Sets {
    /// Every permit and every forbid that refuses, among those that can apply.
    pub(crate) hard: Vec<Policy>,
    /// The `@ask` forbids that can apply.
    pub(crate) ask: Vec<Policy>,
    /// The tool's arguments as policies see them.
    pub(crate) arguments: Record,
    /// What the policies that can apply read of a call's context: all a call's context holds.
    pub(crate) reads: crate::reads::Reads,
}

/// A policy that does not fit a tool: the tool's calls are refused until it does.
#[derive(Debug, Clone)]
pub(crate) struct Unfit {
    pub(crate) label: Arc<str>,
    pub(crate) problem: Problem,
}

/// The id of the permit that lets the `@ask` set's other calls through.
pub(crate) const ASK_BASE: &str = "toolhost: everything else runs";

/// The Cedar schema for a tool `name` whose arguments are `arguments`; `actions` are the
/// other tools the checked policies name, given the same context (only `name`'s calls are
/// decided with it).
fn schema(arguments: &Record, actions: &[&str]) -> Value {
    let tool: serde_json::Map<String, Value> = TOOL_ATTRIBUTES
        .iter()
        .map(|(n, t)| (n.to_string(), json!({"type": t})))
        .collect();
    let mut request: serde_json::Map<String, Value> = REQUEST_ATTRIBUTES
        .iter()
        .map(|(n, t)| (n.to_string(), json!({"type": t})))
        .collect();
    request.insert(
        "time".into(),
        json!({"type": "Extension", "name": "datetime"}),
    );
    let context = json!({
        "type": "Record",
        "attributes": {
            "arguments": Shape::Record(arguments.clone()).cedar(),
            "request": {"type": "Record", "attributes": request},
        }
    });
    let applies = json!({
        "appliesTo": {
            "principalTypes": ["Caller"],
            "resourceTypes": ["Tool"],
            "context": context,
        }
    });
    let actions: serde_json::Map<String, Value> = actions
        .iter()
        .map(|a| (a.to_string(), applies.clone()))
        .collect();
    json!({"": {
        "entityTypes": {
            "Group": {},
            "Caller": {
                "memberOfTypes": ["Group"],
                "shape": {"type": "Record", "attributes": {
                    "name": {"type": "String"},
                    "groups": {"type": "Set", "element": {"type": "String"}},
                }},
                "tags": {"type": "String"},
            },
            "Tool": {"shape": {"type": "Record", "attributes": tool}},
        },
        "actions": actions,
    }})
}

/// The policies of `loaded` checked against the tool `name` with `input_schema`: the sets
/// its calls are decided by, or every problem of the policies that can apply to it.
pub(crate) fn check(loaded: &Loaded, name: &str, input_schema: &Value) -> Result<Sets, Vec<Unfit>> {
    let arguments = crate::shape::arguments(input_schema);
    let mut actions = vec![name];
    let mut hard = Vec::new();
    let mut ask = Vec::new();
    let mut all = PolicySet::new();
    let mut reads = crate::reads::Reads::default();
    for (policy, info) in loaded.policies.iter() {
        if !info.scope.applies_to(name) {
            continue;
        }
        reads.add(&info.reads);
        if let crate::load::Scope::Tools(tools) = &info.scope {
            actions.extend(tools.iter().map(String::as_str).filter(|t| *t != name));
        }
        // Ids are unique across the files: adding cannot clash.
        let _ = all.add(policy.clone());
        if info.asks {
            ask.push(policy.clone());
        } else {
            hard.push(policy.clone());
        }
    }
    actions.sort_unstable();
    actions.dedup();
    let unfit = validate(loaded, &all, &arguments, &actions);
    if !unfit.is_empty() {
        return Err(unfit);
    }
    Ok(Sets {
        hard,
        ask,
        arguments,
        reads,
    })
}

/// Cedar's validator on `set` for the tool's schema: a problem per error, at its place.
fn validate(loaded: &Loaded, set: &PolicySet, arguments: &Record, actions: &[&str]) -> Vec<Unfit> {
    if set.is_empty() {
        return Vec::new();
    }
    let schema = match Schema::from_json_value(schema(arguments, actions)) {
        Ok(schema) => schema,
        Err(e) => {
            // The schema is made here from types Cedar has: a failure is this crate's.
            tracing::error!(error = %e, "the policy schema made for a tool was refused");
            return Vec::new();
        }
    };
    let result = Validator::new(schema).validate(set, ValidationMode::Strict);
    result
        .validation_errors()
        .filter_map(|error| {
            let (_, info) = loaded.get(error.policy_id())?;
            let file = &loaded.files[info.file];
            let policy = Some(error.policy_id().to_string()).filter(|id| !id.contains(':'));
            let mut problem = Problem::at(&file.name, file.place(offset_of(error)), error, policy);
            if let Some(known) = known(&problem.message, arguments) {
                problem.help = Some(match problem.help.take() {
                    Some(help) => format!("{help}; {known}"),
                    None => known,
                });
            }
            Some(Unfit {
                label: info.label.clone(),
                problem,
            })
        })
        .collect()
}

/// What there is to read where an error says an attribute is not: the tool's arguments
/// (and those policies cannot read, with why), the request's, the tool's, the caller's.
fn known(message: &str, arguments: &Record) -> Option<String> {
    if !message.contains("attribute") {
        return None;
    }
    let list = |names: &[&str]| names.join(", ");
    if message.contains("in context") {
        let names = arguments.names();
        let mut help = if names.is_empty() {
            "context.arguments has nothing policies can read".to_string()
        } else {
            format!("context.arguments has: {}", list(&names))
        };
        for (name, why) in &arguments.hidden {
            help.push_str(&format!("; `{name}` is not readable by policies: {why}"));
        }
        let mut request: Vec<&str> = REQUEST_ATTRIBUTES.iter().map(|(n, _)| *n).collect();
        request.push("time");
        help.push_str(&format!("; context.request has: {}", list(&request)));
        return Some(help);
    }
    if message.contains("`Tool`") {
        let names: Vec<&str> = TOOL_ATTRIBUTES.iter().map(|(n, _)| *n).collect();
        return Some(format!("resource has: {}", list(&names)));
    }
    if message.contains("`Caller`") {
        return Some(
            "principal has: name, groups; its token's claims are tags (principal.hasTag(\"c\"), principal.getTag(\"c\"))".into(),
        );
    }
    None
}

/// Whether a policy is a permit.
pub(crate) fn permits(effect: Effect) -> bool {
    effect == Effect::Permit
}
