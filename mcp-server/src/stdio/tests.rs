use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::transport::Transport;
use tokio::io::AsyncWriteExt;

use mcp_toolsets::pace::TURN;

use super::StdioTransport;

/// With many requests read in one go, what the first [`TURN`] started runs before the
/// rest are handed on: their answers go out while the rest is read.
#[tokio::test(flavor = "current_thread")]
async fn the_reader_lets_what_it_handed_on_run_before_it_reads_on() {
    let (mut client, input) = tokio::io::duplex(1 << 16);
    let (output, _read) = tokio::io::duplex(1 << 16);
    let mut transport = StdioTransport::new(input, output, 1 << 20);
    let requests = 2 * TURN;
    for id in 0..requests {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
        client.write_all(line.as_bytes()).await.unwrap();
        client.write_all(b"\n").await.unwrap();
    }
    // Stands for the work the first requests start: it runs once the reader yields.
    let ran = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let ran = ran.clone();
        async move { ran.store(true, Ordering::SeqCst) }
    });
    let mut ran_before = Vec::new();
    for _ in 0..requests {
        assert!(transport.receive().await.is_some());
        ran_before.push(ran.load(Ordering::SeqCst));
    }
    let expected: Vec<bool> = (0..requests).map(|n| n >= TURN).collect();
    assert_eq!(
        ran_before, expected,
        "which requests were handed on after other work had run"
    );
}
