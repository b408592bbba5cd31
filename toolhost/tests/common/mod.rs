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
