//! Round-trip latency of MCP `tools/call` for an inline no-op tool (from a release-built
//! plugin, loaded in process, then isolated in a worker process) over stdio from an rmcp
//! client, and (in process) over streamable HTTP from a raw keep-alive client speaking
//! 2026-07-28: median and p99 over 10,000 calls, sequential and with 16 calls in flight
//! (16 connections over HTTP).
//! `cargo bench -p toolhost --bench mcp_roundtrip`; under `cargo test` it runs 200 calls as
//! a smoke test, with the plugin's unoptimized test build.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::json;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(label: &str, mut samples: Vec<Duration>, wall: Duration) {
    samples.sort();
    println!(
        "mcp_roundtrip/{label}: {} calls, median {:.1} µs, p99 {:.1} µs, throughput {:.0} calls/s",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples.len() as f64 / wall.as_secs_f64()
    );
}

async fn one(client: &RunningService<RoleClient, ()>, tool: &str) -> Duration {
    let serde_json::Value::Object(args) = json!({"a": "x", "b": 1, "c": true}) else {
        unreachable!()
    };
    let start = Instant::now();
    let r = client
        .peer()
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert_eq!(r.is_error, Some(false));
    elapsed
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let calls = if benching { 10_000 } else { 200 };
    let plugins = tempfile::tempdir().unwrap();
    let library = toolhost_tests::bench_library("bench-noop");
    toolhost_tests::package_library(&library, plugins.path(), "bench-noop");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for isolation in ["in_process", "process"] {
        rt.block_on(measure(plugins.path(), isolation, calls));
    }
    rt.block_on(measure_http(plugins.path(), calls));
}

/// One keep-alive HTTP/1.1 connection posting 2026-07-28 `tools/call` requests.
struct HttpConn {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
    request: Vec<u8>,
}

impl HttpConn {
    async fn open(addr: &str, tool: &str) -> HttpConn {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": tool, "arguments": {"a": "x", "b": 1, "c": true},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                      "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        HttpConn {
            stream: tokio::io::BufReader::new(stream),
            request,
        }
    }

    async fn call(&mut self) -> Duration {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let start = Instant::now();
        self.stream
            .get_mut()
            .write_all(&self.request)
            .await
            .unwrap();
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.unwrap();
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.unwrap();
        let elapsed = start.elapsed();
        assert!(
            body.windows(15).any(|w| w == b"\"isError\":false"),
            "{}",
            String::from_utf8_lossy(&body)
        );
        elapsed
    }
}

/// Serves the plugin (in process) over HTTP and measures its calls.
async fn measure_http(plugins: &std::path::Path, calls: usize) {
    use tokio::io::AsyncBufReadExt;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        workspace.path().join("toolhost.toml"),
        "plugin_isolation = \"in_process\"\n",
    )
    .unwrap();
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["serve", "--http", "127.0.0.1:0", "--workspace"])
        .arg(workspace.path())
        .arg("--plugins")
        .arg(plugins)
        .current_dir(workspace.path())
        .env("XDG_CONFIG_HOME", workspace.path().join(".no-config"))
        .env("XDG_STATE_HOME", workspace.path().join(".state"))
        .env("XDG_CACHE_HOME", workspace.path().join(".cache"))
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the server says where it listens");
        if let Some(rest) = line.split("at http://").nth(1) {
            break rest.split('/').next().unwrap().to_string();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let tool = "bench_noop_suffix_000";
    let mut conn = HttpConn::open(&addr, tool).await;
    for _ in 0..200 {
        conn.call().await;
    }
    let start = Instant::now();
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        samples.push(conn.call().await);
    }
    report("http/in_process/sequential", samples, start.elapsed());
    let in_flight = 16;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..in_flight {
        let addr = addr.clone();
        let n = calls / in_flight + usize::from(w < calls % in_flight);
        tasks.push(tokio::spawn(async move {
            let mut conn = HttpConn::open(&addr, tool).await;
            let mut s = Vec::with_capacity(n);
            for _ in 0..n {
                s.push(conn.call().await);
            }
            s
        }));
    }
    let mut samples = Vec::with_capacity(calls);
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    report("http/in_process/16_in_flight", samples, start.elapsed());
    let _ = server.kill().await;
}

/// Serves the plugin with this isolation and measures its calls.
async fn measure(plugins: &std::path::Path, isolation: &str, calls: usize) {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        workspace.path().join("toolhost.toml"),
        format!("plugin_isolation = \"{isolation}\"\n"),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.args(["serve", "--mcp", "--workspace"])
        .arg(workspace.path())
        .arg("--plugins")
        .arg(plugins)
        .current_dir(workspace.path())
        .env("XDG_CONFIG_HOME", workspace.path().join(".no-config"))
        .env("XDG_STATE_HOME", workspace.path().join(".state"))
        .env("XDG_CACHE_HOME", workspace.path().join(".cache"));
    let client = Arc::new(
        ().serve(TokioChildProcess::new(cmd).unwrap())
            .await
            .unwrap(),
    );
    let tool = "bench_noop_suffix_000";
    for _ in 0..200 {
        one(&client, tool).await; // warm-up
    }
    let start = Instant::now();
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        samples.push(one(&client, tool).await);
    }
    report(&format!("{isolation}/sequential"), samples, start.elapsed());

    let in_flight = 16;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..in_flight {
        let client = client.clone();
        let n = calls / in_flight + usize::from(w < calls % in_flight);
        tasks.push(tokio::spawn(async move {
            let mut s = Vec::with_capacity(n);
            for _ in 0..n {
                s.push(one(&client, tool).await);
            }
            s
        }));
    }
    let mut samples = Vec::with_capacity(calls);
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    report(
        &format!("{isolation}/16_in_flight"),
        samples,
        start.elapsed(),
    );
    if let Ok(client) = Arc::try_unwrap(client) {
        let _ = client.cancel().await;
    }
}
