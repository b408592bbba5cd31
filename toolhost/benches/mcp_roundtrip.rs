//! Round-trip latency of MCP `tools/call` for an inline no-op tool (from a release-built
//! plugin, loaded in process, then isolated in a worker process) over stdio from an rmcp
//! client: median and p99 over 10,000 calls, sequential and with 16 calls in flight.
//! `cargo bench -p toolhost --bench mcp_roundtrip`; under `cargo test` it runs 200 calls as
//! a smoke test.
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
    let library = toolhost_tests::release_library("bench-noop");
    toolhost_tests::package_library(&library, plugins.path(), "bench-noop");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for isolation in ["in_process", "process"] {
        rt.block_on(measure(plugins.path(), isolation, calls));
    }
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
