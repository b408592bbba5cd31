//! `toolhost mcp add [NAME] [--file F | --url U] [--version V] [--id ID] [--prefix P] [--yes]`:
//! a `[[mcp_servers]]` entry written from a server's `server.json` (a file, a URL, or the
//! MCP Registry's API at `[mcp] registry`): its package at the version the document pins,
//! started as its runner starts it (`npx`, `uvx`, `docker`), or its remote endpoint; its
//! environment variables as `env` entries taken from toolhost's own environment (so a
//! secret stays out of the file); and the sandbox grant it needs (the registry its runner
//! downloads from). The entry is shown and written only once the user accepts (`--yes`
//! accepts without asking); nothing is started.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::Config;
use crate::error::UsageError;
use crate::server_json::{Argument, ArgumentKind, Input, Package, ServerJson, Transport};

/// The most bytes a server.json (or a registry answer) may have.
const MAX_DOCUMENT: usize = 1024 * 1024;

/// Where the server.json comes from.
pub(crate) enum Origin {
    /// A file.
    File(PathBuf),
    /// A URL the user gave.
    Url(String),
    /// The registry API at this base URL, by name (and version, else the latest).
    Registry {
        /// The API's base URL.
        base: String,
        /// The server's name.
        name: String,
        /// Its version, or `latest`.
        version: String,
    },
}

/// What the user asked for.
pub(crate) struct AddArgs {
    /// Where the document is.
    pub origin: Origin,
    /// The name the user typed, checked against the document's.
    pub name: Option<String>,
    /// The entry's id (default: the server's short name).
    pub id: Option<String>,
    /// Its prefix (default: the id).
    pub prefix: Option<String>,
    /// Accept without asking.
    pub yes: bool,
}

/// `toolhost mcp add`.
pub(crate) async fn add(config_file: &Path, args: AddArgs) -> Result<ExitCode, UsageError> {
    let (bytes, origin) = fetch(&args.origin).await?;
    let server = ServerJson::parse(&bytes, &origin)?;
    if let Some(name) = &args.name
        && *name != server.name
    {
        return Err(format!("{origin} describes {:?}, not {name:?}", server.name).into());
    }
    let text = match std::fs::read_to_string(config_file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", config_file.display()).into()),
    };
    let current = Config::parse(config_file, &text)?;
    let id = match &args.id {
        Some(id) => id.clone(),
        None => short_id(&server.name),
    };
    if current.mcp_servers.iter().any(|s| s.id == id) {
        return Err(format!(
            "{} already has an [[mcp_servers]] entry with id {id:?}: give another with --id",
            config_file.display()
        )
        .into());
    }
    let entry = entry(&server, &id, args.prefix.as_deref().unwrap_or(&id), &origin)?;
    let new_text = crate::config::appended(&text, &entry.toml);
    // The entry must make a config toolhost loads, before anyone is asked.
    Config::parse(config_file, &new_text)?;
    println!("{}", entry.toml.trim_start());
    for note in &entry.notes {
        println!("note: {note}");
    }
    if !accepted(args.yes, config_file)? {
        println!("not added");
        return Ok(ExitCode::FAILURE);
    }
    crate::config::write_atomically(config_file, &new_text)?;
    println!(
        "added [[mcp_servers]] {id:?} to {}; it starts with the next `toolhost` command that loads servers (`toolhost plugins` shows it)",
        config_file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Whether the user accepts the entry shown; without a terminal, an error naming `--yes`.
fn accepted(yes: bool, file: &Path) -> Result<bool, UsageError> {
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "not added to {}: no terminal to ask on; run again with --yes to accept the entry above",
            file.display()
        )
        .into());
    }
    Ok(crate::terminal::yes_or_no(&format!(
        "Add this entry to {}?",
        file.display()
    )))
}

/// The document's bytes and a name for where it came from.
async fn fetch(origin: &Origin) -> Result<(Vec<u8>, String), UsageError> {
    match origin {
        Origin::File(path) => {
            let bytes =
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            Ok((bytes, path.display().to_string()))
        }
        Origin::Url(url) => Ok((get(url).await?, url.clone())),
        Origin::Registry {
            base,
            name,
            version,
        } => {
            let base = base.trim_end_matches('/');
            let encoded = name.replace('/', "%2F");
            let mut last = String::new();
            // The registry's current API, then its first one.
            for api in ["v0.1", "v0"] {
                let url = format!("{base}/{api}/servers/{encoded}/versions/{version}");
                match get(&url).await {
                    Ok(bytes) => return Ok((bytes, url)),
                    Err(e) => last = e.0,
                }
            }
            Err(format!("the registry at {base} has no {name} {version}: {last}").into())
        }
    }
}

/// `GET url`, at most [`MAX_DOCUMENT`] bytes, a success only.
async fn get(url: &str) -> Result<Vec<u8>, UsageError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| format!("{url}: {e}"))?;
    let mut response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(format!("{url}: answered more than {MAX_DOCUMENT} bytes").into());
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(format!("{url}: answered {status}").into());
    }
    Ok(body)
}

/// The id a server gets by default: its name's last part, in the characters a prefix may
/// hold.
fn short_id(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    let id: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(32)
        .collect();
    if id.is_empty() { "server".into() } else { id }
}

/// An entry, as TOML text, and what the user should know about it.
struct Entry {
    toml: String,
    notes: Vec<String>,
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The `[[mcp_servers]]` entry for `server`: its first package toolhost can run over
/// stdio, else its first streamable HTTP remote.
fn entry(server: &ServerJson, id: &str, prefix: &str, origin: &str) -> Result<Entry, String> {
    dispatcher_core::check_prefix(prefix).map_err(|e| format!("{e}: give one with --prefix"))?;
    let mut notes = Vec::new();
    let mut toml = String::new();
    let title = server.title.as_deref().unwrap_or(&server.description);
    let _ = writeln!(toml, "\n# {} {}: {title}", server.name, server.version);
    let _ = writeln!(toml, "# from {origin}");
    if let Some(repo) = &server.repository {
        let _ = writeln!(toml, "# source: {}", repo.url);
    }
    let stdio = server.packages.iter().find(|p| {
        matches!(p.transport, Transport::Stdio)
            && matches!(p.registry_type.as_str(), "npm" | "pypi" | "oci")
    });
    if let Some(package) = stdio {
        let (command, mut args, grant) = runner(package, &mut notes).ok_or("no runner")?;
        let mut env_lines = Vec::new();
        for var in &package.environment_variables {
            let Some(name) = &var.name else { continue };
            let what = var.description.as_deref().unwrap_or("");
            let from_environment = format!("{name} = {}", quoted(&format!("${{{name}}}")));
            match (var.is_secret, var.resolved()) {
                (false, Some(value)) => env_lines.push(format!("{name} = {}", quoted(&value))),
                // A secret, or a value only the user has: toolhost's own variable of the same
                // name, so it stays out of the file (unset, the server does not start).
                _ if var.is_required => {
                    let secret = if var.is_secret { ", secret" } else { "" };
                    let _ = writeln!(
                        toml,
                        "# set {name} in toolhost's environment (required{secret}): {what}"
                    );
                    env_lines.push(from_environment);
                }
                _ => {
                    let _ = writeln!(
                        toml,
                        "# optional: {name}: {what}; to pass it, add {from_environment} to env"
                    );
                }
            }
        }
        for arg in &package.package_arguments {
            push_argument(&mut args, arg, &mut notes);
        }
        let _ = writeln!(toml, "[[mcp_servers]]");
        let _ = writeln!(toml, "id = {}", quoted(id));
        let _ = writeln!(toml, "prefix = {}", quoted(prefix));
        let _ = writeln!(toml, "command = {}", quoted(&command));
        let args: Vec<String> = args.iter().map(|a| quoted(a)).collect();
        let _ = writeln!(toml, "args = [{}]", args.join(", "));
        if !env_lines.is_empty() {
            let _ = writeln!(toml, "env = {{ {} }}", env_lines.join(", "));
        }
        if let Some((hosts, why)) = grant {
            let hosts: Vec<String> = hosts.iter().map(|h| quoted(h)).collect();
            let _ = writeln!(
                toml,
                "network = {{ allow = [{}] }}   # {why}",
                hosts.join(", ")
            );
            notes.push(format!(
                "sandbox: it runs under the command sandbox (workspace-write) and may connect to {} only; add the hosts its own API needs to that list",
                hosts.join(", ")
            ));
        }
        return Ok(Entry { toml, notes });
    }
    if let Some(Transport::StreamableHttp { url, headers }) = server
        .remotes
        .iter()
        .find(|r| matches!(r, Transport::StreamableHttp { .. }))
    {
        let _ = writeln!(toml, "[[mcp_servers]]");
        let _ = writeln!(toml, "id = {}", quoted(id));
        let _ = writeln!(toml, "prefix = {}", quoted(prefix));
        let _ = writeln!(toml, "url = {}", quoted(url));
        for header in headers {
            let Some(name) = &header.name else { continue };
            if name.eq_ignore_ascii_case("authorization") {
                let var = format!("{}_TOKEN", id.to_ascii_uppercase().replace('-', "_"));
                let _ = writeln!(
                    toml,
                    "bearer_token_env = {}   # its bearer token",
                    quoted(&var)
                );
                notes.push(format!(
                    "set {var} in toolhost's environment to the server's token"
                ));
            } else {
                notes.push(format!(
                    "it asks for the header {name}, which toolhost does not send: this server may refuse its calls"
                ));
            }
        }
        return Ok(Entry { toml, notes });
    }
    let offered: Vec<String> = server
        .packages
        .iter()
        .map(|p| format!("{} package over {}", p.registry_type, p.transport.kind()))
        .chain(
            server
                .remotes
                .iter()
                .map(|r| format!("{} remote at {}", r.kind(), r.url().unwrap_or_default())),
        )
        .collect();
    Err(format!(
        "{} offers nothing toolhost runs (it has: {}); toolhost runs npm, PyPI and OCI packages over stdio, and streamable HTTP remotes",
        server.name,
        offered.join(", ")
    ))
}

/// The program, its arguments up to the package's own, and the network grant a package
/// runner needs (the hosts, and why).
type Runner = (String, Vec<String>, Option<(Vec<String>, String)>);

fn runner(package: &Package, notes: &mut Vec<String>) -> Option<Runner> {
    let version = package.version.as_deref();
    let registry_host = |default: &[&str]| -> Vec<String> {
        match package
            .registry_base_url
            .as_deref()
            .and_then(|u| u.split("://").nth(1))
            .and_then(|rest| rest.split('/').next())
        {
            Some(host) => vec![host.to_string()],
            None => default.iter().map(|h| h.to_string()).collect(),
        }
    };
    let mut runtime_args = Vec::new();
    for arg in &package.runtime_arguments {
        push_argument(&mut runtime_args, arg, notes);
    }
    match package.registry_type.as_str() {
        "npm" => {
            let spec = match version {
                Some(v) => format!("{}@{v}", package.identifier),
                None => package.identifier.clone(),
            };
            let mut args = vec!["-y".to_string()];
            args.extend(runtime_args);
            args.push(spec.clone());
            let hosts = registry_host(&["registry.npmjs.org"]);
            Some((
                package.runtime_hint.clone().unwrap_or_else(|| "npx".into()),
                args,
                Some((hosts, format!("npx downloads {spec} at start"))),
            ))
        }
        "pypi" => {
            let spec = match version {
                Some(v) => format!("{}=={v}", package.identifier),
                None => package.identifier.clone(),
            };
            let mut args = runtime_args;
            args.push(spec.clone());
            let hosts = registry_host(&["pypi.org", "files.pythonhosted.org"]);
            Some((
                package.runtime_hint.clone().unwrap_or_else(|| "uvx".into()),
                args,
                Some((hosts, format!("uvx downloads {spec} at start"))),
            ))
        }
        "oci" => {
            let image = match version {
                Some(v) if !package.identifier.contains(':') => {
                    format!("{}:{v}", package.identifier)
                }
                _ => package.identifier.clone(),
            };
            let mut args = vec!["run".to_string(), "-i".into(), "--rm".into()];
            args.extend(runtime_args);
            args.push(image);
            Some((
                package
                    .runtime_hint
                    .clone()
                    .unwrap_or_else(|| "docker".into()),
                args,
                None,
            ))
        }
        _ => None,
    }
}

/// Appends an argument as the command line gets it; one the user must fill is written as
/// its placeholder (`<hint>`) and noted.
fn push_argument(args: &mut Vec<String>, arg: &Argument, notes: &mut Vec<String>) {
    let value = arg.input.resolved();
    match arg.kind {
        ArgumentKind::Named => {
            let Some(flag) = &arg.name else { return };
            match value {
                Some(v) => args.extend([flag.clone(), v]),
                None if arg.input.is_required => {
                    args.extend([flag.clone(), placeholder(flag, &arg.input, notes)]);
                }
                None => {}
            }
        }
        ArgumentKind::Positional => match value {
            Some(v) => args.push(v),
            None if arg.input.is_required => {
                let hint = arg.value_hint.clone().unwrap_or_else(|| "value".into());
                args.push(placeholder(&hint, &arg.input, notes));
            }
            None => {}
        },
    }
}

fn placeholder(label: &str, input: &Input, notes: &mut Vec<String>) -> String {
    let label = label.trim_start_matches('-');
    notes.push(format!(
        "replace <{label}> in args: {}",
        input
            .description
            .as_deref()
            .unwrap_or("a value the server needs")
    ));
    format!("<{label}>")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(json: &str) -> ServerJson {
        ServerJson::parse(json.as_bytes(), "server.json").unwrap()
    }

    #[test]
    fn an_npm_package_is_pinned_run_by_npx_and_granted_its_registry() {
        let s = server(
            r#"{"name":"io.github.acme/weather","description":"Forecasts","version":"1.2.0",
            "packages":[{"registryType":"npm","identifier":"@acme/weather","version":"1.2.0","transport":{"type":"stdio"},
              "packageArguments":[{"type":"named","name":"--units","value":"metric"}],
              "environmentVariables":[{"name":"WEATHER_API_KEY","isSecret":true,"isRequired":true,"description":"API key"},
                                      {"name":"LOG_LEVEL","default":"info"}]}]}"#,
        );
        let e = entry(&s, "weather", "weather", "server.json").unwrap();
        let parsed: toml::Value = toml::from_str(&e.toml).unwrap();
        let m = &parsed["mcp_servers"][0];
        assert_eq!(m["command"].as_str(), Some("npx"));
        let args: Vec<&str> = m["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert_eq!(args, ["-y", "@acme/weather@1.2.0", "--units", "metric"]);
        assert_eq!(
            m["env"]["WEATHER_API_KEY"].as_str(),
            Some("${WEATHER_API_KEY}")
        );
        assert_eq!(m["env"]["LOG_LEVEL"].as_str(), Some("info"));
        assert_eq!(
            m["network"]["allow"][0].as_str(),
            Some("registry.npmjs.org")
        );
        assert!(
            e.toml.contains(
                "# set WEATHER_API_KEY in toolhost's environment (required, secret): API key"
            ),
            "{}",
            e.toml
        );
    }

    #[test]
    fn a_pypi_package_runs_under_uvx_with_pypi_granted() {
        let s = server(
            r#"{"name":"io.github.acme/notes","description":"Notes","version":"0.3.0",
            "packages":[{"registryType":"pypi","identifier":"acme-notes","version":"0.3.0","transport":{"type":"stdio"}}]}"#,
        );
        let e = entry(&s, "notes", "notes", "f").unwrap();
        assert!(
            e.toml.contains("command = \"uvx\"")
                && e.toml.contains("args = [\"acme-notes==0.3.0\"]"),
            "{}",
            e.toml
        );
        assert!(
            e.toml
                .contains("allow = [\"pypi.org\", \"files.pythonhosted.org\"]"),
            "{}",
            e.toml
        );
    }

    #[test]
    fn a_remote_only_server_becomes_a_url_entry() {
        let s = server(
            r#"{"name":"com.example/search","description":"Search","version":"2.0.0",
            "remotes":[{"type":"sse","url":"https://old.example/sse"},
                       {"type":"streamable-http","url":"https://mcp.example/mcp","headers":[{"name":"Authorization","isSecret":true}]}]}"#,
        );
        let e = entry(&s, "search", "search", "f").unwrap();
        assert!(
            e.toml.contains("url = \"https://mcp.example/mcp\""),
            "{}",
            e.toml
        );
        assert!(
            e.toml.contains("bearer_token_env = \"SEARCH_TOKEN\""),
            "{}",
            e.toml
        );
    }

    #[test]
    fn a_server_toolhost_cannot_run_is_refused_with_what_it_offers() {
        let s = server(
            r#"{"name":"com.example/dotnet","description":"D","version":"1.0.0",
            "packages":[{"registryType":"nuget","identifier":"Example.Mcp","version":"1.0.0","transport":{"type":"stdio"}}]}"#,
        );
        let e = entry(&s, "dotnet", "dotnet", "f").err().unwrap();
        assert!(e.contains("nuget package over stdio"), "{e}");
    }

    #[test]
    fn ids_come_from_the_name() {
        assert_eq!(short_id("io.github.acme/weather.v2"), "weather-v2");
        assert_eq!(short_id("io.github.acme/my_server"), "my_server");
    }
}
