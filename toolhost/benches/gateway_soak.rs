//! A compressed long run of the gateway, measured: `toolhost serve --http` taking OAuth
//! tokens from the bench's issuer, in front of a stdio MCP server that takes its caller's
//! own token (`credentials = "caller"`), so that each caller gets a process of its own.
//! More callers than `max_callers` take turns, so their processes are closed to make room
//! (the one idle the longest) and for being idle (`caller_idle_timeout_secs`) all the
//! time. Not part of `cargo xtask bench`: run it when a change touches mounted servers,
//!
//! ```sh
//! SOAK_MINUTES=30 cargo bench -p toolhost --bench gateway_soak
//! ```
//!
//! In test mode (`cargo test --benches`, as `cargo xtask test` runs every bench once) it
//! runs 7 s. It prints the calls made and failed, and the gateway's threads, open files,
//! live child processes and RSS after a warm-up and at the end; it fails on a failed call,
//! on more threads or open files at the end than after the warm-up, on more callers'
//! processes than `max_callers`, or on RSS grown by more than a fifth.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

#[allow(dead_code, reason = "each bench uses part of it")]
mod common;
use common::{Client, Instance};

/// Who calls: more callers than there are processes for them.
const CALLERS: [&str; 6] = ["ann", "bob", "cy", "dee", "eve", "fay"];
/// The most callers' processes at once.
const MAX_CALLERS: usize = 3;
/// Clients calling at once (each takes turns among the callers).
const CLIENTS: usize = 2;
const RESOURCE: &str = "https://soak.invalid/mcp";

/// How long, and when the figures are taken.
struct Plan {
    run: Duration,
    warm_up: Duration,
}

impl Plan {
    /// `--bench`: `SOAK_MINUTES` (30 by default); else the short proof of test mode.
    fn of_args() -> Plan {
        if let Some(minutes) = toolhost_tests::soak_minutes() {
            Plan {
                run: Duration::from_secs(minutes * 60),
                warm_up: Duration::from_secs(30),
            }
        } else {
            Plan {
                run: Duration::from_secs(7),
                warm_up: Duration::from_secs(3),
            }
        }
    }
}

/// What the gateway holds: threads, open files, live child processes (the server's own,
/// which lists its tools, and the callers'), RSS (KiB).
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    threads: usize,
    files: usize,
    children: usize,
    rss_kib: u64,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Usage {
        threads: usize::try_from(field("Threads:")).unwrap_or(0),
        files: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()),
        children: toolhost_tests::children_of(pid)
            .into_iter()
            .filter(|c| toolhost_tests::process_alive(*c))
            .count(),
        rss_kib: field("VmRSS:"),
    }
}

fn serve(ws: &Path, issuer: &str) -> Instance {
    let config = format!(
        "[http.auth]\nissuer = \"{issuer}\"\nresource = \"{RESOURCE}\"\n\n\
         [[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\n\
         credentials = \"caller\"\ntoken_env = \"UPSTREAM_TOKEN\"\naudience = \"{RESOURCE}\"\n\
         max_callers = {MAX_CALLERS}\ncaller_idle_timeout_secs = 1\n",
        toolhost_tests::fixtures().mcp_server().display()
    );
    std::fs::write(ws.join("toolhost.toml"), config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.args(["serve", "--http", "127.0.0.1:0", "--workspace"])
        .arg(ws)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"))
        .env_remove("TOOLHOST_LOG");
    common::start(cmd)
}

fn main() {
    let plan = Plan::of_args();
    let issuer = toolhost_tests::issuer::Issuer::start().expect("the bench's issuer");
    let tokens: Vec<String> = CALLERS
        .iter()
        .map(|who| issuer.token(who, RESOURCE))
        .collect();
    let ws = tempfile::tempdir().unwrap();
    let server = serve(ws.path(), &issuer.url);
    let pid = server.child.id();
    // The server's own process, which lists its tools: every caller's comes on top.
    let base = usage(pid).children;
    let stop = AtomicBool::new(false);
    let (calls, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let (mut warm, mut most_children) = (Usage::default(), 0);
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (addr, stop, calls, failed, failures, tokens) =
                (&server.addr, &stop, &calls, &failed, &failures, &tokens);
            scope.spawn(move || {
                let mut turn = c;
                let mut id = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // A few calls as one caller, then the next caller's turn.
                    let token = &tokens[turn % tokens.len()];
                    let mut client = Client::with_bearer(addr, token);
                    for _ in 0..20 {
                        id += 1;
                        calls.fetch_add(1, Ordering::Relaxed);
                        let answer = client.post(&json!({"jsonrpc": "2.0", "id": id,
                            "method": "tools/call", "params": {"name": "fx__echo",
                            "arguments": {"text": "soak"}, "_meta": {
                                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
                                "io.modelcontextprotocol/clientCapabilities": {}}}}));
                        let ok = answer.as_ref().is_ok_and(|a| a["result"]["isError"] == false);
                        if !ok {
                            failed.fetch_add(1, Ordering::Relaxed);
                            let mut f = failures.lock().unwrap();
                            if f.len() < 5 {
                                f.push(format!("{answer:?}"));
                            }
                            client = Client::with_bearer(addr, token);
                        }
                    }
                    turn += CLIENTS;
                }
            });
        }
        let started = Instant::now();
        while started.elapsed() < plan.run {
            std::thread::sleep(Duration::from_millis(100));
            let now = usage(pid);
            most_children = most_children.max(now.children);
            if warm.threads == 0 && started.elapsed() >= plan.warm_up {
                warm = now;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    // Settled: every caller's process idle past its timeout is closed.
    std::thread::sleep(Duration::from_secs(3));
    let last = usage(pid);
    println!(
        "gateway soak: {} s, {CLIENTS} clients taking turns as {} callers, max_callers = {MAX_CALLERS}",
        plan.run.as_secs(),
        CALLERS.len()
    );
    println!(
        "gateway soak: calls {} failed {}",
        calls.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    for f in failures.lock().unwrap().iter() {
        println!("gateway soak: failure: {f}");
    }
    println!(
        "gateway soak: after {} s: {} threads, {} open files, {} callers' processes, RSS {} KiB; at the end (all idle): {} threads, {} open files, {} callers' processes, RSS {} KiB; most callers' processes at once: {}",
        plan.warm_up.as_secs(),
        warm.threads,
        warm.files,
        warm.children - base,
        warm.rss_kib,
        last.threads,
        last.files,
        last.children - base,
        last.rss_kib,
        most_children - base
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "calls failed");
    assert!(
        most_children <= base + MAX_CALLERS,
        "{} callers' processes at once",
        most_children - base
    );
    assert_eq!(
        last.children, base,
        "callers' processes still open after their idle timeout"
    );
    assert!(
        last.threads <= warm.threads,
        "threads grew: {} -> {}",
        warm.threads,
        last.threads
    );
    assert!(
        last.files <= warm.files,
        "open files grew: {} -> {}",
        warm.files,
        last.files
    );
    assert!(
        last.rss_kib <= warm.rss_kib + warm.rss_kib / 5,
        "RSS grew: {} -> {} KiB",
        warm.rss_kib,
        last.rss_kib
    );
}
