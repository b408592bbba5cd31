//! `[audit]`: every call that ends is one JSON line (who called, what was decided and by
//! whom, what came of it), written before its result is returned, complete or absent also
//! when the server is killed in the middle of a burst, and rotated by size.
#![cfg(test)]

use std::path::Path;

use serde_json::{Value, json};

mod common;
use common::raw_http::{post_stateless, post_stateless_with, stateless};
use common::{Server, command, start, workspace};

const TOKEN: &str = "audited-caller-token-0123456789";

/// An HTTP instance over `ws` whose toolhost.toml holds `toml`, accepting [`TOKEN`].
fn instance(ws: &Path, toml: &str) -> Server {
    std::fs::write(ws.join("toolhost.toml"), toml).unwrap();
    std::fs::write(ws.join("tokens"), format!("{TOKEN}\n")).unwrap();
    start(command(
        ws,
        &["serve", "--http", "127.0.0.1:0", "--token-file", "tokens"],
    ))
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

fn call(server: &Server, id: i64, tool: &str, arguments: &Value, extra: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
        params.extend(extra.clone());
    }
    let auth = bearer();
    let answer = post_stateless_with(
        &server.addr,
        &[("Authorization", auth.as_str())],
        &stateless(id, "tools/call", params, true),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()["result"].clone()
}

/// A call that is asked about, answered with `decision`: its final result.
fn confirmed(server: &Server, id: i64, tool: &str, arguments: &Value, decision: &str) -> Value {
    let round = call(server, id, tool, arguments, json!({}));
    assert_eq!(round["resultType"], "input_required", "{round}");
    let state = round["requestState"].clone();
    call(
        server,
        id + 1,
        tool,
        arguments,
        json!({
            "inputResponses": {"confirm": {"action": "accept", "content": {"decision": decision}}},
            "requestState": state,
        }),
    )
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a torn line ({e}): {l:?}")))
        .collect()
}

#[test]
fn each_ended_call_is_a_line_naming_its_caller_decision_and_outcome() {
    let ws = workspace();
    let server = instance(
        ws.path(),
        "[audit]\npath = \"logs/audit.jsonl\"\n[tool_confirmation.per_tool]\nlist_dir = \"deny\"\n",
    );
    let read = json!({"path": "README.md"});
    call(&server, 1, "read_file", &read, json!({}));
    let write = json!({"path": "out.txt", "content": "secret-content-of-the-call"});
    confirmed(&server, 2, "write_file", &write, "allow");
    confirmed(
        &server,
        4,
        "shell",
        &json!({"command": "echo audited"}),
        "always",
    );
    confirmed(
        &server,
        6,
        "write_file",
        &json!({"path": "no.txt", "content": "x"}),
        "deny",
    );
    call(&server, 8, "list_dir", &json!({"path": "."}), json!({}));
    call(&server, 9, "no_such_tool", &json!({}), json!({}));
    let log = lines(&ws.path().join("logs/audit.jsonl"));
    let principal = log[0]["principal"].as_str().unwrap().to_string();
    assert!(principal.starts_with("token-"), "{principal}");
    // (tool, decision, decided_by.by, outcome)
    let expected = [
        ("read_file", Some("allow"), Some("policy"), "ok"),
        ("write_file", Some("allow"), Some("user"), "ok"),
        ("shell", Some("always"), Some("user"), "ok"),
        ("write_file", Some("deny"), Some("user"), "user_denied"),
        ("list_dir", Some("deny"), Some("policy"), "user_denied"),
        ("no_such_tool", None, None, "not_found"),
    ];
    assert_eq!(log.len(), expected.len(), "{log:#?}");
    for (line, (tool, decision, by, outcome)) in log.iter().zip(expected) {
        let what = format!("{line}");
        assert_eq!(line["tool"], tool, "{what}");
        assert_eq!(line["decision"].as_str(), decision, "{what}");
        assert_eq!(line["decided_by"]["by"].as_str(), by, "{what}");
        assert_eq!(line["outcome"], outcome, "{what}");
        assert_eq!(line["principal"], principal.as_str(), "{what}");
        assert!(line["time"].as_str().unwrap().ends_with('Z'), "{what}");
        assert_eq!(
            line["arguments_sha256"].as_str().unwrap().len(),
            64,
            "{what}"
        );
        assert!(
            line["session"].is_string() && line["instance"].is_string(),
            "{what}"
        );
    }
    assert_eq!(log[0]["class"], "read");
    assert_eq!(log[1]["files_modified"], json!(["out.txt"]));
    assert_eq!(log[2]["command_executed"], "echo audited");
    assert!(log[1]["decided_by"]["client"].is_string(), "{}", log[1]);
    assert_eq!(
        log[4]["decided_by"]["rule"],
        "tool_confirmation.per_tool.list_dir"
    );
    // Arguments are kept as their digest only.
    assert_ne!(log[1]["arguments_sha256"], log[3]["arguments_sha256"]);
    let text = std::fs::read_to_string(ws.path().join("logs/audit.jsonl")).unwrap();
    assert!(!text.contains("secret-content-of-the-call"), "{text}");
}

#[test]
fn a_kill_in_the_middle_of_a_burst_leaves_only_complete_lines_one_per_answered_call() {
    let ws = workspace();
    let server = instance(ws.path(), "[audit]\npath = \"audit.jsonl\"\n");
    let addr = server.addr.clone();
    let answered = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (addr, answered) = (&addr, &answered);
            scope.spawn(move || {
                let auth = bearer();
                for n in 0..400 {
                    let message = stateless(
                        t * 1000 + n,
                        "tools/call",
                        json!({"name": "read_file", "arguments": {"path": "README.md"}}),
                        false,
                    );
                    let Ok(r) = std::panic::catch_unwind(|| {
                        post_stateless_with(addr, &[("Authorization", auth.as_str())], &message)
                    }) else {
                        return;
                    };
                    if r.status == 200 && r.json()["result"]["isError"] == false {
                        answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
        }
        // Killed mid-burst.
        while answered.load(std::sync::atomic::Ordering::SeqCst) < 150 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        toolhost_tests::send_signal(server.child.id(), rustix::process::Signal::KILL);
    });
    let log = lines(&ws.path().join("audit.jsonl"));
    let answered = answered.into_inner();
    assert!(
        log.len() >= answered,
        "{answered} calls were answered, {} recorded",
        log.len()
    );
    assert!(log.len() < 1600, "the burst was not cut short");
    assert!(
        log.iter()
            .all(|l| l["outcome"] == "ok" && l["tool"] == "read_file")
    );
    // Opened again: appended to, nothing lost.
    drop(server);
    let again = instance(ws.path(), "[audit]\npath = \"audit.jsonl\"\n");
    call(
        &again,
        1,
        "read_file",
        &json!({"path": "README.md"}),
        json!({}),
    );
    assert_eq!(lines(&ws.path().join("audit.jsonl")).len(), log.len() + 1);
}

#[test]
fn a_log_past_its_size_is_rotated_keeping_the_configured_number() {
    let ws = workspace();
    let server = instance(
        ws.path(),
        "[audit]\npath = \"audit.jsonl\"\nmax_bytes = 4096\nkeep = 2\n",
    );
    for id in 0..60 {
        call(
            &server,
            id,
            "read_file",
            &json!({"path": "README.md"}),
            json!({}),
        );
    }
    let dir = ws.path();
    assert!(dir.join("audit.jsonl.1").exists() && dir.join("audit.jsonl.2").exists());
    assert!(!dir.join("audit.jsonl.3").exists());
    for file in ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"] {
        let size = std::fs::metadata(dir.join(file)).unwrap().len();
        assert!(size <= 4096, "{file}: {size} bytes");
        assert!(!lines(&dir.join(file)).is_empty(), "{file}");
    }
}

#[test]
fn an_audit_setting_that_is_wrong_stops_the_program_naming_it() {
    let ws = workspace();
    for (toml, says) in [
        ("[audit]\nmax_bytes = 10\n", "audit.max_bytes"),
        ("[audit]\npath = \"README.md/audit.jsonl\"\n", "[audit]"),
    ] {
        std::fs::write(ws.path().join("toolhost.toml"), toml).unwrap();
        let out = command(ws.path(), &["serve", "--http", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{toml}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(says), "{toml}: {said}");
    }
}

#[test]
fn without_an_audit_path_no_log_is_written() {
    let ws = workspace();
    let server = instance(ws.path(), "");
    let r = post_stateless(&server.addr, &stateless(1, "tools/list", json!({}), false));
    assert_eq!(r.status, 401);
    call(
        &server,
        2,
        "read_file",
        &json!({"path": "README.md"}),
        json!({}),
    );
    let names: Vec<_> = std::fs::read_dir(ws.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(!names.iter().any(|n| n.contains("audit")), "{names:?}");
}
