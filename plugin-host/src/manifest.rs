//! `plugin.toml`: what a package says about itself, checked before its library is opened.
//!
//! ```toml
//! name = "text-tools"              # plugin name (what `export_plugin!` says)
//! version = "0.1.0"                # plugin version (semver)
//! tool_api = "1.1.0"               # the tool-api version it was built against
//! requires_tool_api = "1.0.0"      # the oldest tool-api a host must provide (default 1.0.0)
//! target = "x86_64-unknown-linux-gnu"
//! library = "libtext_tools.so"     # file name inside the package
//! sha256 = "…"                     # hex digest of the library
//! unwinds = true                   # built with panic = "unwind"
//!
//! [[tools]]
//! name = "word_count"
//! side_effects = "none"
//! ```
//!
//! A WebAssembly component says `kind = "component"`, `target = "wasm32-wasip2"`, names its
//! `.wasm` file in `library`, and gives the `toolhost:plugin` WIT version it was built
//! against in `tool_api` (and `requires_tool_api`); `unwinds` does not apply (a trap never
//! reaches the host) and may be left out. It may ask for `instances = "reused"`: its calls
//! then run in instances kept from earlier calls (one call at a time each) instead of a
//! fresh instance per call, so a language runtime starts once per instance, not per call.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tool_api::SideEffect;

/// The file name of a package manifest.
pub const MANIFEST_FILE: &str = "plugin.toml";

/// A tool as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestTool {
    /// Tool name.
    pub name: String,
    /// Declared side-effect class.
    pub side_effects: SideEffect,
}

/// What a package's library is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PackageKind {
    /// A native `cdylib` built against tool-api for one target triple.
    #[default]
    Native,
    /// A WebAssembly component (WASI 0.2) built against `tool-api/wit/plugin.wit`.
    Component,
}

impl PackageKind {
    /// The target triple a package of this kind must be built for: the host's, or
    /// [`COMPONENT_TARGET`].
    pub fn expected_target(self) -> &'static str {
        match self {
            PackageKind::Native => crate::HOST_TARGET,
            PackageKind::Component => COMPONENT_TARGET,
        }
    }

    /// The version a package of this kind is checked against: tool-api's native ABI, or
    /// the `toolhost:plugin` WIT package.
    pub fn host_version(self) -> &'static str {
        match self {
            PackageKind::Native => tool_api::TOOL_API_VERSION,
            PackageKind::Component => tool_api::WIT_VERSION,
        }
    }
}

impl std::fmt::Display for PackageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PackageKind::Native => "native",
            PackageKind::Component => "component",
        })
    }
}

/// The target of every component package: one file for every platform.
pub const COMPONENT_TARGET: &str = "wasm32-wasip2";

/// A parsed `plugin.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    pub version: semver::Version,
    /// tool-api version the library was built against.
    pub tool_api: semver::Version,
    /// Oldest tool-api a host must provide.
    #[serde(default = "base_version")]
    pub requires_tool_api: semver::Version,
    /// Native library or WebAssembly component (`native` when absent).
    #[serde(default, skip_serializing_if = "is_native")]
    pub kind: PackageKind,
    /// Target triple the library was built for.
    pub target: String,
    /// Library file name, inside the package directory.
    pub library: String,
    /// Hex SHA-256 of the library.
    pub sha256: String,
    /// Whether the library was built with `panic = "unwind"` (required for a native
    /// library; a component leaves it out).
    #[serde(default)]
    pub unwinds: bool,
    /// Whether a component's calls each get a fresh instance (the default) or may run in
    /// one kept from an earlier call; a native library leaves it out.
    #[serde(default, skip_serializing_if = "Instances::is_fresh")]
    pub instances: Instances,
    /// The tools the library exports.
    #[serde(default)]
    pub tools: Vec<ManifestTool>,
}

/// What a component asks of the instances its calls run in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Instances {
    /// A fresh instance per call: nothing a call leaves in memory reaches the next.
    #[default]
    Fresh,
    /// An instance that ended a call cleanly may run a later one (of any session): what a
    /// call leaves in the component's memory, the next call may see. A trap, a timeout, a
    /// cancel or a refused memory grow still ends its instance.
    Reused,
}

impl Instances {
    fn is_fresh(&self) -> bool {
        *self == Instances::Fresh
    }
}

fn is_native(kind: &PackageKind) -> bool {
    *kind == PackageKind::Native
}

fn base_version() -> semver::Version {
    semver::Version::new(1, 0, 0)
}

/// Why a manifest could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: key `{key}`: {message}", location.as_deref().map(|l| format!(" ({l})")).unwrap_or_default())]
pub struct ManifestError {
    /// The manifest file.
    pub file: String,
    /// Dotted key path, or `(document)`.
    pub key: String,
    /// What was wrong and what was expected.
    pub message: String,
    /// `line L, column C`, when known.
    pub location: Option<String>,
}

fn line_col(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {col}")
}

/// A TOML document that did not deserialize, located by dotted key and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedError {
    /// Dotted key path (`timeouts.default_secs`, `mcp_servers[0].id`), or `(document)`.
    pub key: String,
    /// What was wrong and what was expected.
    pub message: String,
    /// `line L, column C`, when known.
    pub location: Option<String>,
}

/// Deserializes TOML text, naming the key and line of the first problem (an unknown key,
/// a wrong type, a syntax error). Shared by `plugin.toml` and `toolhost.toml`.
pub fn parse_keyed<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, KeyedError> {
    let at = |span: Option<std::ops::Range<usize>>| span.map(|s| line_col(text, s.start));
    let de = toml::Deserializer::parse(text).map_err(|e| KeyedError {
        key: "(document)".into(),
        message: e.message().to_string(),
        location: at(e.span()),
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        KeyedError {
            key: if key == "." { "(document)".into() } else { key },
            message: inner.message().to_string(),
            location: at(inner.span()),
        }
    })
}

impl Manifest {
    /// Parses manifest text; `file` is used in messages.
    pub fn parse(file: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let err = |key: String, message: String, location: Option<String>| ManifestError {
            file: file.display().to_string(),
            key,
            message,
            location,
        };
        let manifest: Manifest =
            parse_keyed(text).map_err(|e| err(e.key, e.message, e.location))?;
        let field = |key: &str, message: String| err(key.into(), message, None);
        if manifest.kind == PackageKind::Native
            && !text
                .parse::<toml::Table>()
                .is_ok_and(|t| t.contains_key("unwinds"))
        {
            return Err(field(
                "unwinds",
                "missing: a native library must say whether it was built with panic = \"unwind\" (true) or \"abort\" (false)".into(),
            ));
        }
        if manifest.kind == PackageKind::Native && manifest.instances == Instances::Reused {
            return Err(field(
                "instances",
                "only a WebAssembly component's instances can be reused (a native library has one instance per process); remove the key".into(),
            ));
        }
        // The name becomes a folder's name where a package is installed: never a path.
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if manifest.name.is_empty()
            || manifest.name.len() > 128
            || manifest.name.starts_with('.')
            || !manifest.name.chars().all(plain)
        {
            return Err(field(
                "name",
                format!(
                    "{:?} is not a plugin name: up to 128 letters, digits, '-', '_' or '.', not starting with '.'",
                    manifest.name
                ),
            ));
        }
        if manifest.library.is_empty()
            || manifest.library.contains(['/', '\\'])
            || manifest.library.starts_with('.')
        {
            return Err(field(
                "library",
                format!(
                    "'{}' must be a plain file name inside the package",
                    manifest.library
                ),
            ));
        }
        if manifest.sha256.len() != 64 || !manifest.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(field("sha256", "expected 64 hexadecimal digits".into()));
        }
        if manifest.tools.is_empty() {
            return Err(field(
                "tools",
                "a package must list at least one tool".into(),
            ));
        }
        Ok(manifest)
    }

    /// The manifest for a library, from what it exports; `target` is this host's.
    pub fn for_library(
        inspection: &crate::library::Inspection,
        library_file: &str,
        sha256: String,
    ) -> Result<Manifest, semver::Error> {
        Ok(Manifest {
            name: inspection.name.clone(),
            version: semver::Version::parse(&inspection.version)?,
            tool_api: semver::Version::parse(&inspection.tool_api)?,
            requires_tool_api: semver::Version::parse(&inspection.requires_tool_api)?,
            kind: PackageKind::Native,
            target: crate::HOST_TARGET.to_string(),
            library: library_file.to_string(),
            sha256,
            unwinds: inspection.unwinds,
            instances: Instances::Fresh,
            tools: inspection
                .tools
                .iter()
                .map(|t| ManifestTool {
                    name: t.name.clone(),
                    side_effects: t.side_effects,
                })
                .collect(),
        })
    }

    /// Renders the manifest as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn manifest(extra: &str) -> String {
        format!(
            "name = \"p\"\nversion = \"1.0.0\"\ntool_api = \"1.0.0\"\ntarget = \"t\"\nlibrary = \"lib.so\"\nsha256 = \"{}\"\n{extra}\n[[tools]]\nname = \"x\"\nside_effects = \"none\"\n",
            "a".repeat(64)
        )
    }

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(Path::new("plugin.toml"), text)
    }

    #[test]
    fn a_plugin_name_that_is_a_path_is_refused() {
        for bad in ["../../.bashrc", "a/b", ".hidden", "", "x y"] {
            let text =
                manifest("unwinds = true").replacen("name = \"p\"", &format!("name = {bad:?}"), 1);
            let e = parse(&text).unwrap_err();
            assert_eq!(e.key, "name", "{bad}: {e}");
        }
        let text =
            manifest("unwinds = true").replacen("name = \"p\"", "name = \"my-tools_2.x\"", 1);
        assert_eq!(parse(&text).unwrap().name, "my-tools_2.x");
    }

    #[test]
    fn a_native_library_must_say_whether_it_unwinds() {
        let e = parse(&manifest("")).unwrap_err();
        assert_eq!(e.key, "unwinds", "{e}");
        assert!(e.message.contains("panic = \"unwind\""), "{e}");
        assert!(parse(&manifest("unwinds = true")).unwrap().unwinds);
    }

    #[test]
    fn a_component_leaves_unwinds_out() {
        let m = parse(&manifest("kind = \"component\"")).unwrap();
        assert_eq!(m.kind, PackageKind::Component);
        assert_eq!(m.kind.expected_target(), COMPONENT_TARGET);
    }

    #[test]
    fn a_component_may_ask_for_reused_instances_and_a_native_library_may_not() {
        let m = parse(&manifest("kind = \"component\"\ninstances = \"reused\"")).unwrap();
        assert_eq!(m.instances, Instances::Reused);
        assert!(m.to_toml().contains("instances = \"reused\""));
        let fresh = parse(&manifest("kind = \"component\"")).unwrap();
        assert_eq!(fresh.instances, Instances::Fresh);
        assert!(!fresh.to_toml().contains("instances"));
        let e = parse(&manifest("unwinds = true\ninstances = \"reused\"")).unwrap_err();
        assert_eq!(e.key, "instances", "{e}");
        assert!(e.message.contains("only a WebAssembly component"), "{e}");
        let e = parse(&manifest("kind = \"component\"\ninstances = \"shared\"")).unwrap_err();
        assert_eq!(e.key, "instances", "{e}");
        assert!(
            e.message.contains("fresh") && e.message.contains("reused"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_kind_is_refused_naming_the_key() {
        let e = parse(&manifest("kind = \"python\"\nunwinds = true")).unwrap_err();
        assert_eq!(e.key, "kind", "{e}");
        assert!(e.message.contains("component"), "{e}");
    }
}
