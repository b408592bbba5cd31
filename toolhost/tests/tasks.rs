//! MCP tasks (the `io.modelcontextprotocol/tasks` extension) from `toolhost serve --http`,
//! driven over raw HTTP as a third-party client would: a slow call of a client that takes
//! tasks becomes one, `tasks/get` brings its result, `tasks/update` answers what it asks,
//! `tasks/cancel` stops it, and only its own principal sees it. The conformance suite
//! (tests/conformance.rs) checks the wire shapes against a mounted server's tasks.
#![cfg(test)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::raw_http::{Response, post_mcp, post_stateless_with, result_text, stateless_declaring};
use common::{Server, serve_http, workspace};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A client that takes tasks (and, with `elicits`, can be asked a form).
fn caps(elicits: bool) -> Value {
    let mut caps = json!({"extensions": {TASKS: {}}});
    if elicits {
        caps["elicitation"] = json!({"form": {}});
    }
    caps
}

/// A toolhost whose calls become tasks after 0.3 s, with `more` config.
fn serve(ws: &Path, more: &str) -> Server {
    std::fs::write(
        ws.join("toolhost.toml"),
        format!("[mcp.tasks]\nafter = 0.3\npoll_interval = 0.1\n\n{more}"),
    )
    .unwrap();
    serve_http(ws, &[])
}

const SHELL_ALLOWED: &str = "[tool_confirmation.per_tool]\nshell = \"auto\"\n";

/// A 2026-07-28 client taking tasks, optionally with a bearer token.
struct Client<'a> {
    server: &'a Server,
    caps: Value,
    token: Option<&'a str>,
}

impl Client<'_> {
    fn post(&self, method: &str, params: Value) -> Response {
        let bearer = self.token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("Authorization", b)])
            .unwrap_or_default();
        let message = stateless_declaring(1, method, params, self.caps.clone());
        post_stateless_with(&self.server.addr, &headers, &message)
    }

    /// The result of a request that must succeed.
    fn ok(&self, method: &str, params: Value) -> Value {
        let r = self.post(method, params);
        let body = r.json();
        assert!(body.get("result").is_some(), "{method}: {body}");
        body["result"].clone()
    }

    fn call(&self, tool: &str, arguments: Value) -> Value {
        self.ok("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    fn get(&self, task: &str) -> Value {
        self.ok("tasks/get", json!({"taskId": task}))
    }

    /// Polls `tasks/get` until `done` holds (at most 20 s).
    fn until(&self, task: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.get(task);
            if done(&got) {
                return got;
            }
            assert!(Instant::now() < deadline, "the task never got there: {got}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ended(&self, task: &str) -> Value {
        self.until(task, |t| {
            ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or(""))
        })
    }
}

fn client(server: &Server) -> Client<'_> {
    Client {
        server,
        caps: caps(false),
        token: None,
    }
}

fn task_id(created: &Value) -> String {
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().unwrap().to_string()
}

#[test]
fn a_slow_call_becomes_a_task_and_tasks_get_inlines_its_result() {
    let ws = workspace();
    let server = serve(ws.path(), SHELL_ALLOWED);
    let c = client(&server);
    let started = Instant::now();
    let created = c.call("shell", json!({"command": "sleep 1.5; echo finished"}));
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
    let id = task_id(&created);
    assert_eq!(created["status"], "working");
    assert_eq!(created["ttlMs"], 3_600_000);
    assert_eq!(created["pollIntervalMs"], 100);
    for absent in ["result", "error", "requestState", "task"] {
        assert!(created.get(absent).is_none(), "{absent}: {created}");
    }
    assert_eq!(c.get(&id)["status"], "working");
    let done = c.ended(&id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resultType"], "complete");
    assert!(result_text(&done["result"]).contains("finished"), "{done}");
    assert_eq!(done["result"]["isError"], false);
}

#[test]
fn a_quick_call_answers_in_its_request_even_for_a_client_that_takes_tasks() {
    let ws = workspace();
    let server = serve(ws.path(), SHELL_ALLOWED);
    let result = client(&server).call("shell", json!({"command": "echo quick"}));
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result.get("taskId").is_none());
    assert!(result_text(&result).contains("quick"), "{result}");
}

#[test]
fn a_client_that_did_not_declare_tasks_gets_its_result_and_no_task_methods() {
    let ws = workspace();
    let server = serve(ws.path(), SHELL_ALLOWED);
    let c = Client {
        server: &server,
        caps: json!({}),
        token: None,
    };
    let result = c.call("shell", json!({"command": "sleep 0.8; echo waited"}));
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result_text(&result).contains("waited"), "{result}");
    let refused = c.post("tasks/get", json!({"taskId": "anything"})).json();
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
}

#[test]
fn tasks_cancel_stops_the_call_and_the_task_ends_cancelled() {
    let ws = workspace();
    let server = serve(ws.path(), SHELL_ALLOWED);
    let c = client(&server);
    let id = task_id(&c.call("shell", json!({"command": "sleep 30; touch finished"})));
    let ack = c.ok("tasks/cancel", json!({"taskId": id}));
    assert_eq!(ack, json!({"resultType": "complete"}));
    let started = Instant::now();
    let done = c.ended(&id);
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Cancelling an ended task changes nothing.
    assert_eq!(c.ok("tasks/cancel", json!({"taskId": id})), ack);
    assert_eq!(c.get(&id)["status"], "cancelled");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ws.path().join("finished").exists());
}

#[test]
fn a_confirmation_waits_in_the_task_until_tasks_update_answers_it() {
    for (decision, ran) in [("allow", true), ("deny", false)] {
        let ws = workspace();
        let server = serve(ws.path(), "");
        let c = Client {
            server: &server,
            caps: caps(true),
            token: None,
        };
        // Asking takes the user's time: the call becomes a task at once.
        let id = task_id(&c.call("shell", json!({"command": "echo ran > ran.txt; echo ran"})));
        let asked = c.until(&id, |t| t["status"] == "input_required");
        let form = &asked["inputRequests"]["confirm"];
        assert_eq!(form["method"], "elicitation/create", "{asked}");
        assert!(
            form["params"]["message"]
                .as_str()
                .unwrap()
                .contains("'shell'"),
            "{asked}"
        );
        let ack = c.ok(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"confirm": {
                "action": "accept", "content": {"decision": decision}}}}),
        );
        assert_eq!(ack, json!({"resultType": "complete"}));
        let done = c.ended(&id);
        assert_eq!(done["status"], "completed", "{decision}: {done}");
        assert_eq!(done["result"]["isError"], !ran, "{decision}: {done}");
        assert_eq!(ws.path().join("ran.txt").exists(), ran, "{decision}");
    }
}

#[test]
fn a_task_is_seen_by_its_own_principal_only() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("tokens"),
        "alice-secret-token-1\nbob-secret-token-22\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        format!("[mcp.tasks]\nafter = 0.3\n\n{SHELL_ALLOWED}"),
    )
    .unwrap();
    let tokens = ws.path().join("tokens");
    let server = serve_http(ws.path(), &["--token-file", tokens.to_str().unwrap()]);
    let as_who = |token| Client {
        server: &server,
        caps: caps(false),
        token: Some(token),
    };
    let (alice, bob) = (
        as_who("alice-secret-token-1"),
        as_who("bob-secret-token-22"),
    );
    let id = task_id(&alice.call("shell", json!({"command": "sleep 1; echo mine"})));
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/update", json!({"taskId": id, "inputResponses": {}})),
        ("tasks/cancel", json!({"taskId": id})),
    ] {
        let refused = bob.post(method, params).json();
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Unknown task"),
            "{refused}"
        );
    }
    assert_eq!(alice.ended(&id)["status"], "completed");
}

#[test]
fn a_task_outlives_the_2025_session_that_made_it() {
    let ws = workspace();
    let server = serve(ws.path(), SHELL_ALLOWED);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": caps(false),
        "clientInfo": {"name": "raw-test", "version": "1"}}});
    let r = post_mcp(&server.addr, &[], &init);
    assert_eq!(
        r.json()["result"]["capabilities"]["extensions"][TASKS],
        json!({})
    );
    let session = r.header("mcp-session-id").unwrap().to_string();
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    post_mcp(
        &server.addr,
        &headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let created = post_mcp(
        &server.addr,
        &headers,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "shell", "arguments": {"command": "sleep 1; echo survived > out.txt; echo survived"}}}),
    )
    .json();
    let id = task_id(&created["result"]);
    // The client goes away: its session ends.
    let gone = common::raw_http::request(&server.addr, "DELETE", "/mcp", &headers, b"");
    assert!(gone.status < 300, "{gone:?}");
    // The same principal finds the task again from a request of the other era.
    let done = client(&server).ended(&id);
    assert_eq!(done["status"], "completed", "{done}");
    assert!(result_text(&done["result"]).contains("survived"), "{done}");
    assert!(ws.path().join("out.txt").exists());
}

#[test]
fn a_mounted_servers_question_during_a_task_waits_in_the_task() {
    let ws = workspace();
    let server = serve(
        ws.path(),
        &format!(
            "[[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\nargs = [\"--asks\"]\n",
            toolhost_tests::fixtures().mcp_server().display()
        ),
    );
    let c = Client {
        server: &server,
        caps: caps(true),
        token: None,
    };
    // The server asks (elicitation/create) after the call became a task.
    let id = task_id(&c.call("fx__ask", json!({"after_ms": 800})));
    let asked = c.until(&id, |t| t["status"] == "input_required");
    let question = &asked["inputRequests"]["elicitation"];
    assert_eq!(question["params"]["message"], "Which color?", "{asked}");
    c.ok(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"elicitation": {
            "action": "accept", "content": {"color": "teal"}}}}),
    );
    let done = c.ended(&id);
    assert_eq!(done["status"], "completed", "{done}");
    assert!(result_text(&done["result"]).contains("teal"), "{done}");
}

#[test]
fn bad_tasks_settings_are_refused_naming_the_key() {
    let ws = workspace();
    std::fs::write(ws.path().join("toolhost.toml"), "[mcp.tasks]\nafter = 0\n").unwrap();
    let out = common::command(ws.path(), &["list"]).output().unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("after"), "{said}");
    std::fs::write(ws.path().join("toolhost.toml"), "[mcp.tasks]\nttl_ms = 5\n").unwrap();
    let out = common::command(ws.path(), &["list"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("ttl_ms"), "{said}");
}

/// The TypeScript SDK (the copy installed with server-everything) and node, when `cargo
/// xtask test` installed them.
fn typescript_sdk() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let node = toolhost_tests::peer("TOOLHOST_TEST_NODE")?;
    let everything = toolhost_tests::peer("TOOLHOST_TEST_SERVER_EVERYTHING")?;
    // …/node_modules/@modelcontextprotocol/server-everything/dist/index.js
    let scope = everything.ancestors().nth(3)?.to_path_buf();
    Some((node, scope.join("sdk")))
}

#[test]
fn a_2025_client_of_the_typescript_sdk_runs_lists_and_cancels_2025_tasks() {
    let Some((node, sdk)) = typescript_sdk() else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/tasks_2025_client.mjs");
    let ws = workspace();
    // A mounted server whose tool asks in a task of its own.
    std::fs::write(
        ws.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"cf\"\nprefix = \"cf\"\ncommand = \"{}\"\nargs = [\"stdio\"]\n\n\
             [tool_confirmation.per_tool]\ncf__confirm_delete = \"auto\"\n",
            toolhost_tests::fixtures().mcp_conformance_server().display()
        ),
    )
    .unwrap();
    let server = serve_http(ws.path(), &[]);
    let url = format!("http://{}/mcp", server.addr);
    let over_http = vec!["http".to_string(), url];
    let over_stdio = vec![
        "stdio".to_string(),
        env!("CARGO_BIN_EXE_toolhost").to_string(),
        "serve".into(),
        "--mcp".into(),
        "--workspace".into(),
        ws.path().display().to_string(),
    ];
    for how in [over_http, over_stdio] {
        let out = std::process::Command::new(&node)
            .arg(&script)
            .arg(&sdk)
            .args(&how)
            .env("XDG_STATE_HOME", ws.path().join(".state"))
            .env("MOUNTED_TOOL", "cf__confirm_delete")
            .current_dir(ws.path())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{how:?}: {said}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let saw: Value = serde_json::from_str(said.trim()).unwrap();
        assert_eq!(
            saw["capabilities"],
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
            "{how:?}"
        );
        assert_eq!(saw["taskSupport"], "optional", "{how:?}");
        let messages = saw["messages"].as_array().unwrap();
        assert_eq!(messages[0]["type"], "taskCreated", "{saw}");
        let last = messages.last().unwrap();
        assert_eq!(last["type"], "result", "{saw}");
        assert!(
            last["text"].as_str().unwrap().contains("from-a-2025-task"),
            "{saw}"
        );
        // The confirmation went to the client's user as an elicitation/create.
        assert!(
            saw["asked"][0].as_str().unwrap().contains("'shell'"),
            "{saw}"
        );
        assert_eq!(saw["cancelled"], "cancelled", "{saw}");
        assert_eq!(saw["after"], "cancelled", "{saw}");
        assert!(
            saw["listed"]
                .as_array()
                .unwrap()
                .contains(&json!("cancelled")),
            "{saw}"
        );
        assert!(
            saw["resultOfCancelled"]
                .as_str()
                .unwrap()
                .contains("was cancelled"),
            "{saw}"
        );
        // The server's question went to this client, and its answer back to the server.
        assert_eq!(saw["askedByMounted"], json!(["Delete notes.txt?"]), "{saw}");
        let mounted = saw["mounted"].as_array().unwrap();
        let answer = mounted.last().unwrap().as_str().unwrap();
        assert!(answer.starts_with("confirm_delete notes.txt"), "{saw}");
        assert!(answer.contains("allow"), "{saw}");
    }
}

#[test]
fn requests_of_the_2025_tasks_are_not_taken_from_a_2026_client() {
    let ws = workspace();
    let server = serve(ws.path(), SHELL_ALLOWED);
    let c = client(&server);
    for removed in ["tasks/result", "tasks/list"] {
        let refused = c.post(removed, json!({"taskId": "x"})).json();
        assert_eq!(refused["error"]["code"], -32601, "{removed}: {refused}");
    }
    // The 2025 `task` parameter is ignored: a quick call answers in its request.
    let result = c.ok(
        "tools/call",
        json!({"name": "shell", "arguments": {"command": "echo plain"}, "task": {"ttl": 1000}}),
    );
    assert_eq!(result["resultType"], "complete", "{result}");
}

#[test]
fn over_a_shared_store_a_task_made_at_one_instance_is_read_answered_and_cancelled_at_another() {
    let Some(redis) = toolhost_tests::redis_server::RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let config = format!("{SHELL_ALLOWED}\n[store]\nurl = \"{}\"\n", redis.url());
    let (a, b) = (serve(ws.path(), &config), serve(ws.path(), &config));
    let (at_a, at_b) = (
        Client {
            server: &a,
            caps: caps(true),
            token: None,
        },
        Client {
            server: &b,
            caps: caps(true),
            token: None,
        },
    );
    // Made at A, its result read at B.
    let id = task_id(&at_a.call("shell", json!({"command": "sleep 1; echo finished"})));
    assert_eq!(at_b.get(&id)["status"], "working");
    let done = at_b.ended(&id);
    assert!(result_text(&done["result"]).contains("finished"), "{done}");
    // A question asked at A, answered at B.
    let id = task_id(&at_a.call(
        "write_file",
        json!({"path": "answered.txt", "content": "from B"}),
    ));
    let asked = at_b.until(&id, |t| t["status"] == "input_required");
    assert!(asked["inputRequests"]["confirm"].is_object(), "{asked}");
    at_b.ok(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"confirm": {
            "action": "accept", "content": {"decision": "allow"}}}}),
    );
    let done = at_a.ended(&id);
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("answered.txt")).unwrap(),
        "from B"
    );
    // Made at A, cancelled at B.
    let id = task_id(&at_a.call("shell", json!({"command": "sleep 30; touch late"})));
    assert_eq!(
        at_b.ok("tasks/cancel", json!({"taskId": id})),
        json!({"resultType": "complete"})
    );
    assert_eq!(at_a.ended(&id)["status"], "cancelled");
    assert_eq!(at_b.ended(&id)["status"], "cancelled");
    // Still nobody else's.
    let stranger = at_b
        .post("tasks/get", json!({"taskId": "0123456789abcdef"}))
        .json();
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");
}

#[test]
fn an_instance_stopped_by_sigterm_drains_and_leaves_its_tasks_readable_at_another() {
    let Some(redis) = toolhost_tests::redis_server::RedisServer::start() else {
        return;
    };
    let ws = workspace();
    let config = format!(
        "{SHELL_ALLOWED}\n[timeouts]\ncancel_grace_secs = 3\n\n[store]\nurl = \"{}\"\n",
        redis.url()
    );
    let (mut a, b) = (serve(ws.path(), &config), serve(ws.path(), &config));
    let (at_a, at_b) = (client(&a), client(&b));
    let short = task_id(&at_a.call("shell", json!({"command": "sleep 1; echo finished"})));
    let long = task_id(&at_a.call("shell", json!({"command": "sleep 60; touch late"})));
    let addr = a.addr.clone();
    toolhost_tests::send_signal(a.child.id(), rustix::process::Signal::TERM);
    // Stopped accepting: a new connection is refused while it drains.
    let deadline = Instant::now() + Duration::from_secs(2);
    while std::net::TcpStream::connect(&addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = toolhost_tests::wait_exit(&mut a.child);
    assert_eq!(status.code(), Some(143), "{status}");
    // The short task finished within the grace period; the long one was cancelled; both
    // are readable at the other instance, in their final state.
    let done = at_b.get(&short);
    assert_eq!(done["status"], "completed", "{done}");
    assert!(result_text(&done["result"]).contains("finished"), "{done}");
    let cut = at_b.get(&long);
    assert!(
        ["cancelled", "failed"].contains(&cut["status"].as_str().unwrap_or("")),
        "{cut}"
    );
    assert!(!ws.path().join("late").exists());
}
