//! The Rust WebAssembly component scaffold (`plugin new NAME --wasm`): a crate
//! that builds into a component with `wit-bindgen`, a copy of `plugin.wit` and a sample
//! tool. Needs none of the component tooling to write.

use std::path::{Path, PathBuf};

use crate::error::{Result, io};

/// The wit-bindgen release the Rust component scaffold uses.
pub const WIT_BINDGEN: &str = "0.57";

/// `plugin new NAME --wasm`: a Rust crate that builds into a WebAssembly component with
/// `wit-bindgen` (`cargo build --release --target wasm32-wasip2`), with a copy of
/// `plugin.wit` and a sample tool. Its README says which target it needs.
pub fn new_rust(name: &str, path: Option<&Path>) -> Result<PathBuf> {
    let step = "create the component crate";
    let (name, dir) = crate::scaffold::scaffold_dir(step, name, path)?;
    let tool_name = name.replace('-', "_");
    io(step, std::fs::create_dir_all(dir.join("src")))?;
    io(step, std::fs::create_dir_all(dir.join("wit")))?;
    let cargo_toml = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# A WebAssembly component when built for wasm32-wasip2.
crate-type = ["cdylib"]

[dependencies]
wit-bindgen = "{WIT_BINDGEN}"
serde_json = "1"

[profile.release]
opt-level = "s"
lto = true

# Its own workspace, wherever it is created.
[workspace]
"#
    );
    let lib_rs = format!(
        r##"//! The {name} toolhost plugin, as a WebAssembly component.

wit_bindgen::generate!({{ path: "wit", world: "plugin" }});

use exports::toolhost::plugin::tools::{{Guest, PluginInfo, ToolError, ToolOutput}};
use toolhost::plugin::host;
use toolhost::plugin::types::{{Content, Level, SideEffect, ToolDefinition}};

struct Component;

impl Guest for Component {{
    fn describe() -> PluginInfo {{
        PluginInfo {{
            name: "{name}".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            tools: vec![ToolDefinition {{
                name: "{tool_name}_greet".into(),
                description: "Greet someone by name.".into(),
                input_schema: r#"{{"type": "object", "properties": {{"name": {{"type": "string", "description": "Who to greet."}}}}, "required": ["name"], "additionalProperties": false}}"#.into(),
                // Declare the highest capability honestly: none < read < write < execute < network.
                side_effects: SideEffect::None,
                concurrency_safe: None,
                timeout_ms: None,
                path_params: Vec::new(),
            }}],
        }}
    }}

    fn execute(tool: String, input: String) -> Result<ToolOutput, ToolError> {{
        let input: serde_json::Value =
            serde_json::from_str(&input).map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        match tool.as_str() {{
            "{tool_name}_greet" => {{
                let name = input["name"].as_str().unwrap_or("you");
                host::log(Level::Debug, &format!("greeting {{name}}"));
                Ok(ToolOutput {{
                    content: vec![Content::Text(format!("Hello, {{name}}!"))],
                    success: true,
                    metadata: String::new(),
                }})
            }}
            other => Err(ToolError::Failed(format!("no tool '{{other}}'"))),
        }}
    }}
}}

export!(Component);
"##
    );
    let readme = format!(
        "# {name}\n\nA toolhost plugin written as a WebAssembly component (the `plugin` world of \
         `wit/plugin.wit`, toolhost:plugin@{wit}).\n\nIt needs Rust's `wasm32-wasip2` target:\n\n\
         ```sh\nrustup target add wasm32-wasip2\ncargo build --release --target wasm32-wasip2\n\
         toolhost plugin package target/wasm32-wasip2/release/{tool_name}.wasm\n```\n\n\
         `cargo check` works on any target (the bindings type-check everywhere; they run only \
         in a component).\n",
        wit = tool_api::WIT_VERSION,
    );
    io(step, std::fs::write(dir.join("Cargo.toml"), cargo_toml))?;
    io(step, std::fs::write(dir.join("src/lib.rs"), lib_rs))?;
    io(
        step,
        std::fs::write(dir.join("wit/plugin.wit"), tool_api::WIT),
    )?;
    io(step, std::fs::write(dir.join("README.md"), readme))?;
    io(step, std::fs::write(dir.join(".gitignore"), "/target\n"))?;
    Ok(dir)
}
