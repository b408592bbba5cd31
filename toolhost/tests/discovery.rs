//! Progressive discovery (`[mcp.discovery]`): a client is listed a few tools and a search,
//! finds a tool by what it does, and calls it as itself (its own schema, policy and name in
//! the audit log), over stdio (2025 era: the found tool joins the list) and stateless HTTP
//! (through `call_found_tool`).
#![cfg(test)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::mcp::{call, text};
use common::raw_http::{post_stateless, result_text, stateless};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// A client that counts the list changes it is told of.
#[derive(Clone, Default)]
struct Counting(Arc<Mutex<usize>>);

impl rmcp::ClientHandler for Counting {
    async fn on_tool_list_changed(&self, _c: rmcp::service::NotificationContext<RoleClient>) {
        *self.0.lock().unwrap() += 1;
    }
}

/// `toolhost serve --mcp` over `dir` with `config`, its client counting list changes.
async fn serve(dir: &Path, config: &str) -> (RunningService<RoleClient, Counting>, Counting) {
    let counting = Counting::default();
    let client = counting
        .clone()
        .serve(TokioChildProcess::new(common::mcp::serve_mcp(dir, config)).unwrap())
        .await
        .unwrap();
    (client, counting)
}

async fn names(client: &RunningService<RoleClient, Counting>) -> Vec<String> {
    let mut names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

/// The names of the tools a `find_tools` result carries.
fn found(result: &Value) -> Vec<String> {
    result["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

const ON: &str = "[mcp.discovery]\nmode = \"on\"\nalways = [\"list_dir\"]\n\n[tool_confirmation.per_tool]\nwrite_file = \"auto\"\n";

#[tokio::test]
async fn a_2025_client_is_listed_a_few_tools_finds_one_and_calls_it_by_its_own_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    let (client, changes) = serve(dir.path(), ON).await;
    assert_eq!(
        names(&client).await,
        ["call_found_tool", "find_tools", "list_dir"]
    );
    let result = call(
        &client,
        "find_tools",
        json!({"query": "read notes.txt", "limit": 3}),
    )
    .await;
    let structured = result.structured_content.clone().unwrap();
    assert_eq!(found(&structured)[0], "read_file", "{structured}");
    // Each found tool comes whole: its own schema, as tools/list would show it.
    let read_file = &structured["tools"][0];
    assert_eq!(
        read_file["inputSchema"]["properties"]["path"]["type"],
        "string"
    );
    assert!(text(&result).contains("now listed"), "{}", text(&result));
    // The client was told, and its list now holds what it found.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while *changes.0.lock().unwrap() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no list change was told"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let listed = names(&client).await;
    assert!(listed.contains(&"read_file".to_string()), "{listed:?}");
    // Called by its own name, checked against its own schema.
    let read = call(&client, "read_file", json!({"path": "notes.txt"})).await;
    assert!(text(&read).contains("hello"), "{read:?}");
    let wrong = call(&client, "read_file", json!({"file": "notes.txt"})).await;
    assert_eq!(wrong.is_error, Some(true));
    assert!(text(&wrong).contains("path"), "{}", text(&wrong));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn with_a_text_model_a_search_finds_the_tool_that_shares_no_word_with_the_request() {
    let Some(model) = toolhost_tests::peer("TOOLHOST_TEST_TEXT_MODEL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = |model: Option<&Path>| {
        let key = model.map_or(String::new(), |m| {
            format!("model = {:?}\n", m.display().to_string())
        });
        format!("[mcp.discovery]\nmode = \"on\"\nalways = []\n{key}")
    };
    // "folder" is in no tool's text: by words, the search finds nothing.
    let query = json!({"query": "what is inside this folder", "limit": 1});
    let (words, _) = serve(dir.path(), &config(None)).await;
    let by_words = call(&words, "find_tools", query.clone()).await;
    assert_eq!(
        found(by_words.structured_content.as_ref().unwrap()),
        Vec::<String>::new()
    );
    words.cancel().await.unwrap();
    let (meaning, _) = serve(dir.path(), &config(Some(&model))).await;
    let by_meaning = call(&meaning, "find_tools", query).await;
    let structured = by_meaning.structured_content.clone().unwrap();
    assert_eq!(found(&structured), ["list_dir"], "{structured}");
    // Words still count: a request in a tool's own words finds it first.
    let by_name = call(
        &meaning,
        "find_tools",
        json!({"query": "run a shell command", "limit": 1}),
    )
    .await;
    assert_eq!(
        found(by_name.structured_content.as_ref().unwrap()),
        ["shell"]
    );
    meaning.cancel().await.unwrap();
}

#[tokio::test]
async fn a_search_names_what_is_wrong_with_its_arguments_and_finds_nothing_for_noise() {
    let dir = tempfile::tempdir().unwrap();
    let (client, _) = serve(dir.path(), ON).await;
    let refused = call(&client, "find_tools", json!({"query": "x", "limit": 500})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).contains("'limit' must be from 1 to 50"),
        "{}",
        text(&refused)
    );
    let nothing = call(&client, "find_tools", json!({"query": "zzqx"})).await;
    assert_eq!(
        found(nothing.structured_content.as_ref().unwrap()),
        Vec::<String>::new()
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn off_by_default_and_auto_with_few_tools_list_them_all_and_never_search() {
    for config in ["", "[mcp.discovery]\nmode = \"auto\"\n"] {
        let dir = tempfile::tempdir().unwrap();
        let (client, _) = serve(dir.path(), config).await;
        let listed = names(&client).await;
        assert!(
            listed.contains(&"read_file".to_string())
                && !listed.contains(&"find_tools".to_string()),
            "{config}: {listed:?}"
        );
        // A call of the search's name is no search when discovery does not apply.
        let result = call(&client, "find_tools", json!({"query": "file"})).await;
        assert_eq!(result.is_error, Some(true), "{config}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn auto_turns_on_past_its_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[mcp.discovery]\nmode = \"auto\"\nthreshold = 3\nalways = [\"list_dir\"]\n";
    let (client, _) = serve(dir.path(), config).await;
    assert_eq!(
        names(&client).await,
        ["call_found_tool", "find_tools", "list_dir"]
    );
    client.cancel().await.unwrap();
}

#[test]
fn a_stateless_client_finds_a_tool_and_calls_it_through_call_found_tool_as_the_tool_itself() {
    let ws = common::workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[mcp.discovery]\nmode = \"on\"\nalways = []\n",
    )
    .unwrap();
    let server = common::serve_http(ws.path(), &[]);
    let list = post_stateless(&server.addr, &stateless(1, "tools/list", json!({}), false)).json();
    let listed: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["find_tools", "call_found_tool"], "{list}");
    let search = stateless(
        2,
        "tools/call",
        json!({"name": "find_tools", "arguments": {"query": "write content into a file"}}),
        false,
    );
    let answer = post_stateless(&server.addr, &search).json();
    let result = &answer["result"];
    assert_eq!(
        found(&result["structuredContent"])[0],
        "write_file",
        "{answer}"
    );
    assert!(result_text(result).contains("call_found_tool"), "{answer}");
    // Through call_found_tool the call is write_file's own: its policy asks, and this
    // client cannot be asked, so `[mcp] prompt_fallback` (deny) refuses it, naming it.
    let write = stateless(
        3,
        "tools/call",
        json!({"name": "call_found_tool", "arguments": {"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}}),
        false,
    );
    let refused = post_stateless(&server.addr, &write).json();
    assert!(
        result_text(&refused["result"]).contains("write_file"),
        "{refused}"
    );
    assert!(!ws.path().join("out.txt").exists());
    // A read goes through, checked against read_file's own schema.
    let read = stateless(
        4,
        "tools/call",
        json!({"name": "call_found_tool", "arguments": {"name": "read_file", "arguments": {"path": "README.md"}}}),
        false,
    );
    let answer = post_stateless(&server.addr, &read).json();
    assert!(result_text(&answer["result"]).contains("hello"), "{answer}");
    let bad = stateless(
        5,
        "tools/call",
        json!({"name": "call_found_tool", "arguments": {"name": "read_file", "arguments": {"file": "README.md"}}}),
        false,
    );
    let answer = post_stateless(&server.addr, &bad).json();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
}

#[test]
fn a_bad_discovery_table_stops_the_server_naming_the_key() {
    let ws = common::workspace();
    for (table, expected) in [
        (
            "[mcp.discovery]\nmode = \"sometimes\"\n",
            "unknown variant `sometimes`",
        ),
        ("[mcp.discovery]\nresults = 0\n", "expected from 1 to 50"),
        ("[mcp.discovery]\nlimit = 3\n", "unknown field `limit`"),
        (
            "[mcp.discovery]\nmodel = \"no-model-here\"\n",
            "model: cannot read the text model's",
        ),
    ] {
        std::fs::write(ws.path().join("toolhost.toml"), table).unwrap();
        let out = common::command(ws.path(), &["serve", "--mcp"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains(expected),
            "{table}: {said}"
        );
        assert!(said.contains("discovery"), "{table}: {said}");
    }
}

/// The names a stateless `find_tools` call of `query` found on `server`.
fn found_over_http(server: &common::Server, query: &str) -> Vec<String> {
    let search = stateless(
        9,
        "tools/call",
        json!({"name": "find_tools", "arguments": {"query": query, "limit": 50}}),
        false,
    );
    let answer = post_stateless(&server.addr, &search).json();
    found(&answer["result"]["structuredContent"])
}

#[test]
fn a_caller_never_finds_a_tool_its_access_rules_hide_and_its_list_is_private() {
    let ws = common::workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[mcp.discovery]\nmode = \"on\"\nalways = []\n\n[[access]]\nprincipals = [\"local\"]\ntools = [\"read_file\", \"list_dir\"]\n",
    )
    .unwrap();
    let server = common::serve_http(ws.path(), &[]);
    let found = found_over_http(&server, "run a shell command or write a file");
    assert!(
        !found.is_empty() && found.iter().all(|t| t == "read_file" || t == "list_dir"),
        "{found:?}"
    );
    let list = post_stateless(&server.addr, &stateless(1, "tools/list", json!({}), false)).json();
    assert_eq!(list["result"]["cacheScope"], "private", "{list}");
}

#[test]
fn discovery_turned_off_by_a_reload_lists_every_tool_again() {
    let ws = common::workspace();
    let config = |mode: &str| format!("[mcp.discovery]\nmode = \"{mode}\"\nalways = []\n");
    std::fs::write(ws.path().join("toolhost.toml"), config("on")).unwrap();
    let server = common::serve_http(ws.path(), &[]);
    let names = || -> Vec<String> {
        let list =
            post_stateless(&server.addr, &stateless(1, "tools/list", json!({}), false)).json();
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(), ["find_tools", "call_found_tool"]);
    std::fs::write(ws.path().join("toolhost.toml"), config("off")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !names().contains(&"read_file".to_string()) {
        assert!(std::time::Instant::now() < deadline, "still {:?}", names());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!names().contains(&"find_tools".to_string()));
}

#[test]
fn a_plain_stdio_client_without_progress_tokens_sees_what_it_found_join_its_list() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.toml"), ON).unwrap();
    let mut child = common::command(dir.path(), &["serve", "--mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(serde_json::from_str(&line).unwrap());
        }
    });
    let mut send = |message: Value| writeln!(stdin, "{message}").unwrap();
    // Lines up to the answer to `id`, the answer last.
    let until = |id: i64| -> Vec<Value> {
        let mut lines = Vec::new();
        loop {
            let line = rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("an answer");
            let done = line["id"] == id;
            lines.push(line);
            if done {
                return lines;
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "plain", "version": "1"}}}),
    );
    until(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "find_tools", "arguments": {"query": "read notes.txt", "limit": 1}}}),
    );
    let answered = until(2);
    assert_eq!(
        found(&answered.last().unwrap()["result"]["structuredContent"]),
        ["read_file"]
    );
    // The list change is told once the search has added the tool.
    let told = (0..50).any(|_| {
        rx.recv_timeout(std::time::Duration::from_millis(200))
            .is_ok_and(|l| l["method"] == "notifications/tools/list_changed")
    }) || answered
        .iter()
        .any(|l| l["method"] == "notifications/tools/list_changed");
    assert!(told, "no list change was told");
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    let listed = until(3);
    let names: Vec<&str> = listed.last().unwrap()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"read_file"), "{names:?}");
    drop(stdin);
    let _ = child.wait();
}

#[tokio::test]
async fn a_client_whose_requests_each_stand_alone_is_told_to_call_found_tools_by_name() {
    use rmcp::ClientServiceExt as _;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    mcp_toolsets::install_tls_provider();
    let ws = common::workspace();
    std::fs::write(ws.path().join("toolhost.toml"), ON).unwrap();
    let server = common::serve_http(ws.path(), &[]);
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", server.addr));
    // rmcp's client discovers the server first and then sends each request on its own: no
    // connection outlives a request, so nothing it finds can join a list it is told of.
    let client = Counting::default()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            rmcp::ClientLifecycleMode::Auto {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2025_11_25],
                legacy_version: Some(rmcp::model::ProtocolVersion::V_2025_11_25),
            },
        )
        .await
        .unwrap();
    let result = call(
        &client,
        "find_tools",
        json!({"query": "read notes.txt", "limit": 1}),
    )
    .await;
    assert_eq!(
        found(result.structured_content.as_ref().unwrap()),
        ["read_file"]
    );
    assert!(
        text(&result).contains("call_found_tool"),
        "{}",
        text(&result)
    );
    assert!(!text(&result).contains("now listed"), "{}", text(&result));
    // By its own name it runs.
    let read = call(&client, "read_file", json!({"path": "README.md"})).await;
    assert!(text(&read).contains("hello"), "{read:?}");
    client.cancel().await.unwrap();
}
