//! A request head as the egress proxy reads it (sandbox's `egress/request.rs`, compiled in
//! from its source): any bytes are read without a panic; a tunnel or a forward names a
//! host and a port that is not 0; and a forwarded head is one complete HTTP/1 request
//! head, the whole of what is sent on, with a path as its target, without the proxy's
//! credentials or a second `Connection` header, so nothing a confined process writes can
//! make the proxy send the origin more (or other) than one request head.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../sandbox/src/egress/request.rs"]
mod request;

use request::{Route, read_request};

fuzz_target!(|data: &[u8]| {
    let Ok(Some((route, len))) = read_request(data) else {
        return;
    };
    assert!(len <= data.len());
    match route {
        Route::Tunnel { host, port } => assert!(!host.is_empty() && port != 0),
        Route::Forward { host, port, head } => {
            assert!(!host.is_empty() && port != 0);
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let mut sent = httparse::Request::new(&mut headers);
            let parsed = sent.parse(&head);
            assert!(
                matches!(parsed, Ok(httparse::Status::Complete(n)) if n == head.len()),
                "the head sent on is not one whole request head: {parsed:?} {:?}",
                String::from_utf8_lossy(&head)
            );
            assert!(sent.path.is_some_and(|p| p.starts_with('/')));
            let named = |name: &str| {
                sent.headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case(name))
                    .count()
            };
            assert_eq!(named("proxy-authorization"), 0);
            assert_eq!(named("connection"), 1);
        }
    }
});
