//! A compressed long run, measured: `toolhost serve --http` under steady load while a
//! plugin is upgraded every minute and the configuration file is rewritten every 30 s.
//! Not part of `cargo xtask bench`: run it when a change touches reloading,
//!
//! ```sh
//! SOAK_MINUTES=30 cargo bench -p toolhost --bench soak
//! ```
//!
//! In test mode (`cargo test --benches`, as `cargo xtask test` runs every bench once) it
//! runs 6 s, upgrading every 2 s and reloading every second, and fails on any failed call or
//! an upgrade or reload the server did not log.
//!
//! Four keep-alive clients alternate `read_file` (a built-in tool) and `wat_noop` (the
//! WebAssembly plugin being upgraded); every call must succeed. Prints the calls made and
//! failed (with the first failures), the upgrades and reloads the server logged against
//! those made, and the server's RSS and open files after a warm-up and at the end.
//! Needs `TOOLHOST_TEST_COMPONENTS` (`cargo xtask test` builds them).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[allow(dead_code, reason = "each bench uses part of it")]
mod common;
use common::{Client, Instance};

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
        if let Some(minutes) = toolhost_tests::soak_minutes() {
            Plan {
                run: Duration::from_secs(minutes * 60),
                upgrade_every: Duration::from_secs(60),
                reload_every: Duration::from_secs(30),
                warm_up: Duration::from_secs(10),
            }
        } else {
            Plan {
                run: Duration::from_secs(6),
                upgrade_every: Duration::from_secs(2),
                reload_every: Duration::from_secs(1),
                warm_up: Duration::from_secs(1),
            }
        }
    }
}

fn serve(ws: &Path) -> Instance {
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

/// A 2026-07-28 `tools/call` of `tool`: its result, or why it failed.
fn call(client: &mut Client, id: u64, tool: &str, arguments: Value) -> Result<Value, String> {
    let answer = client.post(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        }}),
    )?;
    match answer.get("result") {
        Some(r) if r["isError"] == false => Ok(r.clone()),
        _ => Err(answer.to_string()),
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
                    if let Err(e) = call(&mut client, id, tool, arguments) {
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
