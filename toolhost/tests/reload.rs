//! A running `toolhost serve --http` takes changes without a restart: its configuration
//! file (policy, access rules, mounted servers), and the packages in its plugin
//! directories (upgraded, refused, removed), each noticed in the files or on `SIGHUP`.
#![cfg(test)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

mod common;
use common::raw_http::{post_stateless, result_text, stateless};
use common::{call, logged, serve_http, tools, until, workspace};

fn write_config(ws: &Path, text: &str) {
    // Written whole and renamed in, as editors save.
    let scratch = ws.join(".toolhost.toml.new");
    std::fs::write(&scratch, text).unwrap();
    std::fs::rename(&scratch, ws.join("toolhost.toml")).unwrap();
}

#[test]
fn a_changed_config_applies_to_the_next_call_and_one_that_does_not_load_changes_nothing() {
    let ws = workspace();
    write_config(
        ws.path(),
        "[tool_confirmation.per_tool]\nlist_dir = \"deny\"\n",
    );
    let server = serve_http(ws.path(), &[]);
    assert_eq!(call(&server, "list_dir", json!({}))["isError"], true);
    write_config(
        ws.path(),
        "[tool_confirmation.per_tool]\nlist_dir = \"auto\"\n",
    );
    until("list_dir allowed", || {
        call(&server, "list_dir", json!({}))["isError"] == false
    });
    logged(&server, &["toolhost.toml reloaded"]);
    // A file that does not load: the same error as at start, and nothing changes.
    let bad = "[tool_confirmation.per_tool]\nlist_dir = \"sometimes\"\n";
    write_config(ws.path(), bad);
    let line = logged(
        &server,
        &["not reloaded", "the running configuration stays"],
    );
    let at_start = common::command(ws.path(), &["list"]).output().unwrap();
    let refused = toolhost_tests::text(&at_start.stderr);
    let first = refused
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ");
    assert!(line.contains("sometimes"), "{line}");
    assert!(
        refused.contains("sometimes") && line.contains(first.split(": ").last().unwrap_or(first)),
        "at start: {refused}\nat reload: {line}"
    );
    assert_eq!(call(&server, "list_dir", json!({}))["isError"], false);
    // What a running server cannot take is named; the rest applies.
    write_config(
        ws.path(),
        "[store]\nurl = \"redis://127.0.0.1:1/0\"\n\n[tool_confirmation.per_tool]\nlist_dir = \"deny\"\n",
    );
    logged(&server, &["[store] changed", "restart toolhost"]);
    until("list_dir denied again", || {
        call(&server, "list_dir", json!({}))["isError"] == true
    });
}

/// A `[[mcp_servers]]` entry for the fixture server, as `id` with prefix `prefix`.
fn server_entry(id: &str, prefix: &str, args: &str) -> String {
    format!(
        "[[mcp_servers]]\nid = \"{id}\"\nprefix = \"{prefix}\"\ncommand = \"{}\"\nargs = [{args}]\n\n",
        toolhost_tests::fixtures().mcp_server().display()
    )
}

const ECHO_ALLOWED: &str =
    "[tool_confirmation.per_tool]\nfx__echo = \"auto\"\nfy__echo = \"auto\"\n\n";

#[test]
fn mounted_servers_are_added_restarted_when_changed_and_removed_and_the_others_keep_running() {
    let ws = workspace();
    write_config(ws.path(), ECHO_ALLOWED);
    let server = serve_http(ws.path(), &[]);
    assert!(!tools(&server).iter().any(|t| t == "fx__echo"));
    write_config(
        ws.path(),
        &format!("{ECHO_ALLOWED}{}", server_entry("fx", "fx", "")),
    );
    until("fx__echo listed", || {
        tools(&server).iter().any(|t| t == "fx__echo")
    });
    let echoed = call(&server, "fx__echo", json!({"text": "added"}));
    assert_eq!(result_text(&echoed), "echo: added", "{echoed}");
    // Another server added: the first keeps running.
    write_config(
        ws.path(),
        &format!(
            "{ECHO_ALLOWED}{}{}",
            server_entry("fx", "fx", ""),
            server_entry("fy", "fy", "\"--offers\"")
        ),
    );
    until("fy__echo listed", || {
        tools(&server).iter().any(|t| t == "fy__echo")
    });
    // Its prompts pass through as its tools do (registered just after them: a busy machine
    // can answer a prompts/list in between).
    until("fy's prompts listed", || {
        let prompts = post_stateless(
            &server.addr,
            &stateless(3, "prompts/list", json!({}), false),
        )
        .json();
        prompts["result"]["prompts"]
            .as_array()
            .is_some_and(|names| {
                names
                    .iter()
                    .any(|p| p["name"].as_str().is_some_and(|n| n.starts_with("fy__")))
            })
    });
    // Its entry changed: it is restarted.
    write_config(
        ws.path(),
        &format!(
            "{ECHO_ALLOWED}{}{}",
            server_entry("fx", "fx", "\"--with-oneof\""),
            server_entry("fy", "fy", "\"--offers\"")
        ),
    );
    logged(&server, &["server=fx", "stopped to start again"]);
    until("fx restarted", || {
        result_text(&call(&server, "fx__echo", json!({"text": "again"}))) == "echo: again"
    });
    let log = server.log.lock().unwrap().join("\n");
    assert!(!log.contains("server=fy MCP server stopped"), "{log}");
    drop(log);
    // Removed: its tools go.
    write_config(
        ws.path(),
        &format!("{ECHO_ALLOWED}{}", server_entry("fy", "fy", "\"--offers\"")),
    );
    until("fx__echo gone", || {
        !tools(&server).iter().any(|t| t == "fx__echo")
    });
    assert_eq!(
        result_text(&call(&server, "fy__echo", json!({"text": "kept"}))),
        "echo: kept"
    );
}

#[test]
fn access_rules_reloaded_apply_to_a_callers_session_already_open() {
    let ws = workspace();
    let rules = |tools: &str| format!("[[access]]\nprincipals = [\"local\"]\ntools = [{tools}]\n");
    write_config(ws.path(), &rules("\"read_file\""));
    let server = serve_http(ws.path(), &[]);
    assert_eq!(tools(&server), ["read_file"]);
    write_config(ws.path(), &rules("\"read_file\", \"list_dir\""));
    until("list_dir visible", || tools(&server).len() == 2);
    assert_eq!(call(&server, "list_dir", json!({}))["isError"], false);
}

/// The `wat-noop` component's package at `version` in `into` (see
/// [`toolhost_tests::wat_noop_package`]); `None` when the run has no components.
fn wat_noop(into: &Path, version: &str, tampered: bool) -> Option<()> {
    let components = toolhost_tests::peer("TOOLHOST_TEST_COMPONENTS")?;
    toolhost_tests::wat_noop_package(&components, into, version, tampered);
    Some(())
}

/// Moves package `name` of `staging` into `plugins` in one rename, the one there out first.
fn swap_in(ws: &Path, name: &str) {
    let live = ws.join("plugins/wat-noop");
    if live.exists() {
        std::fs::rename(&live, ws.join(format!("old-{name}"))).unwrap();
    }
    std::fs::rename(ws.join("staging").join(name), &live).unwrap();
}

#[test]
fn a_plugin_upgraded_in_its_directory_is_swapped_in_and_a_refused_version_leaves_the_old_one_serving()
 {
    let ws = workspace();
    if wat_noop(&ws.path().join("plugins/wat-noop"), "1.0.0", false).is_none() {
        return;
    }
    write_config(ws.path(), "plugin_dirs = [\"plugins\"]\n");
    let server = serve_http(ws.path(), &[]);
    assert!(tools(&server).iter().any(|t| t == "wat_noop"));
    assert_eq!(call(&server, "wat_noop", json!({}))["isError"], false);
    // A newer version: verified and swapped in.
    wat_noop(&ws.path().join("staging/v2"), "2.0.0", false);
    swap_in(ws.path(), "v2");
    logged(&server, &["plugin upgraded: wat-noop 1.0.0 → 2.0.0"]);
    assert_eq!(call(&server, "wat_noop", json!({}))["isError"], false);
    // One whose checksum does not match: refused, and 2.0.0 keeps serving.
    wat_noop(&ws.path().join("staging/v3"), "3.0.0", true);
    swap_in(ws.path(), "v3");
    let refused = logged(&server, &["wat-noop 2.0.0 keeps serving"]);
    assert!(refused.contains("refused"), "{refused}");
    assert_eq!(call(&server, "wat_noop", json!({}))["isError"], false);
    // Removed: its tool goes.
    std::fs::rename(
        ws.path().join("plugins/wat-noop"),
        ws.path().join("removed"),
    )
    .unwrap();
    logged(&server, &["plugin removed: wat-noop 2.0.0"]);
    assert!(!tools(&server).iter().any(|t| t == "wat_noop"));
    // SIGHUP rescans too.
    toolhost_tests::send_signal(server.child.id(), rustix::process::Signal::HUP);
    logged(&server, &["SIGHUP: reloading"]);
}

/// A 2025-era client that counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for Counting {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::service::RoleClient>,
    ) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn over_stdio_a_plugin_added_under_the_server_reaches_the_client_with_a_list_change() {
    use rmcp::ServiceExt as _;
    let ws = workspace();
    if wat_noop(&ws.path().join("staging/v1"), "1.0.0", false).is_none() {
        return;
    }
    std::fs::create_dir_all(ws.path().join("plugins")).unwrap();
    write_config(ws.path(), "plugin_dirs = [\"plugins\"]\n");
    let cmd = tokio::process::Command::from(common::command(ws.path(), &["serve", "--mcp"]));
    let counting = Counting::default();
    let client = counting
        .clone()
        .serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };
    let before = names(client.peer().list_all_tools().await.unwrap());
    assert!(!before.iter().any(|t| t == "wat_noop"), "{before:?}");
    swap_in(ws.path(), "v1");
    let deadline = Instant::now() + Duration::from_secs(20);
    while counting.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no tools/list_changed came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = names(client.peer().list_all_tools().await.unwrap());
    assert!(after.iter().any(|t| t == "wat_noop"), "{after:?}");
    let called = client
        .peer()
        .call_tool(rmcp::model::CallToolRequestParams::new("wat_noop"))
        .await
        .unwrap();
    assert_eq!(called.is_error, Some(false), "{called:?}");
    client.cancel().await.unwrap();
}
