//! A compressed long run, measured: `toolhost serve --http` under steady load while a
//! plugin is upgraded every minute and the configuration file is rewritten every 30 s.
//! Not part of `cargo xtask bench`: run it when a change touches reloading,
//!
//! ```sh
//! SOAK_MINUTES=30 cargo bench -p toolhost --bench soak
//! ```
//!
//! In test mode (`cargo test --benches`, as `cargo xtask test` runs every bench once) it
//! runs 12 s, upgrading every 4 s and reloading every 2 s, and fails on any failed call or
//! an upgrade or reload the server did not log.
//!
//! Four keep-alive clients alternate `read_file` (a built-in tool) and `wat_noop` (the
//! WebAssembly plugin being upgraded); every call must succeed. Prints the calls made and
//! failed (with the first failures), the upgrades and reloads the server logged against
//! those made, and the server's RSS and open files after a warm-up and at the end.
//! Needs `TOOLHOST_TEST_COMPONENTS` (`cargo xtask test` builds them).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CLIENTS: usize = 4;

/// How long, and how often each change is made.
struct Plan {
    run: Duration,
    upgrade_every: Duration,
    reload_every: Duration,
    warm_up: Duration,
}

impl Plan {
    /// `--bench`: `SOAK_MINUTES` (30 by default); else the short proof of test mode.
    fn of_args() -> Plan {
        if std::env::args().any(|a| a == "--bench") {
            let minutes: u64 = std::env::var("SOAK_MINUTES")
                .ok()
                .and_then(|m| m.parse().ok())
                .unwrap_or(30);
            Plan {
                run: Duration::from_secs(minutes * 60),
                upgrade_every: Duration::from_secs(60),
                reload_every: Duration::from_secs(30),
                warm_up: Duration::from_secs(10),
            }
        } else {
            Plan {
                run: Duration::from_secs(12),
                upgrade_every: Duration::from_secs(4),
                reload_every: Duration::from_secs(2),
                warm_up: Duration::from_secs(1),
            }
        }
    }
}

struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(ws: &Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["serve", "--http", "127.0.0.1:0", "--workspace"])
        .arg(ws)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"))
        .env_remove("TOOLHOST_LOG")
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
        .expect("the server said where it listens");
    Server { child, addr, log }
}

/// A keep-alive connection posting 2026-07-28 `tools/call` requests.
struct Client {
    addr: String,
    stream: BufReader<TcpStream>,
}

impl Client {
    fn new(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Client {
            addr: addr.to_string(),
            stream: BufReader::new(stream),
        }
    }

    /// The call's result, or what went wrong.
    fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Result<Value, String> {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        }})
        .to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
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
                length = v.trim().parse().map_err(|_| "bad length".to_string())?;
            }
        }
        let mut body = vec![0; length];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        match answer.get("result") {
            Some(r) if r["isError"] == false => Ok(r.clone()),
            _ => Err(answer.to_string()),
        }
    }
}

/// RSS (KiB) and open files of `pid`.
fn usage(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (rss, fds)
}

fn write_config(ws: &Path, max_chars: u32) {
    let text = format!("plugin_dirs = [\"plugins\"]\n\n[results]\nmax_chars = {max_chars}\n");
    std::fs::write(ws.join(".toolhost.toml.new"), text).unwrap();
    std::fs::rename(ws.join(".toolhost.toml.new"), ws.join("toolhost.toml")).unwrap();
}

fn main() {
    let Some(components) = toolhost_tests::peer("TOOLHOST_TEST_COMPONENTS") else {
        println!("soak: skipped: no TOOLHOST_TEST_COMPONENTS (cargo xtask test builds them)");
        return;
    };
    let plan = Plan::of_args();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# soak\n").unwrap();
    toolhost_tests::wat_noop_package(
        &components,
        &ws.path().join("plugins/wat-noop"),
        "2.0.0",
        false,
    );
    write_config(ws.path(), 100_000);
    let server = serve(ws.path());
    let pid = server.child.id();
    let stop = AtomicBool::new(false);
    let (calls, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let ends = Instant::now() + plan.run;
    let (mut upgrades, mut reloads) = (0u32, 0u32);
    let mut first = (0, 0);
    // RSS (KiB) at each upgrade: whether it grows with them or settles.
    let mut samples: Vec<u64> = Vec::new();
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (addr, stop, calls, failed, failures) =
                (&server.addr, &stop, &calls, &failed, &failures);
            scope.spawn(move || {
                let mut client = Client::new(addr);
                let mut id = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    id += 1;
                    let (tool, arguments) = if (id + c as u64).is_multiple_of(2) {
                        ("read_file", json!({"path": "README.md"}))
                    } else {
                        ("wat_noop", json!({}))
                    };
                    calls.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = client.call(id, tool, arguments) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let mut f = failures.lock().unwrap();
                        if f.len() < 5 {
                            f.push(format!("{tool}: {e}"));
                        }
                        client = Client::new(addr);
                    }
                }
            });
        }
        let started = Instant::now();
        let (mut next_upgrade, mut next_reload) = (plan.upgrade_every, plan.reload_every);
        let mut warmed = false;
        while Instant::now() < ends {
            std::thread::sleep(Duration::from_millis(200));
            let elapsed = started.elapsed();
            if !warmed && elapsed >= plan.warm_up {
                first = usage(pid);
                warmed = true;
            }
            if elapsed >= next_upgrade {
                samples.push(usage(pid).0);
                upgrades += 1;
                let version = format!("2.{}.{}", (upgrades / 10) % 10, upgrades % 10);
                let staged = ws.path().join(format!("staged-{upgrades}"));
                toolhost_tests::wat_noop_package(&components, &staged, &version, false);
                let live = ws.path().join("plugins/wat-noop");
                std::fs::rename(&live, ws.path().join(format!("old-{upgrades}"))).unwrap();
                std::fs::rename(&staged, &live).unwrap();
                next_upgrade += plan.upgrade_every;
            }
            if elapsed >= next_reload {
                reloads += 1;
                write_config(ws.path(), 100_000 + reloads);
                next_reload += plan.reload_every;
            }
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });
    let last = usage(pid);
    let log = server.log.lock().unwrap();
    let upgraded = log.iter().filter(|l| l.contains("plugin upgraded")).count();
    let reloaded = log
        .iter()
        .filter(|l| l.contains("toolhost.toml reloaded"))
        .count();
    println!(
        "soak: {} s of load, {CLIENTS} clients (read_file and wat_noop alternately)",
        plan.run.as_secs()
    );
    println!(
        "soak: calls {} failed {}",
        calls.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    for f in failures.lock().unwrap().iter() {
        println!("soak: failure: {f}");
    }
    println!("soak: plugin upgrades made {upgrades}, logged {upgraded}");
    println!("soak: config rewrites made {reloads}, reloads logged {reloaded}");
    println!(
        "soak: RSS {} KiB after {} s, {} KiB at the end; open files {} then {}",
        first.0,
        plan.warm_up.as_secs(),
        last.0,
        first.1,
        last.1
    );
    let by_upgrade: Vec<String> = samples.iter().map(|k| (k / 1024).to_string()).collect();
    println!(
        "soak: RSS (MiB) before each upgrade: {}",
        by_upgrade.join(" ")
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "calls failed");
    assert_eq!(upgraded, upgrades as usize, "upgrades made but not logged");
    assert!(
        reloaded >= 1 && reloaded <= reloads as usize,
        "{reloaded} reloads logged of {reloads}"
    );
}
