//! The built-ins' input schemas, generated from their typed inputs: what a model is shown.

use serde_json::{Value, json};

fn definition(name: &str) -> tool_api::ToolDefinition {
    builtin_tools::factories()
        .into_iter()
        .find(|f| f.definition().name == name)
        .map(|f| f.definition().clone())
        .unwrap_or_else(|| panic!("no built-in {name}"))
}

#[test]
fn every_schema_is_within_the_subset_hosts_accept_and_takes_no_unknown_field() {
    for name in ["read_file", "list_dir", "write_file", "patch_file", "shell"] {
        let def = definition(name);
        assert!(def.check().is_ok(), "{name}: {:?}", def.check());
        assert_eq!(def.input_schema["type"], "object", "{name}");
        assert_eq!(def.input_schema["additionalProperties"], false, "{name}");
    }
}

#[test]
fn each_schema_says_what_is_required_and_the_bounds_of_each_field() {
    let cases: [(&str, &str, Value); 6] = [
        ("read_file", "/required", json!(["path"])),
        (
            "read_file",
            "/properties/offset",
            json!({"type": "integer", "minimum": 1, "description": "First line to return (1-based)."}),
        ),
        ("list_dir", "/properties/path/default", json!(".")),
        ("write_file", "/required", json!(["path", "content"])),
        ("patch_file", "/properties/old/minLength", json!(1)),
        ("shell", "/properties/command/minLength", json!(1)),
    ];
    for (name, pointer, expected) in cases {
        let def = definition(name);
        assert_eq!(
            def.input_schema.pointer(pointer),
            Some(&expected),
            "{name} {pointer}"
        );
    }
}
