//! Typed inputs: a tool whose input is a Rust type, so its schema comes from the type and
//! cannot drift from the code that reads it.
//!
//! Implement [`TypedTool`] instead of [`Tool`] + [`DefinedTool`]: name an input type that
//! derives `serde::Deserialize` and `schemars::JsonSchema` (re-exported as
//! [`crate::schemars`]); the tool's `input_schema` is generated from it, and
//! [`TypedTool::run`] gets a parsed value. An input the host validated against the schema
//! and that still does not deserialize (a constraint the schema cannot say) ends the call
//! as `validation_error`, with serde's message.
//!
//! ```
//! use serde::Deserialize;
//! use tool_api::schemars::{self, JsonSchema};
//! use tool_api::{SideEffect, ToolContext, ToolDefinition, ToolError, ToolOutput, TypedTool};
//!
//! /// What `word_count` takes.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! pub struct CountInput {
//!     /// The text to count.
//!     text: String,
//! }
//!
//! #[derive(Default)]
//! pub struct WordCount;
//!
//! impl TypedTool for WordCount {
//!     type Input = CountInput;
//!     fn definition() -> ToolDefinition {
//!         ToolDefinition::typed("word_count", "Count the words of a text.", SideEffect::None).inline()
//!     }
//!     fn run(&self, input: CountInput, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
//!         Ok(ToolOutput::text(input.text.split_whitespace().count().to_string()))
//!     }
//! }
//!
//! let def = <WordCount as tool_api::DefinedTool>::definition();
//! assert_eq!(def.input_schema["properties"]["text"]["type"], "string");
//! assert_eq!(def.input_schema["required"][0], "text");
//! assert!(def.check().is_ok(), "within the subset hosts accept");
//! ```

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::ToolContext;
use crate::definition::ToolDefinition;
use crate::output::{ToolError, ToolOutput};
use crate::tool::{DefinedTool, Tool};

/// A tool with a typed input: its definition's `input_schema` is generated from
/// [`TypedTool::Input`], and [`TypedTool::run`] gets the parsed input. Every `TypedTool` is a
/// [`Tool`] and a [`DefinedTool`], so it is exported and registered like any other tool.
pub trait TypedTool: Default + Send + Sync + 'static {
    /// The input, deserialized from the call's JSON; its JSON Schema is the tool's.
    type Input: DeserializeOwned + JsonSchema;

    /// The definition: name, description, side effects and options (build it with
    /// [`ToolDefinition::typed`]). Any input schema set here is replaced by the one
    /// generated from [`TypedTool::Input`].
    fn definition() -> ToolDefinition;

    /// Runs the call with its parsed input.
    fn run(&self, input: Self::Input, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// Asks a running call to stop (see [`Tool::cancel`]). The default does nothing.
    fn cancel(&self) -> bool {
        false
    }

    /// Whether this call may run alongside others (see
    /// [`DefinedTool::is_concurrency_safe`]); `None` defers to the definition.
    fn is_concurrency_safe(input: &Self::Input) -> Option<bool> {
        let _ = input;
        None
    }
}

/// The JSON Schema of `T`, in the subset hosts accept: generated with schemars (Draft
/// 2020-12), with `oneOf` (which schemars uses for enums, whose variants never overlap)
/// written as the equivalent `anyOf`, and without the root's `$schema`, `title` and
/// `description`: hosts validate every input as Draft 2020-12 whatever it says, the title
/// is the Rust type's name, and the description is the type's doc comment, written for the
/// crate's readers while the model reads the tool's own description beside the schema. A
/// model is handed the schema with every listing (toolhost's five tools spent 62 of their
/// 602 tokens on those doc comments). What a field's doc comment says stays: that is how a
/// model learns what to put there.
pub fn input_schema<T: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(T).to_value();
    if let Value::Object(root) = &mut schema {
        root.remove("$schema");
        root.remove("title");
        root.remove("description");
    }
    one_of_as_any_of(&mut schema);
    schema
}

fn one_of_as_any_of(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(variants) = map.remove("oneOf") {
                map.insert("anyOf".into(), variants);
            }
            map.values_mut().for_each(one_of_as_any_of);
        }
        Value::Array(items) => items.iter_mut().for_each(one_of_as_any_of),
        _ => {}
    }
}

/// Parses a call's input into `T`; a mismatch is [`ToolError::InvalidInput`]
/// (`validation_error`).
pub fn parse_input<T: DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input).map_err(misfit)
}

/// Reads a call's input into `T` from a borrowed [`Value`]; a mismatch is
/// [`ToolError::InvalidInput`] as with [`parse_input`].
fn parse_input_ref<T: DeserializeOwned>(input: &Value) -> Result<T, ToolError> {
    T::deserialize(input).map_err(misfit)
}

/// Parses a call's input from its JSON text into `T`, with no [`Value`] between; a
/// mismatch is [`ToolError::InvalidInput`] as with [`parse_input`].
fn parse_input_text<T: DeserializeOwned>(input: &str) -> Result<T, ToolError> {
    serde_json::from_str(input).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => misfit(e),
        _ => ToolError::InvalidInput(format!("the input is not JSON: {e}")),
    })
}

/// An input that is JSON but not of the tool's input type.
fn misfit(e: serde_json::Error) -> ToolError {
    ToolError::InvalidInput(format!("the input does not fit the tool: {e}"))
}

impl<T: TypedTool> Tool for T {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.run(parse_input(input)?, ctx)
    }

    fn execute_text(&self, input: &str, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.run(parse_input_text(input)?, ctx)
    }

    fn execute_ref(&self, input: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.run(parse_input_ref(input)?, ctx)
    }

    fn cancel(&self) -> bool {
        TypedTool::cancel(self)
    }
}

impl<T: TypedTool> DefinedTool for T {
    fn definition() -> ToolDefinition {
        let mut def = <T as TypedTool>::definition();
        def.input_schema = input_schema::<T::Input>();
        def
    }

    fn is_concurrency_safe(input: &Value) -> Option<bool> {
        let parsed: T::Input = serde_json::from_value(input.clone()).ok()?;
        <T as TypedTool>::is_concurrency_safe(&parsed)
    }
}
