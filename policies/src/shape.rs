//! A tool's arguments as policies see them: its input schema (JSON Schema) read as a Cedar
//! type ([`Shape`]), written into the Cedar schema, and each call's arguments made into a
//! Cedar value of that type.

use cedar_policy::RestrictedExpression;
use serde_json::{Map, Value, json};

/// What a JSON Schema is as a Cedar type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shape {
    String,
    Long,
    /// JSON numbers that may have a fraction: Cedar's `decimal` (four places).
    Decimal,
    Bool,
    Set(Box<Shape>),
    /// Its attributes as declared; those whose type Cedar cannot say are left out (see
    /// [`Record::hidden`]).
    Record(Record),
}

/// An object's properties.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Record {
    /// Name, type, required.
    pub(crate) attributes: Vec<(String, Shape, bool)>,
    /// Properties policies cannot see, with why (a union of types, a reference, …).
    pub(crate) hidden: Vec<(String, &'static str)>,
}

/// The largest magnitude Cedar's `decimal` holds (i64 / 10^4).
const DECIMAL_MAX: f64 = 922_337_203_685_477.0;

impl Shape {
    /// A JSON Schema as a Cedar type, or why it cannot be one.
    pub(crate) fn of(schema: &Value) -> Result<Shape, &'static str> {
        let Some(schema) = schema.as_object() else {
            return Err("its schema is not an object");
        };
        if schema.contains_key("$ref") {
            return Err("its schema is a reference");
        }
        match schema.get("type") {
            Some(Value::String(t)) => Self::of_type(t, schema),
            Some(Value::Array(types)) => {
                // A nullable type is that type, absent when null.
                let named: Vec<&str> = types
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| *t != "null")
                    .collect();
                match named.as_slice() {
                    [one] => Self::of_type(one, schema),
                    ["integer", "number"] | ["number", "integer"] => Ok(Shape::Decimal),
                    _ => Err("it may be one of several types"),
                }
            }
            Some(_) => Err("its `type` is neither a name nor a list"),
            None => Self::untyped(schema),
        }
    }

    fn of_type(name: &str, schema: &Map<String, Value>) -> Result<Shape, &'static str> {
        match name {
            "string" => Ok(Shape::String),
            "integer" => Ok(Shape::Long),
            "number" => Ok(Shape::Decimal),
            "boolean" => Ok(Shape::Bool),
            "array" => match schema.get("items") {
                Some(items) => Ok(Shape::Set(Box::new(Self::of(items)?))),
                None => Err("its items have no declared type"),
            },
            "object" => Ok(Shape::Record(Record::of(schema))),
            "null" => Err("it is always null"),
            _ => Err("its type is not a JSON Schema type"),
        }
    }

    /// A schema without `type`: an enum or const of strings, or alternatives that agree.
    fn untyped(schema: &Map<String, Value>) -> Result<Shape, &'static str> {
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            return if values.iter().all(Value::is_string) {
                Ok(Shape::String)
            } else {
                Err("its values are not all strings")
            };
        }
        if let Some(value) = schema.get("const") {
            return match value {
                Value::String(_) => Ok(Shape::String),
                Value::Bool(_) => Ok(Shape::Bool),
                _ => Err("its constant is not a string or boolean"),
            };
        }
        if schema.contains_key("properties") {
            return Ok(Shape::Record(Record::of(schema)));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alternatives) = schema.get(key).and_then(Value::as_array) {
                let mut shapes = alternatives
                    .iter()
                    .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                    .map(Shape::of);
                let first = shapes.next().ok_or("it has no alternatives")??;
                return if shapes.all(|s| s.as_ref() == Ok(&first)) {
                    Ok(first)
                } else {
                    Err("its alternatives have different types")
                };
            }
        }
        Err("its schema declares no type")
    }

    /// The Cedar schema's JSON for this type.
    pub(crate) fn cedar(&self) -> Value {
        match self {
            Shape::String => json!({"type": "String"}),
            Shape::Long => json!({"type": "Long"}),
            Shape::Decimal => json!({"type": "Extension", "name": "decimal"}),
            Shape::Bool => json!({"type": "Boolean"}),
            Shape::Set(element) => json!({"type": "Set", "element": element.cedar()}),
            Shape::Record(record) => {
                let attributes: Map<String, Value> = record
                    .attributes
                    .iter()
                    .map(|(name, shape, required)| {
                        let mut t = shape.cedar();
                        if !required && let Some(t) = t.as_object_mut() {
                            t.insert("required".into(), Value::Bool(false));
                        }
                        (name.clone(), t)
                    })
                    .collect();
                json!({"type": "Record", "attributes": attributes})
            }
        }
    }

    /// `value` as a Cedar value of this type; `None` where it is not one (null, a
    /// number out of `decimal`'s range, the wrong type): a policy that reads it then
    /// fails, and a failed policy refuses the call.
    pub(crate) fn value(&self, value: &Value) -> Option<RestrictedExpression> {
        match (self, value) {
            (Shape::String, Value::String(s)) => Some(RestrictedExpression::new_string(s.clone())),
            (Shape::Long, Value::Number(n)) => n.as_i64().map(RestrictedExpression::new_long),
            (Shape::Decimal, Value::Number(n)) => {
                let f = n.as_f64()?;
                (f.abs() < DECIMAL_MAX).then(|| decimal(format!("{f:.4}")))
            }
            (Shape::Bool, Value::Bool(b)) => Some(RestrictedExpression::new_bool(*b)),
            (Shape::Set(element), Value::Array(items)) => {
                let values: Option<Vec<_>> = items.iter().map(|i| element.value(i)).collect();
                values.map(RestrictedExpression::new_set)
            }
            (Shape::Record(record), Value::Object(object)) => record.value(object),
            _ => None,
        }
    }
}

/// How many decimals a thread keeps made.
const DECIMALS_KEPT: usize = 4096;

thread_local! {
    /// Decimals made lately, by their text: Cedar parses the extension's name each time it
    /// makes one (some 10 µs), and the numbers calls carry repeat.
    static DECIMALS: std::cell::RefCell<std::collections::HashMap<String, RestrictedExpression>> =
        std::cell::RefCell::default();
}

fn decimal(text: String) -> RestrictedExpression {
    DECIMALS.with_borrow_mut(|kept| {
        if let Some(made) = kept.get(&text) {
            return made.clone();
        }
        if kept.len() >= DECIMALS_KEPT {
            kept.clear();
        }
        let made = RestrictedExpression::new_decimal(&text);
        kept.insert(text, made.clone());
        made
    })
}

impl Record {
    fn of(schema: &Map<String, Value>) -> Record {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let nullable = |s: &Value| {
            s.get("type")
                .and_then(Value::as_array)
                .is_some_and(|t| t.iter().any(|t| t == "null"))
        };
        let mut record = Record::default();
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                match Shape::of(property) {
                    Ok(shape) => {
                        let required = required.contains(&name.as_str()) && !nullable(property);
                        record.attributes.push((name.clone(), shape, required));
                    }
                    Err(why) => record.hidden.push((name.clone(), why)),
                }
            }
        }
        record
    }

    /// The arguments' record: each declared attribute that is present and of its type.
    pub(crate) fn value(&self, object: &Map<String, Value>) -> Option<RestrictedExpression> {
        self.value_of(object, |_| true)
    }

    /// [`Record::value`] with the attributes `wanted` says, only.
    pub(crate) fn value_of(
        &self,
        object: &Map<String, Value>,
        wanted: impl Fn(&str) -> bool,
    ) -> Option<RestrictedExpression> {
        let fields = self.attributes.iter().filter_map(|(name, shape, _)| {
            if !wanted(name) {
                return None;
            }
            let value = shape.value(object.get(name)?)?;
            Some((name.clone(), value))
        });
        RestrictedExpression::new_record(fields).ok()
    }

    /// The names policies may read, for an error that names one that is not there.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.attributes.iter().map(|(n, _, _)| n.as_str()).collect()
    }
}

/// A tool's arguments as a record: its input schema's properties (an input schema that is
/// not an object's has none).
pub(crate) fn arguments(input_schema: &Value) -> Record {
    match Shape::of(input_schema) {
        Ok(Shape::Record(record)) => record,
        _ => Record::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_types_become_cedar_types_or_say_why_not() {
        let cases = [
            (json!({"type": "string"}), Ok(Shape::String)),
            (json!({"type": "integer"}), Ok(Shape::Long)),
            (json!({"type": "number"}), Ok(Shape::Decimal)),
            (json!({"type": ["string", "null"]}), Ok(Shape::String)),
            (json!({"enum": ["a", "b"]}), Ok(Shape::String)),
            (
                json!({"type": "array", "items": {"type": "string"}}),
                Ok(Shape::Set(Box::new(Shape::String))),
            ),
            (
                json!({"type": ["string", "integer"]}),
                Err("it may be one of several types"),
            ),
            (
                json!({"$ref": "#/$defs/x"}),
                Err("its schema is a reference"),
            ),
            (
                json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
                Err("its alternatives have different types"),
            ),
            (
                json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
                Ok(Shape::String),
            ),
        ];
        for (schema, expected) in cases {
            assert_eq!(Shape::of(&schema), expected, "{schema}");
        }
    }

    #[test]
    fn a_nullable_or_unlisted_property_is_optional_and_an_untyped_one_hidden() {
        let record = arguments(&json!({
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": ["integer", "null"]},
                "c": {"type": "boolean"},
                "d": {}
            },
            "required": ["a", "b"]
        }));
        assert_eq!(
            record.attributes,
            vec![
                ("a".into(), Shape::String, true),
                ("b".into(), Shape::Long, false),
                ("c".into(), Shape::Bool, false)
            ]
        );
        assert_eq!(
            record.hidden,
            vec![("d".into(), "its schema declares no type")]
        );
    }

    #[test]
    fn values_of_the_wrong_type_or_range_are_left_out() {
        let record = arguments(&json!({
            "type": "object",
            "properties": {"n": {"type": "number"}, "s": {"type": "string"}}
        }));
        assert!(Shape::Decimal.value(&json!(1e300)).is_none());
        assert!(Shape::Decimal.value(&json!(2.5)).is_some());
        assert!(Shape::String.value(&json!(3)).is_none());
        assert!(record.value(&Map::new()).is_some());
    }
}
