//! # tool-api: write tools for toolhost
//!
//! This crate is everything a tool author needs, and the only crate a plugin depends on.
//! A tool is a Rust type that implements [`Tool`] (run one call) and [`DefinedTool`]
//! (describe itself). Built-in tools and third-party plugins use exactly the same traits;
//! a plugin crate adds one [`export_plugin!`] line and builds as a `cdylib`.
//!
//! ## A complete tool
//!
//! ```
//! use serde_json::{json, Value};
//! use tool_api::{DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};
//!
//! /// Counts lines, words and bytes of a text. Pure and quick, so it runs inline.
//! #[derive(Default)]
//! pub struct WordCount;
//!
//! impl DefinedTool for WordCount {
//!     fn definition() -> ToolDefinition {
//!         ToolDefinition::new(
//!             "word_count",
//!             "Count the lines, words and bytes of a text.",
//!             SideEffect::None,
//!             json!({
//!                 "type": "object",
//!                 "properties": { "text": { "type": "string", "description": "The text to count." } },
//!                 "required": ["text"],
//!                 "additionalProperties": false
//!             }),
//!         )
//!         .inline()
//!     }
//! }
//!
//! impl Tool for WordCount {
//!     fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
//!         // The host validated `input` against the schema, so `text` is a string.
//!         let text = input["text"].as_str().unwrap_or_default();
//!         let (lines, words) = (text.lines().count(), text.split_whitespace().count());
//!         ctx.log().debug(format_args!("counted {words} words"));
//!         Ok(ToolOutput::text(format!("{lines} lines, {words} words, {} bytes", text.len()))
//!             .with_metadata(json!({ "lines": lines, "words": words, "bytes": text.len() })))
//!     }
//! }
//!
//! // In a plugin crate (crate-type = ["cdylib"]) one line exports it:
//! // tool_api::export_plugin!(name: "text-tools", version: env!("CARGO_PKG_VERSION"), tools: [WordCount]);
//!
//! // Tools are unit-tested without a host:
//! let host = tool_api::testing::TestHost::new();
//! let out = WordCount.execute(json!({"text": "a b\nc"}), &host.context()).unwrap();
//! assert_eq!(out.text_content(), "2 lines, 3 words, 5 bytes");
//! ```
//!
//! The same tool with a typed input, whose schema comes from a Rust type (so it cannot drift
//! from the code that reads it), is a [`TypedTool`]: see [`typed`]. Before shipping,
//! [`check_plugin!`] in the plugin's tests checks what a host would refuse (the schema
//! subset is listed in [`schema`]).
//!
//! ## What the host guarantees a tool
//!
//! - `input` was validated against `input_schema` before `execute` is called.
//! - Each call gets a fresh instance (from `Default`), so `self` holds per-call state only.
//! - [`ToolContext::files`] never leaves the session's workspace; symlinks out are refused.
//!   It allows what the tool's [`SideEffect`] declares: nothing for `none`, reading and
//!   listing for `read`, everything for `write` and above (anything else is
//!   [`ToolError::PermissionDenied`]).
//! - A panic in `execute`, `cancel`, `definition` or `Default` is contained: the model sees
//!   an `execution_error`, the host and the plugin's other tools keep working.
//!
//! ## What a tool owes the host
//!
//! - Declare its highest [`SideEffect`] honestly: the confirmation policy is keyed on it.
//! - Mark itself [`ToolDefinition::inline`] only when pure and quick (see [`Tool`]).
//! - Honour cancellation: poll [`ToolContext::is_cancelled`], stop work in [`Tool::cancel`].
//! - Log through [`ToolContext::log`], not `println!` (stdout may carry a protocol).
//!
//! ## Versioning
//!
//! This crate follows semver from 1.0: a plugin built against 1.x loads in any host that
//! provides 1.y with y ≥ x, and in an older 1.y host as long as it uses nothing newer. The
//! [`abi`] module documents how the layout evolves.
//!
//! - 1.1: [`WorkspaceFiles::metadata`].
//! - 1.2: [`ToolContext::output`] (live output), [`DefinedTool::is_concurrency_safe`]
//!   (concurrency judged per call from the input), [`ToolDefinition::interrupt`]
//!   ([`InterruptBehavior::Block`]: run to completion through a user interrupt). An older
//!   host ignores all three (output is dropped, the definition's defaults apply), so a
//!   plugin using them needs no `requires:`.
//! - 1.3: author-side only, no ABI change: typed inputs ([`TypedTool`], the `typed` feature,
//!   on by default), [`check_plugin!`] and [`testing::check_plugin`], the schema subset
//!   check in [`schema`] ([`ToolDefinition::check`]), [`fs_error`] (one wording of file
//!   errors for every host), [`testing::noop`]; [`export_plugin!`]'s expansion carries its
//!   own `unsafe_code` allow; [`ToolDefinition::inline_when_small`] (small file work
//!   without a thread handoff; an older host ignores it and runs the tool off-thread).
//! - 1.4: [`ToolContext::ask_user`] (a question to the user through the host's
//!   confirmation channel).
//! - 1.5: [`ToolContext::process_sandbox`]: how the programs a call starts are to be
//!   confined ([`SandboxMode`], [`ProcessSandbox`]); an older host answers nothing and the
//!   strictest usable sandbox applies (`workspace-write`, no network). Host side, no ABI
//!   change: [`Placement::Wasm`], where a WebAssembly component's tools run and the
//!   hosts their HTTP requests may reach.
//! - 1.6: [`ToolContext::sandbox_settings`]: the host's whole sandbox settings record (the
//!   deny list, writable caches, network allow list, environment policy), carried in the
//!   same answer as 1.5's [`ProcessSandbox`] (an older host: `None`).
//! - 1.7: [`ToolContext::output_wanted`]: whether anyone follows the call's live output
//!   (an older host: `true`). Host side, no ABI change: [`Extensions`], what a host
//!   attaches to one call for the tools it builds in ([`ToolContext::extension`]; a
//!   plugin always sees none).
//!
//! Minor releases add optional fields to [`ToolDefinition`]: build one with
//! [`ToolDefinition::new`] and its setters (or `..ToolDefinition::new(…)` in a struct
//! literal) so that your code keeps compiling.

#![allow(unsafe_code)]

pub mod abi;
mod context;
mod definition;
pub mod export;
mod extensions;
pub mod fs_error;
mod output;
pub mod sandbox;
pub mod schema;
pub mod testing;
#[cfg(test)]
mod tests;
mod tool;
#[cfg(feature = "typed")]
pub mod typed;

pub use context::{Level, Logger, Metadata, ToolContext, UserAnswer, WorkspaceFiles};
pub use definition::{InterruptBehavior, SideEffect, ToolDefinition, is_valid_tool_name};
pub use extensions::Extensions;
pub use output::{Content, ToolError, ToolOutput};
pub use sandbox::{Placement, ProcessSandbox, SANDBOX_SETTINGS_KEY, SandboxMode};
pub use tool::{DefinedTool, Tool, ToolFactory, ToolFuture, TypedFactory, factory, factory_from};

/// Re-exported so tools and plugins need no direct dependency on `serde_json`.
pub use serde_json;

/// Re-exported for typed inputs (`use tool_api::schemars::{self, JsonSchema};`), so a
/// plugin derives `JsonSchema` with the version tool-api builds schemas with.
#[cfg(feature = "typed")]
pub use schemars;
#[cfg(feature = "typed")]
pub use typed::{TypedTool, parse_input};

pub use abi::TOOL_API_VERSION;

/// The version of the `toolhost:plugin` WIT package (`wit/plugin.wit`): the interface of
/// tools written as WebAssembly components. It is versioned apart from the native ABI, with
/// the same rule: a host loads a component built against the same major version and a
/// minor version not newer than its own.
pub const WIT_VERSION: &str = "1.0.0";

/// The text of `wit/plugin.wit`, for tools that generate a component's bindings from it.
pub const WIT: &str = include_str!("../wit/plugin.wit");

/// Exports the tools of a plugin library: emits the root module a host loads.
///
/// Use it once, at the top level of a `cdylib` crate. `name` and `version` identify the
/// plugin (they must match its `plugin.toml`; write `version: env!("CARGO_PKG_VERSION")` so
/// it is Cargo.toml's); `tools` lists every [`DefinedTool`] (or [`TypedTool`]) type, once. An
/// optional `requires: "1.1.0"` before `tools` declares the oldest tool-api a host must
/// provide (default `1.0.0`): declare it when the plugin uses something added later, such as
/// [`WorkspaceFiles::metadata`] (1.1), so that older hosts refuse it with a clear message
/// instead of failing at call time.
///
/// ```ignore
/// tool_api::export_plugin!(
///     name: "text-tools",
///     version: env!("CARGO_PKG_VERSION"),
///     tools: [WordCount, JsonPointer],
/// );
/// ```
///
/// The generated functions contain panics (a panic in a definition, a factory or a call is
/// reported to the host as an error) and record whether the plugin was built with
/// `panic = "unwind"`; hosts refuse `panic = "abort"` builds, whose panics they could not
/// contain. The expansion carries its own `#[allow(unsafe_code)]` (the loader symbol needs
/// it), so a plugin crate needs no lint exception. [`check_plugin!`] checks what it exports.
#[macro_export]
macro_rules! export_plugin {
    (name: $name:expr, version: $version:expr, tools: [$($tool:ty),+ $(,)?] $(,)?) => {
        $crate::export_plugin!(name: $name, version: $version, requires: "1.0.0", tools: [$($tool),+]);
    };
    (name: $name:expr, version: $version:expr, requires: $requires:expr, tools: [$($tool:ty),+ $(,)?] $(,)?) => {
        /// The plugin's exported root module (generated by `tool_api::export_plugin!`).
        #[doc(hidden)]
        // The loader symbol needs `unsafe` (`no_mangle`, a layout promise): the expansion
        // carries its own allow, so a plugin crate needs no lint exception.
        #[allow(unsafe_code)]
        pub mod __toolhost_plugin {
            #[allow(unused_imports)]
            use super::*;
            use $crate::export::__private as __p;

            /// The exported tool types as written (what `tool_api::check_plugin!` looks
            /// for in the sources).
            #[allow(dead_code)]
            pub static TOOL_TYPES: &[&str] = &[$(stringify!($tool)),+];

            /// What the plugin exports (what `tool_api::check_plugin!` checks).
            pub static EXPORT: $crate::export::PluginExport = $crate::export::PluginExport::new(
                $name,
                $version,
                $requires,
                cfg!(panic = "unwind"),
                &[$($crate::export::ToolEntry::of::<$tool>()),+],
            );

            extern "C" fn __toolhost_info() -> $crate::abi::PluginInfo {
                EXPORT.info()
            }

            extern "C" fn __toolhost_definitions() -> __p::RResult<__p::RString, $crate::abi::AbiError> {
                EXPORT.definitions()
            }

            extern "C" fn __toolhost_new_tool(
                name: __p::RStr<'_>,
            ) -> __p::RResult<$crate::abi::AbiToolBox, $crate::abi::AbiError> {
                EXPORT.new_tool(name)
            }

            extern "C" fn __toolhost_extension(
                op: __p::RStr<'_>,
                payload: __p::RStr<'_>,
            ) -> __p::RResult<__p::RString, $crate::abi::AbiError> {
                EXPORT.extension(op, payload)
            }

            fn __toolhost_root() -> $crate::abi::PluginModRef {
                __p::PrefixTypeTrait::leak_into_prefix($crate::abi::PluginMod {
                    info: __toolhost_info,
                    definitions: __toolhost_definitions,
                    new_tool: __toolhost_new_tool,
                    extension: __toolhost_extension,
                })
            }

            extern "C" fn __toolhost_erased_root() -> __p::RootModuleResult {
                __p::__call_root_module_loader(__toolhost_root)
            }

            /// The root module loader abi_stable looks up (see `abi::ROOT_MODULE_SYMBOL`).
            #[unsafe(no_mangle)]
            #[allow(non_upper_case_globals)]
            pub static _1as_0lib_1header_0root_bmodule_bloader: __p::LibHeader =
                // SAFETY: the constructor returns the root module of type `PluginModRef`, the
                // type named here, so the header's layout constant describes what it builds.
                unsafe {
                    __p::LibHeader::from_constructor::<$crate::abi::PluginModRef>(
                        __toolhost_erased_root,
                        __p::CheckTypeLayout::Yes,
                    )
                };
        }
    };
}

/// Checks, in a plugin crate's own tests, everything a host or `cargo xtask plugin package`
/// would refuse in what [`export_plugin!`] exports: each tool's name and input schema
/// ([`ToolDefinition::check`], the subset in [`schema`]), two tools with one name, and an
/// `export_plugin!` version that is not the crate's (`Cargo.toml`'s). It also reads the
/// crate's sources (`src/**/*.rs`, test modules aside): a type implementing `Tool` or
/// `TypedTool` that `export_plugin!` leaves out, and direct use of the filesystem
/// (`std::fs`), programs (`std::process::Command`) or the network (`std::net`) that no
/// exported tool's declared class grants (`execute` grants the first two, `network` the
/// last), are problems too: an isolated worker's sandbox would refuse them at run time. A
/// line that ends with `// toolhost: allow` is not read. Returns the exported definitions,
/// or every problem, one per line.
///
/// ```ignore
/// #[test]
/// fn exports_what_a_host_accepts() {
///     tool_api::check_plugin!().unwrap_or_else(|e| panic!("{e}"));
/// }
/// ```
#[macro_export]
// `crate` (not `$crate`) on purpose: the export is in the plugin crate that calls this.
#[allow(clippy::crate_in_macro_def)]
macro_rules! check_plugin {
    () => {
        $crate::testing::check_plugin_sources(
            &crate::__toolhost_plugin::EXPORT,
            crate::__toolhost_plugin::TOOL_TYPES,
            env!("CARGO_PKG_VERSION"),
            env!("CARGO_MANIFEST_DIR"),
        )
    };
}

#[cfg(test)]
mod wit_tests {
    #[test]
    fn the_wit_package_declares_the_version_hosts_serve() {
        let line = format!("package toolhost:plugin@{};", super::WIT_VERSION);
        assert!(
            super::WIT.lines().any(|l| l.trim() == line),
            "plugin.wit must declare `{line}`"
        );
    }
}
