//! Unit tests of the ABI types and the export macro, run in-process.
#![cfg(test)]

use std::sync::atomic::{AtomicBool, Ordering};

use abi_stable::library::RootModule;
use abi_stable::std_types::{RResult, RStr};
use serde_json::{Value, json};

use crate::abi::{ERROR_FAILED, ERROR_INTERNAL, PluginModRef, ROOT_MODULE_SYMBOL};
use crate::testing::TestHost;
use crate::{
    Content, DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput,
};

#[derive(Default)]
struct Upper;
impl Tool for Upper {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        ctx.log().info("upper called");
        Ok(
            ToolOutput::text(input["text"].as_str().unwrap_or("").to_uppercase())
                .with_metadata(json!({"n": 1}))
                .with_files_modified(vec!["a.txt".into()]),
        )
    }
}
impl DefinedTool for Upper {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "upper",
            "Uppercase a text.",
            SideEffect::None,
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        )
        .inline()
    }
}

#[derive(Default)]
struct Boom;
impl Tool for Boom {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        panic!("boom in execute")
    }
    fn cancel(&self) -> bool {
        panic!("boom in cancel")
    }
}
impl DefinedTool for Boom {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "boom",
            "Panics.",
            SideEffect::None,
            json!({"type": "object"}),
        )
    }
}

static FACTORY_PANICS: AtomicBool = AtomicBool::new(false);

struct Fragile;
impl Default for Fragile {
    fn default() -> Self {
        if FACTORY_PANICS.load(Ordering::SeqCst) {
            panic!("boom in factory");
        }
        Fragile
    }
}
impl Tool for Fragile {
    fn execute(&self, _input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        ctx.files().write("out/x.txt", "data")?;
        let back = ctx.files().read("out/x.txt")?;
        ctx.files().read("../../etc/passwd")?;
        Ok(ToolOutput::text(back))
    }
}
impl DefinedTool for Fragile {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "fragile",
            "Writes.",
            SideEffect::Write,
            json!({"type": "object"}),
        )
    }
}

crate::export_plugin!(name: "unit-plugin", version: "0.3.0", tools: [Upper, Boom, Fragile]);

fn root() -> PluginModRef {
    __toolhost_plugin::_1as_0lib_1header_0root_bmodule_bloader
        .init_root_module::<PluginModRef>()
        .expect("root module passes abi_stable's layout check")
}

#[test]
fn root_module_symbol_is_the_one_abi_stable_looks_up() {
    assert_eq!(
        ROOT_MODULE_SYMBOL,
        abi_stable::library::ROOT_MODULE_LOADER_NAME
    );
}

#[test]
fn exported_root_module_reports_plugin_info_and_unwinding() {
    let info = (root().info())();
    assert_eq!(info.name.as_str(), "unit-plugin");
    assert_eq!(info.version.as_str(), "0.3.0");
    assert_eq!(info.tool_api_version.as_str(), crate::TOOL_API_VERSION);
    assert!(info.unwinds, "tests build with panic=unwind");
    assert_eq!(
        PluginModRef::VERSION_STRINGS.version.as_str(),
        crate::TOOL_API_VERSION
    );
}

#[test]
fn exported_root_module_answers_requirements_and_refuses_unknown_ops() {
    let ext = root().extension();
    let RResult::ROk(req) = ext(RStr::from(crate::abi::OP_REQUIREMENTS), RStr::from("")) else {
        panic!("requirements failed")
    };
    assert_eq!(req.as_str(), "1.0.0");
    let RResult::RErr(e) = ext(RStr::from("frobnicate"), RStr::from("")) else {
        panic!("expected an error")
    };
    assert_eq!(e.code, crate::abi::ERROR_UNSUPPORTED);
    assert!(e.message.contains("'frobnicate'"));
}

#[test]
fn concurrency_op_defers_to_the_definition_and_refuses_bad_payloads() {
    let ext = root().extension();
    let ask = |payload: &str| {
        ext(
            RStr::from(crate::abi::OP_CONCURRENCY_SAFE),
            RStr::from(payload),
        )
    };
    // `Upper` does not judge its input: the empty answer defers to its definition.
    let RResult::ROk(answer) = ask(r#"{"tool": "upper", "input": {}}"#) else {
        panic!("upper failed")
    };
    assert_eq!(answer.as_str(), "");
    let RResult::RErr(e) = ask(r#"{"tool": "nope", "input": {}}"#) else {
        panic!("expected an error for an unknown tool")
    };
    assert!(e.message.contains("has no tool 'nope'"), "{}", e.message);
    let RResult::RErr(e) = ask("not json") else {
        panic!("expected an error for a malformed payload")
    };
    assert_eq!(e.code, crate::abi::ERROR_INVALID_INPUT);
}

#[test]
fn metadata_reports_files_and_directories() {
    let host = TestHost::new();
    host.put_file("dir/a.txt", "abc");
    let ctx = host.context();
    let m = ctx.files().metadata("dir/a.txt").unwrap();
    assert!(!m.is_dir && m.size == 3);
    assert!(ctx.files().metadata("dir").unwrap().is_dir);
    assert!(ctx.files().metadata("nope").is_err());
}

#[test]
fn exported_definitions_round_trip_as_json() {
    let RResult::ROk(json) = (root().definitions())() else {
        panic!("definitions failed")
    };
    let defs: Vec<ToolDefinition> = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["upper", "boom", "fragile"]);
    assert_eq!(defs[0], Upper::definition());
}

#[test]
fn exported_tool_executes_across_the_abi_with_output_intact() {
    let RResult::ROk(tool) = (root().new_tool())(RStr::from("upper")) else {
        panic!("new_tool failed")
    };
    let host = TestHost::new();
    let ctx = host.context();
    let out = tool.execute(
        RStr::from(r#"{"text":"abc"}"#),
        crate::abi::HostCtx::clone(ctx_host(&ctx)),
    );
    let RResult::ROk(out) = out else {
        panic!("execute failed")
    };
    let out: ToolOutput = out.into();
    assert_eq!(out.content, vec![Content::text("ABC")]);
    assert_eq!(out.metadata, json!({"n": 1}));
    assert_eq!(out.files_modified, Some(vec!["a.txt".to_string()]));
    assert_eq!(host.logs().len(), 1);
}

fn ctx_host(ctx: &ToolContext) -> &crate::abi::HostCtx {
    ctx.host()
}

#[test]
fn unknown_tool_name_is_an_error_listing_the_plugins_tools() {
    let RResult::RErr(e) = (root().new_tool())(RStr::from("nope")) else {
        panic!("expected an error")
    };
    assert_eq!(e.code, ERROR_FAILED);
    assert!(e.message.contains("upper, boom, fragile"), "{}", e.message);
}

#[test]
fn panic_in_execute_is_contained_as_internal_error() {
    let RResult::ROk(tool) = (root().new_tool())(RStr::from("boom")) else {
        panic!("new_tool failed")
    };
    let host = TestHost::new();
    let RResult::RErr(e) = tool.execute(RStr::from("{}"), host.context().host().clone()) else {
        panic!("expected an error")
    };
    assert_eq!(e.code, ERROR_INTERNAL);
    assert!(e.message.contains("boom in execute"), "{}", e.message);
    assert!(!tool.cancel(), "a panicking cancel reads as false");
}

#[test]
fn panic_in_factory_is_contained_as_internal_error() {
    FACTORY_PANICS.store(true, Ordering::SeqCst);
    let r = (root().new_tool())(RStr::from("fragile"));
    FACTORY_PANICS.store(false, Ordering::SeqCst);
    let RResult::RErr(e) = r else {
        panic!("expected an error")
    };
    assert_eq!(e.code, ERROR_INTERNAL);
    assert!(e.message.contains("boom in factory"), "{}", e.message);
}

#[test]
fn malformed_input_json_is_invalid_input() {
    let RResult::ROk(tool) = (root().new_tool())(RStr::from("upper")) else {
        panic!("new_tool failed")
    };
    let RResult::RErr(e) = tool.execute(
        RStr::from("{not json"),
        TestHost::new().context().host().clone(),
    ) else {
        panic!("expected an error")
    };
    assert!(matches!(ToolError::from(e), ToolError::InvalidInput(m) if !m.is_empty()));
}

#[test]
fn workspace_files_refuse_escapes_with_permission_denied() {
    let host = TestHost::new();
    let err = Fragile.execute(json!({}), &host.context()).unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied(_)), "{err:?}");
    assert_eq!(host.file("out/x.txt").as_deref(), Some("data"));
}

#[test]
fn cancellation_flag_reaches_the_tool() {
    let host = TestHost::new();
    let ctx = host.context();
    assert!(ctx.check_cancelled().is_ok());
    host.cancel();
    assert!(matches!(
        ctx.check_cancelled(),
        Err(ToolError::Cancelled(_))
    ));
}

#[test]
fn output_with_image_survives_the_abi_conversion() {
    let out = ToolOutput {
        content: vec![
            Content::text("t"),
            Content::Image {
                mime: "image/png".into(),
                data: vec![1, 2, 3],
            },
        ],
        success: false,
        metadata: Value::Null,
        files_modified: None,
        command_executed: Some("ls".into()),
    };
    let back: ToolOutput = crate::abi::AbiOutput::from(out.clone()).into();
    assert_eq!(back, out);
}

#[test]
fn tool_errors_keep_their_class_across_the_abi() {
    for e in [
        ToolError::Failed("a".into()),
        ToolError::InvalidInput("b".into()),
        ToolError::PermissionDenied("c".into()),
        ToolError::Cancelled("d".into()),
        ToolError::Internal("e".into()),
    ] {
        let back: ToolError = crate::abi::AbiError::from(e.clone()).into();
        assert_eq!(back, e);
    }
}

#[test]
fn side_effect_parses_and_orders_by_risk() {
    assert_eq!("WRITE".parse::<SideEffect>().unwrap(), SideEffect::Write);
    assert!(
        "delete"
            .parse::<SideEffect>()
            .unwrap_err()
            .contains("expected one of")
    );
    assert!(SideEffect::Read < SideEffect::Execute);
    assert_eq!(SideEffect::Network.default_timeout().as_secs(), 600);
}

/// A tool whose definition the test picks: (name, side effects, schema).
macro_rules! defined {
    ($ty:ident, $name:expr, $class:expr, $schema:expr) => {
        #[derive(Default)]
        struct $ty;
        impl Tool for $ty {
            fn execute(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
                Ok(ToolOutput::text(""))
            }
        }
        impl DefinedTool for $ty {
            fn definition() -> ToolDefinition {
                ToolDefinition::new($name, "A tool.", $class, $schema)
            }
        }
    };
}

defined!(Fine, "fine", SideEffect::None, json!({"type": "object"}));
defined!(
    SameNameRead,
    "twin",
    SideEffect::Read,
    json!({"type": "object"})
);
defined!(
    SameNameWrite,
    "twin",
    SideEffect::Write,
    json!({"type": "object"})
);
defined!(
    Patterned,
    "patterned",
    SideEffect::None,
    json!({"type": "object", "patternProperties": {"^x": {"type": "string"}}})
);
defined!(
    OneOf,
    "one_of",
    SideEffect::None,
    json!({"type": "object", "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "null"}]}}})
);
defined!(
    Spaced,
    "bad name",
    SideEffect::None,
    json!({"type": "object"})
);

static GOOD: crate::export::PluginExport = crate::export::PluginExport::new(
    "good",
    "0.2.0",
    "1.0.0",
    true,
    &[crate::export::ToolEntry::of::<Fine>()],
);

static FLAWED: crate::export::PluginExport = crate::export::PluginExport::new(
    "flawed",
    "0.1.0",
    "1.0.0",
    true,
    &[
        crate::export::ToolEntry::of::<SameNameRead>(),
        crate::export::ToolEntry::of::<SameNameWrite>(),
        crate::export::ToolEntry::of::<Patterned>(),
        crate::export::ToolEntry::of::<OneOf>(),
        crate::export::ToolEntry::of::<Spaced>(),
    ],
);

#[test]
fn check_plugin_returns_the_exported_definitions() {
    let defs = crate::testing::check_plugin(&GOOD, "0.2.0").unwrap();
    assert_eq!(defs.len(), 1);
    assert_eq!(defs[0].name, "fine");
}

#[test]
fn check_plugin_names_every_problem_a_host_would_refuse() {
    let problems = crate::testing::check_plugin(&FLAWED, "0.2.0")
        .unwrap_err()
        .to_string();
    for expected in [
        "export_plugin! says version \"0.1.0\" but Cargo.toml says \"0.2.0\"",
        "two exported tools are named 'twin' (declaring read and write)",
        "uses patternProperties at /patternProperties",
        "uses oneOf at /properties/v/oneOf, which is outside the supported subset: use anyOf",
        "tool name 'bad name' is invalid",
    ] {
        assert!(
            problems.contains(expected),
            "{expected:?} missing in:\n{problems}"
        );
    }
    assert_eq!(
        problems.lines().count(),
        5,
        "one problem per line:\n{problems}"
    );
}

#[test]
fn test_host_refuses_an_empty_patch_as_the_host_does() {
    let host = TestHost::new();
    host.put_file("empty.txt", "");
    let e = host
        .context()
        .files()
        .patch("empty.txt", "", "x")
        .unwrap_err();
    assert_eq!(
        e.message(),
        crate::fs_error::patch_matches("empty.txt", 0),
        "an empty `old` matches nothing"
    );
    assert_eq!(host.file("empty.txt").as_deref(), Some(""));
}

/// A typed tool whose input is one count.
#[derive(Default)]
struct Repeat;

/// A word and how many times to write it (the type's doc comment, for Rust readers).
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RepeatInput {
    /// The word to repeat.
    word: String,
    times: u8,
}

impl crate::TypedTool for Repeat {
    type Input = RepeatInput;
    fn definition() -> ToolDefinition {
        ToolDefinition::typed("repeat", "Repeat a word.", SideEffect::None).inline()
    }
    fn run(&self, input: RepeatInput, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(input.word.repeat(input.times.into())))
    }
}

#[test]
fn a_typed_tool_across_the_abi_reads_its_input_text_as_a_value_would_give_it() {
    let tool = crate::export::abi_tool(Repeat);
    let run = |text: &str| match tool
        .execute(RStr::from(text), TestHost::new().context().host().clone())
    {
        RResult::ROk(out) => Ok(ToolOutput::from(out).text_content()),
        RResult::RErr(e) => Err(ToolError::from(e)),
    };
    assert_eq!(run(r#"{"word":"ab","times":3}"#).unwrap(), "ababab");
    // The same input as a `Value` and as its text: one answer.
    let value = Repeat
        .execute(json!({"times": 2, "word": "x"}), &TestHost::new().context())
        .unwrap();
    assert_eq!(
        run(r#"{"times":2,"word":"x"}"#).unwrap(),
        value.text_content()
    );
    let refusals = [
        (r#"{"word":"ab","times":300}"#, "does not fit the tool"),
        (r#"{"word":"ab"}"#, "does not fit the tool"),
        (
            r#"{"word":"ab","times":1,"more":true}"#,
            "does not fit the tool",
        ),
        (r#"{"word":"ab","times":"#, "is not JSON"),
    ];
    for (text, says) in refusals {
        match run(text) {
            Err(ToolError::InvalidInput(m)) => assert!(m.contains(says), "{text}: {m}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn a_typed_tool_given_a_borrowed_input_answers_as_given_it_owned() {
    let ctx = TestHost::new().context();
    let input = json!({"word": "ab", "times": 2});
    let borrowed = Repeat.execute_ref(&input, &ctx).unwrap();
    assert_eq!(borrowed.text_content(), "abab");
    assert_eq!(
        borrowed.text_content(),
        Repeat.execute(input, &ctx).unwrap().text_content()
    );
    for misfit in [
        json!({"word": "ab", "times": 300}),
        json!({"word": "ab"}),
        json!({"word": "ab", "times": 1, "more": true}),
    ] {
        match Repeat.execute_ref(&misfit, &ctx) {
            Err(ToolError::InvalidInput(m)) => {
                assert!(m.contains("does not fit the tool"), "{misfit}: {m}")
            }
            other => panic!("{misfit}: {other:?}"),
        }
    }
}

#[test]
fn a_typed_input_schema_carries_no_meta_schema_type_name_or_type_doc_at_its_root() {
    let schema = crate::typed::input_schema::<RepeatInput>();
    assert_eq!(schema.get("$schema"), None, "{schema}");
    assert_eq!(schema.get("title"), None, "{schema}");
    assert_eq!(schema.get("description"), None, "{schema}");
    // A field's doc comment is what tells a model what to put there: it stays.
    assert_eq!(
        schema["properties"]["word"]["description"],
        "The word to repeat."
    );
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["word", "times"]));
    // What a host checks it against still holds.
    crate::schema::check_subset(&schema).unwrap();
}
