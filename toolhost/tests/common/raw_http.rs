//! A third-party MCP client over raw HTTP/1.1: one request per connection, 2025-era
//! sessions and 2026-07-28 stateless requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// An HTTP response: status, headers (lower-case names) and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON body, or the first JSON-RPC message of an event-stream body.
    pub fn json(&self) -> Value {
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

pub fn dechunk(mut body: &[u8]) -> Vec<u8> {
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
pub fn request(
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
    // Read until the body is complete (Content-Length, the last chunk, or the close): a
    // server may keep the connection open whatever `Connection: close` asked.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let complete = |raw: &[u8]| -> bool {
        let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        let body = &raw[split + 4..];
        if let Some(len) = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            return body.len() >= len;
        }
        head.contains("transfer-encoding: chunked") && body.ends_with(b"0\r\n\r\n")
    };
    // At most a minute in all: an event stream's keep-alives would outlast any read timeout.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        if complete(&raw) {
            break;
        }
    }
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

pub const JSON_HEADERS: &[(&str, &str)] = &[
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

pub fn post_mcp(addr: &str, extra: &[(&str, &str)], message: &Value) -> Response {
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
pub fn stateless(id: i64, method: &str, params: Value, elicits: bool) -> Value {
    let caps = if elicits {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    stateless_declaring(id, method, params, caps)
}

/// A 2026-07-28 request whose client declares `caps`.
pub fn stateless_declaring(id: i64, method: &str, mut params: Value, caps: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The text of a tool result's first content block (empty when there is none).
pub fn result_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Posts a 2026-07-28 request with the standard headers its method needs.
pub fn post_stateless(addr: &str, message: &Value) -> Response {
    post_stateless_with(addr, &[], message)
}

pub fn post_stateless_with(addr: &str, extra: &[(&str, &str)], message: &Value) -> Response {
    let method = message["method"].as_str().unwrap().to_string();
    // tools/call and prompts/get name what they call; tasks/* the task.
    let params = &message["params"];
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .map(String::from);
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
pub fn legacy_session(addr: &str, elicits: bool) -> String {
    legacy_session_with(addr, &[], elicits)
}

/// [`legacy_session`] with `extra` headers on each request (a bearer token, say).
pub fn legacy_session_with(addr: &str, extra: &[(&str, &str)], elicits: bool) -> String {
    let caps = if elicits {
        json!({"elicitation": {}})
    } else {
        json!({})
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": caps,
        "clientInfo": {"name": "raw-test", "version": "1"}}});
    let r = post_mcp(addr, extra, &init);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
    let session = r
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let mut headers = vec![
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    headers.extend_from_slice(extra);
    let r = post_mcp(
        addr,
        &headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(r.status < 300, "{r:?}");
    session
}

/// Follows `GET /v1/events` of the server at `addr`: (event name, data) as they come.
pub fn follow_events(addr: &str) -> std::sync::mpsc::Receiver<(String, Value)> {
    follow_events_with(addr, &[])
}

/// [`follow_events`] with more request headers (`Authorization`, say).
pub fn follow_events_with(
    addr: &str,
    headers: &[(&str, &str)],
) -> std::sync::mpsc::Receiver<(String, Value)> {
    let mut stream = TcpStream::connect(addr).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        stream,
        "GET /v1/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{extra}\r\n"
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut name = String::new();
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<Value>(d.trim())
                && tx.send((name.clone(), v)).is_err()
            {
                break;
            }
        }
    });
    rx
}

/// The next event named `name` (20 s at most).
pub fn wait_event(events: &std::sync::mpsc::Receiver<(String, Value)>, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok((n, v)) if n == name => return v,
            Ok(_) => {}
            Err(_) => panic!("no {name} event"),
        }
    }
}
