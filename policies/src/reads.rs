//! What a set of policies reads of a call's context, found in their syntax trees: a call's
//! context holds only that (making Cedar values of arguments nobody reads was most of a
//! decision's cost).

use std::collections::BTreeSet;

use cedar_policy::Policy;
use serde_json::Value;

/// What policies read of `context`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    /// `context.request`.
    pub(crate) request: bool,
    /// The arguments read by name (`context.arguments.NAME`, `context.arguments has NAME`).
    pub(crate) arguments: BTreeSet<String>,
    /// `context.arguments` read whole (compared, or passed on): every argument.
    pub(crate) all_arguments: bool,
}

impl Reads {
    /// What `policy` reads. Where it reads `context` other than by its two attributes,
    /// everything is taken as read.
    pub(crate) fn of(policy: &Policy) -> Reads {
        let mut reads = Reads::default();
        match policy.to_json() {
            Ok(tree) => {
                let mut walk = Walk::default();
                walk.node(&tree);
                reads.request = walk.request;
                reads.arguments = walk.arguments;
                reads.all_arguments = walk.whole_arguments > 0 || walk.unknown;
                reads.request |= walk.unknown;
            }
            Err(_) => {
                reads.request = true;
                reads.all_arguments = true;
            }
        }
        reads
    }

    /// What either reads.
    pub(crate) fn add(&mut self, other: &Reads) {
        self.request |= other.request;
        self.all_arguments |= other.all_arguments;
        self.arguments.extend(other.arguments.iter().cloned());
    }

    /// Whether the arguments are read at all.
    pub(crate) fn any_arguments(&self) -> bool {
        self.all_arguments || !self.arguments.is_empty()
    }

    /// Whether the argument `name` is read.
    pub(crate) fn argument(&self, name: &str) -> bool {
        self.all_arguments || self.arguments.contains(name)
    }
}

#[derive(Default)]
struct Walk {
    request: bool,
    arguments: BTreeSet<String>,
    /// `context.arguments` not followed by an attribute.
    whole_arguments: usize,
    /// `context` read some other way.
    unknown: bool,
}

/// `{".": {"left": L, "attr": A}}` or `has`: (L, A).
fn access(node: &Value) -> Option<(&Value, &str)> {
    let object = node.as_object()?;
    let inner = object.get(".").or_else(|| object.get("has"))?;
    Some((inner.get("left")?, inner.get("attr")?.as_str()?))
}

fn is_context(node: &Value) -> bool {
    node.get("Var").and_then(Value::as_str) == Some("context")
}

impl Walk {
    fn node(&mut self, node: &Value) {
        if let Some((left, attr)) = access(node) {
            if is_context(left) {
                match attr {
                    "request" => self.request = true,
                    // Counted as whole here; an attribute read of it takes it back below.
                    "arguments" => self.whole_arguments += 1,
                    _ => self.unknown = true,
                }
                return;
            }
            if let Some((inner, "arguments")) = access(left)
                && is_context(inner)
            {
                self.arguments.insert(attr.to_string());
                return;
            }
            self.node(left);
            return;
        }
        if is_context(node) {
            self.unknown = true;
            return;
        }
        match node {
            Value::Object(map) => map.values().for_each(|v| self.node(v)),
            Value::Array(items) => items.iter().for_each(|v| self.node(v)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn reads(text: &str) -> Reads {
        Reads::of(&Policy::from_str(text).unwrap())
    }

    #[test]
    fn the_arguments_and_request_a_policy_reads_are_found() {
        let r = reads(
            r#"forbid(principal, action, resource) when { context.arguments has a && context.arguments.a.b == "x" && context["arguments"]["c"] == 1 };"#,
        );
        assert_eq!(
            (r.request, r.all_arguments, r.arguments.len()),
            (false, false, 2)
        );
        assert!(r.argument("a") && r.argument("c") && !r.argument("d"));
        assert!(
            reads("permit(principal, action, resource) when { context.request.hour > 3 };").request
        );
        let none = reads("permit(principal, action, resource);");
        assert!(!none.request && !none.any_arguments());
    }

    #[test]
    fn context_read_whole_counts_as_everything() {
        let whole = reads(
            r#"permit(principal, action, resource) when { context.arguments == {"a": "x"} };"#,
        );
        assert!(whole.all_arguments && !whole.request);
        let unknown = reads(r#"permit(principal, action, resource) when { context has nope };"#);
        assert!(unknown.all_arguments && unknown.request);
    }
}
