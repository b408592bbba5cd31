//! `toolhost serve --http` (and `serve --mcp --control`) driven over raw HTTP/1.1, as a
//! third-party client, a load balancer and a browser would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_tests::{send_signal, wait_exit};

/// A running `toolhost serve --http` (or `--mcp --control`), killed on drop.
struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    /// What the server wrote to stderr, line by line, as it comes.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(ws: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.args(args)
        .arg("--workspace")
        .arg(ws)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env_remove("TOOLHOST_HTTP_TOKEN")
        .env_remove("TOOLHOST_REQUEST_STATE_KEYS");
    cmd
}

/// Starts `cmd` and waits for it to print the address it listens on (`http://ADDR/`).
fn start(mut cmd: Command) -> Server {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("at http://").nth(1) {
                    let addr = rest.split('/').next().unwrap_or_default().to_string();
                    let _ = tx.send(addr);
                }
                log.lock().unwrap().push(line);
            }
        });
    }
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            panic!(
                "the server never said where it listens: {:?}",
                log.lock().unwrap()
            )
        });
    Server { child, addr, log }
}

fn serve_http(ws: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["serve", "--http", "127.0.0.1:0"];
    args.extend(extra);
    start(command(ws, &args))
}

/// An HTTP response: status, headers (lower-case names) and body.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON body, or the first JSON-RPC message of an event-stream body.
    fn json(&self) -> Value {
        let text = String::from_utf8_lossy(&self.body);
        if self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
        {
            for line in text.lines() {
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                    && v.get("jsonrpc").is_some()
                {
                    return v;
                }
            }
            panic!("no JSON-RPC message in the event stream: {text}");
        }
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(std::str::from_utf8(&body[..end]).unwrap().trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[end + 4 + size..];
    }
}

/// One request on a fresh connection (`Connection: close`).
fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before it has read a large body: a failed write is fine.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP response: {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

const JSON_HEADERS: &[(&str, &str)] = &[
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

fn post_mcp(addr: &str, extra: &[(&str, &str)], message: &Value) -> Response {
    let mut headers = JSON_HEADERS.to_vec();
    headers.extend_from_slice(extra);
    request(
        addr,
        "POST",
        "/mcp",
        &headers,
        message.to_string().as_bytes(),
    )
}

/// A 2026-07-28 request: per-request `_meta` and the version header.
fn stateless(id: i64, method: &str, mut params: Value, elicits: bool) -> Value {
    let caps = if elicits {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Posts a 2026-07-28 request with the standard headers its method needs.
fn post_stateless(addr: &str, message: &Value) -> Response {
    post_stateless_with(addr, &[], message)
}

fn post_stateless_with(addr: &str, extra: &[(&str, &str)], message: &Value) -> Response {
    let method = message["method"].as_str().unwrap().to_string();
    let name = message["params"]["name"].as_str().map(String::from);
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method.as_str()),
    ];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name.as_str()));
    }
    headers.extend_from_slice(extra);
    post_mcp(addr, &headers, message)
}

/// A 2025-11-25 session: initialize, initialized; returns the session id.
fn legacy_session(addr: &str, elicits: bool) -> String {
    let caps = if elicits {
        json!({"elicitation": {}})
    } else {
        json!({})
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": caps,
        "clientInfo": {"name": "raw-test", "version": "1"}}});
    let r = post_mcp(addr, &[], &init);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
    let session = r
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let r = post_mcp(
        addr,
        &headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(r.status < 300, "{r:?}");
    session
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# hello\n").unwrap();
    dir
}

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
