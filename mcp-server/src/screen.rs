//! Screening incoming MCP messages before the protocol library sees them, so that every
//! message with a recoverable id gets a JSON-RPC answer, on stdio and HTTP alike.
//!
//! rmcp (the MCP library under the server) drops a line it cannot parse without a reply,
//! and turns a known method with bad params (`tools/call` without `params`, or with
//! `arguments: [1]`) into an unknown custom request (`-32601 Method not found`). A client
//! waiting on that id would hang, or be told the wrong thing. [`screen`] answers instead:
//!
//! | problem | code | message names |
//! |---|---|---|
//! | not valid UTF-8 | `-32700` | the byte offset |
//! | not JSON, or nested deeper than 128 levels | `-32700` | line, column, the limit |
//! | JSON, but not a JSON-RPC 2.0 message (a batch, no `method`, wrong `jsonrpc`) | `-32600` | what is missing |
//! | larger than `[mcp] max_message_bytes` | `-32600` | the size and the limit |
//! | a known method with params of the wrong shape | `-32602` | the method and the field |
//!
//! The id of a message that cannot be parsed is recovered by [`IdScanner`], which reads the
//! top-level `"id"` member from raw bytes (even from a message too large to hold); when
//! there is none, the answer carries `"id": null`, as JSON-RPC says. Notifications (no id)
//! are never answered; a bad one is logged.
#![allow(
    clippy::result_large_err,
    reason = "a refusal is the rare path and ends the message; boxing it would allocate for nothing on the common one"
)]

use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, InitializeRequestParams,
    JsonRpcMessage, PaginatedRequestParams, RequestId, ServerJsonRpcMessage,
};
use serde_json::{Value, json};

/// JSON-RPC: the message is not valid JSON.
pub const PARSE_ERROR: i32 = -32700;
/// JSON-RPC: the JSON is not a valid request object.
pub const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC: the method's params are wrong.
pub const INVALID_PARAMS: i32 = -32602;
/// A request that ran out of time (an implementation-defined server error).
pub const REQUEST_TIMED_OUT: i32 = -32001;

/// The id a server message answers: a result's or an error's; `None` for a notification,
/// a request, or an error that answers no id.
pub fn answered_id(message: &ServerJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(r) => Some(&r.id),
        JsonRpcMessage::Error(e) => e.id.as_ref(),
        _ => None,
    }
}

/// The default largest message, in bytes (`[mcp] max_message_bytes`).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How deep a message may nest (serde_json's own recursion limit).
pub const MAX_DEPTH: usize = 128;

/// A message refused before it reached the protocol library, and the answer it gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The request's id, `Value::Null` when it could not be recovered; `None` for a
    /// notification, which gets no answer.
    pub id: Option<Value>,
    /// The JSON-RPC error code.
    pub code: i32,
    /// What was wrong and where.
    pub message: String,
    /// Details a program can read (`limit`, `size`, `method`, `path`).
    pub data: Option<Value>,
}

impl Rejection {
    /// The JSON-RPC error response to send, or `None` for a notification.
    pub fn response(&self) -> Option<Value> {
        let id = self.id.clone()?;
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        Some(json!({"jsonrpc": "2.0", "id": id, "error": error}))
    }

    /// Logs the refusal, as every transport does before it answers.
    pub fn log(&self) {
        tracing::warn!(code = self.code, "refused a message: {}", self.message);
    }

    /// The refusal of a request whose id an earlier request of the same session still
    /// holds: one in flight, or one never answered (cancelled). The protocol library keys
    /// requests by id, so a second one would take the first one's place and one of the
    /// two answers would be lost without a word.
    pub fn duplicate_id(id: &RequestId) -> Rejection {
        let shown = serde_json::to_value(id).unwrap_or_default();
        Rejection {
            message: format!(
                "Invalid request: id {shown} is taken by a request still in flight (or one that was cancelled); give each request an id of its own"
            ),
            id: Some(shown),
            code: INVALID_REQUEST,
            data: None,
        }
    }

    /// The answer to a request still running after `timeout` (`serve --request-timeout`),
    /// whose call is then cancelled.
    pub fn timed_out(id: Value, timeout: std::time::Duration) -> Rejection {
        Rejection {
            id: Some(id),
            code: REQUEST_TIMED_OUT,
            message: format!(
                "Request timed out after {} s (serve --request-timeout); the call was cancelled",
                timeout.as_secs()
            ),
            data: None,
        }
    }

    /// The refusal of a message of `size` bytes over `limit`, answering `id` when it was
    /// recovered (`Value::Null` otherwise).
    pub fn too_large(size: usize, limit: usize, id: Option<Value>) -> Rejection {
        Rejection {
            id: Some(id.unwrap_or(Value::Null)),
            code: INVALID_REQUEST,
            message: format!(
                "Message too large: {size} bytes, over the limit of {limit} bytes \
                 ([mcp] max_message_bytes); send less, e.g. write a large file in parts"
            ),
            data: Some(json!({"size": size, "limit": limit})),
        }
    }

    fn parse(id: Option<Value>, message: String) -> Rejection {
        Rejection {
            id: Some(id.unwrap_or(Value::Null)),
            code: PARSE_ERROR,
            message,
            data: None,
        }
    }
}

/// Parses one message, or says why it is refused and whom to answer.
pub fn screen(bytes: &[u8]) -> Result<ClientJsonRpcMessage, Rejection> {
    if let Some(call) = tools_call(bytes) {
        return Ok(call);
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
        Ok(ClientJsonRpcMessage::Request(request)) => {
            if let ClientRequest::CallToolRequest(call) = &request.request
                && let Some(problem) = call_input_responses_problem(&call.params, bytes)
            {
                return Err(Rejection {
                    id: Some(id_value(&request.id)),
                    code: INVALID_PARAMS,
                    message: problem,
                    data: Some(json!({"method": "tools/call"})),
                });
            }
            if let Some((method, cursor)) = cursor_of_a_list(&request.request) {
                // Nothing here is paginated, so no cursor can be one this server gave; the
                // spec asks for invalid params, not a first page.
                return Err(Rejection {
                    id: Some(id_value(&request.id)),
                    code: INVALID_PARAMS,
                    message: format!(
                        "Invalid params for '{method}': cursor {cursor:?} is not one this server gave; \
                         it lists everything in one answer (no nextCursor), so call it without a cursor"
                    ),
                    data: Some(json!({"method": method, "cursor": cursor})),
                });
            }
            if let ClientRequest::CustomRequest(custom) = &request.request
                && let Some(problem) = typed_params_problem(&custom.method, custom.params.as_ref())
            {
                return Err(Rejection {
                    id: Some(id_value(&request.id)),
                    code: INVALID_PARAMS,
                    message: problem,
                    data: Some(json!({"method": custom.method})),
                });
            }
            Ok(ClientJsonRpcMessage::Request(request))
        }
        Ok(message) => Ok(message),
        Err(error) => Err(diagnose(bytes, &error)),
    }
}

/// The hot path: a well-formed `tools/call` read straight into its typed parts. rmcp's
/// generic message type is an untagged enum over flattened structs, so serde buffers the
/// message and tries each variant, building an error for each miss: a fifth of the
/// server's CPU under load. The result is what rmcp builds (`_meta` moves from the params
/// into the request's extensions); anything this does not read whole (another method, a
/// malformed message, `inputResponses` to check) takes the general path.
fn tools_call(bytes: &[u8]) -> Option<ClientJsonRpcMessage> {
    use memchr::memmem::Finder;
    use rmcp::model::{
        CallToolRequest, CallToolRequestMethod, JsonRpcRequest, JsonRpcVersion2_0, RequestId,
    };
    use std::sync::LazyLock;
    // Built once: a searcher's set-up costs more than a search of a short line.
    static METHOD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"tools/call\""));
    static INPUT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"inputResponses\""));
    if METHOD.find(bytes).is_none() || INPUT.find(bytes).is_some() {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Message {
        #[allow(dead_code)]
        jsonrpc: JsonRpcVersion2_0,
        id: RequestId,
        #[allow(dead_code)]
        method: CallToolRequestMethod,
        params: CallToolRequestParams,
    }
    // The line's UTF-8 checked once, not again in each string it holds (invalid, it takes
    // the general path, which says where).
    let text = std::str::from_utf8(bytes).ok()?;
    let Message { id, mut params, .. } = serde_json::from_str(text).ok()?;
    let meta = params.meta.take();
    let mut request = CallToolRequest::new(params);
    if let Some(meta) = meta {
        request.extensions.insert(meta);
    }
    Some(ClientJsonRpcMessage::Request(JsonRpcRequest::new(
        id,
        ClientRequest::CallToolRequest(request),
    )))
}

fn id_value(id: &rmcp::model::RequestId) -> Value {
    serde_json::to_value(id).unwrap_or(Value::Null)
}

/// Why `bytes` did not parse as a message: its JSON, its JSON-RPC shape, or its params.
fn diagnose(bytes: &[u8], error: &serde_json::Error) -> Rejection {
    let recovered = || {
        let mut scanner = IdScanner::default();
        scanner.feed(bytes);
        scanner.id()
    };
    if let Err(e) = std::str::from_utf8(bytes) {
        return Rejection::parse(
            recovered(),
            format!(
                "Parse error: the message is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        );
    }
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) if e.to_string().contains("recursion limit") => {
            return Rejection::parse(
                recovered(),
                format!(
                    "Parse error: the message nests deeper than {MAX_DEPTH} levels (line {}, column {})",
                    e.line(),
                    e.column()
                ),
            );
        }
        Err(e) => {
            return Rejection::parse(
                recovered(),
                format!("Parse error: not valid JSON: {e}; each message is one JSON-RPC object"),
            );
        }
    };
    let Value::Object(object) = &value else {
        let what = if value.is_array() {
            "a batch (JSON array); send one JSON-RPC object per message"
        } else {
            "not a JSON object"
        };
        return invalid_request(None, format!("Invalid request: the message is {what}"));
    };
    let id = object.get("id").cloned();
    let method = object.get("method");
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid_request(id, "Invalid request: \"jsonrpc\" must be \"2.0\"".into());
    }
    if let Some(id) = &id
        && !(id.is_string() || id.is_i64() || id.is_u64())
    {
        return invalid_request(
            Some(Value::Null),
            format!("Invalid request: \"id\" must be a string or an integer, found {id}"),
        );
    }
    match method {
        Some(Value::String(method)) => {
            let problem = typed_params_problem(method, object.get("params")).unwrap_or_else(|| {
                format!("Invalid params for '{method}': {error}")
            });
            Rejection {
                // A notification (no id) gets no answer.
                id,
                code: INVALID_PARAMS,
                message: problem,
                data: Some(json!({"method": method})),
            }
        }
        Some(other) => invalid_request(
            id,
            format!("Invalid request: \"method\" must be a string, found {other}"),
        ),
        None if object.contains_key("result") || object.contains_key("error") => invalid_request(
            id,
            format!("Invalid request: a response this server cannot read: {error}"),
        ),
        None => invalid_request(
            id,
            "Invalid request: no \"method\" (a request needs \"method\", and \"id\" unless it is a notification)".into(),
        ),
    }
}

/// The method and cursor of a list request that carries a cursor.
fn cursor_of_a_list(request: &ClientRequest) -> Option<(&'static str, &str)> {
    let (method, params) = match request {
        ClientRequest::ListToolsRequest(r) => ("tools/list", &r.params),
        ClientRequest::ListPromptsRequest(r) => ("prompts/list", &r.params),
        ClientRequest::ListResourcesRequest(r) => ("resources/list", &r.params),
        ClientRequest::ListResourceTemplatesRequest(r) => ("resources/templates/list", &r.params),
        _ => return None,
    };
    Some((method, params.as_ref()?.cursor.as_deref()?))
}

fn invalid_request(id: Option<Value>, message: String) -> Rejection {
    Rejection {
        id: Some(id.unwrap_or(Value::Null)),
        code: INVALID_REQUEST,
        message,
        data: None,
    }
}

/// What is wrong with the params of a method this server knows, read into that method's
/// own type so the message names the field (`arguments: invalid type: sequence, expected a
/// map`). `None` for a method it does not know (rmcp answers those `-32601`).
fn typed_params_problem(method: &str, params: Option<&Value>) -> Option<String> {
    fn check<T: serde::de::DeserializeOwned>(
        method: &str,
        params: Option<&Value>,
        optional: bool,
    ) -> Option<String> {
        let Some(params) = params else {
            return (!optional).then(|| {
                format!(
                    "Invalid params for '{method}': \"params\" is missing; it must be an object"
                )
            });
        };
        if params.is_null() && optional {
            return None;
        }
        let de = params.clone();
        match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(_) => None,
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner();
                Some(if path == "." || path.is_empty() {
                    format!("Invalid params for '{method}': {inner}")
                } else {
                    format!("Invalid params for '{method}': {path}: {inner}")
                })
            }
        }
    }
    match method {
        "tools/call" => check::<CallToolRequestParams>(method, params, false)
            .or_else(|| input_responses_problem(params?)),
        "initialize" => check::<InitializeRequestParams>(method, params, false),
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
            check::<PaginatedRequestParams>(method, params, true)
        }
        "ping" | "server/discover" => match params {
            Some(p) if !p.is_object() && !p.is_null() => Some(format!(
                "Invalid params for '{method}': \"params\" must be an object, found {p}"
            )),
            _ => None,
        },
        _ => None,
    }
}

/// A parsed `tools/call`'s `inputResponses`, which the typed params read leniently (`null`
/// as absent, any value per key): looked at in the raw message only when it is there.
fn call_input_responses_problem(params: &CallToolRequestParams, bytes: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"inputResponses\"";
    if params.input_responses.is_none() && !bytes.windows(KEY.len()).any(|w| w == KEY) {
        return None;
    }
    let value: Value = serde_json::from_slice(bytes).ok()?;
    input_responses_problem(value.get("params")?)
}

/// `inputResponses` (a 2026-07-28 retry) must map request keys to result objects; `null`
/// or a number is a client's mistake, not "no responses".
fn input_responses_problem(params: &Value) -> Option<String> {
    let responses = params.get("inputResponses")?;
    let Some(map) = responses.as_object() else {
        return Some(format!(
            "Invalid params for 'tools/call': inputResponses must be an object of results by request key, found {responses}"
        ));
    };
    map.iter().find(|(_, v)| !v.is_object()).map(|(key, v)| {
        format!("Invalid params for 'tools/call': inputResponses.{key} must be a result object, found {v}")
    })
}

/// One message read in pieces under a size limit (a stdio line, an HTTP body). Past the
/// limit nothing more is held: the rest is only counted and scanned for the id, so the
/// refusal can name the size and answer the right request.
#[derive(Debug)]
pub struct MessageBuffer {
    limit: usize,
    bytes: Vec<u8>,
    over: Option<(usize, IdScanner)>,
}

impl MessageBuffer {
    /// An empty message, refused past `limit` bytes.
    pub fn new(limit: usize) -> Self {
        MessageBuffer {
            limit,
            bytes: Vec::new(),
            over: None,
        }
    }

    /// Adds the next piece.
    pub fn push(&mut self, chunk: &[u8]) {
        match &mut self.over {
            Some((size, scanner)) => {
                *size += chunk.len();
                scanner.feed(chunk);
            }
            None if self.bytes.len() + chunk.len() > self.limit => {
                let mut scanner = IdScanner::default();
                scanner.feed(&self.bytes);
                scanner.feed(chunk);
                self.over = Some((self.bytes.len() + chunk.len(), scanner));
                self.bytes = Vec::new();
            }
            None => self.bytes.extend_from_slice(chunk),
        }
    }

    /// The bytes read so far (all of them while under the limit).
    pub fn len(&self) -> usize {
        self.over
            .as_ref()
            .map_or(self.bytes.len(), |(size, _)| *size)
    }

    /// Whether nothing was read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message, or its refusal when it went over the limit; the buffer is empty after.
    pub fn take(&mut self) -> Result<Vec<u8>, Rejection> {
        match self.over.take() {
            Some((size, scanner)) => Err(Rejection::too_large(size, self.limit, scanner.id())),
            None => Ok(std::mem::take(&mut self.bytes)),
        }
    }
}

/// Recovers the top-level `"id"` member of a JSON object from raw bytes fed in any number
/// of pieces, without holding the message: for messages too large, too deep or not valid
/// UTF-8 to parse. Keys written with escapes are not recognised.
#[derive(Debug, Default)]
pub struct IdScanner {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// The first bytes of the key being read (enough to tell `id`).
    key: Vec<u8>,
    /// The key is longer than `id`, or has an escape.
    key_spoiled: bool,
    key_is_id: bool,
    /// Reading the id's value: its bytes.
    value: Option<Vec<u8>>,
    done: Option<Value>,
    finished: bool,
}

impl IdScanner {
    /// How long an id may be and still be recovered.
    const MAX_ID: usize = 256;

    /// Reads more of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.finished {
                return;
            }
            self.step(b);
        }
    }

    /// The id, if one was found (a string or an integer).
    pub fn id(&self) -> Option<Value> {
        self.done.clone()
    }

    fn step(&mut self, b: u8) {
        if let Some(value) = &mut self.value {
            let ends = if value.first() == Some(&b'"') {
                let closes = b == b'"' && !self.escaped;
                self.escaped = !self.escaped && b == b'\\';
                value.push(b);
                closes
            } else if b.is_ascii_digit() || b == b'-' || (value.is_empty() && b == b'"') {
                value.push(b);
                false
            } else {
                // Whitespace before the value; anything else after it ends it.
                !(value.is_empty() && b.is_ascii_whitespace())
            };
            if value.len() > Self::MAX_ID {
                self.finished = true;
                return;
            }
            if ends {
                let parsed = serde_json::from_slice::<Value>(value).ok();
                self.done = parsed.filter(|v| v.is_string() || v.is_i64() || v.is_u64());
                self.finished = true;
            }
            return;
        }
        if self.in_string {
            let reading_key = self.depth == 1 && self.expect_key;
            if self.escaped {
                self.escaped = false;
                self.key_spoiled = true;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if reading_key {
                    self.key_is_id = !self.key_spoiled && self.key == b"id";
                    self.expect_key = false;
                }
            } else if reading_key {
                if self.key.len() < 2 {
                    self.key.push(b);
                } else {
                    self.key_spoiled = true;
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.key.clear();
                self.key_spoiled = false;
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    if b == b'[' {
                        // A batch: no single id to answer.
                        self.finished = true;
                    }
                    self.expect_key = true;
                }
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.finished = true;
                }
            }
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.key_is_id = false;
            }
            b':' if self.depth == 1 && self.key_is_id => {
                self.value = Some(Vec::new());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(bytes: &[u8]) -> Rejection {
        screen(bytes).expect_err("refused")
    }

    #[test]
    fn a_valid_call_passes() {
        let m = screen(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}"#);
        assert!(matches!(m, Ok(ClientJsonRpcMessage::Request(_))), "{m:?}");
    }

    #[test]
    fn the_tools_call_fast_path_reads_what_the_general_path_reads() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a"}}}"#,
            r#"{"id":"x-9","method":"tools/call","jsonrpc":"2.0","params":{"name":"t","_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":{},"requestState":"s"}}"#,
        ] {
            let fast = tools_call(line.as_bytes()).expect("the fast path reads it");
            let general: ClientJsonRpcMessage = serde_json::from_str(line).unwrap();
            assert_eq!(
                serde_json::to_value(&fast).unwrap(),
                serde_json::to_value(&general).unwrap(),
                "{line}"
            );
            let meta = |m: &ClientJsonRpcMessage| match m {
                ClientJsonRpcMessage::Request(rmcp::model::JsonRpcRequest {
                    request: ClientRequest::CallToolRequest(r),
                    ..
                }) => r
                    .extensions
                    .get::<rmcp::model::RequestMetaObject>()
                    .cloned(),
                _ => None,
            };
            assert_eq!(meta(&fast), meta(&general), "{line}");
        }
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","inputResponses":null}}"#,
        ] {
            assert!(tools_call(other.as_bytes()).is_none(), "{other}");
        }
    }

    #[test]
    fn not_json_is_a_parse_error_with_the_id_when_it_can_be_read() {
        let r = rejected(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call" oops"#);
        assert_eq!(
            (r.code, r.id.clone()),
            (PARSE_ERROR, Some(json!(7))),
            "{r:?}"
        );
        let r = rejected(b"hello");
        assert_eq!((r.code, r.id), (PARSE_ERROR, Some(Value::Null)));
    }

    #[test]
    fn invalid_utf8_is_a_parse_error_naming_the_offset() {
        let mut bytes = br#"{"jsonrpc":"2.0","id":"a","method":"ping","params":{"x":""#.to_vec();
        bytes.extend([0xff, 0xfe]);
        bytes.extend(br#""}}"#);
        let r = rejected(&bytes);
        assert_eq!((r.code, r.id.clone()), (PARSE_ERROR, Some(json!("a"))));
        assert!(
            r.message.contains("UTF-8") && r.message.contains("offset"),
            "{r:?}"
        );
    }

    #[test]
    fn deep_nesting_is_a_parse_error_naming_the_limit() {
        let mut s = String::from(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{"a":"#,
        );
        s.push_str(&"[".repeat(100_000));
        s.push_str(&"]".repeat(100_000));
        s.push_str("}}}");
        let r = rejected(s.as_bytes());
        assert_eq!((r.code, r.id.clone()), (PARSE_ERROR, Some(json!(3))));
        assert!(r.message.contains("128 levels"), "{r:?}");
    }

    #[test]
    fn tools_call_without_params_or_with_array_arguments_is_invalid_params() {
        let r = rejected(br#"{"jsonrpc":"2.0","id":4,"method":"tools/call"}"#);
        assert_eq!(
            (r.code, r.id.clone()),
            (INVALID_PARAMS, Some(json!(4))),
            "{r:?}"
        );
        assert!(r.message.contains("\"params\" is missing"), "{r:?}");
        let r = rejected(br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#);
        assert_eq!(
            (r.code, r.id.clone()),
            (INVALID_PARAMS, Some(json!(5))),
            "{r:?}"
        );
        assert!(r.message.contains("arguments"), "{r:?}");
    }

    #[test]
    fn input_responses_that_are_not_result_objects_are_invalid_params() {
        for responses in ["null", "5", r#"{"confirm": 5}"#] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"x","arguments":{{}},"inputResponses":{responses}}}}}"#
            );
            let r = rejected(line.as_bytes());
            assert_eq!(r.code, INVALID_PARAMS, "{responses}: {r:?}");
            assert!(r.message.contains("inputResponses"), "{r:?}");
        }
    }

    #[test]
    fn a_list_with_a_cursor_this_server_never_gave_is_invalid_params() {
        for method in [
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
        ] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":8,"method":"{method}","params":{{"cursor":"abc"}}}}"#
            );
            let r = rejected(line.as_bytes());
            assert_eq!(
                (r.code, r.id.clone()),
                (INVALID_PARAMS, Some(json!(8))),
                "{r:?}"
            );
            assert_eq!(
                r.message,
                format!(
                    "Invalid params for '{method}': cursor \"abc\" is not one this server gave; it lists \
                     everything in one answer (no nextCursor), so call it without a cursor"
                )
            );
        }
        for fine in [
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"cursor":null}}"#,
        ] {
            assert!(screen(fine.as_bytes()).is_ok(), "{fine}");
        }
    }

    #[test]
    fn batches_and_wrong_versions_are_invalid_requests() {
        let r = rejected(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
        assert_eq!((r.code, r.id), (INVALID_REQUEST, Some(Value::Null)));
        let r = rejected(br#"{"jsonrpc":"1.0","id":9,"method":"ping"}"#);
        assert_eq!((r.code, r.id), (INVALID_REQUEST, Some(json!(9))));
    }

    #[test]
    fn a_message_over_the_limit_is_refused_with_its_size_and_id_and_not_held() {
        let head = br#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"x":""#;
        let mut m = MessageBuffer::new(64);
        m.push(head);
        for _ in 0..1000 {
            m.push(&[b'a'; 100]);
        }
        let size = head.len() + 100_000;
        assert_eq!(m.len(), size);
        let r = m.take().expect_err("over the limit");
        assert_eq!(
            (r.id, r.data),
            (Some(json!("big")), Some(json!({"size": size, "limit": 64})))
        );
        m.push(b"{}");
        assert_eq!(
            m.take().unwrap(),
            b"{}",
            "the buffer is ready for the next message"
        );
    }

    #[test]
    fn the_id_scanner_reads_pieces_and_skips_nested_ids() {
        let msg = br#"{"params":{"id":"inner"},"method":"x", "id" : "outer-1","more":[1]}"#;
        let mut s = IdScanner::default();
        for chunk in msg.chunks(3) {
            s.feed(chunk);
        }
        assert_eq!(s.id(), Some(json!("outer-1")));
        let mut s = IdScanner::default();
        s.feed(br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"arguments":{"x":""#);
        s.feed(&[b'a'; 1000]);
        assert_eq!(s.id(), Some(json!(42)));
    }
}
