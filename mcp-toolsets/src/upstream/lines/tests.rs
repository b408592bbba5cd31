use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, NumberOrString,
    ProgressToken, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

use super::{Lines, MAX_LINE};
use crate::relay::{CallRoutes, FromServer};

/// A connection to a pretend server: what it writes is read by `lines`; what `lines`
/// writes, it reads.
struct Server {
    lines: Lines<DuplexStream>,
    says: DuplexStream,
    hears: BufReader<DuplexStream>,
    calls: Arc<CallRoutes>,
}

fn server() -> Server {
    let (says, from) = tokio::io::duplex(1 << 20);
    let (to, hears) = tokio::io::duplex(1 << 20);
    let calls = Arc::new(CallRoutes::default());
    Server {
        lines: Lines::new(from, to, calls.clone(), "s"),
        says,
        hears: BufReader::new(hears),
        calls,
    }
}

impl Server {
    async fn say(&mut self, line: &str) {
        self.says.write_all(line.as_bytes()).await.unwrap();
        self.says.write_all(b"\n").await.unwrap();
    }

    /// Sends a `tools/call` with id `id` through the transport.
    async fn call(&mut self, id: i64) {
        let request =
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t")));
        let message = ClientJsonRpcMessage::request(request, RequestId::Number(id));
        self.lines.send(message).await.unwrap();
        let mut heard = String::new();
        self.hears.read_line(&mut heard).await.unwrap();
        let heard: Value = serde_json::from_str(&heard).unwrap();
        assert_eq!(heard["method"], "tools/call");
    }

    async fn next(&mut self) -> ServerJsonRpcMessage {
        tokio::time::timeout(std::time::Duration::from_secs(5), self.lines.receive())
            .await
            .expect("a message")
            .expect("not the end")
    }
}

/// How rmcp's own reading takes a line (as its debug form, which names the result type
/// it became and every field).
fn generally(line: &str) -> String {
    format!(
        "{:?}",
        serde_json::from_str::<ServerJsonRpcMessage>(line).unwrap()
    )
}

/// A message as its debug form.
fn seen(message: ServerJsonRpcMessage) -> String {
    format!("{message:?}")
}

#[tokio::test]
async fn a_tool_calls_answer_is_read_as_the_general_reading_reads_it() {
    let results = [
        json!({"content": [{"type": "text", "text": "abc"}], "isError": false}),
        json!({"content": [{"type": "text", "text": "x"}], "structuredContent": null}),
        json!({"structuredContent": {"n": 1}}),
        json!({"isError": true, "_meta": {"k": "v"}, "resultType": "complete"}),
        json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
        // Not plain results: a task, an input_required round, nothing of a tool result.
        json!({"task": {"taskId": "t1", "status": "working", "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 1000}}),
        json!({"resultType": "input_required", "inputRequests": {}}),
        json!({"other": 1}),
    ];
    let mut s = server();
    for (n, result) in results.into_iter().enumerate() {
        let id = i64::try_from(n).unwrap();
        s.call(id).await;
        let line = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
        s.say(&line).await;
        assert_eq!(seen(s.next().await), generally(&line), "{line}");
        assert!(!s.lines.tool_calls.contains(&RequestId::Number(id)));
    }
    // An error answer, and an answer to what was no tools/call, are read the general way.
    s.call(100).await;
    let error = r#"{"jsonrpc":"2.0","id":100,"error":{"code":-32602,"message":"no"}}"#;
    s.say(error).await;
    assert_eq!(seen(s.next().await), generally(error));
    assert!(s.lines.tool_calls.is_empty());
    let other = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
    s.say(other).await;
    assert_eq!(seen(s.next().await), generally(other));
}

#[tokio::test]
async fn progress_reaches_its_call_before_the_answer_after_it_is_read() {
    let mut s = server();
    let (tx, mut rx) = crate::mailbox::channel();
    let token = ProgressToken(NumberOrString::Number(9));
    let _route = s.calls.route(token, "session", tx);
    s.call(1).await;
    s.say(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":9,"progress":1,"message":"halfway"}}"#).await;
    s.say(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#)
        .await;
    assert!(matches!(s.next().await, JsonRpcMessage::Response(_)));
    match rx.try_recv() {
        Some(FromServer::Progress(text)) => assert_eq!(text, "halfway\n"),
        _ => panic!("the progress did not come first"),
    }
}

#[tokio::test]
async fn an_oversized_line_is_dropped_and_the_next_is_read() {
    let mut s = server();
    let huge = "x".repeat(MAX_LINE + 10);
    let (mut says, lines) = (s.says, &mut s.lines);
    let writer = tokio::spawn(async move {
        says.write_all(huge.as_bytes()).await.unwrap();
        says.write_all(
            b"\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n",
        )
        .await
        .unwrap();
        says
    });
    let next = tokio::time::timeout(std::time::Duration::from_secs(30), lines.receive())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(next, JsonRpcMessage::Notification(_)));
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn input_that_is_no_json_is_ignored_and_json_that_is_no_message_is_refused() {
    let mut s = server();
    s.say("not json at all").await;
    s.say(r#"{"jsonrpc":"2.0","id":3,"neither":"request nor answer"}"#)
        .await;
    s.say(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
        .await;
    assert!(matches!(s.next().await, JsonRpcMessage::Notification(_)));
    let mut heard = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        s.hears.read_line(&mut heard),
    )
    .await
    .expect("an answer to the message that was none")
    .unwrap();
    let heard: Value = serde_json::from_str(&heard).unwrap();
    assert_eq!(heard["error"]["code"], -32600, "{heard}");
}

#[tokio::test]
async fn a_cancelled_call_is_forgotten() {
    let mut s = server();
    s.call(5).await;
    assert!(s.lines.tool_calls.contains(&RequestId::Number(5)));
    let cancel = ClientNotification::CancelledNotification(CancelledNotification::new(
        CancelledNotificationParam::new(Some(RequestId::Number(5)), None),
    ));
    s.lines
        .send(ClientJsonRpcMessage::notification(cancel))
        .await
        .unwrap();
    assert!(s.lines.tool_calls.is_empty());
}

/// A `tools/call` toolhost sends itself on the connection: what the server heard.
async fn direct_call(s: &mut Server, progress: bool) -> (crate::upstream::outbox::Sent, Value) {
    let direct = s.lines.direct();
    let sent = direct
        .send(&CallToolRequestParams::new("t"), progress)
        .unwrap();
    direct.flush().await.unwrap();
    let mut heard = String::new();
    s.hears.read_line(&mut heard).await.unwrap();
    (sent, serde_json::from_str(&heard).unwrap())
}

#[tokio::test]
async fn toolhosts_own_calls_get_their_answers_straight_and_rmcp_never_sees_them() {
    let mut s = server();
    let (mut sent, heard) = direct_call(&mut s, false).await;
    assert_eq!(heard["method"], "tools/call");
    assert!(
        heard["id"].as_str().unwrap().starts_with("toolhost-"),
        "{heard}"
    );
    assert!(
        heard["params"]["_meta"]["progressToken"].is_null(),
        "{heard}"
    );
    let id = heard["id"].clone();
    s.say(&json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "abc"}]}}).to_string())
        .await;
    // rmcp is handed only what comes after it.
    s.say(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
        .await;
    assert!(matches!(s.next().await, JsonRpcMessage::Notification(_)));
    match (&mut sent.answer).await.unwrap() {
        Ok(super::Answered::Tool(r)) => {
            assert_eq!(
                format!("{:?}", r.content),
                format!("{:?}", vec![rmcp::model::ContentBlock::text("abc")])
            );
        }
        other => panic!("{other:?}"),
    }
    // A task and an error come back as the general reading has them.
    let (mut task, heard) = direct_call(&mut s, true).await;
    assert_eq!(heard["params"]["_meta"]["progressToken"], heard["id"]);
    let task_result = json!({"task": {"taskId": "t1", "status": "working",
        "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 1000}});
    s.say(&json!({"jsonrpc": "2.0", "id": heard["id"], "result": task_result}).to_string())
        .await;
    let (mut refused, heard_again) = direct_call(&mut s, false).await;
    s.say(&json!({"jsonrpc": "2.0", "id": heard_again["id"], "error": {"code": -32021, "message": "needs elicitation"}}).to_string())
        .await;
    s.say(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
        .await;
    assert!(matches!(s.next().await, JsonRpcMessage::Notification(_)));
    let general: rmcp::model::ServerResult = serde_json::from_value(task_result).unwrap();
    match (&mut task.answer).await.unwrap() {
        Ok(super::Answered::Other(result)) => {
            assert_eq!(format!("{result:?}"), format!("{general:?}"));
        }
        other => panic!("{other:?}"),
    }
    match (&mut refused.answer).await.unwrap() {
        Err(e) => assert_eq!(e.code.0, -32021),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_answer_to_a_call_that_stopped_waiting_is_dropped_and_the_end_of_output_ends_the_waiting()
 {
    let mut s = server();
    let (sent, heard) = direct_call(&mut s, false).await;
    drop(sent);
    s.say(&json!({"jsonrpc": "2.0", "id": heard["id"], "result": {"content": []}}).to_string())
        .await;
    let (mut waiting, _) = direct_call(&mut s, false).await;
    drop(s.says);
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(5), s.lines.receive())
            .await
            .unwrap()
            .is_none(),
        "the forgotten answer reached rmcp"
    );
    assert!((&mut waiting.answer).await.is_err(), "a call still waits");
    assert!(
        s.lines
            .direct()
            .send(&CallToolRequestParams::new("t"), false)
            .is_err()
    );
}

#[test]
fn a_plain_result_is_read_straight_as_rmcp_reads_it_whatever_its_blocks() {
    for result in [
        json!({"content": [{"type": "text", "text": "abc"}], "isError": false}),
        json!({"content": [{"type": "text", "text": "a\"b\\n\u{e9}"}]}),
        json!({"content": [{"text": "abc", "type": "text"}]}),
        json!({"content": [{"type": "text", "text": "abc", "annotations": {"priority": 0.5}}]}),
        json!({"content": [{"type": "text", "text": "abc", "_meta": {"k": 1}}]}),
        json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
        json!({"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}]}),
        json!({"content": [{"type": "text", "text": "a"}, {"type": "audio", "data": "AA", "mimeType": "audio/wav"}]}),
        json!({"content": [], "structuredContent": {"a": 1}}),
    ] {
        let raw = serde_json::value::to_raw_value(&result).unwrap();
        let straight = super::envelope::plain_result(&raw).expect("a plain result");
        let general: rmcp::model::CallToolResult = serde_json::from_value(result.clone()).unwrap();
        assert_eq!(straight, general, "{result}");
    }
    // A block rmcp would not read is no plain result here either.
    for bad in [
        json!({"content": [{"type": "text", "text": 5}]}),
        json!({"content": [{"type": "text"}]}),
        json!({"content": [{"type": "nonesuch", "text": "a"}]}),
    ] {
        let raw = serde_json::value::to_raw_value(&bad).unwrap();
        assert!(super::envelope::plain_result(&raw).is_none(), "{bad}");
        assert!(
            serde_json::from_value::<rmcp::model::CallToolResult>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn a_block_with_a_key_written_twice_is_no_plain_result_as_rmcp_reads_none() {
    // Found by the fuzz target `upstream_lines`: the last `text` was taken where rmcp
    // refuses the block.
    for twice in [
        r#"{"content":[{"type":"text","text":"a","text":"b"}]}"#,
        r#"{"content":[{"type":"text","type":"text","text":"a"}]}"#,
        r#"{"content":[{"type":"text","text":"a","annotations":{},"annotations":{}}]}"#,
    ] {
        let raw = serde_json::value::RawValue::from_string(twice.into()).unwrap();
        assert!(super::envelope::plain_result(&raw).is_none(), "{twice}");
        assert!(
            serde_json::from_str::<rmcp::model::CallToolResult>(twice).is_err(),
            "{twice}"
        );
    }
}

#[test]
fn only_ids_written_as_toolhost_writes_its_own_are_its_calls() {
    for (id, n) in [
        ("toolhost-7", Some(7)),
        ("toolhost-18446744073709551615", Some(u64::MAX)),
        ("toolhost-07", None),
        ("toolhost-", None),
        ("toolhost-+7", None),
        ("toolhost-7x", None),
        ("toolhost-18446744073709551616", None),
        ("other-7", None),
    ] {
        assert_eq!(super::envelope::number_of(id), n, "{id}");
    }
}

/// With many answers read in one go, the calls the first [`TURN`] answered run before the
/// rest are handed on: their results go on while the rest is read.
#[tokio::test(flavor = "current_thread")]
async fn the_reader_lets_the_calls_it_answered_run_before_it_reads_on() {
    use crate::pace::TURN;
    let mut s = server();
    let calls = 2 * TURN as usize;
    let mut waiting = Vec::new();
    for _ in 0..calls {
        let (call, heard) = direct_call(&mut s, false).await;
        s.say(&json!({"jsonrpc": "2.0", "id": heard["id"], "result": {"content": []}}).to_string())
            .await;
        waiting.push(call);
    }
    drop(s.says);
    // The first call, when it runs, counts the calls still waiting for their answers (the
    // others stay in `waiting`: a call let go of stops waiting).
    let direct = s.lines.direct();
    let mut first = waiting.remove(0);
    let seen = tokio::spawn(async move {
        (&mut first.answer).await.unwrap().unwrap();
        direct.waiting()
    });
    let mut lines = s.lines;
    assert!(lines.receive().await.is_none(), "the answers reached rmcp");
    assert_eq!(
        seen.await.unwrap(),
        calls - TURN as usize,
        "the first call ran only after more than {TURN} answers were read"
    );
    drop(waiting);
}

#[test]
fn the_commonest_answer_is_read_by_hand_as_serde_reads_it_and_nothing_else_is() {
    // (line, read by hand): whatever the hand reading takes, serde's takes the same way.
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":"toolhost-7","result":{"content":[{"type":"text","text":"abc"}],"isError":false}}"#,
            true,
        ),
        (
            r#" { "result" : { "isError" : true , "content" : [ { "text" : "a" , "type" : "text" } ] } , "id" : "x" } "#,
            true,
        ),
        (r#"{"id":"toolhost-1","result":{"content":[]}}"#, true),
        // As a server of 2026-07-28 answers.
        (
            r#"{"jsonrpc":"2.0","id":"toolhost-1","result":{"resultType":"complete","content":[{"type":"text","text":"abc"}],"isError":false}}"#,
            true,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[],"resultType":"complete"}}"#,
            true,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a\"b\\n\u00e9\n"},{"type":"text","text":""}]}}"#,
            true,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"é"}]}}"#,
            true,
        ),
        // Left to serde: what the hand reading does not read.
        (
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"abc"}]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a"}],"structuredContent":{"a":1}}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a","_meta":{}}]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"image","data":"AA","mimeType":"image/png"}]}}"#,
            false,
        ),
        (r#"{"id":"toolhost-1","result":{"isError":false}}"#, false),
        (
            r#"{"id":"toolhost-1","result":{"resultType":"input_required","content":[]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"resultType":"compl\u0065te","content":[]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"resultType":"complete","resultType":"complete","content":[]}}"#,
            false,
        ),
        (r#"{"id":"tool\u0068ost-1","result":{"content":[]}}"#, false),
        (
            r#"{"jsonrpc":"1.0","id":"toolhost-1","result":{"content":[]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","method":"x","result":{"content":[]}}"#,
            false,
        ),
        // Refused by both.
        (r#"{"id":"toolhost-1","result":{"content":[]}} x"#, false),
        (
            r#"{"id":"toolhost-1","id":"toolhost-2","result":{"content":[]}}"#,
            false,
        ),
        // Found by the fuzz target: an `error` written twice beside the result.
        (
            r#"{"id":"toolhost-1","result":{"content":[]},"error":{},"error":{}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a","text":"b"}]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a"},]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a	b"}]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a\x"}]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"isError":tru,"content":[]}}"#,
            false,
        ),
        (
            r#"{"id":"toolhost-1","result":{"content":[{"type":"text","text":"a\"#,
            false,
        ),
        (r#"{"id":"toolhost-1""#, false),
    ];
    for (line, by_hand) in cases {
        let hand = super::envelope::text_answer(line);
        assert_eq!(hand.is_some(), by_hand, "{line}");
        let both = super::envelope::plain_answer(line.as_bytes());
        let serde = serde_json::from_str::<super::envelope::Envelope<'_>>(line)
            .ok()
            .filter(|e| e.method.is_none())
            .and_then(|e| {
                Some((
                    e.id?.request_id(),
                    super::envelope::plain_result(e.result?)?,
                ))
            });
        assert_eq!(
            both.map(|(id, result)| (id.request_id(), result)),
            serde,
            "{line}"
        );
        if let Some((id, result)) = hand {
            let general: Value = serde_json::from_str(line).unwrap();
            let theirs: rmcp::model::RequestId =
                serde_json::from_value(general["id"].clone()).unwrap();
            assert_eq!(id.request_id(), theirs, "{line}");
            let theirs: rmcp::model::CallToolResult =
                serde_json::from_value(general["result"].clone()).unwrap();
            assert_eq!(result, theirs, "{line}");
        }
    }
}
