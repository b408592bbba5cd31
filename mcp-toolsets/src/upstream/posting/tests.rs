//! A posted call against a server written here byte for byte: what it sends, and what it
//! makes of every kind of answer, well-formed or not.

use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolRequestParams, ClientCapabilities, Implementation, ProtocolVersion};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{NotPosted, Posts, Session, Setup};
use crate::relay::{CallRoutes, FromServer};
use crate::upstream::lines::envelope::Answered;

/// A server that answers the requests it takes, one per connection, with `answers` in
/// turn; the requests it read, each as text.
fn server(answers: Vec<Vec<u8>>) -> (String, Arc<Mutex<Vec<String>>>) {
    let (listener, url) = listen();
    let read = Arc::new(Mutex::new(Vec::new()));
    let kept = read.clone();
    tokio::spawn(async move {
        for answer in answers {
            let (mut socket, _) = listener.accept().await.unwrap();
            let request = read_request(&mut socket).await;
            kept.lock().unwrap().push(request);
            let _ = socket.write_all(&answer).await;
            let _ = socket.shutdown().await;
        }
    });
    (url, read)
}

/// A listener on a free port of this machine, and the URL of its `/mcp`.
fn listen() -> (tokio::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    (tokio::net::TcpListener::from_std(listener).unwrap(), url)
}

/// The next request on `socket` as text: its head, then as much body as it says (empty
/// when the client closed the connection instead).
async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                break;
            }
        }
        if n == 0 {
            break;
        }
    }
    String::from_utf8_lossy(&request).to_string()
}

/// What a connection of [`keeping_server`] does once it has given its answers.
#[derive(Clone, Copy)]
enum Then {
    /// Closes the connection.
    Close,
    /// Keeps it open until the client closes it.
    Hold,
}

/// The requests a [`keeping_server`] read, each beside the number of its connection.
type ReadOn = Arc<Mutex<Vec<(usize, String)>>>;

/// A server that keeps its connections open: the `n`th it takes answers its requests
/// with `connections[n]`'s answers in turn, then does what it says; one more is closed at
/// once. The requests it read, each beside the number of the connection it came on.
fn keeping_server(connections: Vec<(Vec<Vec<u8>>, Then)>) -> (String, ReadOn) {
    let (listener, url) = listen();
    let read = Arc::new(Mutex::new(Vec::new()));
    let kept = read.clone();
    tokio::spawn(async move {
        let mut scripts = connections.into_iter().enumerate();
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let Some((n, (answers, then))) = scripts.next() else {
                continue;
            };
            let kept = kept.clone();
            tokio::spawn(async move {
                for answer in answers {
                    let request = read_request(&mut socket).await;
                    kept.lock().unwrap().push((n, request));
                    socket.write_all(&answer).await.unwrap();
                }
                if let Then::Hold = then {
                    let mut rest = Vec::new();
                    let _ = socket.read_to_end(&mut rest).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    (url, read)
}

/// One call of `echo` posted, which must be answered "hi".
async fn says_hi(posts: &Posts) {
    let answered = call(posts, &CallRoutes::default()).await;
    assert_eq!(
        text(&answered.unwrap_or_else(|e| panic!("{}", failure(Err(e))))),
        "hi"
    );
}

/// The number of the connection each request a [`keeping_server`] read came on, in turn.
fn connections(read: &ReadOn) -> Vec<usize> {
    read.lock().unwrap().iter().map(|(n, _)| *n).collect()
}

/// A JSON answer to the `n`th call of a connection, its connection kept open.
fn kept_json(n: u64) -> Vec<u8> {
    let body = ANSWER.replace("toolhost-1", &format!("toolhost-{n}"));
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An HTTP answer with `status`, `content_type` and `body`, closing its connection.
fn answer(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut text = format!(
        "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    text.extend_from_slice(body);
    text
}

fn json(body: &str) -> Vec<u8> {
    answer(
        "200 OK",
        "content-type: application/json\r\n",
        body.as_bytes(),
    )
}

fn events(body: &str) -> Vec<u8> {
    answer(
        "200 OK",
        "content-type: text/event-stream\r\n",
        body.as_bytes(),
    )
}

/// Posts to `url` as a connection of `version`, in `session`, with `bearer`; what the
/// connection would read of the calls' streams.
fn posts(
    url: &str,
    version: ProtocolVersion,
    session: Option<&str>,
    bearer: Option<&str>,
) -> (
    Posts,
    mpsc::UnboundedReceiver<rmcp::model::ServerJsonRpcMessage>,
) {
    let watched = Arc::new(Session::default());
    watched.saw(session);
    let (to_connection, read) = mpsc::unbounded_channel();
    let posts = Posts::new(Setup {
        url,
        bearer,
        session: watched,
        version: &version,
        client: Implementation::new("toolhost", "0"),
        capabilities: ClientCapabilities::default(),
        to_connection,
    })
    .unwrap();
    assert!(
        posts.direct.is_some(),
        "a plain http:// server with no proxy set is posted to directly"
    );
    (posts, read)
}

/// One call of `echo` posted: what it got.
async fn call(posts: &Posts, calls: &CallRoutes) -> Result<super::Answer, NotPosted> {
    let params = CallToolRequestParams::new("echo").with_arguments(
        serde_json::json!({"message": "hi"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let (posting, body) = posts.prepare(&params, true, None).unwrap();
    posts.post(&posting, body, calls).await
}

fn text(answer: &super::Answer) -> String {
    match answer {
        Ok(Answered::Tool(result)) => result.content[0]
            .as_text()
            .map(|t| t.text.clone())
            .unwrap_or_default(),
        other => panic!("no tool result: {other:?}"),
    }
}

fn failure(outcome: Result<super::Answer, NotPosted>) -> String {
    match outcome {
        Err(NotPosted::Failed(why)) => why,
        Err(NotPosted::SessionExpired) => "session expired".into(),
        Ok(answer) => panic!("answered: {answer:?}"),
    }
}

const ANSWER: &str =
    r#"{"jsonrpc":"2.0","id":"toolhost-1","result":{"content":[{"type":"text","text":"hi"}]}}"#;

#[tokio::test]
async fn a_2026_call_names_itself_in_its_headers_and_says_who_asks_in_its_metadata() {
    let (url, read) = server(vec![json(ANSWER)]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, Some("t0ken"));
    assert_eq!(
        text(
            &call(&posts, &CallRoutes::default())
                .await
                .unwrap_or_else(|_| panic!())
        ),
        "hi"
    );
    let request = read.lock().unwrap()[0].to_ascii_lowercase();
    for header in [
        "mcp-method: tools/call",
        "mcp-name: echo",
        "mcp-protocol-version: 2026-07-28",
        "authorization: bearer t0ken",
        "accept: application/json, text/event-stream",
    ] {
        assert!(request.contains(header), "{header} in {request}");
    }
    assert!(!request.contains("mcp-session-id"), "{request}");
    for meta in [
        r#""io.modelcontextprotocol/protocolversion":"2026-07-28""#,
        r#""io.modelcontextprotocol/clientinfo":{"name":"toolhost""#,
        r#""io.modelcontextprotocol/clientcapabilities":{"#,
        r#""progresstoken":"toolhost-1""#,
    ] {
        assert!(request.contains(meta), "{meta} in {request}");
    }
}

#[tokio::test]
async fn a_2025_call_goes_out_in_the_connections_session_without_the_newer_headers() {
    let (url, read) = server(vec![json(ANSWER)]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2025_11_25, Some("s-1"), None);
    let answered = call(&posts, &CallRoutes::default()).await;
    assert_eq!(text(&answered.unwrap_or_else(|_| panic!())), "hi");
    let request = read.lock().unwrap()[0].to_ascii_lowercase();
    assert!(request.contains("mcp-session-id: s-1"), "{request}");
    assert!(
        request.contains("mcp-protocol-version: 2025-11-25"),
        "{request}"
    );
    assert!(
        !request.contains("mcp-method") && !request.contains("clientinfo"),
        "{request}"
    );
}

#[tokio::test]
async fn a_streamed_answer_comes_after_its_progress_and_the_servers_own_request_goes_to_the_connection()
 {
    let stream = concat!(
        ": a comment\n\n",
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"toolhost-1\",\"progress\":1,\"message\":\"halfway\"}}\n\n",
        "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"elicitation/create\",\"params\":{\"mode\":\"form\",\"message\":\"Which?\",\"requestedSchema\":{\"type\":\"object\",\"properties\":{}}}}\n\n",
        "data: {\"jsonrpc\":\"2.0\",\"id\":\"toolhost-1\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n",
    );
    let (url, _) = server(vec![events(stream)]);
    let (posts, mut connection) = posts(&url, ProtocolVersion::V_2025_11_25, Some("s"), None);
    let calls = Arc::new(CallRoutes::default());
    let (to, mut progress) = crate::mailbox::channel();
    let token =
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::String("toolhost-1".into()));
    let _route = calls.route(token, "session", to);
    assert_eq!(
        text(&call(&posts, &calls).await.unwrap_or_else(|_| panic!())),
        "done"
    );
    assert!(matches!(progress.try_recv(), Some(FromServer::Progress(p)) if p == "halfway\n"));
    let asked = connection.try_recv().unwrap();
    assert!(
        serde_json::to_string(&asked)
            .unwrap()
            .contains("elicitation/create"),
        "{asked:?}"
    );
}

#[tokio::test]
async fn a_stream_that_breaks_is_taken_up_after_its_last_event() {
    let first = "id: e1\nretry: 10\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"toolhost-1\",\"progress\":1}}\n\n";
    let second = "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"toolhost-1\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"resumed\"}]}}\n\n";
    let (url, read) = server(vec![events(first), events(second)]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2025_11_25, Some("s"), None);
    assert_eq!(
        text(
            &call(&posts, &CallRoutes::default())
                .await
                .unwrap_or_else(|_| panic!())
        ),
        "resumed"
    );
    let resumed = read.lock().unwrap()[1].to_ascii_lowercase();
    assert!(
        resumed.starts_with("get /mcp")
            && resumed.contains("last-event-id: e1")
            && resumed.contains("mcp-session-id: s"),
        "{resumed}"
    );
}

#[tokio::test]
async fn what_is_not_an_answer_fails_the_call_naming_what_came() {
    let huge = format!("data: {}", "x".repeat(super::MAX_MESSAGE + 1));
    let table: Vec<(Vec<u8>, Option<&str>, &str)> = vec![
        (
            answer("404 Not Found", "", b""),
            Some("s"),
            "session expired",
        ),
        (
            answer("404 Not Found", "", b"gone"),
            None,
            "HTTP 404 Not Found: gone",
        ),
        (
            answer(
                "401 Unauthorized",
                "www-authenticate: Bearer error=\"invalid_token\"\r\n",
                b"",
            ),
            None,
            "refused toolhost's credentials (HTTP 401 Unauthorized, Bearer error=\"invalid_token\")",
        ),
        (
            answer("200 OK", "content-type: text/html\r\n", b"<p>hi</p>"),
            None,
            "content type 'text/html'",
        ),
        (
            answer("202 Accepted", "", b""),
            None,
            "HTTP 202 Accepted and no result",
        ),
        (
            json(r#"{"jsonrpc":"2.0","id":"toolhost-9","result":{}}"#),
            None,
            "not this call's answer",
        ),
        (
            events(
                "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":1}}\n\n",
            ),
            None,
            "ended before the call's answer",
        ),
        (events(&huge), None, "over 16777216 bytes"),
    ];
    for (answered, session, expected) in table {
        let (url, _) = server(vec![answered]);
        let (posts, _) = posts(&url, ProtocolVersion::V_2025_11_25, session, None);
        let why = failure(call(&posts, &CallRoutes::default()).await);
        assert!(why.contains(expected), "{expected}: {why}");
    }
}

#[tokio::test]
async fn a_refusal_carrying_a_json_rpc_error_is_the_servers_error() {
    let body =
        br#"{"jsonrpc":"2.0","id":"toolhost-1","error":{"code":-32602,"message":"no such tool"}}"#;
    let (url, _) = server(vec![answer(
        "400 Bad Request",
        "content-type: application/json\r\n",
        body,
    )]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    match call(&posts, &CallRoutes::default()).await {
        Ok(Err(error)) => assert_eq!(error.message, "no such tool"),
        Ok(other) => panic!("{other:?}"),
        Err(not) => panic!("{}", failure(Err(not))),
    }
}

#[tokio::test]
async fn a_temporary_redirect_to_the_same_server_is_followed_with_the_call_whole() {
    let (url, read) = server(vec![
        answer("307 Temporary Redirect", "location: /moved\r\n", b""),
        json(ANSWER),
    ]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    let answered = call(&posts, &CallRoutes::default()).await;
    assert_eq!(text(&answered.unwrap_or_else(|_| panic!())), "hi");
    let read = read.lock().unwrap();
    let (first, second) = (&read[0], &read[1]);
    assert!(second.starts_with("POST /moved "), "{second}");
    let body = |request: &str| request.split_once("\r\n\r\n").unwrap().1.to_string();
    assert_eq!(
        body(first),
        body(second),
        "the body is posted again as it was"
    );
    assert!(
        second.to_ascii_lowercase().contains("mcp-name: echo"),
        "{second}"
    );
}

#[tokio::test]
async fn a_redirect_elsewhere_or_that_drops_the_body_is_not_followed() {
    let table = [
        (
            "307 Temporary Redirect",
            "location: http://127.0.0.2:1/mcp\r\n",
            "HTTP 307 Temporary Redirect",
        ),
        ("302 Found", "location: /moved\r\n", "HTTP 302 Found"),
        (
            "307 Temporary Redirect",
            "location: http://[::1\r\n",
            "HTTP 307 Temporary Redirect",
        ),
    ];
    for (status, headers, expected) in table {
        let (url, read) = server(vec![answer(status, headers, b"moved"), json(ANSWER)]);
        let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
        let why = failure(call(&posts, &CallRoutes::default()).await);
        assert!(why.contains(expected), "{expected}: {why}");
        assert_eq!(read.lock().unwrap().len(), 1, "{status} is not followed");
    }
}

#[tokio::test]
async fn redirects_are_followed_at_most_ten_in_a_row() {
    let mut answers = vec![answer("308 Permanent Redirect", "location: /again\r\n", b""); 11];
    answers.push(json(ANSWER));
    let (url, read) = server(answers);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    let why = failure(call(&posts, &CallRoutes::default()).await);
    assert!(why.contains("HTTP 308 Permanent Redirect"), "{why}");
    assert_eq!(
        read.lock().unwrap().len(),
        1 + crate::upstream::http_client::MAX_REDIRECTS
    );
}

#[tokio::test]
async fn calls_one_after_another_go_out_on_one_kept_connection() {
    let (url, read) = keeping_server(vec![(
        vec![kept_json(1), kept_json(2), kept_json(3)],
        Then::Hold,
    )]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    for _ in 0..3 {
        says_hi(&posts).await;
    }
    assert_eq!(
        connections(&read),
        [0, 0, 0],
        "every call on the first connection"
    );
    assert_eq!(posts.direct.as_ref().unwrap().kept(), 1);
}

/// A JSON answer to the `n`th call of a connection in chunks of `piece` bytes (with an
/// extension and a trailer, as a server may send them), its connection kept open.
fn kept_chunked(n: u64, piece: usize) -> Vec<u8> {
    let body = ANSWER.replace("toolhost-1", &format!("toolhost-{n}"));
    let mut text =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for chunk in body.as_bytes().chunks(piece) {
        text.extend_from_slice(format!("{:x};x=y\r\n", chunk.len()).as_bytes());
        text.extend_from_slice(chunk);
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"0\r\nx-trailer: z\r\n\r\n");
    text
}

#[tokio::test]
async fn a_chunked_answer_is_read_whole_and_its_connection_kept() {
    let (url, read) = keeping_server(vec![(
        vec![kept_chunked(1, 7), kept_chunked(2, 1000)],
        Then::Hold,
    )]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    says_hi(&posts).await;
    says_hi(&posts).await;
    assert_eq!(connections(&read), [0, 0], "both calls on one connection");
}

#[tokio::test]
async fn an_answer_that_ends_with_its_connection_is_read_whole_and_not_kept() {
    let body = ANSWER;
    let until_close = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{body}");
    let (url, read) = keeping_server(vec![
        (vec![until_close.into_bytes()], Then::Close),
        (vec![kept_json(2)], Then::Hold),
    ]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    says_hi(&posts).await;
    says_hi(&posts).await;
    assert_eq!(
        connections(&read),
        [0, 1],
        "the second call on a new connection"
    );
}

#[tokio::test]
async fn a_kept_connection_the_server_closed_is_not_taken_for_the_next_call() {
    let (url, read) = keeping_server(vec![
        (vec![kept_json(1)], Then::Close),
        (vec![kept_json(2)], Then::Hold),
    ]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    says_hi(&posts).await;
    // The server closes its end once it has answered; the runtime sees it meanwhile.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    says_hi(&posts).await;
    assert_eq!(
        connections(&read),
        [0, 1],
        "the second call on a new connection"
    );
}

#[tokio::test]
async fn a_connection_whose_answer_was_not_read_to_its_end_is_closed_not_kept() {
    // The answer's event comes in a chunked body that does not end: what is left of it
    // would come before the next call's answer on that connection.
    let event = "data: {\"jsonrpc\":\"2.0\",\"id\":\"toolhost-1\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n\n";
    let unended = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n",
        event.len()
    );
    let (url, read) = keeping_server(vec![
        (vec![unended.into_bytes()], Then::Hold),
        (vec![kept_json(2)], Then::Hold),
    ]);
    let (posts, _) = posts(&url, ProtocolVersion::V_2026_07_28, None, None);
    says_hi(&posts).await;
    assert_eq!(posts.direct.as_ref().unwrap().kept(), 0);
    says_hi(&posts).await;
    assert_eq!(connections(&read), [0, 1]);
}

#[test]
fn the_callers_own_meta_goes_out_beside_what_the_call_sets() {
    let (posts, _) = posts(
        "http://127.0.0.1:1/mcp",
        ProtocolVersion::V_2026_07_28,
        None,
        None,
    );
    let meta = serde_json::json!({
        "progressToken": "client-7",
        "io.modelcontextprotocol/clientCapabilities": {"stale": true},
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
    });
    let mut params = CallToolRequestParams::new("echo").with_arguments(
        serde_json::json!({"message": "hi"})
            .as_object()
            .unwrap()
            .clone(),
    );
    params.meta = Some(serde_json::from_value(meta).unwrap());
    let table = [
        (
            true,
            Some(ClientCapabilities::builder().enable_elicitation().build()),
        ),
        (false, None),
    ];
    for (progress, capabilities) in table {
        let (_, body) = posts
            .prepare(&params, progress, capabilities.as_ref())
            .unwrap();
        let text = String::from_utf8(body).unwrap();
        let sent: serde_json::Value = serde_json::from_str(&text).unwrap();
        let sent_meta = &sent["params"]["_meta"];
        let token = if progress { "toolhost-1" } else { "client-7" };
        assert_eq!(sent_meta["progressToken"], token, "{text}");
        assert_eq!(text.matches("progressToken").count(), 1, "{text}");
        assert_eq!(text.matches("clientCapabilities").count(), 1, "{text}");
        let expected_capabilities = match &capabilities {
            Some(c) => serde_json::to_value(c).unwrap(),
            None => serde_json::json!({}),
        };
        assert_eq!(
            sent_meta["io.modelcontextprotocol/clientCapabilities"], expected_capabilities,
            "{text}"
        );
        assert!(sent_meta["traceparent"].is_string(), "{text}");
        assert_eq!(
            sent_meta["io.modelcontextprotocol/clientInfo"]["name"],
            "toolhost"
        );
        assert_eq!(sent["params"]["name"], "echo");
        assert_eq!(sent["params"]["arguments"]["message"], "hi");
        assert_eq!(sent["method"], "tools/call");
    }
    params.meta = None;
    let (_, body) = posts.prepare(&params, false, None).unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        sent["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
}

#[test]
fn a_tool_name_a_header_cannot_carry_as_it_is_goes_through_rmcp() {
    let (posts, _) = posts(
        "http://127.0.0.1:1/mcp",
        ProtocolVersion::V_2026_07_28,
        None,
        None,
    );
    for name in ["with space", "é", "=?base64?x?="] {
        let params = CallToolRequestParams::new(name.to_string());
        assert!(posts.prepare(&params, false, None).is_none(), "{name}");
    }
}
