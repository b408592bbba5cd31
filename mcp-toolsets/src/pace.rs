//! How a reader of JSON-RPC lines paces itself ([`Pace`]): both ends of a gateway's stdio
//! (`serve --mcp` reading its client, and the reader of a mounted server's answers).
//!
//! A reader that takes every message its read brought before any of them is worked on
//! moves a batch of calls whole: with 16 calls in flight through a gateway, the server
//! behind it waited for all 16, then the gateway for all 16 answers, then the client, each
//! process working while the others waited. Yielding every [`TURN`] messages lets what
//! they started run (the calls, their requests upstream, their answers written) while the
//! rest are read, so the processes on either side work beside each other.

/// How many messages a reader hands on before it yields to the work they started. With
/// 16 calls in flight through a gateway (`cargo xtask bench`'s plan, release build,
/// medians of 6 rounds), 8 took the calls a second from 25,500 to 41,900, 4 to 37,800 and
/// 3 to 33,600; the server alone runs the same instructions a call, and its calls a second
/// moved within the evening's noise (docs/performance.md).
pub const TURN: u32 = 8;

/// The messages a reader handed on since it last yielded.
#[derive(Debug, Default)]
pub struct Pace {
    handed: u32,
}

impl Pace {
    /// Yields to the runtime once [`TURN`] messages were handed on since the last yield.
    /// Cancel-safe: call it before taking the next message, and a drop while yielding
    /// loses nothing.
    pub async fn before_next(&mut self) {
        if self.handed >= TURN {
            self.handed = 0;
            tokio::task::yield_now().await;
        }
    }

    /// One more message was handed on.
    pub fn handed(&mut self) {
        self.handed += 1;
    }
}
