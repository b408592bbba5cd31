//! The login's loopback callback server (oauth's `callback.rs`, compiled in from its
//! source), served whatever bytes arrive on a connection: no panic, no hang; whatever is
//! answered is an HTTP/1 response; and the login hears of the browser's return only for a
//! `GET /callback`, answered `200`.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[path = "shared/runtime.rs"]
mod runtime;

#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../oauth/src/callback.rs"]
mod callback;

use runtime::runtime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let (mut ours, theirs) = tokio::io::duplex(1 << 16);
        let (back, mut came) = tokio::sync::mpsc::channel(1);
        let served = tokio::spawn(callback::serve(theirs, back));
        // The server may stop reading (a malformed head is answered and closed).
        let _ = ours.write_all(data).await;
        let _ = ours.shutdown().await;
        let mut answer = Vec::new();
        let _ = ours.read_to_end(&mut answer).await;
        served.await.expect("the connection's task does not panic");
        if !answer.is_empty() {
            assert!(
                answer.starts_with(b"HTTP/1."),
                "{:?}",
                String::from_utf8_lossy(&answer)
            );
        }
        if came.try_recv().is_ok() {
            // `HTTP/1.0 200` or `HTTP/1.1 200`, as the request's version was.
            assert!(
                answer.starts_with(b"HTTP/1.") && answer.get(8..12) == Some(b" 200"),
                "{:?}",
                String::from_utf8_lossy(&answer)
            );
            // Blank lines before a request line are skipped, as RFC 9112 asks of a server.
            let head = String::from_utf8_lossy(data);
            let head = head.trim_start_matches(['\r', '\n']);
            assert!(head.starts_with("GET /callback"), "{head:?}");
        }
    });
});
