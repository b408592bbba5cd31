//! # text-tools: an example toolhost plugin
//!
//! Two pure tools (`side_effects = none`, inline): `word_count` counts lines, words and
//! characters of a text; `json_pointer` looks up an RFC 6901 pointer in a JSON document.
//! Copy this crate to start a plugin whose tools only compute.

use serde::Deserialize;
use tool_api::schemars::{self, JsonSchema};
use tool_api::serde_json::{Value, json};
use tool_api::{
    SideEffect, ToolContext, ToolDefinition, ToolError, ToolOutput, TypedTool, export_plugin,
};

/// The input of `word_count`; its doc comments become the schema's descriptions.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CountInput {
    /// The text to count.
    text: String,
}

/// Counts lines, words and characters.
#[derive(Default)]
pub struct WordCount;

impl TypedTool for WordCount {
    type Input = CountInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "word_count",
            "Count the lines, words and characters of a text.",
            SideEffect::None,
        )
        .inline()
    }

    fn run(&self, input: CountInput, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let text = &input.text;
        let (lines, words, chars) = (
            text.lines().count(),
            text.split_whitespace().count(),
            text.chars().count(),
        );
        Ok(
            ToolOutput::text(format!("{lines} lines, {words} words, {chars} characters"))
                .with_metadata(json!({"lines": lines, "words": words, "characters": chars})),
        )
    }
}

/// The input of `json_pointer`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PointerInput {
    /// The JSON document, as text.
    document: String,
    /// The pointer; "" is the whole document.
    pointer: String,
}

/// Looks up a JSON pointer.
#[derive(Default)]
pub struct JsonPointer;

impl TypedTool for JsonPointer {
    type Input = PointerInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "json_pointer",
            "Look up an RFC 6901 JSON pointer (like /items/0/name) in a JSON document given as text.",
            SideEffect::None,
        )
        .inline()
    }

    fn run(&self, input: PointerInput, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let PointerInput { document, pointer } = input;
        if !(pointer.is_empty() || pointer.starts_with('/')) {
            return Err(ToolError::invalid_input(format!(
                "pointer '{pointer}' must be empty or start with '/', e.g. /items/0"
            )));
        }
        let doc: Value = tool_api::serde_json::from_str(&document)
            .map_err(|e| ToolError::invalid_input(format!("document is not valid JSON: {e}")))?;
        match doc.pointer(&pointer) {
            Some(found) => {
                Ok(ToolOutput::text(found.to_string()).with_metadata(json!({"found": true})))
            }
            None => Ok(ToolOutput::failure(format!("nothing at '{pointer}'"))
                .with_metadata(json!({"found": false}))),
        }
    }
}

export_plugin!(
    name: "text-tools",
    version: env!("CARGO_PKG_VERSION"),
    tools: [WordCount, JsonPointer],
);

#[cfg(test)]
mod tests {
    use super::*;
    use tool_api::Tool;
    use tool_api::testing::TestHost;

    #[test]
    fn exports_what_a_host_accepts() {
        let tools = tool_api::check_plugin!().unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["word_count", "json_pointer"]);
    }

    #[test]
    fn input_that_does_not_fit_the_type_is_invalid_input() {
        let err = WordCount
            .execute(json!({"text": 3}), &TestHost::new().context())
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err}");
    }

    #[test]
    fn word_count_counts_lines_words_and_characters() {
        let out = WordCount
            .execute(
                json!({"text": "héllo world\nbye"}),
                &TestHost::new().context(),
            )
            .unwrap();
        assert_eq!(out.text_content(), "2 lines, 3 words, 15 characters");
    }

    #[test]
    fn json_pointer_finds_nested_values() {
        let doc = r#"{"items": [{"name": "a"}, {"name": "b"}]}"#;
        let out = JsonPointer
            .execute(
                json!({"document": doc, "pointer": "/items/1/name"}),
                &TestHost::new().context(),
            )
            .unwrap();
        assert_eq!(out.text_content(), "\"b\"");
    }

    #[test]
    fn json_pointer_reports_missing_paths_and_bad_input() {
        let ctx = TestHost::new().context();
        let out = JsonPointer
            .execute(json!({"document": "{}", "pointer": "/x"}), &ctx)
            .unwrap();
        assert!(!out.success);
        let err = JsonPointer
            .execute(json!({"document": "{", "pointer": ""}), &ctx)
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)));
        let err = JsonPointer
            .execute(json!({"document": "{}", "pointer": "x"}), &ctx)
            .unwrap_err();
        assert!(err.to_string().contains("must be empty or start with '/'"));
    }
}
