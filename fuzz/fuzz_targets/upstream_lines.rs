//! A stdio MCP server's line as the gateway reads it (mcp-toolsets' `envelope.rs`, compiled
//! in from its source): any bytes are read without a panic, and what the quick reading
//! makes of them is what rmcp's own reading of the same text makes: the same id, and for a
//! `tools/call` answer read straight as a plain result, the same result; and a plain answer
//! read in one pass is read as the envelope's reading reads it.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../mcp-toolsets/src/upstream/lines/envelope.rs"]
mod envelope;

use rmcp::model::{CallToolResult, RequestId};

fuzz_target!(|data: &[u8]| {
    // The one-pass reading of a plain answer takes only what the envelope's reading takes,
    // the same way: the same id, and the same plain result.
    let quick = envelope::plain_answer(data);
    let Ok(read) = serde_json::from_slice::<envelope::Envelope<'_>>(data) else {
        assert!(quick.is_none(), "taken in one pass, refused as an envelope");
        return;
    };
    if let Some((id, plain)) = quick {
        assert!(read.method.is_none());
        let theirs = read.id.as_ref().map(envelope::Id::request_id);
        assert_eq!(Some(id.request_id()), theirs);
        let general = read.result.and_then(envelope::plain_result);
        assert_eq!(
            Some(plain),
            general,
            "the one pass and the envelope disagree"
        );
    }
    let general: Option<serde_json::Value> = serde_json::from_slice(data).ok();
    if let (Some(id), Some(general)) = (&read.id, &general)
        && let Ok(theirs) = serde_json::from_value::<RequestId>(general["id"].clone())
    {
        assert_eq!(id.request_id(), theirs, "the id of {general}");
        if let Some(n) = id.direct() {
            assert_eq!(theirs.to_string(), format!("{}{n}", envelope::ID_PREFIX));
        }
    }
    if let Some(result) = read.result
        && let Some(plain) = envelope::plain_result(result)
    {
        let theirs: CallToolResult = serde_json::from_str(result.get())
            .expect("rmcp reads a result the quick reading took as plain");
        assert_eq!(
            serde_json::to_value(&plain).ok(),
            serde_json::to_value(&theirs).ok(),
            "{}",
            result.get()
        );
    }
    // The whole answer, as a call waiting for it gets it: built, whatever the bytes; a
    // plain result read straight is rmcp's tool result.
    if let (Some(Ok(answer)), Some(result)) = (read.answer(), read.result)
        && envelope::plain_result(result).is_some()
    {
        assert!(matches!(answer, envelope::Answered::Tool(_)));
    }
});
