//! `[limits]`: calls per minute per caller, to every tool and to one. A limited call is a
//! result the model reads (which limit, when to retry), never a dropped request; each
//! caller (bearer token) is counted apart; instances sharing a Redis share the count.
#![cfg(test)]

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolhost_tests::redis_server::RedisServer;

mod common;
use common::raw_http::{post_stateless_with, result_text, stateless};
use common::{Server, command, start, workspace};

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdefgh";

/// An HTTP instance over `ws` (whose toolhost.toml sets the limits) accepting both tokens,
/// with the store at `store`.
fn instance(ws: &Path, store: &str) -> Server {
    std::fs::write(ws.join("tokens"), format!("{ALICE}\n{BOB}\n")).unwrap();
    let mut cmd = command(
        ws,
        &["serve", "--http", "127.0.0.1:0", "--token-file", "tokens"],
    );
    cmd.env("TOOLHOST_STORE_URL", store);
    start(cmd)
}

fn limits(ws: &Path, toml: &str) {
    std::fs::write(ws.join("toolhost.toml"), toml).unwrap();
}

/// Waits out the end of a minute, so that a test's calls fall in one window.
fn in_one_minute() {
    let into = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 60;
    if into > 45 {
        std::thread::sleep(Duration::from_secs(61 - into));
    }
}

/// `read_file` (runs without asking) called by `token` at `server`: its result.
fn read(server: &Server, token: &str, id: i64) -> Value {
    let bearer = format!("Bearer {token}");
    let call = stateless(
        id,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "README.md"}}),
        false,
    );
    let answer = post_stateless_with(&server.addr, &[("Authorization", bearer.as_str())], &call);
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()["result"].clone()
}

fn limited(result: &Value) -> bool {
    result["isError"] == true && result_text(result).contains("rate limit reached")
}

#[test]
fn a_caller_over_a_tool_limit_gets_a_result_naming_it_and_when_to_retry() {
    let ws = workspace();
    limits(ws.path(), "[limits.per_tool]\nread_file = 2\n");
    let server = instance(ws.path(), "memory");
    in_one_minute();
    for id in 1..=2 {
        let ok = read(&server, ALICE, id);
        assert_eq!(result_text(&ok), "# hello\n", "{ok}");
    }
    let third = read(&server, ALICE, 3);
    assert!(limited(&third), "{third}");
    let said = result_text(&third);
    assert!(
        said.contains("2 calls per minute to 'read_file'") && said.contains("retry in"),
        "{said}"
    );
    assert_eq!(third["structuredContent"], Value::Null);
    // Another caller has a count of its own.
    let other = read(&server, BOB, 4);
    assert_eq!(result_text(&other), "# hello\n", "{other}");
}

#[test]
fn the_limit_on_all_tools_counts_each_callers_calls_to_any_tool() {
    let ws = workspace();
    limits(ws.path(), "[limits]\ncalls_per_minute = 3\n");
    let server = instance(ws.path(), "memory");
    in_one_minute();
    let bearer = format!("Bearer {ALICE}");
    let list = stateless(
        1,
        "tools/call",
        json!({"name": "list_dir", "arguments": {"path": "."}}),
        false,
    );
    let listed = post_stateless_with(&server.addr, &[("Authorization", bearer.as_str())], &list);
    assert_eq!(listed.json()["result"]["isError"], false, "{listed:?}");
    for id in 2..=3 {
        assert_eq!(result_text(&read(&server, ALICE, id)), "# hello\n");
    }
    let fourth = read(&server, ALICE, 4);
    assert!(
        limited(&fourth) && result_text(&fourth).contains("3 calls per minute to all tools"),
        "{fourth}"
    );
}

#[test]
fn instances_sharing_redis_share_each_callers_count() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    limits(ws.path(), "[limits.per_tool]\nread_file = 3\n");
    let (a, b) = (
        instance(ws.path(), &redis.url()),
        instance(ws.path(), &redis.url()),
    );
    in_one_minute();
    for (id, at) in [(1, &a), (2, &b), (3, &a)] {
        assert_eq!(result_text(&read(at, ALICE, id)), "# hello\n");
    }
    let fourth = read(&b, ALICE, 4);
    assert!(limited(&fourth), "the count was not shared: {fourth}");
    assert_eq!(result_text(&read(&b, BOB, 5)), "# hello\n");
}

#[test]
fn with_redis_down_a_limited_tool_is_refused_saying_why_and_the_rest_runs() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    limits(ws.path(), "[limits.per_tool]\nread_file = 100\n");
    let server = instance(ws.path(), &redis.url());
    assert_eq!(result_text(&read(&server, ALICE, 1)), "# hello\n");
    redis.stop();
    let refused = read(&server, ALICE, 2);
    let said = result_text(&refused);
    assert!(
        refused["isError"] == true
            && said.contains("cannot be checked")
            && said.contains(&redis.url()),
        "{refused}"
    );
    // A tool without a limit needs no count.
    let bearer = format!("Bearer {ALICE}");
    let list = stateless(
        3,
        "tools/call",
        json!({"name": "list_dir", "arguments": {"path": "."}}),
        false,
    );
    let listed = post_stateless_with(&server.addr, &[("Authorization", bearer.as_str())], &list);
    assert_eq!(listed.json()["result"]["isError"], false, "{listed:?}");
    redis.restart();
}

#[test]
fn a_limit_that_is_not_a_count_stops_the_program_naming_the_key() {
    let ws = workspace();
    limits(ws.path(), "[limits.per_tool]\nshell = -1\n");
    let out = command(ws.path(), &["list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("limits.per_tool.shell"), "{said}");
}
