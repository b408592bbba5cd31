//! A second peer gateway in front of the same server: agentgateway (Rust), when a built
//! binary of it is named by [`VAR`]. The bench cannot build it: its source is on GitHub and
//! its workspace patches crates from git, where this machine reaches only the package
//! registries (docs/performance.md says how one was built here by hand). Given one, the
//! bench starts it as its users do, with its configuration on its command line: one bind
//! on the port the bench picks, one MCP backend whose one target is `toolhost serve --http`
//! (the bare configuration, as toolhost's own HTTP gateway mounts it), reached by the
//! bench's client over its streamable HTTP (a 2025-11-25 session), both started for each
//! round as every other server is.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::mcp_text::server;

/// The environment variable naming a built agentgateway binary.
pub(super) const VAR: &str = "TOOLHOST_BENCH_AGENTGATEWAY";

/// Why agentgateway stands in no row when [`VAR`] is not set.
fn not_given() -> String {
    format!(
        "agentgateway (Rust, a peer gateway): not measured: set {VAR} to a built agentgateway binary (the bench cannot build it: its source is on GitHub and its workspace patches crates from git, and this machine reaches only the package registries; docs/performance.md says how one was built here)"
    )
}

/// The name a target's tool takes behind agentgateway with one target: its own (v1.3.1
/// listed and called `read_file` so, answering as server-sent events in a session; it
/// prefixes names only once it multiplexes several targets).
const TOOL: &str = "read_file";

/// The binary [`VAR`] names (`var`, its value): `None` when it is not set, an error naming
/// it when it is set to no file.
fn binary(var: Option<std::ffi::OsString>) -> Result<Option<PathBuf>, String> {
    let Some(path) = var else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    if path.is_file() {
        Ok(Some(path))
    } else {
        Err(format!(
            "{VAR} is {}, which is no file: set it to a built agentgateway binary, or unset it",
            path.display()
        ))
    }
}

/// agentgateway's configuration as its `-c` takes it (JSON is YAML): a bind on `{port}`
/// routing to one MCP target at `{upstream_port}`, both filled in by the bench.
fn config() -> String {
    let config = json!({"binds": [{
        "port": "PORT",
        "listeners": [{"routes": [{"backends": [{"mcp": {"targets": [{
            "name": "up",
            "mcp": {"host": "http://127.0.0.1:{upstream_port}/mcp"},
        }]}}]}]}],
    }]});
    config.to_string().replace("\"PORT\"", "{port}")
}

/// The plan's entry for agentgateway in front of `upstream` (a `serve --http` command with
/// `{port}`), when [`VAR`] names a binary; `Err` says why it is not measured.
pub(super) fn entry(upstream: Vec<String>) -> Result<Value, String> {
    let binary = binary(std::env::var_os(VAR))?.ok_or_else(not_given)?;
    let mut entry = server(
        "agentgateway-http",
        TOOL,
        json!({"path": "a.txt"}),
        vec![binary.display().to_string(), "-c".into(), config()],
    );
    entry["http"] = json!({"stateless": false});
    entry["upstream"] = json!(upstream);
    // What it spends is the timed rows' figure; its counts stand against no floor.
    entry["count"] = false.into();
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_configuration_binds_the_benchs_port_and_targets_the_upstreams() {
        let config = config();
        assert!(config.contains("\"port\":{port}"), "{config}");
        assert!(
            config.contains("\"host\":\"http://127.0.0.1:{upstream_port}/mcp\""),
            "{config}"
        );
        let filled: Value = serde_json::from_str(
            &config
                .replace("{port}", "3000")
                .replace("{upstream_port}", "4000"),
        )
        .expect("JSON once filled in");
        assert_eq!(filled["binds"][0]["port"], 3000);
    }

    #[test]
    fn a_variable_naming_no_file_is_an_error_naming_the_variable_and_the_path() {
        let err = binary(Some("/nonexistent/agentgateway".into())).unwrap_err();
        assert!(
            err.contains(VAR) && err.contains("/nonexistent/agentgateway"),
            "{err}"
        );
        assert_eq!(binary(None), Ok(None));
        let this = std::env::current_exe().unwrap();
        assert_eq!(binary(Some(this.clone().into())), Ok(Some(this)));
    }
}
