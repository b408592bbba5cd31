//! `server.json`, the MCP Registry's description of a server: its name, version, the
//! packages it is published as (npm, PyPI, OCI, …) with their transports, arguments and
//! environment variables, and the remote endpoints it is served at. Read leniently where
//! the format grows (unknown keys are ignored), strictly where toolhost acts on a value
//! (names, versions, transports), with the rules of the published schema
//! (`https://static.modelcontextprotocol.io/schemas/…/server.schema.json`).

use std::collections::BTreeMap;

use serde::Deserialize;

/// A server.json document.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJson {
    /// Reverse-DNS name with one `/`: `io.github.acme/weather`.
    pub name: String,
    /// What it does (1 to 100 characters).
    pub description: String,
    /// Its version (no range).
    pub version: String,
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// How it is published as a package.
    #[serde(default)]
    pub packages: Vec<Package>,
    /// Where it is served remotely.
    #[serde(default)]
    pub remotes: Vec<Transport>,
    /// Its source.
    #[serde(default)]
    pub repository: Option<Repository>,
}

/// Where its source is.
#[derive(Debug, Clone, Deserialize)]
pub struct Repository {
    /// The repository's URL.
    pub url: String,
}

/// One package a server is published as.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// `npm`, `pypi`, `oci`, `nuget`, `mcpb`.
    pub registry_type: String,
    /// The registry's base URL (default: the type's public registry).
    #[serde(default)]
    pub registry_base_url: Option<String>,
    /// The package's name in its registry.
    pub identifier: String,
    /// Its version: a specific one.
    #[serde(default)]
    pub version: Option<String>,
    /// The runner: `npx`, `uvx`, `docker`, `dnx`.
    #[serde(default)]
    pub runtime_hint: Option<String>,
    /// How a client speaks to it.
    pub transport: Transport,
    /// Arguments for the runner.
    #[serde(default)]
    pub runtime_arguments: Vec<Argument>,
    /// Arguments for the package's program.
    #[serde(default)]
    pub package_arguments: Vec<Argument>,
    /// The environment it reads.
    #[serde(default)]
    pub environment_variables: Vec<Input>,
}

/// A transport: `stdio`, `streamable-http` or `sse`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type")]
pub enum Transport {
    /// Over the program's stdin and stdout.
    #[serde(rename = "stdio")]
    Stdio,
    /// Streamable HTTP.
    #[serde(rename = "streamable-http")]
    StreamableHttp {
        /// Its URL (may hold `{variables}`).
        url: String,
        /// Headers it needs.
        #[serde(default)]
        headers: Vec<Input>,
    },
    /// The 2024 HTTP+SSE transport (toolhost does not speak it).
    #[serde(rename = "sse")]
    Sse {
        /// Its URL.
        url: String,
    },
}

impl Transport {
    /// Its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::StreamableHttp { .. } => "streamable-http",
            Transport::Sse { .. } => "sse",
        }
    }

    /// Its URL, for an HTTP transport.
    pub fn url(&self) -> Option<&str> {
        match self {
            Transport::Stdio => None,
            Transport::StreamableHttp { url, .. } | Transport::Sse { url } => Some(url),
        }
    }
}

/// A command-line argument: `positional` (inserted as is) or `named` (`--flag value`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    /// `positional` or `named`.
    #[serde(rename = "type")]
    pub kind: ArgumentKind,
    /// A named argument's flag, dashes included.
    #[serde(default)]
    pub name: Option<String>,
    /// A positional argument's label.
    #[serde(default)]
    pub value_hint: Option<String>,
    /// What it is set to.
    #[serde(flatten)]
    pub input: Input,
}

/// Which kind of argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgumentKind {
    /// Inserted verbatim.
    Positional,
    /// A flag, with a value when it has one.
    Named,
}

/// A value a user may have to give: an environment variable, a header, an argument.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    /// The variable's or header's name.
    #[serde(default)]
    pub name: Option<String>,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Its fixed value (`{variables}` substituted).
    #[serde(default)]
    pub value: Option<String>,
    /// Its default.
    #[serde(default)]
    pub default: Option<String>,
    /// Whether the server needs it.
    #[serde(default)]
    pub is_required: bool,
    /// Whether it is a secret.
    #[serde(default)]
    pub is_secret: bool,
    /// The values `{name}` in `value` stands for.
    #[serde(default)]
    pub variables: BTreeMap<String, Input>,
}

impl Input {
    /// Its value with each `{variable}` that has a value or default substituted; `None`
    /// when it has neither value nor default.
    pub fn resolved(&self) -> Option<String> {
        let mut text = self.value.clone().or_else(|| self.default.clone())?;
        for (name, var) in &self.variables {
            if let Some(v) = var.value.as_ref().or(var.default.as_ref()) {
                text = text.replace(&format!("{{{name}}}"), v);
            }
        }
        Some(text)
    }
}

/// What the registry's API answers for one version: the document under `server`.
#[derive(Deserialize)]
struct Listed {
    server: ServerJson,
}

impl ServerJson {
    /// Parses a server.json, or a registry answer holding one under `server`; `origin`
    /// names where it came from in errors. Checks the rules toolhost relies on.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<ServerJson, String> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("{origin} is not JSON: {e}"))?;
        let server = if value
            .get("server")
            .is_some_and(serde_json::Value::is_object)
        {
            serde_path_to_error::deserialize::<_, Listed>(value)
                .map(|l| l.server)
                .map_err(|e| format!("{origin}: at {}: {}", e.path(), e.inner()))?
        } else {
            serde_path_to_error::deserialize::<_, ServerJson>(value)
                .map_err(|e| format!("{origin}: at {}: {}", e.path(), e.inner()))?
        };
        server.check().map_err(|e| format!("{origin}: {e}"))?;
        Ok(server)
    }

    /// The schema's rules on what toolhost acts on.
    fn check(&self) -> Result<(), String> {
        let mut parts = self.name.splitn(3, '/');
        let (namespace, server) = (parts.next().unwrap_or(""), parts.next());
        let ok_chars = |s: &str, extra: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || extra.contains(c))
        };
        let valid = parts.next().is_none()
            && ok_chars(namespace, "")
            && server.is_some_and(|s| ok_chars(s, "_"))
            && (3..=200).contains(&self.name.len());
        if !valid {
            return Err(format!(
                "name {:?} is not a registry name: namespace/server in reverse-DNS form, e.g. io.github.acme/weather",
                self.name
            ));
        }
        if !(1..=100).contains(&self.description.chars().count()) {
            return Err("description must be 1 to 100 characters".into());
        }
        if is_range(&self.version) {
            return Err(format!(
                "version {:?} is a range; a server.json names one version",
                self.version
            ));
        }
        for (i, package) in self.packages.iter().enumerate() {
            if let Some(v) = &package.version
                && (v.is_empty() || v == "latest" || is_range(v))
            {
                return Err(format!(
                    "packages[{i}].version {v:?} is not a specific version (the schema refuses `latest` and ranges)"
                ));
            }
        }
        if self.packages.is_empty() && self.remotes.is_empty() {
            return Err("it lists no packages and no remotes: nothing to run or reach".into());
        }
        Ok(())
    }
}

/// `^1.2`, `~1`, `>=1`, `1.x`, `1.*`: what the schema calls a range.
fn is_range(version: &str) -> bool {
    version.starts_with(['^', '~', '>', '<', '='])
        || version.split('.').any(|p| p == "x" || p == "X" || p == "*")
        || version.contains(' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{"name":"io.github.acme/weather","description":"Forecasts","version":"1.2.0",
        "packages":[{"registryType":"npm","identifier":"@acme/weather","version":"1.2.0","transport":{"type":"stdio"}}]}"#;

    #[test]
    fn a_document_and_a_registry_answer_both_read() {
        let s = ServerJson::parse(MINIMAL.as_bytes(), "f").unwrap();
        assert_eq!(s.packages[0].identifier, "@acme/weather");
        let listed = format!(r#"{{"server":{MINIMAL},"_meta":{{}}}}"#);
        assert_eq!(
            ServerJson::parse(listed.as_bytes(), "r").unwrap().name,
            "io.github.acme/weather"
        );
    }

    #[test]
    fn what_the_schema_refuses_is_refused_naming_it() {
        let table = [
            (
                MINIMAL.replace("io.github.acme/weather", "weather"),
                "not a registry name",
            ),
            (
                MINIMAL.replace("io.github.acme/weather", "a/b/c"),
                "not a registry name",
            ),
            (
                MINIMAL.replace("\"version\":\"1.2.0\",\n", "\"version\":\"^1.2\",\n"),
                "range",
            ),
            (
                MINIMAL.replace(
                    "\"identifier\":\"@acme/weather\",\"version\":\"1.2.0\"",
                    "\"identifier\":\"@acme/weather\",\"version\":\"latest\"",
                ),
                "packages[0].version",
            ),
            (MINIMAL.replace("\"Forecasts\"", "\"\""), "description"),
            (
                MINIMAL.replace("\"stdio\"", "\"carrier-pigeon\""),
                "packages[0].transport",
            ),
        ];
        for (doc, needle) in table {
            let e = ServerJson::parse(doc.as_bytes(), "server.json").unwrap_err();
            assert!(
                e.contains(needle) && e.starts_with("server.json"),
                "{needle}: {e}"
            );
        }
    }

    #[test]
    fn variables_are_substituted_in_values() {
        let input = Input {
            value: Some("--dir={root}/data".into()),
            variables: [(
                "root".to_string(),
                Input {
                    default: Some("/srv".into()),
                    ..Input::default()
                },
            )]
            .into(),
            ..Input::default()
        };
        assert_eq!(input.resolved().as_deref(), Some("--dir=/srv/data"));
    }
}
