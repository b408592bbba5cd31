//! `toolhost mcp add`: an `[[mcp_servers]]` entry from the MCP Registry's `server.json`, as
//! a user runs it. The fixture (`mcp_registry/server-everything.json`) describes the real
//! `@modelcontextprotocol/server-everything` on npm, written here by the published schema;
//! the entry it becomes starts that server from the npm registry.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use toolhost_tests::{peer, text};

const NAME: &str = "io.github.modelcontextprotocol/server-everything";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_registry/server-everything.json")
}

struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new(config: &str) -> Machine {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("toolhost.toml"), config).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Machine { dir }
    }

    fn config(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("toolhost.toml")).unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        command
            .arg("--config")
            .arg(self.dir.path().join("toolhost.toml"))
            .args(args)
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path().join("home"))
            .env("XDG_CONFIG_HOME", self.dir.path().join("no-user-config"))
            .env("XDG_CACHE_HOME", self.dir.path().join("cache"))
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .stdin(Stdio::null());
        command
    }

    fn toolhost(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

fn said(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

#[test]
fn without_a_terminal_or_yes_the_entry_is_shown_and_nothing_is_written() {
    let machine = Machine::new("# mine\n");
    let fixture = fixture();
    let out = machine.toolhost(&["mcp", "add", "--file", fixture.to_str().unwrap()]);
    let said = said(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("--yes") && said.contains("[[mcp_servers]]"),
        "{said}"
    );
    assert!(
        said.contains("@modelcontextprotocol/server-everything@2026.8.31"),
        "{said}"
    );
    assert_eq!(machine.config(), "# mine\n");
}

#[test]
fn the_entry_pins_the_package_passes_its_variables_and_grants_its_registry_only() {
    let machine = Machine::new("# mine\nmax_concurrency = 4\n");
    let fixture = fixture();
    let out = machine.toolhost(&[
        "mcp",
        "add",
        NAME,
        "--file",
        fixture.to_str().unwrap(),
        "--yes",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let config = machine.config();
    assert!(
        config.starts_with("# mine\nmax_concurrency = 4\n"),
        "{config}"
    );
    let parsed: toml::Value = toml::from_str(&config).unwrap();
    let entry = &parsed["mcp_servers"][0];
    assert_eq!(entry["id"].as_str(), Some("server-everything"));
    assert_eq!(entry["command"].as_str(), Some("npx"));
    let args: Vec<&str> = entry["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(
        args,
        [
            "-y",
            "@modelcontextprotocol/server-everything@2026.8.31",
            "stdio"
        ]
    );
    assert_eq!(entry["env"]["EVERYTHING_LOG_LEVEL"].as_str(), Some("info"));
    assert!(
        entry["env"].get("EVERYTHING_API_KEY").is_none(),
        "an optional secret is left for the user to pass"
    );
    assert!(
        config.contains("# optional: EVERYTHING_API_KEY"),
        "{config}"
    );
    let allow: Vec<&str> = entry["network"]["allow"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(allow, ["registry.npmjs.org"]);

    let again = machine.toolhost(&["mcp", "add", "--file", fixture.to_str().unwrap(), "--yes"]);
    assert!(
        said(&again).contains("already has an [[mcp_servers]] entry with id \"server-everything\""),
        "{}",
        said(&again)
    );
}

#[test]
fn a_document_the_schema_refuses_is_refused_naming_where_and_nothing_is_written() {
    let machine = Machine::new("");
    let doc = std::fs::read_to_string(fixture()).unwrap();
    let table = [
        (
            doc.replace(
                "\"version\": \"2026.8.31\",\n      \"runtimeHint\"",
                "\"version\": \"latest\",\n      \"runtimeHint\"",
            ),
            "packages[0].version",
        ),
        (
            doc.replace("\"type\": \"stdio\"", "\"type\": \"pigeon\""),
            "packages[0].transport",
        ),
        (
            doc.replace(NAME, "server-everything"),
            "not a registry name",
        ),
    ];
    for (bad, needle) in table {
        let file = machine.dir.path().join("bad.json");
        std::fs::write(&file, bad).unwrap();
        let out = machine.toolhost(&["mcp", "add", "--file", file.to_str().unwrap(), "--yes"]);
        let said = said(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(
            said.contains(needle) && said.contains("bad.json"),
            "{needle}: {said}"
        );
        assert_eq!(machine.config(), "");
    }
}

#[test]
fn a_name_is_looked_up_in_the_configured_registry_api() {
    let body = format!(
        r#"{{"server":{},"_meta":{{"io.modelcontextprotocol.registry/official":{{"status":"active","isLatest":true}}}}}}"#,
        std::fs::read_to_string(fixture()).unwrap()
    );
    let (port, hits) = toolhost_tests::web_server(Box::leak(body.into_boxed_str()));
    let machine = Machine::new(&format!("[mcp]\nregistry = \"http://127.0.0.1:{port}\"\n"));
    let out = machine.toolhost(&["mcp", "add", NAME, "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        said(&out).contains(
            "/v0.1/servers/io.github.modelcontextprotocol%2Fserver-everything/versions/latest"
        ),
        "{}",
        said(&out)
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(machine.config().contains("id = \"server-everything\""));

    let other = machine.toolhost(&[
        "mcp",
        "add",
        "io.github.acme/other",
        "--yes",
        "--id",
        "other",
    ]);
    assert!(said(&other).contains("describes \"io.github.modelcontextprotocol/server-everything\", not \"io.github.acme/other\""), "{}", said(&other));
}

#[test]
fn the_added_server_starts_from_the_npm_registry_and_answers() {
    let Some(node) = peer("TOOLHOST_TEST_NODE") else {
        return;
    };
    let machine = Machine::new("");
    let fixture = fixture();
    let out = machine.toolhost(&["mcp", "add", "--file", fixture.to_str().unwrap(), "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    // This machine reaches the npm registry through an address of its own network, which
    // the egress proxy refuses unless it is named: the entry's grant gets the addresses
    // registry.npmjs.org resolves to here (on a user's machine the name alone does).
    let addresses: Vec<String> =
        std::net::ToSocketAddrs::to_socket_addrs(&("registry.npmjs.org", 443))
            .map(|a| a.map(|a| format!("\"{}\"", a.ip())).collect())
            .unwrap_or_default();
    // npx fetches the package at the first start: on a loaded machine (the whole suite
    // beside it on two cores) that takes longer than the default 10 s a start may take,
    // so the entry gets the time a user on a slow connection would give it.
    let config = machine
        .config()
        .replace(
            "allow = [\"registry.npmjs.org\"]",
            &format!("allow = [\"registry.npmjs.org\", {}]", addresses.join(", ")),
        )
        .replacen(
            "id = \"server-everything\"\n",
            "id = \"server-everything\"\nstartup_timeout_secs = 120\n",
            1,
        );
    assert!(config.contains("startup_timeout_secs = 120"), "{config}");
    std::fs::write(machine.dir.path().join("toolhost.toml"), config).unwrap();

    let node_dir = node.parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        node_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let listed = machine
        .command(&["list", "--json"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", said(&listed));
    let tools: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let get_env = tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.starts_with("server-everything") && n.ends_with("get-env"))
        .unwrap_or_else(|| panic!("no get-env tool in {tools}; {}", text(&listed.stderr)))
        .to_string();
    let called = machine
        .command(&["call", &get_env, "--yes"])
        .env("PATH", &path)
        .output()
        .unwrap();
    let said = said(&called);
    assert_eq!(called.status.code(), Some(0), "{said}");
    assert!(
        said.contains("EVERYTHING_LOG_LEVEL") && said.contains("info"),
        "{said}"
    );
}
