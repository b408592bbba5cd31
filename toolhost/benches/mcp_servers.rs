//! MCP servers side by side over stdio and streamable HTTP, driven by one client written
//! for this bench.
//!
//! Each server in the plan is started, initialized (2025-11-25), asked for its tools, then
//! sent `calls` × `tools/call` with `inflight` requests outstanding, in interleaved rounds.
//! Per round and server it prints calls/s, the server's CPU per call (user + system of its
//! process tree, from `/proc`) and its resident memory when idle after `tools/list`; then
//! `best NAME: C calls/s, U us CPU/call, idle R MiB` for each server's best round.
//!
//! The client is one thread with blocking pipes: it writes every free slot's request in one
//! flush, then reads answers, and matches them by id without building a JSON tree for the
//! result. Its own limit is shown by a server that does nothing but answer: the echo server
//! this binary becomes when started with `--echo-server`, added to every plan as `echo`.
//! Beside a plan's first stdio `read_file` server it adds a bare rmcp server with the same
//! tool (`--rmcp-server WORKSPACE`, [`rmcp_peer`]: what a Rust user would write instead) as
//! `rmcp-read-file`.
//!
//! With `"count": n` in the plan, each stdio server's instructions per call are then counted
//! with callgrind over `n` and `2n` calls (`instructions NAME: N per call`; see `count`):
//! a figure that repeats exactly for the same binary, where the time moves with the evening.
//! So is each stateless server over HTTP that the bench starts, one call at a time on one
//! connection, with the server it mounts (`upstream`) counted beside it
//! (`instructions NAME+mounted`; see [`http::per_call_counted`]): near exactly (two runs
//! of 500 calls moved by 0.3%).
//!
//! A server with `"http": {"stateless": true|false}` in the plan is driven over HTTP
//! instead ([`http`]): its command and `env` get a free port for `{port}`; the HTTP echo
//! server (`echo-http`) shows that client's limit.
//!
//! `cargo xtask bench` runs it with a plan in the environment:
//! `TOOLHOST_BENCH_MCP_SERVERS='{"calls":10000,"inflight":16,"rounds":5,"servers":[{"name":
//! "toolhost","tool":"read_file","arguments":{"path":"a.txt"},"command":["toolhost","serve",
//! "--mcp"]}]}' cargo bench -p toolhost --bench mcp_servers`. Under `cargo test` (no
//! `--bench`) it drives both echo servers for a few hundred calls and checks every answer.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

#[path = "mcp_servers/count.rs"]
mod count;
#[path = "mcp_servers/fan_out.rs"]
mod fan_out;
#[path = "mcp_servers/floor.rs"]
mod floor;
#[path = "mcp_servers/http.rs"]
mod http;
#[path = "mcp_servers/relay.rs"]
mod relay;
#[path = "mcp_servers/rmcp_peer.rs"]
mod rmcp_peer;
#[path = "mcp_servers/rmcp_proxy.rs"]
mod rmcp_proxy;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

/// The bench's OAuth issuer, started at its first use: `{issuer}` in a server's `files` is
/// its URL, `{token}` as a server's bearer a token it signed.
fn issuer() -> &'static toolhost_tests::issuer::Issuer {
    static ISSUER: std::sync::OnceLock<toolhost_tests::issuer::Issuer> = std::sync::OnceLock::new();
    ISSUER.get_or_init(|| toolhost_tests::issuer::Issuer::start().expect("the bench's issuer"))
}

/// What to measure: from `TOOLHOST_BENCH_MCP_SERVERS` (JSON).
#[derive(Deserialize)]
struct Plan {
    #[serde(default = "default_calls")]
    calls: u64,
    #[serde(default = "default_inflight")]
    inflight: u64,
    #[serde(default = "default_rounds")]
    rounds: u32,
    /// With `n` > 0: each stdio server's instructions per call, counted with callgrind
    /// over `n` and `2n` calls ([`count`]).
    #[serde(default)]
    count: u64,
    servers: Vec<Server>,
    /// Many calls in flight at once to a tool that takes its time ([`fan_out`]).
    #[serde(default)]
    fan_out: Vec<fan_out::FanOut>,
}

fn default_calls() -> u64 {
    10_000
}
fn default_inflight() -> u64 {
    16
}
fn default_rounds() -> u32 {
    3
}

#[derive(Deserialize, Clone)]
struct Server {
    name: String,
    tool: String,
    arguments: Value,
    command: Vec<String>,
    /// Environment for the command (`{port}` filled in over HTTP).
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Over streamable HTTP instead of stdio.
    #[serde(default)]
    http: Option<http::Http>,
    /// `false` for a server not worth counting under callgrind (a JIT or an interpreter,
    /// dozens of times slower there, set against no floor).
    #[serde(default = "counted")]
    count: bool,
    /// A gateway: beside it, the bench's bare rmcp proxy in front of the same upstream
    /// ([`rmcp_proxy`]), as `NAME-rmcp-proxy` (unless the proxy's `rmcp` is `false`), and
    /// the bench's byte relay ([`relay`]), as `NAME-relay`.
    #[serde(default)]
    proxy: Option<ProxyOf>,
    /// A gateway in front of a server over HTTP: that server, started before each round
    /// on a free port that `{upstream_port}` names in the gateway's command, env and
    /// `files`; its CPU counts with the gateway's.
    #[serde(default)]
    upstream: Option<Vec<String>>,
    /// Files written before the server starts (path: text, `{upstream_port}` filled in, and
    /// `{issuer}`: the bench's OAuth issuer's URL).
    #[serde(default)]
    files: BTreeMap<String, String>,
    /// Processes whose CPU counts with the server's (its upstream, started by the bench).
    #[serde(skip)]
    beside: Vec<u32>,
    /// A server over HTTP that runs already (started and set up by whoever wrote the plan):
    /// it is reached on its port, and measured by its processes, instead of started.
    #[serde(default)]
    attached: Option<Attached>,
    /// The command counted under callgrind instead of `command`, where the two differ (a
    /// gateway's mounted server runs unconfined under valgrind, which has no Landlock).
    #[serde(default)]
    counted_as: Option<Vec<String>>,
    /// A gateway counted once more, with the server it mounts: this command runs it with
    /// that server mounted under callgrind, writing its report into `logs`
    /// (`instructions NAME+mounted: N per call`, both processes).
    #[serde(default)]
    counted_with_mounted: Option<CountedWith>,
    /// Where the mounted server's report is read from, while counted so ([`count`]).
    #[serde(skip)]
    mounted_logs: Option<std::path::PathBuf>,
    /// Calls per round for this server, where the plan's would take too long (a peer a
    /// hundred times slower).
    #[serde(default)]
    calls: Option<u64>,
    /// Requests kept outstanding for this server, where not the plan's `inflight`: a
    /// server alone with as many calls in flight as a gateway in front of it sends under
    /// its default session cap.
    #[serde(default)]
    inflight: Option<u64>,
}

/// A server of the plan that runs already: its port, and its processes (the first is the
/// server's; the CPU of the others' trees counts with it). Stopped but in its own rounds.
#[derive(Deserialize, Clone)]
struct Attached {
    port: u16,
    pids: Vec<u32>,
}

impl Attached {
    /// Sends `signal` to every process of its trees.
    fn signal(&self, signal: rustix::process::Signal) {
        for pid in self.pids.iter().flat_map(|&p| tree(p)) {
            if let Some(pid) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }

    /// Stopped (SIGSTOP) until its own round: a peer that idles at a third of a core (a
    /// Python gateway's timers and health checks) would take that CPU from every other
    /// server's timed round on two cores.
    fn pause(&self) {
        self.signal(rustix::process::Signal::STOP);
    }

    /// Running for its own round, stopped again when the value is dropped.
    fn awake(&self) -> Awake<'_> {
        self.signal(rustix::process::Signal::CONT);
        Awake(self)
    }
}

/// An attached server running for its round ([`Attached::awake`]).
struct Awake<'a>(&'a Attached);

impl Drop for Awake<'_> {
    fn drop(&mut self) {
        self.0.pause();
    }
}

/// How a gateway is counted with the server it mounts: its command, and the directory
/// that server's callgrind report is written into (`--log-file=DIR/%p.log`).
#[derive(Deserialize, Clone)]
struct CountedWith {
    command: Vec<String>,
    logs: std::path::PathBuf,
}

/// What a gateway in the plan forwards: the upstream's command and its tool's own name.
#[derive(Deserialize, Clone)]
struct ProxyOf {
    upstream_tool: String,
    command: Vec<String>,
    /// `false`: the byte relay alone beside the gateway, without the bare rmcp proxy (a
    /// floor of the hop, where the proxy's count would be set against no row).
    #[serde(default = "counted")]
    rmcp: bool,
}

fn counted() -> bool {
    true
}

/// One round's figures for one server.
#[derive(Clone, Copy)]
struct Figures {
    calls_per_s: f64,
    cpu_us_per_call: f64,
    /// The server's own process alone (a gateway without the server it mounts).
    own_cpu_us_per_call: f64,
    idle_mib: f64,
    after_mib: f64,
    /// Calls that failed: none, but at a peer the bench did not start ([`Attached`]),
    /// whose failures are reported and its round left out rather than stop the bench.
    failed: u64,
}

/// An answer, read only as far as the bench needs: its id and whether it failed.
#[derive(Deserialize)]
struct Answer {
    id: Option<Value>,
    error: Option<serde::de::IgnoredAny>,
    result: Option<AnswerResult>,
}

#[derive(Deserialize)]
struct AnswerResult {
    #[serde(rename = "isError")]
    is_error: Option<bool>,
}

/// The processes of a tree: `pid` and its descendants (as `/proc` lists them now).
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let children = toolhost_tests::children_of(all[i]);
        all.extend(children.into_iter().filter_map(|c| u32::try_from(c).ok()));
        i += 1;
    }
    all
}

/// User + system CPU seconds of a process tree.
fn cpu_seconds(pid: u32) -> f64 {
    cpu_seconds_of(tree(pid))
}

/// User + system CPU seconds of `processes`, each from its process CPU clock (nanoseconds;
/// `/proc/PID/stat` counts in clock ticks of 10 ms, where a fast server's round of 20,000
/// calls spends about 140 ms).
fn cpu_seconds_of(processes: Vec<u32>) -> f64 {
    processes
        .into_iter()
        .filter_map(toolhost_tests::cpu_time)
        .map(|t| t.as_secs_f64())
        .sum()
}

/// Resident memory of a process tree, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let kib: u64 = tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .sum();
    kib as f64 / 1024.0
}

/// A started server: its pipes, and a watchdog that kills it when no answer has come for
/// 30 s (so a server that hangs fails the bench instead of holding it forever).
struct Running {
    child: Arc<Mutex<Child>>,
    pid: u32,
    to: BufWriter<std::process::ChildStdin>,
    from: BufReader<std::process::ChildStdout>,
    line: String,
    progress: Arc<AtomicU64>,
    /// Dropped when the server stops: its watchdog ends then, not at its next check.
    stopped: std::sync::mpsc::Sender<()>,
}

/// `XDG_STATE_HOME` of every server the bench starts (the plan's `env` may set another):
/// the definitions a gateway pins (one entry per round, keyed by its upstream's port) stay
/// in the bench's scratch directory, emptied when the bench starts, not in the user's
/// `~/.local/state`.
fn state_home() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp_servers-state");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
        dir
    })
}

impl Running {
    fn start(server: &Server) -> Running {
        let (program, args) = server
            .command
            .split_first()
            .unwrap_or_else(|| panic!("{}: no command", server.name));
        let mut child = Command::new(program)
            .args(args)
            .env("XDG_STATE_HOME", state_home())
            .envs(&server.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: cannot start {program}: {e}", server.name));
        let to = BufWriter::new(child.stdin.take().unwrap());
        let from = BufReader::with_capacity(1 << 16, child.stdout.take().unwrap());
        let pid = child.id();
        let child = Arc::new(Mutex::new(child));
        let progress = Arc::new(AtomicU64::new(0));
        let (stopped, stopping) = std::sync::mpsc::channel::<()>();
        {
            let (child, progress) = (child.clone(), progress.clone());
            let name = server.name.clone();
            std::thread::spawn(move || {
                let mut seen = u64::MAX;
                // Every 30 s until the server stops (its sender dropped).
                while let Err(RecvTimeoutError::Timeout) =
                    stopping.recv_timeout(Duration::from_secs(30))
                {
                    let now = progress.load(Ordering::Relaxed);
                    if now == seen {
                        eprintln!("{name}: no answer for 30 s; killing it");
                        let _ = child.lock().unwrap().kill();
                        return;
                    }
                    seen = now;
                }
            });
        }
        Running {
            child,
            pid,
            to,
            from,
            line: String::new(),
            progress,
            stopped,
        }
    }

    fn send(&mut self, message: &str) {
        self.to.write_all(message.as_bytes()).unwrap();
        self.to.write_all(b"\n").unwrap();
    }

    fn flush(&mut self) {
        self.to.flush().expect("the server closed its input");
    }

    /// The next message from the server (requests and notifications included).
    fn next(&mut self) -> &str {
        self.line.clear();
        let n = self.from.read_line(&mut self.line).unwrap();
        assert!(n > 0, "the server closed its output");
        self.progress.fetch_add(1, Ordering::Relaxed);
        &self.line
    }

    /// Sends a request and returns its answer's result (skipping anything else).
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&request.to_string());
        self.flush();
        loop {
            let message: Value = serde_json::from_str(self.next()).unwrap();
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    panic!("{method} failed: {error}");
                }
                return message["result"].clone();
            }
        }
    }

    fn stop(self) {
        drop(self.stopped);
        drop(self.to);
        let mut child = self.child.lock().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A 2025-11-25 client's `initialize`.
fn initialize_params() -> Value {
    serde_json::json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "toolhost-bench", "version": "1"}
    })
}

/// A server's file as written: `{issuer}` filled in with the bench's issuer's URL.
fn with_issuer(text: &str) -> String {
    if text.contains("{issuer}") {
        text.replace("{issuer}", &issuer().url)
    } else {
        text.to_string()
    }
}

/// One round against one server.
fn round(server: &Server, calls: u64, inflight: u64) -> Figures {
    if let Some(upstream) = &server.upstream {
        let (mut child, port) = http::start(
            &format!("{}'s upstream", server.name),
            upstream,
            &BTreeMap::new(),
        );
        let fill = |s: &String| s.replace("{upstream_port}", &port.to_string());
        for (path, text) in &server.files {
            std::fs::write(path, with_issuer(&fill(text)))
                .unwrap_or_else(|e| panic!("{}: cannot write {path}: {e}", server.name));
        }
        let front = Server {
            command: server.command.iter().map(fill).collect(),
            env: server
                .env
                .iter()
                .map(|(k, v)| (k.clone(), fill(v)))
                .collect(),
            upstream: None,
            files: BTreeMap::new(),
            beside: vec![child.id()],
            ..server.clone()
        };
        let figures = round(&front, calls, inflight);
        let _ = child.kill();
        let _ = child.wait();
        return figures;
    }
    for (path, text) in &server.files {
        std::fs::write(path, with_issuer(text))
            .unwrap_or_else(|e| panic!("{}: cannot write {path}: {e}", server.name));
    }
    if let Some(over) = &server.http {
        return http::round(server, over, calls, inflight);
    }
    let mut s = Running::start(server);
    s.request(0, "initialize", initialize_params());
    s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert_lists_tool(server, &s.request(1, "tools/list", serde_json::json!({})));
    let params = serde_json::json!({"name": server.tool, "arguments": server.arguments});
    let first = s.request(2, "tools/call", params.clone());
    assert_ne!(
        first["isError"], true,
        "{}: the first call failed: {first}",
        server.name
    );
    let meter = Meter::start(s.pid, &server.beside, idle_mib(s.pid));
    // Ids from 1000 up; answers carry them back, so the outstanding count is all we keep.
    let call = |id: u64| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
    };
    let (mut sent, mut answered, mut failed) = (0u64, 0u64, 0u64);
    while answered < calls {
        if sent < calls && sent - answered < inflight {
            while sent < calls && sent - answered < inflight {
                s.send(&call(1000 + sent));
                sent += 1;
            }
            s.flush();
        }
        let answer: Answer = serde_json::from_str(s.next()).unwrap();
        let ours = answer
            .id
            .as_ref()
            .and_then(Value::as_u64)
            .is_some_and(|id| (1000..1000 + sent).contains(&id));
        if ours {
            answered += 1;
            let errored = answer.error.is_some()
                || answer
                    .result
                    .as_ref()
                    .is_none_or(|r| r.is_error == Some(true));
            failed += u64::from(errored);
        }
    }
    let figures = meter.read(calls);
    s.stop();
    all_answered(server, failed, calls, figures)
}

/// Checks that a `tools/list` result names the server's tool.
fn assert_lists_tool(server: &Server, listed: &Value) {
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&server.tool.as_str()),
        "{}: no tool {} (it has {names:?})",
        server.name,
        server.tool
    );
}

/// A server's resident memory once idle: a moment after its first answer.
fn idle_mib(pid: u32) -> f64 {
    std::thread::sleep(Duration::from_millis(300));
    rss_mib(pid)
}

/// A round's clock and the server's CPU, from just before its first timed call.
struct Meter {
    pid: u32,
    /// Processes whose CPU counts with the server's.
    beside: Vec<u32>,
    idle_mib: f64,
    cpu_before: f64,
    own_before: f64,
    started: Instant,
}

impl Meter {
    fn start(pid: u32, beside: &[u32], idle_mib: f64) -> Meter {
        Meter {
            pid,
            beside: beside.to_vec(),
            idle_mib,
            cpu_before: cpu_seconds(pid) + beside.iter().copied().map(cpu_seconds).sum::<f64>(),
            own_before: cpu_seconds_of(vec![pid]),
            started: Instant::now(),
        }
    }

    /// The round's figures after `calls` calls (read while the server still runs).
    fn read(&self, calls: u64) -> Figures {
        let wall = self.started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(self.pid) + self.beside.iter().copied().map(cpu_seconds).sum::<f64>()
            - self.cpu_before;
        let own = cpu_seconds_of(vec![self.pid]) - self.own_before;
        Figures {
            calls_per_s: calls as f64 / wall,
            cpu_us_per_call: cpu / calls as f64 * 1e6,
            own_cpu_us_per_call: own / calls as f64 * 1e6,
            idle_mib: self.idle_mib,
            after_mib: rss_mib(self.pid),
            failed: 0,
        }
    }
}

/// `figures`, when every call of the round succeeded (checked once the server stopped).
fn all_answered(server: &Server, failed: u64, calls: u64, figures: Figures) -> Figures {
    if server.attached.is_some() {
        return Figures { failed, ..figures };
    }
    assert_eq!(
        failed, 0,
        "{}: {failed} of {calls} calls failed",
        server.name
    );
    figures
}

/// The echo servers' answer to `message`: `initialize`, `tools/list` (one tool, `echo`),
/// and anything else as a `tools/call` whose text is the arguments.
fn echo_result(message: &Value) -> Value {
    match message["method"].as_str() {
        Some("initialize") => serde_json::json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo", "version": "1"}
        }),
        Some("tools/list") => serde_json::json!({"tools": [{
            "name": "echo",
            "inputSchema": {"type": "object"}
        }]}),
        _ => serde_json::json!({
            "content": [{"type": "text", "text": message["params"]["arguments"].to_string()}],
            "isError": false
        }),
    }
}

/// The trivial server: answers `initialize`, `tools/list` and `tools/call` (echoing the
/// arguments as text), ignores notifications, and writes whenever its input runs dry.
fn echo_server() {
    let stdin = std::io::stdin();
    let mut input = BufReader::with_capacity(1 << 16, stdin.lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = message.get("id") else {
            continue;
        };
        let answer =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "result": echo_result(&message)});
        serde_json::to_writer(&mut output, &answer).unwrap();
        output.write_all(b"\n").unwrap();
        if input.buffer().is_empty() && output.flush().is_err() {
            return;
        }
    }
}

/// The floor server of `read_file` over `workspace` ([`floor`]), as `read-file-floor`.
fn read_file_floor(workspace: &str, arguments: &Value) -> Server {
    bench_server(
        "read-file-floor",
        "--read-file-server",
        workspace,
        arguments,
    )
}

/// The bare rmcp server with the same `read_file` ([`rmcp_peer`]), as `rmcp-read-file`.
fn rmcp_read_file(workspace: &str, arguments: &Value) -> Server {
    bench_server("rmcp-read-file", "--rmcp-server", workspace, arguments)
}

/// This binary started with `flag WORKSPACE`, serving `read_file`.
fn bench_server(name: &str, flag: &str, workspace: &str, arguments: &Value) -> Server {
    Server {
        name: name.into(),
        tool: "read_file".into(),
        arguments: arguments.clone(),
        command: vec![
            std::env::current_exe().unwrap().display().to_string(),
            flag.into(),
            workspace.into(),
        ],
        env: BTreeMap::new(),
        http: None,
        count: true,
        proxy: None,
        upstream: None,
        files: BTreeMap::new(),
        beside: Vec::new(),
        counted_as: None,
        counted_with_mounted: None,
        mounted_logs: None,
        calls: None,
        attached: None,
        inflight: None,
    }
}

/// The bare rmcp proxy ([`rmcp_proxy`]) in front of `gateway`'s upstream, publishing the
/// same tool under the same name, as `NAME-rmcp-proxy`.
fn rmcp_proxy_of(gateway: &Server, of: &ProxyOf) -> Server {
    let mut command = vec![
        std::env::current_exe().unwrap().display().to_string(),
        "--rmcp-proxy".into(),
        gateway.tool.clone(),
        of.upstream_tool.clone(),
        "--".into(),
    ];
    command.extend(of.command.iter().cloned());
    Server {
        name: format!("{}-rmcp-proxy", gateway.name),
        tool: gateway.tool.clone(),
        arguments: gateway.arguments.clone(),
        command,
        env: BTreeMap::new(),
        http: None,
        count: gateway.count,
        proxy: None,
        upstream: None,
        files: BTreeMap::new(),
        beside: Vec::new(),
        counted_as: None,
        counted_with_mounted: None,
        mounted_logs: None,
        calls: None,
        attached: None,
        inflight: None,
    }
}

/// The bench's byte relay ([`relay`]) in front of `gateway`'s upstream, calling the
/// upstream's own tool (a relay renames nothing), as `NAME-relay`; timed, not counted.
/// In front of an HTTP server, the relay listens where the client connects and the bench
/// starts the server (`of.command`) beside it, as it starts a gateway's upstream.
fn relay_of(gateway: &Server, of: &ProxyOf) -> Server {
    let exe = std::env::current_exe().unwrap().display().to_string();
    let (command, upstream) = match gateway.http {
        Some(_) => (
            vec![
                exe,
                "--tcp-relay".into(),
                "{port}".into(),
                "{upstream_port}".into(),
            ],
            Some(of.command.clone()),
        ),
        None => {
            let mut command = vec![exe, "--relay".into(), "--".into()];
            command.extend(of.command.iter().cloned());
            (command, None)
        }
    };
    Server {
        name: format!("{}-relay", gateway.name),
        tool: of.upstream_tool.clone(),
        command,
        upstream,
        files: BTreeMap::new(),
        count: false,
        proxy: None,
        counted_as: None,
        counted_with_mounted: None,
        ..gateway.clone()
    }
}

/// The workspace and arguments of the plan's first stdio server calling `read_file`: the
/// read_file floor and the bare rmcp peer serve the same file.
fn read_file_plan(servers: &[Server]) -> Option<(String, Value)> {
    servers
        .iter()
        .filter(|s| s.http.is_none() && s.tool == "read_file")
        .find_map(|s| {
            let at = s.command.iter().position(|a| a == "--workspace")?;
            Some((s.command.get(at + 1)?.clone(), s.arguments.clone()))
        })
}

fn echo(extra: &str) -> Server {
    Server {
        name: "echo".into(),
        tool: "echo".into(),
        arguments: serde_json::json!({"message": extra}),
        command: vec![
            std::env::current_exe().unwrap().display().to_string(),
            "--echo-server".into(),
        ],
        env: BTreeMap::new(),
        http: None,
        count: true,
        proxy: None,
        upstream: None,
        files: BTreeMap::new(),
        beside: Vec::new(),
        counted_as: None,
        counted_with_mounted: None,
        mounted_logs: None,
        calls: None,
        attached: None,
        inflight: None,
    }
}

/// The argument after `flag`, if `flag` is given.
fn value_of<'a>(args: &'a [String], flag: &str) -> Option<&'a String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // First: the proxy's upstream command (after `--`) may hold another mode's flag (the
    // bench itself as the read_file floor server).
    if args.get(1).is_some_and(|a| a == "--rmcp-proxy") {
        // --rmcp-proxy PUBLISHED UPSTREAM_TOOL -- COMMAND...
        let upstream = args.iter().position(|a| a == "--").map(|i| &args[i + 1..]);
        match (args.get(2), args.get(3), upstream) {
            (Some(published), Some(tool), Some(command)) => {
                rmcp_proxy::rmcp_proxy(published, tool, command)
            }
            _ => panic!("--rmcp-proxy PUBLISHED UPSTREAM_TOOL -- COMMAND..."),
        }
        return;
    }
    if args.get(1).is_some_and(|a| a == "--relay") {
        // --relay -- COMMAND...
        match args.iter().position(|a| a == "--") {
            Some(i) => relay::relay(&args[i + 1..]),
            None => panic!("--relay -- COMMAND..."),
        }
        return;
    }
    if args.get(1).is_some_and(|a| a == "--tcp-relay") {
        // --tcp-relay PORT UPSTREAM_PORT
        match (args.get(2), args.get(3)) {
            (Some(port), Some(upstream)) => relay::tcp_relay(
                port.parse()
                    .expect("--tcp-relay PORT UPSTREAM_PORT: a port"),
                upstream
                    .parse()
                    .expect("--tcp-relay PORT UPSTREAM_PORT: a port"),
            ),
            _ => panic!("--tcp-relay PORT UPSTREAM_PORT"),
        }
        return;
    }
    if args.iter().any(|a| a == "--echo-server") {
        echo_server();
        return;
    }
    if let Some(workspace) = value_of(&args, "--read-file-server") {
        floor::read_file_server(workspace);
        return;
    }
    if let Some(workspace) = value_of(&args, "--rmcp-server") {
        rmcp_peer::rmcp_server(workspace);
        return;
    }
    if let Some(port) = value_of(&args, "--echo-http-server") {
        http::echo_http_server(port.parse().expect("a port"));
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        // Under `cargo test`: the client against its echo servers, and through the byte
        // relay over HTTP to the HTTP one, every answer checked.
        let echo_http = http::echo("hi");
        let echo_relayed = relay_of(
            &echo_http,
            &ProxyOf {
                upstream_tool: "echo".into(),
                command: echo_http.command.clone(),
                rmcp: false,
            },
        );
        for server in [echo("hi"), echo_http, echo_relayed] {
            let figures = round(&server, 300, 16);
            assert!(figures.calls_per_s > 0.0);
            println!(
                "mcp_servers (test mode): 300 calls to {}, {:.0} calls/s",
                server.name, figures.calls_per_s
            );
        }
        // The read_file floor and the bare rmcp peer answer what a file holds, and refuse
        // a path out.
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), "abc").unwrap();
        let workspace = ws.path().to_str().unwrap();
        let arguments = serde_json::json!({"path": "a.txt"});
        // The bare proxy in front of the floor server forwards its one tool, under the
        // name a gateway would publish, and the answers as they come.
        let floor = read_file_floor(workspace, &arguments);
        let forwarded = ProxyOf {
            upstream_tool: "read_file".into(),
            command: floor.command.clone(),
            rmcp: true,
        };
        let gateway = Server {
            name: "gateway".into(),
            tool: "up__read_file".into(),
            ..floor.clone()
        };
        for server in [
            read_file_floor(workspace, &arguments),
            rmcp_read_file(workspace, &arguments),
            rmcp_proxy_of(&gateway, &forwarded),
            relay_of(&gateway, &forwarded),
        ] {
            assert!(round(&server, 300, 16).calls_per_s > 0.0, "{}", server.name);
            let mut s = Running::start(&server);
            s.request(0, "initialize", initialize_params());
            s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
            let read = s.request(
                1,
                "tools/call",
                serde_json::json!({"name": server.tool, "arguments": arguments}),
            );
            assert_eq!(read["content"][0]["text"], "abc", "{}: {read}", server.name);
            let refused = s.request(
                2,
                "tools/call",
                serde_json::json!({"name": server.tool, "arguments": {"path": "../a.txt"}}),
            );
            assert_eq!(refused["isError"], true, "{}: {refused}", server.name);
            s.stop();
        }
        // All calls at once: every one answered, the server's threads counted.
        let all_at_once = fan_out::FanOut {
            name: "echo".into(),
            tool: "echo".into(),
            arguments: serde_json::json!({"message": "hi"}),
            command: echo("hi").command,
            calls: 500,
        };
        let (took, most, before) = fan_out::run(&all_at_once);
        assert!(
            took > 0.0 && most >= before && before >= 1,
            "{took} {most} {before}"
        );
        if count::available() {
            let (per_call, _) = count::per_call(&echo("hi"), 50).unwrap();
            // Reading, parsing and answering one line takes thousands of instructions.
            assert!(per_call > 1000.0, "{per_call}");
            println!(
                "mcp_servers (test mode): the echo server, {per_call:.0} instructions per call"
            );
        } else {
            println!(
                "mcp_servers (test mode): instructions not counted: valgrind is not installed"
            );
        }
        return;
    }
    let plan: Plan = match std::env::var("TOOLHOST_BENCH_MCP_SERVERS") {
        Ok(text) => serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("TOOLHOST_BENCH_MCP_SERVERS is not a plan: {e}")),
        Err(_) => Plan {
            calls: default_calls(),
            inflight: default_inflight(),
            rounds: default_rounds(),
            count: 0,
            servers: Vec::new(),
            fan_out: Vec::new(),
        },
    };
    let mut servers = plan.servers.clone();
    let proxies: Vec<Server> = servers
        .iter()
        .filter_map(|s| {
            let of = s.proxy.as_ref()?;
            Some(
                of.rmcp
                    .then(|| rmcp_proxy_of(s, of))
                    .into_iter()
                    .chain([relay_of(s, of)]),
            )
        })
        .flatten()
        .collect();
    servers.extend(proxies);
    let read_file = read_file_plan(&servers);
    if let Some((workspace, arguments)) = &read_file {
        servers.push(rmcp_read_file(workspace, arguments));
        // Timed in the rounds too: the most calls/s a server that reads the file reaches
        // under this client (counted below, with the floors, not twice).
        servers.push(Server {
            count: false,
            ..read_file_floor(workspace, arguments)
        });
    }
    servers.push(echo("hi"));
    if servers.iter().any(|s| s.http.is_some()) {
        servers.push(http::echo("hi"));
    }
    let mut best: Vec<Option<Figures>> = vec![None; servers.len()];
    // A server the bench did not start runs only in its own rounds.
    for attached in servers.iter().filter_map(|s| s.attached.as_ref()) {
        attached.pause();
    }
    for r in 0..plan.rounds {
        for (i, server) in servers.iter().enumerate() {
            let calls = server.calls.unwrap_or(plan.calls);
            let f = round(server, calls, server.inflight.unwrap_or(plan.inflight));
            if f.failed > 0 {
                println!(
                    "failed {}: {} of {calls} calls failed in round {r}",
                    server.name, f.failed
                );
                continue;
            }
            println!(
                "round {r} {}: {:.0} calls/s, server CPU {:.1} us/call ({:.1} its own process), idle RSS {:.1} MiB, after {} calls {:.1} MiB",
                server.name,
                f.calls_per_s,
                f.cpu_us_per_call,
                f.own_cpu_us_per_call,
                f.idle_mib,
                calls,
                f.after_mib
            );
            if best[i].is_none_or(|b| f.calls_per_s > b.calls_per_s) {
                best[i] = Some(f);
            }
        }
    }
    for (server, f) in servers.iter().zip(best) {
        if let Some(f) = f {
            println!(
                "best {}: {:.0} calls/s, {:.2} us CPU/call, idle {:.1} MiB, own {:.2} us CPU/call",
                server.name, f.calls_per_s, f.cpu_us_per_call, f.idle_mib, f.own_cpu_us_per_call
            );
        }
    }
    for fan_out in &plan.fan_out {
        let (took, most, before) = fan_out::run(fan_out);
        println!(
            "fan-out {}: {} calls in {took:.2} s, at most {most} threads ({before} before)",
            fan_out.name, fan_out.calls
        );
    }
    if plan.count == 0 {
        return;
    }
    if !count::available() {
        println!("instructions: not counted: valgrind is not installed (apt-get install valgrind)");
        return;
    }
    // Beside a server that calls read_file: the least a server doing that could spend.
    let floors: Vec<Server> = read_file
        .iter()
        .map(|(workspace, arguments)| read_file_floor(workspace, arguments))
        .collect();
    // Over HTTP: the servers the bench starts, stateless, with the one each mounts.
    let over_http = servers
        .iter()
        .filter(|s| s.count && s.attached.is_none())
        .filter_map(|s| Some((s, s.http.as_ref().filter(|h| h.stateless)?)));
    for (server, over) in over_http {
        match http::per_call_counted(server, over, plan.count) {
            Ok((own, None)) => println!("instructions {}: {own:.0} per call", server.name),
            Ok((own, Some(mounted))) => {
                println!("instructions {}: {own:.0} per call", server.name);
                println!(
                    "instructions {}+mounted: {:.0} per call ({own:.0} the gateway's, {mounted:.0} the mounted server's)",
                    server.name,
                    own + mounted
                );
            }
            Err(e) => println!("instructions {}: not counted: {e}", server.name),
        }
    }
    let stdio = servers.iter().filter(|s| s.http.is_none() && s.count);
    for server in stdio.chain(&floors) {
        let counted = Server {
            command: server
                .counted_as
                .clone()
                .unwrap_or_else(|| server.command.clone()),
            ..server.clone()
        };
        match count::per_call(&counted, plan.count) {
            Ok((n, _)) => println!("instructions {}: {n:.0} per call", server.name),
            Err(e) => println!("instructions {}: not counted: {e}", server.name),
        }
        if let Some(with) = &server.counted_with_mounted {
            let counted = Server {
                command: with.command.clone(),
                mounted_logs: Some(with.logs.clone()),
                ..server.clone()
            };
            let name = format!("{}+mounted", server.name);
            match count::per_call(&counted, plan.count) {
                Ok((own, Some(mounted))) => println!(
                    "instructions {name}: {:.0} per call ({own:.0} the gateway's, {mounted:.0} the mounted server's)",
                    own + mounted
                ),
                Ok((_, None)) => {
                    println!("instructions {name}: not counted: no mounted server's count")
                }
                Err(e) => println!("instructions {name}: not counted: {e}"),
            }
        }
    }
}
