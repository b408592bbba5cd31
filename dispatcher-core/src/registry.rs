//! The tool registry: validated definitions, their compiled validators and factories.

use std::sync::Arc;

use tool_api::{SideEffect, ToolDefinition, ToolFactory};

use crate::error::RegistrationError;
use crate::schema::{InputValidator, check_subset};

/// A registered tool, ready to dispatch.
pub(crate) struct Registered {
    pub(crate) name: Arc<str>,
    pub(crate) factory: Arc<dyn ToolFactory>,
    /// The definition as published (for a toolset's tool: under its qualified name).
    pub(crate) published: ToolDefinition,
    /// For a toolset's tool: the toolset id and the tool's own name.
    pub(crate) origin: Option<(Arc<str>, String)>,
    pub(crate) validator: InputValidator,
    pub(crate) side_effects: SideEffect,
    pub(crate) inline: bool,
}

impl Registered {
    pub(crate) fn definition(&self) -> &ToolDefinition {
        &self.published
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
    if !is_valid_tool_name(&factory.definition().name) {
        return Err(RegistrationError::InvalidName {
            name: factory.definition().name.clone(),
        });
    }
    let name = factory.definition().name.clone();
    prepare_as(factory, name, None)
}

/// Validates a factory's definition for publication under `published_name`.
pub(crate) fn prepare_as(
    factory: Arc<dyn ToolFactory>,
    published_name: String,
    origin: Option<(Arc<str>, String)>,
) -> Result<Registered, RegistrationError> {
    let def = factory.definition();
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
    let mut published = def.clone();
    published.name = published_name;
    Ok(Registered {
        name: Arc::from(published.name.as_str()),
        published,
        origin,
        side_effects: def.side_effects,
        inline: def.inline,
        validator,
        factory,
    })
}
