//! What the benches that drive `toolhost serve --http` share: starting an instance (its
//! address and its log, as they come) and a keep-alive client posting 2026-07-28 requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// A running `toolhost serve --http`, killed when dropped.
pub struct Instance {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its error output, line by line.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` (a `serve --http 127.0.0.1:0` command) and waits until it says where it
/// listens.
pub fn start(mut cmd: Command) -> Instance {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line
                .strip_prefix("toolhost: ")
                .and_then(|l| l.split("at http://").nth(1))
            {
                let _ = tx.send(rest.split('/').next().unwrap_or_default().to_string());
            }
            kept.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the instance said where it listens");
    Instance { child, addr, log }
}

/// A keep-alive HTTP/1.1 connection posting 2026-07-28 MCP requests.
pub struct Client {
    addr: String,
    stream: BufReader<TcpStream>,
    /// The `Authorization` header line it sends, if any.
    authorization: String,
}

impl Client {
    pub fn new(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Client {
            addr: addr.to_string(),
            stream: BufReader::new(stream),
            authorization: String::new(),
        }
    }

    /// A client whose requests carry `token` as their bearer token.
    pub fn with_bearer(addr: &str, token: &str) -> Client {
        Client {
            authorization: format!("Authorization: Bearer {token}\r\n"),
            ..Client::new(addr)
        }
    }

    /// Posts `message`: its JSON-RPC answer (the connection must not fail).
    pub fn answer(&mut self, message: &Value) -> Value {
        self.post(message).expect("an answer")
    }

    /// Posts `message`; its JSON-RPC answer, or what went wrong on the connection.
    pub fn post(&mut self, message: &Value) -> Result<Value, String> {
        let body = message.to_string();
        let method = message["method"].as_str().unwrap_or_default();
        let name = message["params"]["name"].as_str().unwrap_or_default();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: {method}\r\nMcp-Name: {name}\r\n{}Content-Length: {}\r\n\r\n",
            self.addr,
            self.authorization,
            body.len()
        );
        let out = self.stream.get_mut();
        out.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
        out.write_all(body.as_bytes()).map_err(|e| e.to_string())?;
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.stream
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().map_err(|_| format!("bad length: {v}"))?;
            }
        }
        let mut body = vec![0; length];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| e.to_string())?;
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
}
