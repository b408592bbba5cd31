//! An HTTP server's answer as a posted call reads it (mcp-toolsets' `wire.rs`, compiled in
//! from its source): the head parsed, then the body cut out by its framing, from any bytes
//! arriving in any pieces. Nothing panics; what waits for more never holds more than the
//! bounds allow; every piece of body handed on is not empty (the reading goes forward);
//! and the same bytes are read to the same head, body and rest however they are cut.
//!
//! The input's first byte picks how the rest is cut (a piece length and how it changes);
//! the rest is what the server sent, read once whole and once in those pieces.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

/// Where `wire.rs` sits in mcp-toolsets (`posting::direct::wire`), so that its paths to
/// its neighbours resolve.
#[path = "../../mcp-toolsets/src/upstream/posting"]
mod posting {
    use std::borrow::Cow;

    /// What an error shows of what a server sent (posting.rs has its own, shortened).
    fn excerpt(bytes: &[u8]) -> Cow<'_, str> {
        String::from_utf8_lossy(bytes)
    }

    pub(crate) mod direct {
        #[allow(dead_code, missing_docs, unreachable_pub)]
        mod wire;

        use bytes::BytesMut;
        use wire::{Framing, MAX_HEAD};

        /// How one reading of an answer went.
        #[derive(Debug, PartialEq)]
        pub(crate) enum Read {
            /// The head (its status, what was kept of it, how the body was framed, whether
            /// the connection is kept), the body, and what came after it.
            Answer(String, Vec<u8>, Vec<u8>),
            /// Refused, or cut short: the reading ended in an error.
            Refused,
        }

        /// Reads `wire` arriving in `pieces`, then the connection's end, as `Line::head`
        /// and a call's body do, checking the bounds at every wait.
        pub(crate) fn read(wire: &[u8], pieces: &mut dyn Iterator<Item = usize>) -> Read {
            let mut rest = wire;
            let mut buf = BytesMut::new();
            let mut more = |buf: &mut BytesMut| -> bool {
                if rest.is_empty() {
                    return false;
                }
                let n = pieces.next().unwrap_or(rest.len()).clamp(1, rest.len());
                buf.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                true
            };
            let mut passed = 0;
            let head = loop {
                if !buf.is_empty() {
                    match wire::parse_head(&mut buf, &mut passed) {
                        Ok(Some(head)) => break head,
                        Ok(None) => assert!(
                            buf.len() <= MAX_HEAD && passed <= MAX_HEAD,
                            "a head waited for with {} bytes held",
                            buf.len()
                        ),
                        Err(_) => return Read::Refused,
                    }
                }
                if !more(&mut buf) {
                    return Read::Refused;
                }
            };
            let shown = format!(
                "{} {:?} {:?} {}",
                head.status, head.headers, head.framing, head.reusable
            );
            let mut framing = head.framing;
            let mut body = Vec::new();
            let mut closed = false;
            loop {
                match framing.next(&mut buf, closed) {
                    Ok(Some(data)) => {
                        assert!(!data.is_empty(), "an empty piece of body, in {framing:?}");
                        body.extend_from_slice(&data);
                    }
                    Ok(None) if framing == Framing::Ended => break,
                    Ok(None) => {
                        assert!(!closed, "waited for more after the end, in {framing:?}");
                        assert!(
                            buf.len() <= MAX_HEAD,
                            "{} bytes held waiting, in {framing:?}",
                            buf.len()
                        );
                        closed = !more(&mut buf);
                    }
                    Err(_) => return Read::Refused,
                }
            }
            let after = [&buf[..], rest].concat();
            Read::Answer(shown, body, after)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&how, wire)) = data.split_first() else {
        return;
    };
    let whole = posting::direct::read(wire, &mut std::iter::empty());
    // Pieces of 1 to 16 bytes, growing by `how`'s high bits each time (0: all the same).
    let first = usize::from(how & 0x0f) + 1;
    let growth = usize::from(how >> 4);
    let mut cuts = std::iter::successors(Some(first), |n| Some((n + growth) % 4099 + 1));
    let cut = posting::direct::read(wire, &mut cuts);
    assert_eq!(
        whole, cut,
        "read whole and cut in pieces from {first} growing by {growth}"
    );
});
