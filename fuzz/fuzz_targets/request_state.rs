//! Opening a `requestState` (mcp-server's `request_state.rs`, compiled in from its
//! source): a client's token is either one this server sealed for that caller, tool and
//! arguments, or refused; any string, including one derived from a real token, is one or
//! the other, never a panic, and a forged one is never accepted.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[path = "shared/runtime.rs"]
mod runtime;

#[allow(dead_code, missing_docs)]
#[path = "../../mcp-server/src/request_state.rs"]
mod request_state;

use std::sync::OnceLock;
use std::time::Duration;

use dispatcher_core::store::MemoryStore;

use runtime::runtime;
use serde_json::json;

fn confirmations() -> &'static request_state::Confirmations {
    static C: OnceLock<request_state::Confirmations> = OnceLock::new();
    C.get_or_init(|| {
        let codec = request_state::parse_ring(
            "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKiss",
            "fuzz",
        )
        .expect("a key ring");
        request_state::Confirmations::new(codec, Duration::from_secs(300), MemoryStore::new())
    })
}

/// Opens `token` (opening claims its nonce in the store: an async call).
fn opens(c: &request_state::Confirmations, token: &str, args: &serde_json::Value) -> bool {
    runtime()
        .block_on(c.open(token, "principal", "write_file", args))
        .is_ok()
}

fuzz_target!(|token: &str| {
    let c = confirmations();
    let args = json!({"path": "a.txt"});
    assert!(
        !opens(c, token, &args),
        "a token this server never sealed was accepted: {token:?}"
    );
    // A real token with the fuzz input spliced into it is refused too.
    // Sealing reads the store's generation (async, never failing in memory).
    let real = runtime()
        .block_on(c.seal("principal", "write_file", &args))
        .expect("a memory store's generation");
    let at = token.len() % (real.len() + 1);
    if let Some((head, tail)) = real.split_at_checked(at) {
        let forged = format!("{head}{token}{tail}");
        if forged != real {
            assert!(!opens(c, &forged, &args));
        }
    }
});
