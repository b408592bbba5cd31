//! The JSON Schema subset tool inputs may use. A host checks it when it registers a tool
//! and refuses a tool outside it; [`crate::testing::check_plugin`] checks it in a plugin's
//! own `cargo test`, and `cargo xtask plugin package` before it packages.
//!
//! # The subset
//!
//! It is what the major model providers accept in tool definitions, so a tool written once
//! works with every provider. A schema is refused at registration, naming the construct and
//! its JSON pointer, if it uses anything else.
//!
//! | kind | allowed keywords |
//! |---|---|
//! | root | must be `"type": "object"`; may carry `$schema` and `$defs` / `definitions` |
//! | any node | `type` (a name or a list of `object`, `array`, `string`, `number`, `integer`, `boolean`, `null`), `enum`, `const`, `anyOf`, `$ref` (local: `#/$defs/…` or `#/definitions/…`) |
//! | annotations | `title`, `description`, `default`, `examples`, `deprecated`, `readOnly`, `writeOnly`, `$comment` |
//! | objects | `properties`, `required`, `additionalProperties` (boolean or schema), `minProperties`, `maxProperties` |
//! | arrays | `items` (one schema), `minItems`, `maxItems`, `uniqueItems` |
//! | strings | `minLength`, `maxLength`, `pattern`, `format` |
//! | numbers | `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf` |
//!
//! Refused, with what to use instead: `oneOf` (use `anyOf`), `allOf` (merge the
//! subschemas), `not`, `if`/`then`/`else`, `patternProperties`, `propertyNames`,
//! `dependentRequired`, `dependentSchemas`, `dependencies`, `prefixItems` and array-form
//! `items` (tuples), `contains`, `unevaluated*`, `$id`, `$anchor`, `$dynamicRef`, remote
//! `$ref`, and any keyword not listed above.
//!
//! Inputs are validated with Draft 2020-12 semantics, formats included.

use std::fmt;

use serde_json::Value;

/// Why a schema is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaProblem {
    /// It uses a construct outside the subset.
    Unsupported {
        /// JSON pointer of the construct inside the schema.
        pointer: String,
        /// The keyword or construct.
        construct: String,
        /// What to use instead.
        hint: String,
    },
    /// It is malformed (wrong value type for a keyword, dangling `$ref`, not an object at
    /// the top).
    Invalid {
        /// JSON pointer inside the schema.
        pointer: String,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaProblem::Unsupported {
                pointer,
                construct,
                hint,
            } => write!(
                f,
                "uses {construct} at {pointer}, which is outside the supported subset: {hint}"
            ),
            SchemaProblem::Invalid { pointer, message } => {
                write!(f, "is invalid at {pointer}: {message}")
            }
        }
    }
}

impl std::error::Error for SchemaProblem {}

const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
];
const SCALAR_KEYWORDS: &[&str] = &[
    "required",
    "minProperties",
    "maxProperties",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "enum",
    "const",
];
const TYPES: &[&str] = &[
    "object", "array", "string", "number", "integer", "boolean", "null",
];

fn hint_for(keyword: &str) -> &'static str {
    match keyword {
        "oneOf" => "use anyOf",
        "allOf" => "merge the subschemas into one",
        "not" | "if" | "then" | "else" => {
            "express the constraint with enum, anyOf or the tool's own checks"
        }
        "patternProperties" | "propertyNames" => {
            "list the properties, or use additionalProperties with a schema"
        }
        "dependentRequired" | "dependentSchemas" | "dependencies" => {
            "check the dependency inside the tool and return InvalidInput"
        }
        "prefixItems" | "items" => "use one schema for all items (\"items\": {…})",
        "contains" | "minContains" | "maxContains" => {
            "check the array inside the tool and return InvalidInput"
        }
        "unevaluatedProperties" => "use additionalProperties",
        "unevaluatedItems" => "use items",
        "$id" | "$anchor" | "$dynamicRef" | "$dynamicAnchor" | "$recursiveRef"
        | "$recursiveAnchor" | "$vocabulary" => {
            "inline the schema or use a local $ref to #/$defs/…"
        }
        "$ref" => "only local references to #/$defs/NAME or #/definitions/NAME are supported",
        "$defs" | "definitions" | "$schema" => "move it to the root of the schema",
        _ => "remove it; only the keywords listed in tool-api's `schema` docs are accepted",
    }
}

struct Checker<'a> {
    root: &'a Value,
}

/// Where a node is inside the schema. Rendered as a JSON pointer only for an error, so a
/// schema within the subset is checked without building a string for each node.
#[derive(Clone, Copy)]
enum Place<'a> {
    Root,
    Key(&'a Place<'a>, &'a str),
    Index(&'a Place<'a>, usize),
}

impl Place<'_> {
    /// The JSON pointer (`/` for the root).
    fn pointer(&self) -> String {
        fn write(place: &Place<'_>, out: &mut String) {
            match place {
                Place::Root => {}
                Place::Key(parent, key) => {
                    write(parent, out);
                    out.push('/');
                    out.push_str(&key.replace('~', "~0").replace('/', "~1"));
                }
                Place::Index(parent, i) => {
                    write(parent, out);
                    out.push('/');
                    out.push_str(&i.to_string());
                }
            }
        }
        let mut out = String::new();
        write(self, &mut out);
        if out.is_empty() {
            out.push('/');
        }
        out
    }
}

impl Checker<'_> {
    fn unsupported(&self, place: &Place<'_>, construct: &str) -> SchemaProblem {
        SchemaProblem::Unsupported {
            pointer: place.pointer(),
            construct: construct.to_string(),
            hint: hint_for(construct).to_string(),
        }
    }

    fn invalid(&self, place: &Place<'_>, message: impl Into<String>) -> SchemaProblem {
        SchemaProblem::Invalid {
            pointer: place.pointer(),
            message: message.into(),
        }
    }

    fn check_node(
        &self,
        node: &Value,
        place: &Place<'_>,
        is_root: bool,
    ) -> Result<(), SchemaProblem> {
        let obj = match node {
            Value::Object(o) => o,
            Value::Bool(_) if !is_root => return Ok(()),
            _ => return Err(self.invalid(place, "a schema must be a JSON object")),
        };
        // In key order, whatever order the map keeps: the first problem is the same in
        // every build (serde_json's `preserve_order` may be on in a host's).
        let mut entries: Vec<(&String, &Value)> = obj.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, value) in entries {
            let here = Place::Key(place, key);
            match key.as_str() {
                k if ANNOTATIONS.contains(&k) || SCALAR_KEYWORDS.contains(&k) => {}
                "$schema" | "$defs" | "definitions" if is_root => {
                    if key != "$schema" {
                        self.check_map(value, &here)?;
                    }
                }
                "type" => self.check_type(value, &here)?,
                "properties" => self.check_map(value, &here)?,
                "additionalProperties" => self.check_node(value, &here, false)?,
                "items" => match value {
                    Value::Array(_) => return Err(self.unsupported(&here, "items")),
                    v => self.check_node(v, &here, false)?,
                },
                "anyOf" => match value {
                    Value::Array(items) if !items.is_empty() => {
                        for (i, item) in items.iter().enumerate() {
                            self.check_node(item, &Place::Index(&here, i), false)?;
                        }
                    }
                    _ => {
                        return Err(
                            self.invalid(&here, "anyOf must be a non-empty array of schemas")
                        );
                    }
                },
                "$ref" => self.check_ref(value, &here)?,
                other => return Err(self.unsupported(&here, other)),
            }
        }
        Ok(())
    }

    fn check_map(&self, value: &Value, place: &Place<'_>) -> Result<(), SchemaProblem> {
        let Value::Object(map) = value else {
            return Err(self.invalid(place, "expected an object mapping names to schemas"));
        };
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (name, schema) in entries {
            self.check_node(schema, &Place::Key(place, name), false)?;
        }
        Ok(())
    }

    fn check_type(&self, value: &Value, place: &Place<'_>) -> Result<(), SchemaProblem> {
        let names: &[Value] = match value {
            Value::Array(items) => items,
            v => std::slice::from_ref(v),
        };
        for name in names {
            match name.as_str() {
                Some(n) if TYPES.contains(&n) => {}
                _ => {
                    return Err(self.invalid(
                        place,
                        format!("unknown type {name}: expected one of {}", TYPES.join(", ")),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_ref(&self, value: &Value, place: &Place<'_>) -> Result<(), SchemaProblem> {
        let Some(target) = value.as_str() else {
            return Err(self.invalid(place, "$ref must be a string"));
        };
        let local = target
            .strip_prefix('#')
            .filter(|rest| rest.starts_with("/$defs/") || rest.starts_with("/definitions/"));
        match local {
            Some(p) if self.root.pointer(p).is_some() => Ok(()),
            Some(_) => Err(self.invalid(place, format!("$ref '{target}' points to nothing"))),
            None => Err(self.unsupported(place, "$ref")),
        }
    }
}

/// Checks that `schema` is an object schema within the subset; the error names the first
/// construct outside it (or the malformed part) and its JSON pointer.
///
/// ```
/// use serde_json::json;
/// assert!(tool_api::schema::check_subset(&json!({"type": "object"})).is_ok());
/// let e = tool_api::schema::check_subset(&json!({
///     "type": "object",
///     "properties": {"x": {"oneOf": [{"type": "string"}, {"type": "null"}]}}
/// }))
/// .unwrap_err();
/// assert_eq!(e.to_string(), "uses oneOf at /properties/x/oneOf, which is outside the supported subset: use anyOf");
/// ```
pub fn check_subset(schema: &Value) -> Result<(), SchemaProblem> {
    let checker = Checker { root: schema };
    checker.check_node(schema, &Place::Root, true)?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(checker.invalid(
            &Place::Key(&Place::Root, "type"),
            "the top of an input schema must be \"type\": \"object\"",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pointer_of(schema: &Value) -> String {
        match check_subset(schema) {
            Err(
                SchemaProblem::Unsupported { pointer, .. } | SchemaProblem::Invalid { pointer, .. },
            ) => pointer,
            Ok(()) => panic!("{schema} was accepted"),
        }
    }

    #[test]
    fn a_refusal_names_the_json_pointer_of_the_construct() {
        let escaped = json!({"type": "object", "properties": {"a/b~c": {"oneOf": []}}});
        assert_eq!(pointer_of(&escaped), "/properties/a~1b~0c/oneOf");
        let in_any_of = json!({"type": "object", "properties": {
            "x": {"anyOf": [{"type": "string"}, {"not": {}}]}
        }});
        assert_eq!(pointer_of(&in_any_of), "/properties/x/anyOf/1/not");
        let in_defs = json!({"type": "object", "$defs": {"d": {"type": "wat"}}});
        assert_eq!(pointer_of(&in_defs), "/$defs/d/type");
        assert_eq!(pointer_of(&json!(true)), "/");
        assert_eq!(pointer_of(&json!({"properties": {}})), "/type");
    }
}
