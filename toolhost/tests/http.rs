//! `toolhost serve --http` (and `serve --mcp --control`) driven over raw HTTP/1.1, as a
//! third-party client, a load balancer and a browser would.
#![cfg(test)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_tests::{send_signal, wait_exit};

mod common;
use common::browser::Browser;
use common::raw_http::{
    JSON_HEADERS, Response, follow_events, legacy_session, legacy_session_with, post_mcp,
    post_stateless, post_stateless_with, request, stateless, wait_event,
};
use common::{Server, command, serve_http, start, workspace};

#[test]
fn http_serves_2025_sessions_and_2026_stateless_requests_side_by_side() {
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    let session = legacy_session(&server.addr, false);
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let r = post_mcp(
        &server.addr,
        &headers,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "README.md"}}}),
    );
    assert_eq!(
        r.json()["result"]["content"][0]["text"],
        "# hello\n",
        "{r:?}"
    );

    let r = post_stateless(
        &server.addr,
        &stateless(3, "server/discover", json!({}), false),
    );
    let discovered = r.json();
    let versions = discovered["result"]["supportedVersions"].to_string();
    assert!(
        versions.contains("2026-07-28") && versions.contains("2025-11-25"),
        "{discovered}"
    );
    let r = post_stateless(&server.addr, &stateless(4, "tools/list", json!({}), false));
    let listed = r.json();
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"read_file") && names.contains(&"write_file"),
        "{listed}"
    );
    let r = post_stateless(
        &server.addr,
        &stateless(
            5,
            "tools/call",
            json!({"name": "read_file", "arguments": {"path": "README.md"}}),
            false,
        ),
    );
    let called = r.json();
    assert_eq!(
        called["result"]["content"][0]["text"], "# hello\n",
        "{called}"
    );
    assert_eq!(called["result"]["resultType"], "complete", "{called}");
}

#[test]
fn every_connection_sends_its_answers_without_waiting_for_acknowledgements() {
    // A session's answer is an event stream written in two parts (its head, then each
    // event): with Nagle's algorithm on, the second part waits for the client's delayed
    // acknowledgement, 40 ms a call for a client as Python's or agentgateway's.
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    let mut connection = TcpStream::connect(&server.addr).unwrap();
    connection
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // Answered once accepted: the server's end is one of its descriptors from then on.
    write!(
        connection,
        "GET /nowhere HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut connection, &mut head).unwrap();
    match toolhost_tests::peer_nodelay(server.child.id(), &connection) {
        Some(on) => assert!(on, "the server's end of the connection has TCP_NODELAY off"),
        None => panic!(
            "the server's end of the connection was not found among its descriptors (pidfd_getfd needs ptrace rights over it)"
        ),
    }
}

#[test]
fn a_server_out_of_descriptors_waits_and_serves_again_once_connections_close() {
    // Clients that hold more connections than the server has descriptors left: its
    // accept fails (EMFILE) until some close. It must neither stop accepting for good
    // nor spin on the failure, and must say what happened.
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    let read_readme = || {
        post_stateless(
            &server.addr,
            &stateless(
                1,
                "tools/call",
                json!({"name": "read_file", "arguments": {"path": "README.md"}}),
                false,
            ),
        )
        .json()
    };
    assert_eq!(read_readme()["result"]["content"][0]["text"], "# hello\n");
    let pid = server.child.id();
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let limit = open + 4;
    let limited = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={limit}:{limit}"))
        .status()
        .expect("prlimit (util-linux) sets the server's descriptor limit");
    assert!(limited.success(), "prlimit failed: {limited}");
    let held: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = |server: &Server| server.log.lock().unwrap().join("\n");
    while !log(&server).contains("cannot accept a connection") {
        assert!(
            Instant::now() < deadline,
            "no accept failed with {} connections held and {limit} descriptors: {}",
            held.len(),
            log(&server)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        log(&server).contains("trying again in a second"),
        "{}",
        log(&server)
    );
    // Not a failure a second: the loop waits between tries.
    std::thread::sleep(Duration::from_millis(1500));
    let failures = log(&server).matches("cannot accept a connection").count();
    assert!(
        failures <= 3,
        "{failures} failed accepts in 1.5 s: it spins"
    );
    drop(held);
    assert_eq!(read_readme()["result"]["content"][0]["text"], "# hello\n");
}

fn tools_call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

#[test]
fn a_foreign_host_or_origin_gets_403_on_every_route() {
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    let call = tools_call(1, "read_file", json!({"path": "README.md"}));
    for headers in [
        vec![("Host", "evil.example.com")],
        vec![("Host", "evil.example.com:80")],
        vec![("Origin", "http://evil.example.com")],
        vec![("Origin", "http://localhost:1")],
    ] {
        let mut all = JSON_HEADERS.to_vec();
        all.extend(headers.iter().copied());
        let r = request(
            &server.addr,
            "POST",
            "/mcp",
            &all,
            call.to_string().as_bytes(),
        );
        assert_eq!(r.status, 403, "{headers:?}: {r:?}");
        let r = request(&server.addr, "GET", "/v1/confirmations", &headers, b"");
        assert_eq!(r.status, 403, "{headers:?}: {r:?}");
    }
    let own = format!("http://{}", server.addr);
    let r = request(
        &server.addr,
        "GET",
        "/v1/confirmations",
        &[("Origin", own.as_str())],
        b"",
    );
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn a_public_address_needs_a_token_and_every_request_carries_it_and_logs_never_show_it() {
    let ws = workspace();
    let out = command(ws.path(), &["serve", "--http", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--token-file") && stderr.contains("TOOLHOST_HTTP_TOKEN"),
        "{stderr}"
    );

    let token = "s3cret-token-for-the-http-test-0123456789";
    std::fs::write(
        ws.path().join("tokens"),
        format!("# one per line\n{token}\n"),
    )
    .unwrap();
    let mut cmd = command(
        ws.path(),
        &["serve", "--http", "0.0.0.0:0", "--token-file", "tokens"],
    );
    cmd.env("TOOLHOST_LOG", "trace");
    let server = start(cmd);
    let port = server.addr.rsplit(':').next().unwrap().to_string();
    let addr = format!("127.0.0.1:{port}");
    let session_less = stateless(
        1,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "README.md"}}),
        false,
    );
    let r = post_stateless(&addr, &session_less);
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"toolhost\"")
    );
    let r = post_stateless_with(
        &addr,
        &[("Authorization", "Bearer wrong-token-of-enough-length")],
        &session_less,
    );
    assert_eq!(r.status, 401, "{r:?}");
    let bearer = format!("Bearer {token}");
    let r = post_stateless_with(&addr, &[("Authorization", bearer.as_str())], &session_less);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["content"][0]["text"], "# hello\n");
    let r = request(
        &addr,
        "GET",
        "/v1/confirmations",
        &[("Authorization", bearer.as_str())],
        b"",
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = request(&addr, "GET", "/v1/confirmations", &[], b"");
    assert_eq!(r.status, 401, "{r:?}");
    std::thread::sleep(Duration::from_millis(200));
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the log was verbose"
    );
    assert!(!log.contains(token), "the token leaked into the log");
}

#[test]
fn bad_messages_over_http_get_json_rpc_errors_naming_the_problem() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[mcp]\nmax_message_bytes = 4096\n",
    )
    .unwrap();
    let server = serve_http(ws.path(), &[]);
    let post = |body: &[u8]| request(&server.addr, "POST", "/mcp", JSON_HEADERS, body);
    let mut bad_utf8 = br#"{"jsonrpc":"2.0","id":10,"method":"ping","params":{"x":""#.to_vec();
    bad_utf8.extend([0xff, 0xc3]);
    bad_utf8.extend(br#""}}"#);
    let r = post(&bad_utf8);
    assert_eq!(
        (
            r.status,
            r.json()["id"].clone(),
            r.json()["error"]["code"].clone()
        ),
        (400, json!(10), json!(-32700)),
        "{r:?}"
    );
    let mut deep =
        br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"x","arguments":{"a":"#
            .to_vec();
    deep.extend(std::iter::repeat_n(b'[', 2000));
    deep.extend(std::iter::repeat_n(b']', 2000));
    deep.extend(b"}}}");
    let r = post(&deep);
    assert_eq!(
        (
            r.status,
            r.json()["id"].clone(),
            r.json()["error"]["code"].clone()
        ),
        (400, json!(11), json!(-32700)),
        "{r:?}"
    );
    let mut huge = br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"big","content":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'a', 1 << 20));
    huge.extend(br#""}}}"#);
    let r = post(&huge);
    assert_eq!(r.status, 413, "{r:?}");
    let error = r.json();
    assert_eq!(error["id"], 12, "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("4096"),
        "{error}"
    );
    let r = post(b"not json at all");
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!(-32700)),
        "{r:?}"
    );
    let r = post(br#"{"jsonrpc":"2.0","id":13,"method":"tools/call"}"#);
    assert_eq!(
        (
            r.status,
            r.json()["id"].clone(),
            r.json()["error"]["code"].clone()
        ),
        (200, json!(13), json!(-32602)),
        "{r:?}"
    );
    let r = post(br#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"read_file","arguments":[1]}}"#);
    assert_eq!(
        (
            r.status,
            r.json()["id"].clone(),
            r.json()["error"]["code"].clone()
        ),
        (200, json!(14), json!(-32602)),
        "{r:?}"
    );
    // And the server still serves.
    let r = post_stateless(
        &server.addr,
        &stateless(
            15,
            "tools/call",
            json!({"name": "read_file", "arguments": {"path": "README.md"}}),
            false,
        ),
    );
    assert_eq!(
        r.json()["result"]["content"][0]["text"],
        "# hello\n",
        "{r:?}"
    );
}

fn allow_shell(ws: &Path) {
    std::fs::write(
        ws.join("toolhost.toml"),
        "[tool_confirmation.per_tool]\nshell = \"auto\"\n",
    )
    .unwrap();
}

#[test]
fn a_request_over_the_timeout_gets_504_and_its_call_is_cancelled() {
    let ws = workspace();
    allow_shell(ws.path());
    let server = serve_http(ws.path(), &["--request-timeout", "1"]);
    let started = Instant::now();
    let r = post_stateless(
        &server.addr,
        &stateless(
            7,
            "tools/call",
            json!({"name": "shell", "arguments": {"command": "sleep 30; touch finished"}}),
            false,
        ),
    );
    assert_eq!(r.status, 504, "{r:?}");
    assert_eq!(r.json()["id"], 7);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ws.path().join("finished").exists());
}

/// A 2026-07-28 call posted with its tool's name in Base64 in `Mcp-Name`, as SEP-2243
/// allows: the fast path leaves such a request to rmcp's per-request service.
fn post_through_the_protocol_library(addr: &str, message: &Value) -> Response {
    use base64::Engine as _;
    let name = message["params"]["name"].as_str().unwrap();
    let encoded = format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(name)
    );
    post_mcp(
        addr,
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", &encoded),
        ],
        message,
    )
}

#[test]
fn a_plain_stateless_call_is_answered_as_the_protocol_librarys_service_answers_it() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let server = serve_http(ws.path(), &[]);
    let cases = [
        ("read_file", json!({"path": "a.txt"}), false),
        ("read_file", json!({"path": 3}), false),
        ("read_file", json!({"path": "../outside.txt"}), false),
        ("no_such_tool", json!({}), false),
        // Refused: this client cannot be asked.
        (
            "write_file",
            json!({"path": "b.txt", "content": "x"}),
            false,
        ),
        // Asked: an input_required round with a sealed state.
        ("write_file", json!({"path": "b.txt", "content": "x"}), true),
    ];
    for (tool, arguments, elicits) in cases {
        let message = stateless(
            9,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            elicits,
        );
        let fast = post_stateless(&server.addr, &message);
        let library = post_through_the_protocol_library(&server.addr, &message);
        let answer = |r: &Response| {
            let mut json = r.json();
            // Sealed afresh for each round.
            if let Some(result) = json["result"].as_object_mut() {
                assert_eq!(result.remove("requestState").is_some(), elicits, "{r:?}");
            }
            (r.status, r.header("content-type").map(String::from), json)
        };
        assert_eq!(answer(&fast), answer(&library), "{tool} {arguments}");
    }
    assert!(!ws.path().join("b.txt").exists());
}

#[test]
fn a_stateless_call_that_is_not_plain_gets_the_protocol_librarys_answer() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let server = serve_http(ws.path(), &[]);
    let call = stateless(
        4,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "a.txt"}}),
        false,
    );
    let mut unversioned = call.clone();
    unversioned["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/protocolVersion");
    let v = ("MCP-Protocol-Version", "2026-07-28");
    let m = ("Mcp-Method", "tools/call");
    let n = ("Mcp-Name", "read_file");
    let json_and_events = ("Accept", "application/json, text/event-stream");
    let cases = [
        (
            "JSON refused by its weight",
            vec![
                ("Accept", "application/json;q=0, text/event-stream"),
                v,
                m,
                n,
            ],
            &call,
            406,
            "Not Acceptable",
        ),
        (
            "another tool in Mcp-Name",
            vec![json_and_events, v, m, ("Mcp-Name", "list_dir")],
            &call,
            400,
            "does not match body value",
        ),
        (
            "no Mcp-Name",
            vec![json_and_events, v, m],
            &call,
            400,
            "missing required Mcp-Name header",
        ),
        (
            "no version in _meta",
            vec![json_and_events, v, m, n],
            &unversioned,
            400,
            "",
        ),
    ];
    for (case, headers, message, status, says) in cases {
        let mut all = vec![("Content-Type", "application/json")];
        all.extend(headers);
        let r = request(
            &server.addr,
            "POST",
            "/mcp",
            &all,
            message.to_string().as_bytes(),
        );
        assert_eq!(r.status, status, "{case}: {r:?}");
        assert!(
            String::from_utf8_lossy(&r.body).contains(says),
            "{case}: {r:?}"
        );
    }
}

#[test]
fn a_stateless_call_whose_client_goes_away_is_cancelled() {
    let ws = workspace();
    allow_shell(ws.path());
    let server = serve_http(ws.path(), &[]);
    let body = stateless(
        5,
        "tools/call",
        json!({"name": "shell", "arguments": {"command": "touch started; sleep 2; touch finished"}}),
        false,
    )
    .to_string();
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: shell\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ws.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stream);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!ws.path().join("finished").exists());
    // The server goes on answering.
    let r = post_stateless(
        &server.addr,
        &stateless(
            6,
            "tools/call",
            json!({"name": "list_dir", "arguments": {}}),
            false,
        ),
    );
    assert_eq!(r.json()["result"]["isError"], false, "{r:?}");
}

#[test]
fn sigterm_lets_calls_in_flight_finish_then_exits() {
    let ws = workspace();
    allow_shell(ws.path());
    let mut server = serve_http(ws.path(), &[]);
    let addr = server.addr.clone();
    let call = std::thread::spawn(move || {
        post_stateless(
            &addr,
            &stateless(
                8,
                "tools/call",
                json!({"name": "shell", "arguments": {"command": "touch started; sleep 1; echo drained"}}),
                false,
            ),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ws.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    send_signal(server.child.id(), rustix::process::Signal::TERM);
    let r = call.join().unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.json()["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("drained"),
        "{r:?}"
    );
    let status = wait_exit(&mut server.child);
    assert_eq!(status.code(), Some(143), "{status}");
}

const RING: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

#[test]
fn a_confirmation_asked_by_one_instance_completes_at_another_with_the_same_key_ring() {
    let ws = workspace();
    let with_ring = |ring: &str| {
        let mut cmd = command(ws.path(), &["serve", "--http", "127.0.0.1:0"]);
        cmd.env("TOOLHOST_REQUEST_STATE_KEYS", ring);
        start(cmd)
    };
    let a = with_ring(RING);
    let b = with_ring(RING);
    let other = with_ring("k9 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=");
    let arguments = json!({"path": "scaled.txt", "content": "from b"});
    let first = post_stateless(
        &a.addr,
        &stateless(
            1,
            "tools/call",
            json!({"name": "write_file", "arguments": arguments}),
            true,
        ),
    );
    let asked = first.json();
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!ws.path().join("scaled.txt").exists());
    let retry = |id: i64| {
        stateless(
            id,
            "tools/call",
            json!({
                "name": "write_file", "arguments": arguments,
                "inputResponses": {"confirm": {"action": "accept", "content": {"decision": "allow"}}},
                "requestState": state,
            }),
            true,
        )
    };
    let refused = post_stateless(&other.addr, &retry(2)).json();
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("requestState refused"),
        "{refused}"
    );
    let done = post_stateless(&b.addr, &retry(3)).json();
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("scaled.txt")).unwrap(),
        "from b"
    );
}

/// A 2025-11-25 client that cannot elicit asks for a write on a thread of its own (its
/// confirmation waits for whoever answers); the thread returns the response.
fn write_from_a_session_without_elicitation(
    addr: &str,
    path: &str,
    content: &str,
) -> std::thread::JoinHandle<Response> {
    let session = legacy_session(addr, false);
    let (addr, call) = (
        addr.to_string(),
        tools_call(2, "write_file", json!({"path": path, "content": content})),
    );
    std::thread::spawn(move || {
        let headers = [
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        post_mcp(&addr, &headers, &call)
    })
}

#[test]
fn the_control_api_answers_a_waiting_call_and_a_second_answer_gets_409() {
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    // A console is watching: a client that cannot be asked waits for it.
    let events = follow_events(&server.addr);
    std::thread::sleep(Duration::from_millis(200));
    let call = write_from_a_session_without_elicitation(&server.addr, "console.txt", "ok");
    let requested = wait_event(&events, "tool.confirmation_requested");
    let id = requested["request_id"].as_str().unwrap().to_string();
    let pending: Value =
        serde_json::from_slice(&request(&server.addr, "GET", "/v1/confirmations", &[], b"").body)
            .unwrap();
    assert_eq!(pending[0]["request_id"], id.as_str(), "{pending}");
    assert_eq!(pending[0]["tool_name"], "write_file", "{pending}");
    let path = format!("/v1/confirmations/{id}");
    let answer = |decision: &str| {
        request(
            &server.addr,
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            json!({"decision": decision}).to_string().as_bytes(),
        )
    };
    let bad = request(
        &server.addr,
        "POST",
        &path,
        &[("Content-Type", "application/json")],
        br#"{"decision":"maybe"}"#,
    );
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(answer("allow").status, 200);
    let late = answer("deny");
    assert_eq!(late.status, 409, "{late:?}");
    assert!(
        String::from_utf8_lossy(&late.body).contains("web-console"),
        "{late:?}"
    );
    let unknown = request(
        &server.addr,
        "POST",
        "/v1/confirmations/nope",
        &[("Content-Type", "application/json")],
        br#"{"decision":"allow"}"#,
    );
    assert_eq!(unknown.status, 404);
    let r = call.join().unwrap();
    assert_eq!(r.json()["result"]["isError"], false, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("console.txt")).unwrap(),
        "ok"
    );
    let resolved = wait_event(&events, "tool.confirmation_resolved");
    assert_eq!(
        resolved["decided_by"],
        json!({"by": "user", "client": "web-console"}),
        "{resolved}"
    );
    wait_event(&events, "tool.completed");
}

#[test]
fn a_stdio_session_can_be_approved_through_the_control_api() {
    let ws = workspace();
    let mut server = start(command(
        ws.path(),
        &["serve", "--mcp", "--control", "127.0.0.1:0"],
    ));
    let events = follow_events(&server.addr);
    std::thread::sleep(Duration::from_millis(200));
    let mut stdin = server.child.stdin.take().unwrap();
    for frame in [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        tools_call(
            2,
            "write_file",
            json!({"path": "stdio.txt", "content": "approved"}),
        ),
    ] {
        writeln!(stdin, "{frame}").unwrap();
    }
    let requested = wait_event(&events, "tool.confirmation_requested");
    assert_eq!(requested["session_id"], "mcp");
    let id = requested["request_id"].as_str().unwrap();
    let r = request(
        &server.addr,
        "POST",
        &format!("/v1/confirmations/{id}"),
        &[("Content-Type", "application/json")],
        br#"{"decision":"allow"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let stdout = server.child.stdout.take().unwrap();
    let answer = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .map(|l| serde_json::from_str::<Value>(&l).unwrap())
        .find(|v| v["id"] == 2)
        .unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("stdio.txt")).unwrap(),
        "approved"
    );
}

/// A `serve --http` with its console open in a browser, and a write of `path` from a
/// session that cannot elicit, waiting for the console's answer.
struct Console {
    browser: Browser,
    ws: tempfile::TempDir,
    _server: Server,
    call: std::thread::JoinHandle<Response>,
}

/// [`Console`], or `None` where there is no browser (and the run does not require one).
fn console_with_a_waiting_write(path: &str, content: &str) -> Option<Console> {
    let browser = Browser::start()?;
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    browser.open(&format!("http://{}/", server.addr));
    browser.wait_for("#status.live");
    let call = write_from_a_session_without_elicitation(&server.addr, path, content);
    Some(Console {
        browser,
        ws,
        _server: server,
        call,
    })
}

#[test]
fn the_console_in_a_browser_shows_a_pending_write_and_allow_completes_it() {
    let Some(console) = console_with_a_waiting_write("notes/plan.md", "# Plan\n") else {
        return;
    };
    let Console {
        browser, ws, call, ..
    } = console;
    let item = browser.wait_for("[data-request-id]");
    let shown = browser.text(&item);
    assert!(
        shown.contains("write_file") && shown.contains("notes/plan.md"),
        "{shown}"
    );
    if let Ok(path) = std::env::var("TOOLHOST_CONSOLE_SCREENSHOT") {
        std::fs::write(path, browser.screenshot()).unwrap();
    }
    assert!(!ws.path().join("notes/plan.md").exists());
    browser.click("[data-request-id] button.allow");
    let r = call.join().unwrap();
    assert_eq!(r.json()["result"]["isError"], false, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes/plan.md")).unwrap(),
        "# Plan\n"
    );
    // The log shows the call completing; the pending list empties.
    browser.wait_for("#log .completed");
    browser.wait_for("#pending .empty");
}

#[test]
fn a_pending_request_keeps_its_element_while_the_console_refreshes_so_a_click_is_not_lost() {
    let Some(console) = console_with_a_waiting_write("kept.txt", "kept") else {
        return;
    };
    let Console {
        browser, ws, call, ..
    } = console;
    let allow = browser.wait_for("[data-request-id] button.allow");
    // The list refreshes 400 ms after each confirmation event: the button found before is
    // still the one on the page.
    std::thread::sleep(Duration::from_millis(1200));
    browser
        .try_click(&allow)
        .unwrap_or_else(|refusal| panic!("the button found before was redrawn: {refusal}"));
    let r = call.join().unwrap();
    assert_eq!(r.json()["result"]["isError"], false, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("kept.txt")).unwrap(),
        "kept"
    );
}

#[test]
fn behind_a_token_the_console_page_loads_asks_for_the_token_and_works_with_it() {
    let ws = workspace();
    let token = "console-token-for-the-browser-test-0123";
    let mut cmd = command(ws.path(), &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("TOOLHOST_HTTP_TOKEN", token);
    let server = start(cmd);
    // The page itself needs no token; its data routes do.
    let page = request(&server.addr, "GET", "/", &[], b"");
    assert_eq!(page.status, 200, "{page:?}");
    assert!(String::from_utf8_lossy(&page.body).contains("token-form"));
    for path in ["/v1/confirmations", "/v1/events", "/v1/health"] {
        let r = request(&server.addr, "GET", path, &[], b"");
        assert_eq!(r.status, 401, "{path}: {r:?}");
    }
    let foreign = request(
        &server.addr,
        "GET",
        "/",
        &[("Host", "evil.example.com")],
        b"",
    );
    assert_eq!(foreign.status, 403, "{foreign:?}");
    let Some(browser) = Browser::start() else {
        return;
    };
    browser.open(&format!("http://{}/", server.addr));
    browser.wait_for("#token-form.shown");
    let input = browser.wait_for("#token");
    browser.type_into(&input, token);
    browser.click("#token-form button");
    browser.wait_for("#status.live");
    browser.wait_for("#token-form:not(.shown)");
    let bearer = format!("Bearer {token}");
    let session = legacy_session_with(&server.addr, &[("Authorization", bearer.as_str())], false);
    let (addr, headers) = (server.addr.clone(), bearer.clone());
    let call = std::thread::spawn(move || {
        post_mcp(
            &addr,
            &[
                ("Authorization", headers.as_str()),
                ("Mcp-Session-Id", session.as_str()),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            &tools_call(
                2,
                "write_file",
                json!({"path": "behind.txt", "content": "ok"}),
            ),
        )
    });
    browser.click("[data-request-id] button.allow");
    let r = call.join().unwrap();
    assert_eq!(r.json()["result"]["isError"], false, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("behind.txt")).unwrap(),
        "ok"
    );
}

use toolhost_tests::peer;

#[test]
fn the_python_sdk_confirms_a_write_over_stdio_and_http() {
    let Some(python) = peer("TOOLHOST_TEST_PYTHON_SDK") else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/sdk_client.py");
    let stdio_ws = workspace();
    let http_ws = workspace();
    let server = serve_http(http_ws.path(), &[]);
    let url = format!("http://{}/mcp", server.addr);
    let runs: [(&Path, Vec<&std::ffi::OsStr>); 2] = [
        (
            stdio_ws.path(),
            vec![
                "stdio".as_ref(),
                env!("CARGO_BIN_EXE_toolhost").as_ref(),
                stdio_ws.path().as_os_str(),
            ],
        ),
        (http_ws.path(), vec!["http".as_ref(), url.as_ref()]),
    ];
    for (ws, args) in runs {
        let out = Command::new(&python)
            .arg(&script)
            .args(&args)
            .env("XDG_CONFIG_HOME", ws.join(".no-config"))
            .env("XDG_STATE_HOME", ws.join(".state"))
            .current_dir(ws)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
        assert_eq!(seen["protocol"], "2026-07-28", "{seen}");
        assert_eq!(seen["allowed"]["is_error"], false, "{seen}");
        assert_eq!(seen["denied"]["is_error"], true, "{seen}");
        assert_eq!(seen["asked"].as_array().unwrap().len(), 2, "{seen}");
        assert_eq!(
            std::fs::read_to_string(ws.join("allowed.txt")).unwrap(),
            "written by the Python SDK"
        );
        assert!(!ws.join("denied.txt").exists());
    }
}

/// `toolhost call` in `ws` (whose toolhost.toml names the remote server), with `env`.
fn call_via(
    ws: &Path,
    tool: &str,
    input: Value,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, Value) {
    let mut cmd = command(ws, &["call", tool, "--input", &input.to_string(), "--json"]);
    cmd.args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let block = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not a result block ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), block)
}

#[test]
fn a_remote_server_over_http_asks_through_input_required_and_toolhost_asks_its_user() {
    let remote_ws = workspace();
    let token = "remote-bearer-token-0123456789";
    let mut cmd = command(remote_ws.path(), &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("TOOLHOST_HTTP_TOKEN", token);
    let remote = start(cmd);
    let local = workspace();
    let config = format!(
        "[[mcp_servers]]\nid = \"remote\"\nprefix = \"remote\"\nurl = \"http://{}/mcp\"\nbearer_token_env = \"REMOTE_TOKEN\"\n\
         side_effects = {{ write_file = \"write\" }}\n",
        remote.addr
    );
    std::fs::write(local.path().join("toolhost.toml"), &config).unwrap();
    let env = [("REMOTE_TOKEN", token)];
    // --yes answers toolhost's own confirmation and the remote server's question.
    let (code, block) = call_via(
        local.path(),
        "remote__write_file",
        json!({"path": "from-afar.txt", "content": "confirmed twice"}),
        &["--yes"],
        &env,
    );
    assert_eq!(code, 0, "{block}");
    assert_eq!(
        std::fs::read_to_string(remote_ws.path().join("from-afar.txt")).unwrap(),
        "confirmed twice"
    );
    // The local policy lets the tool run; nobody at a terminal answers the remote
    // server's question, so it is declined and the remote call is denied.
    std::fs::write(
        local.path().join("toolhost.toml"),
        format!("{config}\n[tool_confirmation.per_tool]\nremote__write_file = \"auto\"\n"),
    )
    .unwrap();
    let (code, block) = call_via(
        local.path(),
        "remote__write_file",
        json!({"path": "refused.txt", "content": "no"}),
        &[],
        &env,
    );
    assert_eq!(code, 1, "{block}");
    assert!(block.to_string().contains("User denied"), "{block}");
    assert!(!remote_ws.path().join("refused.txt").exists());
    // Without the token the server is not reached, and the load report says why.
    let (code, block) = call_via(
        local.path(),
        "remote__read_file",
        json!({"path": "README.md"}),
        &[],
        &[],
    );
    assert_eq!(code, 1, "{block}");
}

/// A remote toolhost over HTTP (2026-07-28) whose `write_file` asks before it writes, and
/// a local stdio toolhost mounting it, whose own policy lets the call run: the remote
/// question arrives as the remote server's `input_required` round.
fn remote_that_asks() -> (tempfile::TempDir, Server, tempfile::TempDir) {
    let remote_ws = workspace();
    let remote = serve_http(remote_ws.path(), &[]);
    let local = workspace();
    std::fs::write(
        local.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"remote\"\nprefix = \"remote\"\nurl = \"http://{}/mcp\"\n\
             side_effects = {{ write_file = \"write\" }}\n\n[tool_confirmation.per_tool]\nremote__write_file = \"auto\"\n",
            remote.addr
        ),
    )
    .unwrap();
    (remote_ws, remote, local)
}

/// A client of a stdio server that sends one message and waits for its answer.
struct StdioClient {
    stdin: std::process::ChildStdin,
    lines: Box<dyn Iterator<Item = Value>>,
}

impl StdioClient {
    fn of(server: &mut Server) -> StdioClient {
        let lines = BufReader::new(server.child.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .map(|l| serde_json::from_str::<Value>(&l).unwrap());
        StdioClient {
            stdin: server.child.stdin.take().unwrap(),
            lines: Box::new(lines),
        }
    }

    fn ask(&mut self, message: Value) -> Value {
        writeln!(self.stdin, "{message}").unwrap();
        let id = message["id"].clone();
        self.lines.find(|v| v["id"] == id).unwrap()
    }
}

#[test]
fn a_mounted_2026_servers_question_goes_whole_to_a_2026_client_and_its_answer_back() {
    let (remote_ws, _remote, local) = remote_that_asks();
    let mut server = start_stdio(local.path());
    let mut client = StdioClient::of(&mut server);
    let args =
        json!({"name": "remote__write_file", "arguments": {"path": "mid.txt", "content": "x"}});
    let first = client.ask(stateless(1, "tools/call", args.clone(), true));
    let asked = &first["result"];
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    // The remote server's own question, under its own key; toolhost's state wraps its state.
    let question = &asked["inputRequests"]["confirm"];
    assert!(
        question
            .to_string()
            .contains("'write_file' (write) asks to run"),
        "{question}"
    );
    let state = asked["requestState"].as_str().unwrap().to_string();
    assert!(!remote_ws.path().join("mid.txt").exists());
    let mut retry = args.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] =
        json!({"confirm": {"action": "accept", "content": {"decision": "allow"}}});
    let answers = [
        client.ask(stateless(2, "tools/call", retry.clone(), true)),
        client.ask(stateless(3, "tools/call", retry, true)),
    ];
    assert_eq!(
        answers[0]["result"]["resultType"], "complete",
        "{}",
        answers[0]
    );
    assert_ne!(answers[0]["result"]["isError"], true, "{}", answers[0]);
    assert_eq!(
        std::fs::read_to_string(remote_ws.path().join("mid.txt")).unwrap(),
        "x"
    );
    // toolhost's state is used once.
    assert_eq!(answers[1]["error"]["code"], -32602, "{}", answers[1]);
}

#[test]
fn a_mounted_2026_server_is_told_what_the_calling_client_can_answer() {
    // The client cannot elicit: the remote server is told so with the call (not what
    // toolhost could relay to anyone), does not ask, and its own fallback refuses the
    // write, saying nobody could be asked.
    let (remote_ws, _remote, local) = remote_that_asks();
    let mut server = start_stdio(local.path());
    let call = stateless(
        1,
        "tools/call",
        json!({"name": "remote__write_file", "arguments": {"path": "mid.txt", "content": "x"}}),
        false,
    );
    let answer = &StdioClient::of(&mut server).ask(call);
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("nobody could be asked to confirm it"),
        "{answer}"
    );
    assert!(!remote_ws.path().join("mid.txt").exists());
}

/// `toolhost serve --mcp` in `ws` on pipes (no handshake: a 2026-07-28 client needs none).
fn start_stdio(ws: &Path) -> Server {
    let mut child = command(ws, &["serve", "--mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _ = child.stderr.take();
    Server {
        child,
        addr: String::new(),
        log: Default::default(),
    }
}

/// Runs `toolhost serve ARGS` expecting it to refuse to start: exit 2 and its message.
fn refused_to_serve(ws: &Path, args: &[&str]) -> String {
    let out = command(ws, args).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    stderr
}

#[test]
fn bad_serve_options_and_key_rings_stop_the_server_naming_what_is_wrong() {
    let ws = workspace();
    std::fs::write(ws.path().join("no-tokens"), "# nothing but a comment\n").unwrap();
    let e = refused_to_serve(
        ws.path(),
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--token-file",
            "no-tokens",
        ],
    );
    assert!(
        e.contains("no-tokens") && e.contains("holds no token"),
        "{e}"
    );
    let e = refused_to_serve(
        ws.path(),
        &["serve", "--http", "127.0.0.1:0", "--token-file", "missing"],
    );
    assert!(
        e.contains("cannot read the token file") && e.contains("missing"),
        "{e}"
    );
    let e = refused_to_serve(
        ws.path(),
        &["serve", "--http", "127.0.0.1:0", "--request-timeout", "0"],
    );
    assert!(e.contains("--request-timeout"), "{e}");
    let e = refused_to_serve(ws.path(), &["serve", "--control", "127.0.0.1:0"]);
    assert!(e.contains("--mcp"), "{e}");
    // The key ring is read relative to the config file, and a bad line names itself.
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[mcp]\nrequest_state_keys = \"keys.txt\"\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("keys.txt"), "k1 dG9vLXNob3J0\n").unwrap();
    let e = refused_to_serve(ws.path(), &["serve", "--http", "127.0.0.1:0"]);
    assert!(
        e.contains("keys.txt, line 1") && e.contains("at least 32"),
        "{e}"
    );
    std::fs::remove_file(ws.path().join("keys.txt")).unwrap();
    let e = refused_to_serve(ws.path(), &["serve", "--http", "127.0.0.1:0"]);
    assert!(
        e.contains("cannot read the request-state key ring") && e.contains("keys.txt"),
        "{e}"
    );
}

#[test]
fn an_http_toolset_whose_token_variable_is_unset_is_refused_naming_the_variable() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[[mcp_servers]]\nid = \"remote\"\nprefix = \"remote\"\nurl = \"http://127.0.0.1:9/mcp\"\nbearer_token_env = \"UNSET_REMOTE_TOKEN\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .arg("plugins")
        .current_dir(ws.path())
        .env("XDG_CONFIG_HOME", ws.path().join(".no-config"))
        .env("XDG_CACHE_HOME", ws.path().join(".cache"))
        .env("XDG_STATE_HOME", ws.path().join(".state"))
        .env_remove("UNSET_REMOTE_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("refused  MCP server 'remote'") && stdout.contains("UNSET_REMOTE_TOKEN"),
        "{stdout}"
    );
}

#[test]
fn an_unknown_path_or_method_gets_a_json_error_naming_what_is_served() {
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    let missing = request(&server.addr, "GET", "/v1/nothing", &[], b"");
    assert_eq!(missing.status, 404, "{missing:?}");
    let message = missing.json()["error"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("no endpoint GET /v1/nothing; this server answers")
            && message.contains("/mcp")
            && message.contains("POST /v1/confirmations/{id}"),
        "{message}"
    );
    let wrong = request(&server.addr, "DELETE", "/v1/events", &[], b"");
    assert_eq!(wrong.status, 405, "{wrong:?}");
    let message = wrong.json()["error"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("/v1/events does not take DELETE;"),
        "{message}"
    );

    // The control API beside MCP on stdio serves no /mcp, and says so.
    let control = start(command(
        ws.path(),
        &["serve", "--mcp", "--control", "127.0.0.1:0"],
    ));
    let missing = request(&control.addr, "POST", "/mcp", &[], b"{}");
    assert_eq!(missing.status, 404, "{missing:?}");
    let message = missing.json()["error"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("no endpoint POST /mcp;") && !message.contains("(MCP"),
        "{message}"
    );
}

#[test]
fn a_session_request_reusing_the_id_of_one_in_flight_is_refused_and_the_first_is_answered() {
    let ws = workspace();
    allow_shell(ws.path());
    let server = serve_http(ws.path(), &[]);
    let session = legacy_session(&server.addr, false);
    let other = legacy_session(&server.addr, false);
    let in_session = |session: &str, message: Value| {
        let headers = [
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        post_mcp(&server.addr, &headers, &message)
    };
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            in_session(
                &session,
                tools_call(
                    2,
                    "shell",
                    json!({"command": "touch started; sleep 1; echo first"}),
                ),
            )
        });
        let started = Instant::now();
        while !ws.path().join("started").exists() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the call never ran"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let refused = in_session(&session, ping.clone()).json();
        assert_eq!(refused["id"], 2, "{refused}");
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("id 2 is taken by a request still in flight"),
            "{refused}"
        );
        // Another session's id 2 is another request.
        assert_eq!(in_session(&other, ping.clone()).json()["result"], json!({}));
        let first = first.join().unwrap().json();
        assert_eq!(
            first["result"]["content"][0]["text"], "first\n[exit code: 0]",
            "{first}"
        );
    });
    // Free again once answered.
    assert_eq!(
        in_session(&session, ping).json(),
        json!({"jsonrpc": "2.0", "id": 2, "result": {}})
    );
}

/// Whether process `pid` has ended (gone, or a zombie left to reap).
fn ended(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z'))
    })
}

#[test]
fn a_session_request_over_the_timeout_gets_the_error_on_its_stream_and_its_call_is_cancelled() {
    let ws = workspace();
    allow_shell(ws.path());
    let server = serve_http(ws.path(), &["--request-timeout", "1"]);
    let session = legacy_session(&server.addr, false);
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let started = Instant::now();
    let r = post_mcp(
        &server.addr,
        &headers,
        &tools_call(
            7,
            "shell",
            json!({"command": "echo $$ > pid; sleep 30; touch finished"}),
        ),
    );
    let answer = r.json();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Request timed out after 1 s"),
        "{answer}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Under load the timeout may come before the shell starts: then there is nothing to stop.
    let pid_file = ws.path().join("pid");
    let waited = Instant::now();
    while !pid_file.exists() && waited.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let Ok(pid) = std::fs::read_to_string(&pid_file) else {
        return;
    };
    let pid = pid.trim();
    let cancelled = Instant::now();
    while !ended(pid) {
        assert!(
            cancelled.elapsed() < Duration::from_secs(10),
            "the timed-out call's shell {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!ws.path().join("finished").exists());
}

#[test]
fn the_mcp_transports_refusals_are_json_rpc_errors_with_their_status_and_what_to_do() {
    let ws = workspace();
    let server = serve_http(ws.path(), &[]);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let version = ("MCP-Protocol-Version", "2025-11-25");
    let cases = [
        (
            post_mcp(&server.addr, &[version], &ping),
            400,
            json!(2),
            "Bad Request: Session ID is required; initialize first and send the Mcp-Session-Id header it answers with (or use protocol 2026-07-28, which has no sessions)",
        ),
        (
            post_mcp(&server.addr, &[version, ("Mcp-Session-Id", "gone")], &ping),
            404,
            json!(2),
            "Not Found: Session not found; the session was closed or has expired: initialize a new one",
        ),
        (
            request(
                &server.addr,
                "POST",
                "/mcp",
                &[
                    ("Content-Type", "application/json"),
                    ("Accept", "text/html"),
                ],
                ping.to_string().as_bytes(),
            ),
            406,
            json!(2),
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        ),
        (
            request(
                &server.addr,
                "POST",
                "/mcp",
                &[
                    ("Content-Type", "text/plain"),
                    ("Accept", "application/json, text/event-stream"),
                ],
                ping.to_string().as_bytes(),
            ),
            415,
            json!(2),
            "Unsupported Media Type: Content-Type must be application/json",
        ),
        (
            request(&server.addr, "PUT", "/mcp", &[], b""),
            405,
            Value::Null,
            "Method Not Allowed; /mcp answers POST (messages), GET (a session's event stream) and DELETE (end a session)",
        ),
    ];
    for (r, status, id, message) in cases {
        assert_eq!(r.status, status, "{r:?}");
        assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
        assert_eq!(
            r.json(),
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": message}}),
            "{r:?}"
        );
    }
}

/// A toolhost.toml in `ws` with the fixture MCP server as toolset `fx` (its `grow` adds a
/// tool), writes allowed.
fn use_the_fixture_server(ws: &Path) {
    std::fs::write(
        ws.join("toolhost.toml"),
        format!(
            "[tool_confirmation.default]\nWRITE = \"auto\"\n\n[[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\n",
            toolhost_tests::fixtures().mcp_server().display()
        ),
    )
    .unwrap();
}

#[test]
fn a_2026_listen_stream_is_told_of_tool_changes_and_ends_with_its_result_on_sigterm() {
    let ws = workspace();
    use_the_fixture_server(ws.path());
    let mut server = serve_http(ws.path(), &[]);
    // The listen request's event stream, read as it comes.
    let listen = stateless(
        1,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "resourcesListChanged": true}}),
        false,
    )
    .to_string();
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\n",
        server.addr,
        listen.len()
    );
    for (k, v) in JSON_HEADERS {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    stream
        .write_all(format!("{head}\r\n{listen}").as_bytes())
        .unwrap();
    let mut lines = BufReader::new(stream).lines().map_while(Result::ok);
    let mut next_message = || -> Value {
        for line in lines.by_ref() {
            if let Some(data) = line.strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<Value>(data.trim())
            {
                return v;
            }
        }
        panic!("the listen stream ended");
    };
    let ack = next_message();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "tools only: resources never change"
    );
    let grown = post_stateless(
        &server.addr,
        &stateless(
            2,
            "tools/call",
            json!({"name": "fx__grow", "arguments": {}}),
            false,
        ),
    )
    .json();
    assert_eq!(grown["result"]["content"][0]["text"], "grown", "{grown}");
    let note = next_message();
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 1,
        "{note}"
    );
    let listed = post_stateless(&server.addr, &stateless(3, "tools/list", json!({}), false)).json();
    assert!(
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "fx__extra"),
        "{listed}"
    );
    // A stopping server ends the stream with its final result, not a cut connection.
    send_signal(server.child.id(), rustix::process::Signal::TERM);
    let last = next_message();
    assert_eq!(last["id"], 1, "{last}");
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    let status = wait_exit(&mut server.child);
    assert_eq!(status.code(), Some(143), "{status}");
    let log = server.log.lock().unwrap().join("\n");
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn a_change_behind_a_2026_server_reaches_the_client_of_the_toolhost_that_uses_it() {
    // fixture server (stdio) -> remote toolhost (HTTP, 2026-07-28) -> local toolhost
    // (stdio) -> a 2025-era client. The fixture grows a tool; the remote tells the local
    // one on the listen stream it opened; the local one tells its client.
    let remote_ws = workspace();
    use_the_fixture_server(remote_ws.path());
    let remote = serve_http(remote_ws.path(), &[]);
    let local = workspace();
    std::fs::write(
        local.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"remote\"\nprefix = \"remote\"\nurl = \"http://{}/mcp\"\n\n\
             [tool_confirmation.per_tool]\nremote__fx__grow = \"auto\"\n",
            remote.addr
        ),
    )
    .unwrap();
    let mut server = start_stdio(local.path());
    let mut stdin = server.child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = server.child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    // Messages come in any order (the notice may come before the call's answer): what one
    // wait passes over is kept for the next.
    let mut kept: Vec<Value> = Vec::new();
    let mut next = |pred: &dyn Fn(&Value) -> bool, what: &str| -> Value {
        if let Some(i) = kept.iter().position(pred) {
            return kept.remove(i);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(v) if pred(&v) => return v,
                Ok(v) => kept.push(v),
                Err(_) => panic!("no {what} within 20 s; passed over: {kept:?}"),
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "1"}}}),
    );
    let init = next(&|v| v["id"] == 1, "initialize answer");
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(tools_call(2, "remote__fx__grow", json!({})));
    let grown = next(&|v| v["id"] == 2, "tools/call answer");
    assert_eq!(grown["result"]["content"][0]["text"], "grown", "{grown}");
    next(
        &|v| v["method"] == "notifications/tools/list_changed",
        "notifications/tools/list_changed",
    );
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    let listed = next(&|v| v["id"] == 3, "tools/list answer");
    assert!(
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "remote__fx__extra"),
        "{listed}"
    );
}

#[test]
fn an_answer_for_a_question_parked_on_another_instance_is_told_to_call_again() {
    // Two stdio instances sharing a key ring (as behind a load balancer) mount the same
    // 2025-era server. A 2026 client's round on the first parks the server's call there;
    // its answer, sent to the second, opens the sealed state but finds no waiting call.
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\nargs = [\"--asks\"]\n",
            toolhost_tests::fixtures().mcp_server().display()
        ),
    )
    .unwrap();
    let ring = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let instance = || {
        let child = command(ws.path(), &["serve", "--mcp"])
            .env("TOOLHOST_REQUEST_STATE_KEYS", ring)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Server {
            child,
            addr: String::new(),
            log: Default::default(),
        }
    };
    let (mut first, mut second) = (instance(), instance());
    let asked = StdioClient::of(&mut first).ask(stateless(
        1,
        "tools/call",
        json!({"name": "fx__ask", "arguments": {}}),
        true,
    ));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].clone();
    let answer = StdioClient::of(&mut second).ask(stateless(
        2,
        "tools/call",
        json!({"name": "fx__ask", "arguments": {},
               "inputResponses": {"elicitation": {"action": "accept", "content": {"color": "teal"}}},
               "requestState": state}),
        true,
    ));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer.to_string().contains("is no longer waiting")
            && answer.to_string().contains("call the tool again"),
        "{answer}"
    );
}
