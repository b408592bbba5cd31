use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use rmcp::model::CallToolRequestParams;
use tokio::io::{AsyncBufReadExt, AsyncWrite, BufReader};

use super::{Direct, Writer};

/// A server's stdin that counts the writes made to it.
struct Counted {
    inner: tokio::io::DuplexStream,
    writes: Arc<AtomicUsize>,
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if written.is_ready() {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The calls of toolhost over a counted stdin, what the server reads, and the count.
fn direct() -> (
    Arc<Direct>,
    BufReader<tokio::io::DuplexStream>,
    Arc<AtomicUsize>,
) {
    let (inner, hears) = tokio::io::duplex(1 << 20);
    let writes = Arc::new(AtomicUsize::new(0));
    let writer = Writer::new(Counted {
        inner,
        writes: writes.clone(),
    });
    (Direct::new(Arc::new(writer)), BufReader::new(hears), writes)
}

#[tokio::test(flavor = "current_thread")]
async fn calls_made_in_one_turn_of_the_runtime_go_out_in_one_write() {
    let (direct, mut hears, writes) = direct();
    // Four calls, each made as the gateway makes them: queued, then a write asked for.
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let direct = direct.clone();
            tokio::spawn(async move {
                let sent = direct
                    .send(&CallToolRequestParams::new("t"), false)
                    .unwrap();
                direct.flush_soon();
                sent
            })
        })
        .collect();
    let mut sent = Vec::new();
    for call in calls {
        sent.push(call.await.unwrap());
    }
    let mut ids = Vec::new();
    for _ in 0..4 {
        let mut line = String::new();
        hears.read_line(&mut line).await.unwrap();
        let heard: serde_json::Value = serde_json::from_str(&line).unwrap();
        ids.push(heard["id"].as_str().unwrap().to_string());
    }
    let expected: Vec<String> = sent.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(ids, expected);
    assert_eq!(writes.load(Ordering::SeqCst), 1, "one write for the four");

    // A call made after the batch went out is written by a write of its own.
    let later = direct
        .send(&CallToolRequestParams::new("t"), false)
        .unwrap();
    direct.flush_soon();
    let mut line = String::new();
    hears.read_line(&mut line).await.unwrap();
    assert!(line.contains(&later.id.to_string()), "{line}");
    assert_eq!(writes.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_that_cannot_be_written_ends_the_calls_waiting_and_later_ones() {
    let (direct, hears, _) = direct();
    drop(hears);
    let mut sent = direct
        .send(&CallToolRequestParams::new("t"), false)
        .unwrap();
    direct.flush_soon();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), &mut sent.answer)
        .await
        .expect("the call is told at once, not at its timeout");
    assert!(answer.is_err(), "no answer can come: {answer:?}");
    let again = direct.send(&CallToolRequestParams::new("t"), false);
    assert_eq!(
        again.err().map(|e| e.kind()),
        Some(std::io::ErrorKind::NotConnected)
    );
}
