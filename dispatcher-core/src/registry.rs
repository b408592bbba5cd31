//! The tool registry: validated definitions, their compiled validators and factories.

use std::sync::Arc;

use tool_api::{SideEffect, ToolDefinition, ToolFactory};

use crate::error::RegistrationError;
use crate::schema::{InputValidator, check_subset};

/// A registered tool, ready to dispatch.
pub(crate) struct Registered {
    pub(crate) name: Arc<str>,
    pub(crate) factory: Arc<dyn ToolFactory>,
    pub(crate) validator: InputValidator,
    pub(crate) side_effects: SideEffect,
    pub(crate) inline: bool,
    pub(crate) concurrency_safe: bool,
}

impl Registered {
    pub(crate) fn definition(&self) -> &ToolDefinition {
        self.factory.definition()
    }
}

/// Whether `name` is what model providers accept: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Validates a factory's definition and compiles its validator.
pub(crate) fn prepare(factory: Arc<dyn ToolFactory>) -> Result<Registered, RegistrationError> {
    let def = factory.definition();
    if !is_valid_tool_name(&def.name) {
        return Err(RegistrationError::InvalidName {
            name: def.name.clone(),
        });
    }
    check_subset(&def.name, &def.input_schema)?;
    for param in &def.path_params {
        let declared = def
            .input_schema
            .get("properties")
            .and_then(|p| p.get(param))
            .is_some();
        if !declared {
            return Err(RegistrationError::UnknownPathParam {
                tool: def.name.clone(),
                param: param.clone(),
            });
        }
    }
    let validator = InputValidator::compile(&def.name, &def.input_schema)?;
    Ok(Registered {
        name: Arc::from(def.name.as_str()),
        side_effects: def.side_effects,
        inline: def.inline,
        concurrency_safe: def.is_concurrency_safe(),
        validator,
        factory,
    })
}
