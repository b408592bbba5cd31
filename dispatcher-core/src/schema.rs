//! Tool input schemas at registration and at dispatch: the subset check (the subset is
//! listed in [`tool_api::schema`], where tool authors look) and the compiled validator.
//!
//! Inputs are validated with Draft 2020-12 semantics, formats included.

use serde_json::Value;
use tool_api::schema::SchemaProblem;

use crate::error::RegistrationError;

/// Checks that `schema` is an object schema within the subset ([`tool_api::schema`]).
pub fn check_subset(tool: &str, schema: &Value) -> Result<(), RegistrationError> {
    tool_api::schema::check_subset(schema).map_err(|problem| match problem {
        SchemaProblem::Unsupported {
            pointer,
            construct,
            hint,
        } => RegistrationError::UnsupportedConstruct {
            tool: tool.to_string(),
            pointer,
            construct,
            hint,
        },
        SchemaProblem::Invalid { pointer, message } => RegistrationError::InvalidSchema {
            tool: tool.to_string(),
            pointer,
            message,
        },
    })
}

/// One way an input failed its schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InputError {
    /// JSON pointer into the input (`""` is the whole input).
    pub pointer: String,
    /// What is wrong there.
    pub message: String,
}

/// A compiled input validator.
pub struct InputValidator {
    validator: jsonschema::Validator,
    /// The schema, to read the alternatives an `anyOf` / `oneOf` error refers to.
    schema: Value,
}

impl InputValidator {
    /// Compiles a schema already accepted by [`check_subset`].
    pub fn compile(tool: &str, schema: &Value) -> Result<Self, RegistrationError> {
        jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(schema)
            .map(|validator| InputValidator {
                validator,
                schema: schema.clone(),
            })
            .map_err(|e| RegistrationError::InvalidSchema {
                tool: tool.to_string(),
                pointer: {
                    let p = e.instance_path().to_string();
                    if p.is_empty() { "/".into() } else { p }
                },
                message: e.to_string(),
            })
    }

    /// Whether the input is valid (no error list is built).
    pub fn is_valid(&self, input: &Value) -> bool {
        self.validator.is_valid(input)
    }

    /// Every violation, or an empty list when the input is valid.
    pub fn validate(&self, input: &Value) -> Vec<InputError> {
        if self.validator.is_valid(input) {
            return Vec::new();
        }
        self.validator
            .iter_errors(input)
            .map(|e| InputError {
                pointer: e.instance_path().to_string(),
                message: self.allowed_values(&e).unwrap_or_else(|| e.to_string()),
            })
            .collect()
    }

    /// For a value matching none of an `anyOf` / `oneOf` whose alternatives are constants
    /// (what a documented Rust enum becomes): the allowed values, instead of "not valid
    /// under any of the schemas listed in the 'anyOf' keyword".
    fn allowed_values(&self, e: &jsonschema::ValidationError<'_>) -> Option<String> {
        use jsonschema::error::ValidationErrorKind as Kind;
        if !matches!(e.kind(), Kind::AnyOf { .. } | Kind::OneOfNotValid { .. }) {
            return None;
        }
        let branches = self.schema.pointer(e.schema_path().as_str())?.as_array()?;
        let mut allowed = Vec::new();
        for branch in branches {
            match (branch.get("const"), branch.get("enum")) {
                (Some(c), _) => allowed.push(c.to_string()),
                (None, Some(Value::Array(values))) => {
                    allowed.extend(values.iter().map(Value::to_string));
                }
                _ => return None,
            }
        }
        Some(format!(
            "{} is not one of the allowed values: {}",
            e.instance(),
            allowed.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(property: Value, value: Value) -> Vec<String> {
        let schema = json!({"type": "object", "properties": {"mode": property}});
        InputValidator::compile("t", &schema)
            .unwrap()
            .validate(&json!({"mode": value}))
            .into_iter()
            .map(|e| format!("{}: {}", e.pointer, e.message))
            .collect()
    }

    #[test]
    fn a_value_outside_the_allowed_constants_lists_them() {
        let documented_enum = json!({"anyOf": [
            {"const": "fast", "description": "Quick."},
            {"const": "thorough", "description": "Slow."}
        ]});
        let table = [
            (
                documented_enum.clone(),
                r#"/mode: "slow" is not one of the allowed values: "fast", "thorough""#,
            ),
            (
                json!({"oneOf": [{"const": 1}, {"enum": [2, 3]}]}),
                r#"/mode: "slow" is not one of the allowed values: 1, 2, 3"#,
            ),
            (
                json!({"enum": ["fast", "thorough"]}),
                "/mode: \"slow\" is not one of",
            ),
        ];
        for (property, want) in table {
            let got = errors(property, json!("slow"));
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(got[0].starts_with(want), "{got:?} vs {want}");
        }
    }

    #[test]
    fn alternatives_that_are_not_constants_keep_the_validator_message() {
        let got = errors(
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            json!(true),
        );
        assert!(got[0].contains("anyOf"), "{got:?}");
    }
}
