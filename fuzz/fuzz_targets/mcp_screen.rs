//! The screen every MCP message passes before the protocol library sees it (mcp-server's
//! `screen.rs`, compiled in from its source): any bytes are a message or a refusal
//! whose answer is a JSON-RPC error; the framing buffer and the id scanner take any
//! chunking of them.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[allow(dead_code, missing_docs)]
#[path = "../../mcp-server/src/screen.rs"]
mod screen;

fuzz_target!(|data: &[u8]| {
    if let Err(rejection) = screen::screen(data)
        && let Some(answer) = rejection.response()
    {
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert!(answer["error"]["code"].is_i64(), "{answer}");
    }
    // The same bytes in uneven chunks through the buffer, with a small limit.
    let mut buffer = screen::MessageBuffer::new(4096);
    let mut ids = screen::IdScanner::default();
    for chunk in data.chunks(7) {
        buffer.push(chunk);
        ids.feed(chunk);
    }
    let _ = buffer.take();
    let _ = ids.id();
});
