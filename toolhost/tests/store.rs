//! Many instances, one truth: `toolhost serve --http` instances sharing a key ring and a
//! real `redis-server` (`[store] url`), driven by a 2026-07-28 client over raw HTTP as a
//! load balancer would spread it. A confirmed call runs once whichever instance its retry
//! reaches, however many at once; "always" holds on every instance; and when Redis is down
//! nothing runs twice, nothing that needed it is allowed, and it all comes back.
#![cfg(test)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_tests::redis_server::RedisServer;

mod common;
use common::raw_http::{
    follow_events, legacy_session, post_mcp, post_stateless, request, stateless, wait_event,
};
use common::{Server, command, start, workspace};

const RING: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// An instance over `ws` sharing the key ring and the store at `url`.
fn instance(ws: &Path, url: &str) -> Server {
    let mut cmd = command(ws, &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("TOOLHOST_REQUEST_STATE_KEYS", RING)
        .env("TOOLHOST_STORE_URL", url);
    start(cmd)
}

/// Three instances over `ws` sharing `redis`.
fn three(ws: &Path, redis: &RedisServer) -> (Server, Server, Server) {
    let url = redis.url();
    (instance(ws, &url), instance(ws, &url), instance(ws, &url))
}

/// A shell call that appends a line to `runs.log`: how many times it ran.
fn appending() -> Value {
    json!({"command": "echo ran >> runs.log"})
}

fn runs(ws: &Path) -> usize {
    std::fs::read_to_string(ws.join("runs.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn call(id: i64, arguments: &Value) -> Value {
    stateless(
        id,
        "tools/call",
        json!({"name": "shell", "arguments": arguments}),
        true,
    )
}

/// The confirmation round at `server`: its `requestState`.
fn asked(server: &Server, arguments: &Value) -> String {
    let round = post_stateless(&server.addr, &call(1, arguments)).json();
    assert_eq!(round["result"]["resultType"], "input_required", "{round}");
    round["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string()
}

fn retry(id: i64, arguments: &Value, state: &str, decision: &str) -> Value {
    stateless(
        id,
        "tools/call",
        json!({
            "name": "shell", "arguments": arguments,
            "inputResponses": {"confirm": {"action": "accept", "content": {"decision": decision}}},
            "requestState": state,
        }),
        true,
    )
}

fn error_of(answer: &Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn health(server: &Server) -> Value {
    request(&server.addr, "GET", "/v1/health", &[], b"").json()
}

#[test]
fn a_confirmed_call_runs_once_whichever_instance_its_retry_or_replay_reaches() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let (a, b, c) = three(ws.path(), &redis);
    let arguments = appending();
    let state = asked(&a, &arguments);
    let done = post_stateless(&b.addr, &retry(2, &arguments, &state, "allow")).json();
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(runs(ws.path()), 1);
    for (id, at) in [(3, &c), (4, &a), (5, &b)] {
        let replayed = post_stateless(&at.addr, &retry(id, &arguments, &state, "allow")).json();
        assert!(error_of(&replayed).contains("already used"), "{replayed}");
    }
    assert_eq!(runs(ws.path()), 1, "a replay at another instance ran again");
}

#[test]
fn a_replay_after_the_store_lost_its_data_runs_nothing_at_any_instance() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let (a, b, c) = three(ws.path(), &redis);
    let arguments = appending();
    // Wiped (as by FLUSHALL), then lost with the server (a restart without persistence,
    // as the README's scale-out example runs it).
    for (round, wipe) in [("flushed", 0), ("restarted", 1)] {
        let ran = runs(ws.path());
        let state = asked(&a, &arguments);
        let done = post_stateless(&b.addr, &retry(2, &arguments, &state, "allow")).json();
        assert_eq!(done["result"]["isError"], false, "{round}: {done}");
        assert_eq!(runs(ws.path()), ran + 1);
        if wipe == 0 {
            redis.flush_all();
        } else {
            redis.restart();
        }
        for (id, at) in [(3, &c), (4, &a), (5, &b)] {
            let replayed = post_stateless(&at.addr, &retry(id, &arguments, &state, "allow")).json();
            let said = error_of(&replayed);
            assert!(
                said.contains("lost its data") && said.contains("asked anew"),
                "{round}: {replayed}"
            );
        }
        assert_eq!(runs(ws.path()), ran + 1, "{round}: a replay ran again");
        // Asked anew, the call runs.
        let state = asked(&c, &arguments);
        let done = post_stateless(&a.addr, &retry(6, &arguments, &state, "allow")).json();
        assert_eq!(done["result"]["isError"], false, "{round}: {done}");
        assert_eq!(runs(ws.path()), ran + 2);
    }
}

#[test]
fn a_retry_sent_to_three_instances_at_once_runs_exactly_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let servers: Vec<Server> = (0..3).map(|_| instance(ws.path(), &redis.url())).collect();
    for round in 0..5 {
        let arguments = json!({"command": format!("echo {round} >> runs.log")});
        let state = asked(&servers[round % 3], &arguments);
        let answers: Vec<Value> = std::thread::scope(|scope| {
            let sent: Vec<_> = servers
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let (arguments, state) = (arguments.clone(), state.clone());
                    let id = 10 + i64::try_from(i).unwrap();
                    scope.spawn(move || {
                        post_stateless(&s.addr, &retry(id, &arguments, &state, "allow")).json()
                    })
                })
                .collect();
            sent.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ran = answers
            .iter()
            .filter(|a| a["result"]["isError"] == false)
            .count();
        let refused = answers
            .iter()
            .filter(|a| error_of(a).contains("already used"))
            .count();
        assert_eq!((ran, refused), (1, 2), "round {round}: {answers:?}");
        assert_eq!(runs(ws.path()), round + 1);
    }
}

#[test]
fn always_answered_at_one_instance_holds_at_another() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let (a, b) = (
        instance(ws.path(), &redis.url()),
        instance(ws.path(), &redis.url()),
    );
    let arguments = appending();
    let state = asked(&b, &arguments);
    let done = post_stateless(&b.addr, &retry(2, &arguments, &state, "always")).json();
    assert_eq!(done["result"]["isError"], false, "{done}");
    // The same client at the other instance: not asked again.
    let again = post_stateless(
        &a.addr,
        &call(3, &json!({"command": "echo again >> runs.log"})),
    )
    .json();
    assert_eq!(again["result"]["resultType"], "complete", "{again}");
    assert_eq!(runs(ws.path()), 2);
}

#[test]
fn with_redis_down_nothing_runs_that_needed_it_the_server_stays_up_and_it_comes_back() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let (a, b) = (
        instance(ws.path(), &redis.url()),
        instance(ws.path(), &redis.url()),
    );
    let arguments = appending();
    // A confirmation asked for while Redis is up, and retried once it is down.
    let pending = asked(&b, &json!({"command": "echo pending >> runs.log"}));
    // A grant made while Redis is up...
    let state = asked(&a, &arguments);
    let done = post_stateless(&a.addr, &retry(2, &arguments, &state, "always")).json();
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(health(&b)["status"], "ok");
    let state = pending;
    redis.stop();
    // ...cannot be read at B, and a question asked now could not be checked at its
    // retry: the call is refused, saying why, and nothing runs.
    let unasked = post_stateless(
        &b.addr,
        &call(3, &json!({"command": "echo down >> runs.log"})),
    )
    .json();
    let said = error_of(&unasked);
    assert!(
        said.contains("cannot ask for confirmation")
            && said.contains(&redis.url())
            && said.contains("Nothing ran"),
        "{unasked}"
    );
    // A retry whose state cannot be checked is refused, saying why; nothing ran.
    let started = Instant::now();
    let refused = post_stateless(
        &b.addr,
        &retry(
            4,
            &json!({"command": "echo pending >> runs.log"}),
            &state,
            "allow",
        ),
    )
    .json();
    let said = error_of(&refused);
    assert!(
        said.contains("cannot be checked") && said.contains(&redis.url()),
        "{refused}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(runs(ws.path()), 1);
    // The server stays up, says so in its health, and serves what needs no shared state.
    let down = health(&b);
    assert_eq!(down["status"], "degraded", "{down}");
    assert_eq!(down["store"]["up"], false);
    let listed = post_stateless(&b.addr, &stateless(5, "tools/list", json!({}), true)).json();
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{listed}"
    );
    let logs = b.log.lock().unwrap().join("\n");
    assert!(logs.contains("cannot be reached"), "{logs}");
    // Back by itself once Redis is.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while health(&b)["status"] != "ok" {
        assert!(Instant::now() < deadline, "{}", health(&b));
        std::thread::sleep(Duration::from_millis(100));
    }
    let arguments = json!({"command": "echo after >> runs.log"});
    let state = asked(&a, &arguments);
    let done = post_stateless(&b.addr, &retry(6, &arguments, &state, "allow")).json();
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(runs(ws.path()), 2);
}

#[test]
fn a_call_that_needs_no_shared_state_costs_the_store_nothing_and_a_confirmed_one_two_commands_per_request()
 {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let (a, b) = (
        instance(ws.path(), &redis.url()),
        instance(ws.path(), &redis.url()),
    );
    let read = json!({"name": "read_file", "arguments": {"path": "README.md"}});
    post_stateless(&a.addr, &stateless(1, "tools/call", read.clone(), true));
    let before = redis.commands_processed();
    for id in 0..40 {
        let at = if id % 2 == 0 { &a } else { &b };
        let r = post_stateless(&at.addr, &stateless(id, "tools/call", read.clone(), true)).json();
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    // Besides the INFO that counts them, at most the instances' look for a console.
    let spent = redis.commands_processed() - before - 1;
    assert!(
        spent <= 3,
        "40 calls that need no shared state cost {spent} commands"
    );
    let before = redis.commands_processed();
    for n in 0..5 {
        let arguments = json!({"command": format!("echo {n} >> runs.log")});
        let state = asked(&a, &arguments);
        let done = post_stateless(&b.addr, &retry(n, &arguments, &state, "allow")).json();
        assert_eq!(done["result"]["isError"], false, "{done}");
    }
    let spent = redis.commands_processed() - before - 1;
    assert!(
        // Per write: the grant looked up and the store's generation read at the question;
        // the nonce taken and the generation read again (pipelined) at the retry.
        (15..=20).contains(&spent),
        "5 confirmed writes (10 requests) cost {spent} commands"
    );
}

/// Answers confirmation `id` at `server` from its control API.
fn answer_at(server: &Server, id: &str, decision: &str) -> common::raw_http::Response {
    request(
        &server.addr,
        "POST",
        &format!("/v1/confirmations/{id}"),
        &[("Content-Type", "application/json")],
        json!({"decision": decision}).to_string().as_bytes(),
    )
}

#[test]
fn a_console_on_one_instance_sees_and_answers_a_confirmation_pending_at_another() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let (a, b) = (
        instance(ws.path(), &redis.url()),
        instance(ws.path(), &redis.url()),
    );
    // The console is open at A only. It follows B once its subscription in the store is
    // up: until a call at B is told at A, a moment's wait was a guess (under load, late).
    let events = follow_events(&a.addr);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listing = stateless(
            1,
            "tools/call",
            json!({"name": "list_dir", "arguments": {}}),
            false,
        );
        post_stateless(&b.addr, &listing);
        if events.recv_timeout(Duration::from_millis(500)).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "A's console never saw B's calls");
    }
    // A 2025 client that cannot be asked calls at B: its call waits for the console.
    let session = legacy_session(&b.addr, false);
    let at_b = b.addr.clone();
    let call = std::thread::spawn(move || {
        let headers = [
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        let message = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "shell", "arguments": {"command": "echo ran >> runs.log"}}});
        post_mcp(&at_b, &headers, &message)
    });
    let requested = wait_event(&events, "tool.confirmation_requested");
    let id = requested["request_id"].as_str().unwrap().to_string();
    assert_ne!(requested["instance"], Value::Null, "{requested}");
    // Listed at A a moment after its event (a request answered at once is never shared).
    let deadline = Instant::now() + Duration::from_secs(5);
    let listed = loop {
        let pending = request(&a.addr, "GET", "/v1/confirmations", &[], b"").json();
        if let Some(p) = pending
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["request_id"] == id.as_str())
        {
            break p.clone();
        }
        assert!(Instant::now() < deadline, "{id} not listed at A: {pending}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(listed["tool_name"], "shell", "{listed}");
    assert_eq!(listed["instance"], requested["instance"], "{listed}");
    assert_eq!(answer_at(&a, &id, "allow").status, 200);
    let done = call.join().unwrap().json();
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(runs(ws.path()), 1);
    // Answered once: a second answer, at either instance, is told who answered.
    for at in [&a, &b] {
        let late = answer_at(at, &id, "deny");
        assert_eq!(late.status, 409, "{late:?}");
        assert!(
            String::from_utf8_lossy(&late.body).contains("web-console"),
            "{late:?}"
        );
    }
    let after = request(&a.addr, "GET", "/v1/confirmations", &[], b"").json();
    assert!(
        after
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["request_id"] != id.as_str()),
        "{after}"
    );
}

#[test]
fn a_store_that_is_not_one_stops_the_server_naming_where_it_was_set() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[store]\nurl = \"postgres://db\"\n",
    )
    .unwrap();
    let out = command(ws.path(), &["list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("url") && said.contains("redis://HOST:PORT/DB"),
        "{said}"
    );
    std::fs::remove_file(ws.path().join("toolhost.toml")).unwrap();
    let out = command(ws.path(), &["list"])
        .env("TOOLHOST_STORE_URL", "mem")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("TOOLHOST_STORE_URL"), "{said}");
}
