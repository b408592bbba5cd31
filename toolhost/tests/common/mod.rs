//! What the tests of `toolhost serve` share: starting a server, a workspace.
#![allow(dead_code, reason = "each test file uses part of it")]
#![cfg(test)]

pub mod browser;
pub mod mcp;
pub mod raw_http;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `toolhost serve --http` (or `--mcp --control`), killed on drop.
pub struct Server {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// What the server wrote to stderr, line by line, as it comes.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn command(ws: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.args(args)
        .arg("--workspace")
        .arg(ws)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"))
        .env_remove("TOOLHOST_HTTP_TOKEN")
        .env_remove("TOOLHOST_REQUEST_STATE_KEYS")
        .env_remove("TOOLHOST_STORE_URL");
    cmd
}

/// Starts `cmd` and waits for it to print the address it listens on (its `toolhost: …
/// at http://ADDR/…` line; a log line may name other URLs).
pub fn start(mut cmd: Command) -> Server {
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
                if let Some(rest) = line
                    .strip_prefix("toolhost: ")
                    .and_then(|l| l.split("at http://").nth(1))
                {
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

pub fn serve_http(ws: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["serve", "--http", "127.0.0.1:0"];
    args.extend(extra);
    start(command(ws, &args))
}

/// A temporary workspace with a README.
pub fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# hello\n").unwrap();
    dir
}

/// The tool names the server lists now.
pub fn tools(server: &Server) -> Vec<String> {
    let listed = raw_http::post_stateless(
        &server.addr,
        &raw_http::stateless(1, "tools/list", serde_json::json!({}), false),
    )
    .json();
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A call's result.
pub fn call(server: &Server, name: &str, arguments: serde_json::Value) -> serde_json::Value {
    let answer = raw_http::post_stateless(
        &server.addr,
        &raw_http::stateless(
            2,
            "tools/call",
            serde_json::json!({"name": name, "arguments": arguments}),
            false,
        ),
    )
    .json();
    answer["result"].clone()
}

/// Waits (at most 20 s) until `done` holds.
pub fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the server's log has a line with every one of `words`; that line.
pub fn logged(server: &Server, words: &[&str]) -> String {
    let mut found = String::new();
    until(&format!("a log line with {words:?}"), || {
        let log = server.log.lock().unwrap();
        match log.iter().find(|l| words.iter().all(|w| l.contains(w))) {
            Some(line) => {
                found = line.clone();
                true
            }
            None => false,
        }
    });
    found
}
