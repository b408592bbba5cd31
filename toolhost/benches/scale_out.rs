//! Scale-out, measured: three `toolhost serve --http` instances behind a client that
//! spreads 2026-07-28 requests over them (as a load balancer would), first each with its
//! own memory, then all sharing one real `redis-server`.
//!
//! Prints, for `cargo xtask bench`:
//! - `calls/s` of a call that needs no shared state (`read_file`, allowed by the policy),
//!   with `memory` and with Redis: the floor and the figure, in the same run;
//! - the Redis commands each kind of call costs (read from Redis's own count, less what
//!   the instances do idle): none for that call, two per request for a confirmed write
//!   (the grant lookup and the store's generation when it is asked, the state's claim and
//!   the generation again, pipelined, when it is retried);
//! - that under that load, retries of each confirmed write sent to all three instances
//!   at once run it exactly once.
//!
//! Needs `TOOLHOST_TEST_REDIS` (`cargo xtask test` installs Debian's redis-server);
//! without it, says so and measures nothing.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_tests::redis_server::RedisServer;

#[allow(dead_code, reason = "each bench uses part of it")]
mod common;
use common::{Client, Instance};

const RING: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const INSTANCES: usize = 3;
const CLIENTS: usize = 6;
/// How long each load runs, and how long the instances' idle traffic is counted: seconds
/// when benchmarking (`--bench`), a fraction in test mode, which only proves it runs.
fn load_for() -> Duration {
    if std::env::args().any(|a| a == "--bench") {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(500)
    }
}
const WRITES: usize = 30;

fn instance(ws: &Path, store: &str) -> Instance {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.args(["serve", "--http", "127.0.0.1:0", "--workspace"])
        .arg(ws)
        .current_dir(ws)
        .env("XDG_CONFIG_HOME", ws.join(".no-config"))
        .env("XDG_STATE_HOME", ws.join(".state"))
        .env("TOOLHOST_REQUEST_STATE_KEYS", RING)
        .env("TOOLHOST_STORE_URL", store)
        .env("TOOLHOST_LOG", "warn")
        .env_remove("TOOLHOST_HTTP_TOKEN");
    common::start(cmd)
}

/// A 2026-07-28 `tools/call`.
fn call(id: u64, tool: &str, arguments: &Value, extra: &Value) -> Value {
    let mut params = json!({
        "name": tool, "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "scale-bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    });
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// `read_file` calls from [`CLIENTS`] connections spread over `instances` for
/// [`load_for`]: calls per second.
fn load(instances: &[Instance], stop_early: Option<&AtomicBool>) -> f64 {
    let done = AtomicU64::new(0);
    let load_for = load_for();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (done, addr) = (&done, &instances[c % instances.len()].addr);
            scope.spawn(move || {
                let mut client = Client::new(addr);
                let read = json!({"path": "a.txt"});
                let mut id = 0;
                while started.elapsed() < load_for
                    && !stop_early.is_some_and(|s| s.load(Ordering::Relaxed))
                {
                    id += 1;
                    let r = client.answer(&call(id, "read_file", &read, &json!({})));
                    assert_eq!(r["result"]["isError"], false, "{r}");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    done.into_inner() as f64 / started.elapsed().as_secs_f64()
}

/// A write asked about at `at`: its `requestState`.
fn asked(at: &mut Client, id: u64, arguments: &Value) -> Value {
    let round = at.answer(&call(id, "shell", arguments, &json!({})));
    assert_eq!(round["result"]["resultType"], "input_required", "{round}");
    round["result"]["requestState"].clone()
}

fn allowed(arguments: &Value, state: &Value) -> Value {
    json!({
        "inputResponses": {"confirm": {"action": "accept", "content": {"decision": "allow"}}},
        "requestState": state,
        "arguments": arguments,
    })
}

/// Redis commands per operation: `(commands, idle)` over the same time, per `n`.
fn per_call(commands: u64, idle_per_sec: f64, took: Duration, n: usize) -> f64 {
    let idle = idle_per_sec * took.as_secs_f64();
    ((commands as f64 - idle).max(0.0)) / n as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("scale_out: bench");
        return;
    }
    let Some(redis) = RedisServer::start() else {
        println!(
            "scale-out: skipped: no redis-server (set TOOLHOST_TEST_REDIS; cargo xtask test installs it)"
        );
        return;
    };
    let ws = tempfile::tempdir().expect("workspace");
    std::fs::write(ws.path().join("a.txt"), "x".repeat(4096)).expect("a.txt");

    let memory: Vec<Instance> = (0..INSTANCES)
        .map(|_| instance(ws.path(), "memory"))
        .collect();
    load(&memory, None); // warm-up
    let memory_rate = load(&memory, None);
    drop(memory);
    println!("scale-out: memory calls/s {memory_rate:.0}");

    let shared: Vec<Instance> = (0..INSTANCES)
        .map(|_| instance(ws.path(), &redis.url()))
        .collect();
    load(&shared, None); // warm-up
    // What the instances do idle (their looks for a console), per second.
    let before = redis.commands_processed();
    let idle_for = load_for() * 4 / 3; // 4 s when benchmarking
    std::thread::sleep(idle_for);
    let idle_per_sec = (redis.commands_processed() - before - 1) as f64 / idle_for.as_secs_f64();
    let before = redis.commands_processed();
    let started = Instant::now();
    let redis_rate = load(&shared, None);
    let took = started.elapsed();
    let commands = redis.commands_processed() - before - 1;
    let calls = (redis_rate * took.as_secs_f64()) as usize;
    println!("scale-out: redis calls/s {redis_rate:.0}");
    println!(
        "scale-out: store commands per read_file call {:.3} ({commands} commands for {calls} calls; idle {idle_per_sec:.1}/s)",
        per_call(commands, idle_per_sec, took, calls.max(1))
    );

    // Confirmed writes: the round at one instance, the retry at the next.
    let mut clients: Vec<Client> = shared.iter().map(|i| Client::new(&i.addr)).collect();
    let before = redis.commands_processed();
    let started = Instant::now();
    for n in 0..WRITES {
        let arguments = json!({"command": format!("echo measured{n} >> measured.log")});
        let state = asked(&mut clients[n % INSTANCES], 1, &arguments);
        let r = clients[(n + 1) % INSTANCES].answer(&call(
            2,
            "shell",
            &arguments,
            &allowed(&arguments, &state),
        ));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    let commands = redis.commands_processed() - before - 1;
    println!(
        "scale-out: store commands per confirmed write {:.2} (two requests: the question and its retry)",
        per_call(commands, idle_per_sec, started.elapsed(), WRITES)
    );

    // Exactly once under load: each retry sent to all three at once, while read_file
    // calls keep every instance busy.
    let stop = AtomicBool::new(false);
    let (ran, refused) = std::thread::scope(|scope| {
        let loading = scope.spawn(|| load(&shared, Some(&stop)));
        let mut ran = 0;
        let mut refused = 0;
        for n in 0..WRITES {
            let arguments = json!({"command": format!("echo once{n} >> once.log")});
            let state = asked(&mut clients[n % INSTANCES], 1, &arguments);
            let answers: Vec<Value> = std::thread::scope(|inner| {
                let sent: Vec<_> = shared
                    .iter()
                    .map(|i| {
                        let (arguments, state) = (arguments.clone(), state.clone());
                        inner.spawn(move || {
                            Client::new(&i.addr).answer(&call(
                                3,
                                "shell",
                                &arguments,
                                &allowed(&arguments, &state),
                            ))
                        })
                    })
                    .collect();
                sent.into_iter().map(|h| h.join().expect("retry")).collect()
            });
            ran += answers
                .iter()
                .filter(|a| a["result"]["isError"] == false)
                .count();
            refused += answers
                .iter()
                .filter(|a| {
                    a["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("already used"))
                })
                .count();
        }
        stop.store(true, Ordering::Relaxed);
        let _ = loading.join();
        (ran, refused)
    });
    let lines = std::fs::read_to_string(ws.path().join("once.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    println!(
        "scale-out: exactly once under load {lines}/{WRITES} writes ran once ({ran} retries ran, {refused} refused as already used)"
    );
}
