//! What the sandbox costs, each figure against the same work without it, measured in
//! alternation in one run (on a shared VM two windows seconds apart drift by more than
//! the 5% under test):
//!
//! - an isolated no-op call in a sandboxed worker vs the same plugin in a worker run
//!   unconfined (`sandbox = "unconfined"`): the sandbox is set up once per worker, so a
//!   call pays only what seccomp's filter adds to each of the worker's system calls
//!   (target: within 5%);
//! - a worker's start (spawn, confine itself, open the library, report) with and without
//!   its sandbox;
//! - `shell` running `true` under the default (`workspace-write`) vs `host` (the sandbox is
//!   prepared per command: its ruleset, filters and masks are built in the host, its
//!   namespaces made and everything applied in the child; target: at most 3 ms more);
//! - a 100 MB download from a loopback server with curl, through the egress proxy (a
//!   command granted network, in its own network namespace) vs straight to it (`host`)
//!   (target: at least 90% of its floor), beside that floor: the same download through a bare
//!   byte relay (no proxy protocol, no checks, no namespace: what any proxy must at least
//!   do, moving each byte through its process once) vs straight to it.
//!
//! - confining a command in a workspace with a `node_modules` of 100,000 files under
//!   `deny_read = ["**/.env"]` (the search for the pattern: target under 50 ms), beside
//!   its floor: a plain walk of the same tree on one thread, nothing matched.
//!
//! Each figure is a median over rounds; in each round both sides run the same number of
//! times, in alternating order. `cargo bench --bench sandbox` prints them and writes
//! `target/criterion/sandbox/paired.json` for `cargo xtask bench`; run as a test (`cargo
//! test --benches`), it does a few rounds to prove it works.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use dispatcher_core::{ConfirmationPolicy, Dispatcher, DispatcherConfig, SessionSpec, ToolUse};
use plugin_host::{Isolation, PluginHost, PluginSandbox, WorkerSettings};
use serde_json::json;
use toolhost_tests::{bench_library, package_library};

/// How many rounds, and how many times each side runs in a round.
struct Plan {
    rounds: usize,
    /// The files of the large workspace's `node_modules`.
    workspace_files: usize,
    calls: usize,
    starts: usize,
    commands: usize,
    downloads: usize,
    download_bytes: usize,
}

const BENCH: Plan = Plan {
    rounds: 31,
    workspace_files: 100_000,
    calls: 400,
    starts: 4,
    commands: 20,
    downloads: 1,
    download_bytes: 100 << 20,
};

const SMOKE: Plan = Plan {
    rounds: 2,
    workspace_files: 2_000,
    calls: 5,
    starts: 1,
    commands: 2,
    downloads: 1,
    download_bytes: 1 << 20,
};

/// A bare byte relay on loopback to `target`: each connection copied both ways through a
/// 4 MiB buffer, nothing parsed or checked. Returns its port.
fn bare_relay(target: u16) -> u16 {
    use std::io::{Read, Write};
    fn pump(mut from: std::net::TcpStream, mut to: std::net::TcpStream) {
        let mut buf = vec![0u8; 4 << 20];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let upstream = std::net::TcpStream::connect(("127.0.0.1", target)).unwrap();
            let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
            std::thread::spawn(move || pump(u2, c2));
            std::thread::spawn(move || pump(client, upstream));
        }
    });
    port
}

/// An HTTP server on loopback that answers every request with `bytes` bytes.
fn download_server(bytes: usize) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = vec![b'x'; 1 << 20];
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n"
                );
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(body.len());
                    if stream.write_all(&body[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    port
}

/// A workspace whose `node_modules` holds `files` files, a hundred to a package (half
/// in the package's folder, half two folders down), and a `.env` at its top.
fn large_workspace(files: usize) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join(".env"), "SECRET=1").unwrap();
    for p in 0..files.div_ceil(100) {
        let package = root.path().join(format!("node_modules/pkg{p}"));
        let deep = package.join("lib/sub");
        std::fs::create_dir_all(&deep).unwrap();
        for f in 0..100 {
            let dir = if f % 2 == 0 { &package } else { &deep };
            std::fs::write(dir.join(format!("f{f}.js")), "").unwrap();
        }
    }
    root
}

/// The entries under `dir`, walked on one thread without matching anything: what any
/// search of the tree must at least do.
fn plain_walk(dir: &std::path::Path) -> usize {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            count += 1;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    count
}

/// Two sides timed round by round ([`paired`]).
struct Paired {
    /// The medians of each side's per-round means, in µs.
    a: f64,
    b: f64,
    /// Each round's `a` over its `b`, sorted: drift the two rounds share cancels out.
    ratios: Vec<f64>,
}

impl Paired {
    /// The per-round ratio at `share` of the way up (0.5: the median).
    fn ratio(&self, share: f64) -> f64 {
        let at = ((self.ratios.len() - 1) as f64 * share).round() as usize;
        self.ratios[at]
    }
}

/// Runs `a` and `b` in alternating order for `rounds`, each `n` times a round.
fn paired(
    rounds: usize,
    n: usize,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> Paired {
    let mut means = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let side = |f: &mut dyn FnMut() -> Duration| {
            let total: Duration = (0..n).map(|_| f()).sum();
            total.as_secs_f64() * 1e6 / n as f64
        };
        if round % 2 == 0 {
            means.0.push(side(&mut a));
            means.1.push(side(&mut b));
        } else {
            means.1.push(side(&mut b));
            means.0.push(side(&mut a));
        }
    }
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let ratios = sorted(means.0.iter().zip(&means.1).map(|(a, b)| a / b).collect());
    let median = |v: Vec<f64>| sorted(v)[rounds / 2];
    Paired {
        a: median(means.0),
        b: median(means.1),
        ratios,
    }
}

/// The first two CPUs this process may run on (none where it has only one).
fn two_cpus() -> (Option<usize>, Option<usize>) {
    let Ok(allowed) = rustix::thread::sched_getaffinity(None) else {
        return (None, None);
    };
    let mut cpus = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| allowed.is_set(c));
    match (cpus.next(), cpus.next()) {
        (Some(a), Some(b)) => (Some(a), Some(b)),
        _ => (None, None),
    }
}

/// The calling thread kept to one CPU (threads and processes it starts inherit that),
/// until dropped; nothing where `cpu` is `None`.
struct Pinned(Option<rustix::thread::CpuSet>);

impl Pinned {
    fn to(cpu: Option<usize>) -> Pinned {
        let Some(cpu) = cpu else {
            return Pinned(None);
        };
        let before = rustix::thread::sched_getaffinity(None).expect("this thread's CPUs");
        let mut one = rustix::thread::CpuSet::new();
        one.set(cpu);
        rustix::thread::sched_setaffinity(None, &one).expect("a CPU of this process's");
        Pinned(Some(before))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = rustix::thread::sched_setaffinity(None, before);
        }
    }
}

fn worker() -> WorkerSettings {
    WorkerSettings::new(env!("CARGO_BIN_EXE_plugin-worker"), Vec::<String>::new())
}

/// A plugin host over `plugins`, isolated, its worker unconfined or not.
fn host(plugins: &std::path::Path, cache: &std::path::Path, unconfined: bool) -> PluginHost {
    PluginHost::new([plugins])
        .isolation(Isolation::Process)
        .worker(worker())
        .cache_dir(cache)
        .sandbox(
            "bench-noop",
            PluginSandbox {
                unconfined,
                ..PluginSandbox::default()
            },
        )
}

fn allow_all() -> ConfirmationPolicy {
    toml::from_str(r#"default = { write = "auto", execute = "auto", network = "auto" }"#).unwrap()
}

fn main() {
    let plan = if std::env::args().any(|a| a == "--bench") {
        BENCH
    } else {
        SMOKE
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    package_library(&bench_library("bench-noop"), plugins.path(), "bench-noop");
    let workspace = tempfile::tempdir().unwrap();

    // The isolated no-op, sandboxed and not. Both workers (and the host's threads that read
    // them) run on one CPU and the caller on another, on both sides: left to the
    // scheduler, a worker that shared its caller's CPU answered in a fraction of the time
    // of one that did not, and that alone moved this pairing by 14% between two runs.
    let (worker_cpu, caller_cpu) = two_cpus();
    let sides: Vec<(Dispatcher, dispatcher_core::Session)> = [false, true]
        .into_iter()
        .map(|unconfined| {
            let _on = Pinned::to(worker_cpu);
            let d = Dispatcher::new();
            let report = host(plugins.path(), cache.path(), unconfined).load_into(&d);
            assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
            let confined = report.workers[0].status().sandbox.is_some();
            assert_eq!(confined, !unconfined, "{:?}", report.worker_lines());
            let session = d
                .open_session(SessionSpec::new("bench", workspace.path()))
                .unwrap();
            (d, session)
        })
        .collect();
    // One call on one side, timed; it must succeed.
    let timed = |(d, session): &(Dispatcher, dispatcher_core::Session), tool: &str, input| {
        let tu = ToolUse::new("toolu_bench", tool, input);
        let start = Instant::now();
        let result = rt.block_on(d.dispatch(tu, session));
        let spent = start.elapsed();
        assert!(!result.is_error(), "{}", result.text());
        spent
    };
    let noop = |side| {
        timed(
            side,
            "bench_noop_suffix_000",
            json!({"a": "x", "b": 1, "c": true}),
        )
    };
    let isolated = {
        let _on = Pinned::to(caller_cpu);
        paired(
            plan.rounds,
            plan.calls,
            || noop(&sides[0]),
            || noop(&sides[1]),
        )
    };
    drop(sides);

    // A worker's start, sandboxed and not: spawn, confine, open the library, report.
    let start = |unconfined: bool| {
        let d = Dispatcher::new();
        let host = host(plugins.path(), cache.path(), unconfined);
        let begin = Instant::now();
        let report = host.load_into(&d);
        let spent = begin.elapsed();
        assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
        spent
    };
    let Paired {
        a: start_sandboxed,
        b: start_unconfined,
        ..
    } = paired(
        plan.rounds.min(15),
        plan.starts,
        || start(false),
        || start(true),
    );

    // `shell` running `true` under the default (workspace-write, no network), under host,
    // and under workspace-write with a network granted through the egress proxy to a
    // loopback download server (the download rows use that one).
    let port = download_server(plan.download_bytes);
    let shells: Vec<(Dispatcher, dispatcher_core::Session)> = [
        (sandbox::Mode::WorkspaceWrite, false),
        (sandbox::Mode::Host, false),
        (sandbox::Mode::WorkspaceWrite, true),
    ]
    .into_iter()
    .map(|(mode, network)| {
        let mut config = DispatcherConfig::default();
        config.sandbox.mode = mode;
        config.sandbox.network = sandbox::NetworkSettings {
            enabled: network,
            allow: sandbox::HostList::new([format!("127.0.0.1:{port}")]).unwrap(),
            deny: sandbox::HostList::none(),
        };
        let d = Dispatcher::builder()
            .config(config)
            .policy(allow_all())
            .build();
        for f in builtin_tools::factories() {
            d.register(f).unwrap();
        }
        let session = d
            .open_session(SessionSpec::new("bench", workspace.path()))
            .unwrap();
        (d, session)
    })
    .collect();
    let shell = |side, command: &str| timed(side, "shell", json!({ "command": command }));
    let Paired {
        a: shell_sandboxed,
        b: shell_host,
        ..
    } = paired(
        plan.rounds.min(15),
        plan.commands,
        || shell(&shells[0], "true"),
        || shell(&shells[1], "true"),
    );
    let Paired {
        a: shell_networked,
        b: shell_host_again,
        ..
    } = paired(
        plan.rounds.min(15),
        plan.commands,
        || shell(&shells[2], "true"),
        || shell(&shells[1], "true"),
    );
    // The proxied side goes through the proxy (HTTP_PROXY is set for it); the host side has
    // no proxy and connects straight.
    let download = format!("curl -fsS --max-time 60 -o /dev/null http://127.0.0.1:{port}/data");
    let Paired {
        a: download_proxied,
        b: download_direct,
        ..
    } = paired(
        plan.rounds.min(9),
        plan.downloads,
        || shell(&shells[2], &download),
        || shell(&shells[1], &download),
    );
    let relay = bare_relay(port);
    let through_relay =
        format!("curl -fsS --max-time 60 -o /dev/null http://127.0.0.1:{relay}/data");
    let Paired {
        a: download_relay,
        b: download_direct_again,
        ..
    } = paired(
        plan.rounds.min(9),
        plan.downloads,
        || shell(&shells[1], &through_relay),
        || shell(&shells[1], &download),
    );
    // The proxy against its floor in the same rounds: each round's ratio, so drift between
    // rounds (the download's speed moved 20% between runs here) cancels out.
    let against_relay = paired(
        plan.rounds.min(15),
        plan.downloads * 3,
        || shell(&shells[2], &download),
        || shell(&shells[1], &through_relay),
    );
    // deny_read's pattern searched for in a large workspace, against a plain walk of it.
    let large = large_workspace(plan.workspace_files);
    let denying = sandbox::Settings {
        deny_read: vec!["**/.env".into()],
        ..sandbox::Settings::default()
    };
    let grant = sandbox::CommandGrant {
        mode: sandbox::CommandMode::WorkspaceWrite,
        network: false,
    };
    let entries = plain_walk(large.path());
    let Paired {
        a: deny_read_search,
        b: deny_read_floor,
        ..
    } = paired(
        plan.rounds.min(15),
        3,
        || {
            let begin = Instant::now();
            let c = denying
                .confinement(grant, large.path(), workspace.path())
                .unwrap();
            let spent = begin.elapsed();
            assert!(c.hide.contains(&large.path().join(".env")), "{:?}", c.hide);
            spent
        },
        || {
            let begin = Instant::now();
            assert_eq!(plain_walk(large.path()), entries);
            begin.elapsed()
        },
    );
    drop(large);

    let mb = plan.download_bytes as f64 / (1 << 20) as f64;
    let rate = |us: f64| mb / (us / 1e6);

    println!(
        "sandbox/isolated_noop: {:.2} µs sandboxed vs {:.2} µs unconfined; per round {:+.1}% (10th to 90th percentile: {:+.1}% to {:+.1}%)",
        isolated.a,
        isolated.b,
        (isolated.ratio(0.5) - 1.0) * 100.0,
        (isolated.ratio(0.1) - 1.0) * 100.0,
        (isolated.ratio(0.9) - 1.0) * 100.0
    );
    println!(
        "sandbox/worker_start: {:.2} ms sandboxed vs {:.2} ms unconfined",
        start_sandboxed / 1000.0,
        start_unconfined / 1000.0
    );
    println!(
        "sandbox/shell_true: {:.2} ms under workspace-write vs {:.2} ms under host",
        shell_sandboxed / 1000.0,
        shell_host / 1000.0
    );
    println!(
        "sandbox/shell_true_networked: {:.2} ms under workspace-write with the egress proxy vs {:.2} ms under host",
        shell_networked / 1000.0,
        shell_host_again / 1000.0
    );
    println!(
        "sandbox/download: {mb:.0} MB through the egress proxy {:.0} MB/s vs direct {:.0} MB/s ({:.0}%)",
        rate(download_proxied),
        rate(download_direct),
        download_direct / download_proxied * 100.0
    );
    println!(
        "sandbox/download_floor: through a bare byte relay {:.0} MB/s vs direct {:.0} MB/s ({:.0}%)",
        rate(download_relay),
        rate(download_direct_again),
        download_direct_again / download_relay * 100.0
    );
    println!(
        "sandbox/download_vs_relay: through the egress proxy {:.0} MB/s vs through a bare byte relay {:.0} MB/s, per round {:.0}% (10th to 90th percentile: {:.0}% to {:.0}%)",
        rate(against_relay.a),
        rate(against_relay.b),
        100.0 / against_relay.ratio(0.5),
        100.0 / against_relay.ratio(0.9),
        100.0 / against_relay.ratio(0.1)
    );
    println!(
        "sandbox/deny_read_search: {:.2} ms confining a command in a workspace of {entries} entries under deny_read = [\"**/.env\"] vs {:.2} ms walking it on one thread",
        deny_read_search / 1000.0,
        deny_read_floor / 1000.0
    );
    if plan.rounds == BENCH.rounds {
        // target/release/deps/sandbox-… -> target/criterion/sandbox
        let exe = std::env::current_exe().unwrap();
        let dir = exe.ancestors().nth(3).unwrap().join("criterion/sandbox");
        std::fs::create_dir_all(&dir).unwrap();
        let figures = json!({
            "isolated_noop_us": {
                "sandboxed": isolated.a,
                "unconfined": isolated.b,
                "ratio": {"p10": isolated.ratio(0.1), "p50": isolated.ratio(0.5), "p90": isolated.ratio(0.9)},
                "rounds": plan.rounds,
                "calls": plan.calls,
            },
            "worker_start_us": {"sandboxed": start_sandboxed, "unconfined": start_unconfined},
            "shell_true_us": {"sandboxed": shell_sandboxed, "host": shell_host},
            "shell_true_networked_us": {"sandboxed": shell_networked, "host": shell_host_again},
            "download_us": {"proxied": download_proxied, "direct": download_direct, "megabytes": mb},
            "download_floor_us": {"relay": download_relay, "direct": download_direct_again, "megabytes": mb},
            "download_vs_relay_us": {
                "proxied": against_relay.a,
                "relay": against_relay.b,
                "speed_ratio": {"p10": 1.0 / against_relay.ratio(0.9), "p50": 1.0 / against_relay.ratio(0.5), "p90": 1.0 / against_relay.ratio(0.1)},
                "megabytes": mb,
            },
            "deny_read_search_us": {"search": deny_read_search, "plain_walk": deny_read_floor, "entries": entries},
        });
        std::fs::write(
            dir.join("paired.json"),
            serde_json::to_vec_pretty(&figures).unwrap(),
        )
        .unwrap();
    }
}
