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
}

impl InputValidator {
    /// Compiles a schema already accepted by [`check_subset`].
    pub fn compile(tool: &str, schema: &Value) -> Result<Self, RegistrationError> {
        jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(schema)
            .map(|validator| InputValidator { validator })
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
                message: e.to_string(),
            })
            .collect()
    }
}
