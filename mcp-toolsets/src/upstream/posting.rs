//! A `tools/call` to a server over streamable HTTP, posted by toolhost itself ([`Posts`]).
//!
//! rmcp's HTTP client takes each request through its connection's task and a worker task
//! of its own, works out its headers from the message turned into a JSON value, parses the
//! URL again and reads the answer by trying each result type in turn: about 150,000
//! instructions a call, half of everything a gateway in front of `serve --http` did per call
//! (callgrind), and three task hand-overs each way. A call posted here is one request made
//! by the call's own future, its body written as its parts, its answer read straight (as
//! from a stdio server's line: [`super::lines::envelope`]). What else the server sends on
//! the call's event stream (its requests to the user, notifications other than progress) is
//! handed to the connection as if read on it, where rmcp answers it as before. Everything
//! else the connection does (initialization, listing, cancellation, session recovery, the
//! answers to the server's requests) stays rmcp's; the session it holds is watched
//! ([`Watched`]) so that a posted call goes out in it.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures_util::StreamExt as _;
use http_body_util::{BodyDataStream, BodyExt as _};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, Implementation, JsonRpcMessage, NumberOrString,
    ProgressToken, ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerNotification,
};
use tokio::sync::mpsc;

use super::lines::envelope::{Answer, Answered, Envelope, ID_PREFIX, plain_answer};
use crate::relay::CallRoutes;

mod direct;
mod watched;
use direct::{Body, Direct};
pub(crate) use watched::{Session, Watched};

/// The most bytes one event of a call's stream (or a JSON answer) may take: as one line
/// of a stdio server (16 MiB).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// The most bytes of a refusal's body read to name it.
const MAX_REFUSAL: usize = 64 * 1024;
/// How many times a call's event stream that broke is taken up again (`Last-Event-ID`).
const RESUMES: usize = 3;

const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// How toolhost posts its own `tools/call`s to one connection's server.
pub(crate) struct Posts {
    client: reqwest::Client,
    /// Set when the server is reached without reqwest's layers ([`Direct`]).
    direct: Option<Direct>,
    url: reqwest::Url,
    /// `Bearer …`, as rmcp's connection sends it.
    authorization: Option<HeaderValue>,
    session: Arc<Session>,
    version: HeaderValue,
    /// The version names the call in `Mcp-Method` and `Mcp-Name` (SEP-2243).
    standard_headers: bool,
    /// The headers every call's request carries, made once ([`Posts::headers`]).
    common: HeaderMap,
    /// A 2026-07-28 server: each request says who asks and what it can be asked.
    stateless: Option<Stateless>,
    next: AtomicU64,
    /// Where a message of a call's stream that is neither its answer nor its progress goes:
    /// the connection, which handles it as if it had read it.
    to_connection: mpsc::UnboundedSender<ServerJsonRpcMessage>,
}

/// What a 2026-07-28 request's metadata carries besides the call's own.
/// Written once, as JSON: they are the same on every call of the connection.
struct Stateless {
    /// The `_meta` members naming the version and toolhost as the client, then the key of
    /// the client's capabilities, whose value follows.
    members: Vec<u8>,
    /// The connection's own capabilities, for a call whose client named none.
    capabilities: Vec<u8>,
}

/// The `_meta` keys a posted call sets itself (its progress token; the 2026-07-28 client
/// context): the caller's own members of those names are left out.
const PROGRESS_TOKEN: &str = "progressToken";
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

impl Stateless {
    fn new(
        version: &ProtocolVersion,
        client: &Implementation,
        capabilities: &ClientCapabilities,
    ) -> Option<Stateless> {
        let mut members = Vec::with_capacity(160);
        serde_json::to_writer(&mut members, PROTOCOL_VERSION).ok()?;
        members.push(b':');
        serde_json::to_writer(&mut members, version.as_str()).ok()?;
        members.push(b',');
        serde_json::to_writer(&mut members, CLIENT_INFO).ok()?;
        members.push(b':');
        serde_json::to_writer(&mut members, client).ok()?;
        members.push(b',');
        serde_json::to_writer(&mut members, CLIENT_CAPABILITIES).ok()?;
        members.push(b':');
        Some(Stateless {
            members,
            capabilities: serde_json::to_vec(capabilities).ok()?,
        })
    }
}

/// A call ready to be posted: its id, the token its progress is routed by, its tool's
/// name as a header (its request's body goes beside it).
pub(crate) struct Posting {
    n: u64,
    pub(crate) id: RequestId,
    pub(crate) token: ProgressToken,
    name: HeaderValue,
}

/// Why a posted call got no answer.
pub(crate) enum NotPosted {
    /// The server no longer knows the connection's session: the call was not run, and
    /// goes through the connection, which opens a new one.
    SessionExpired,
    /// The request failed, or its answer could not be read: what happened.
    Failed(String),
}

/// What the connection's HTTP side was set up with, for [`Posts::new`].
pub(crate) struct Setup<'a> {
    pub(crate) url: &'a str,
    pub(crate) bearer: Option<&'a str>,
    pub(crate) session: Arc<Session>,
    pub(crate) version: &'a ProtocolVersion,
    pub(crate) client: Implementation,
    pub(crate) capabilities: ClientCapabilities,
    pub(crate) to_connection: mpsc::UnboundedSender<ServerJsonRpcMessage>,
}

impl Posts {
    /// `None` when the connection's URL or token cannot be sent as toolhost sends them
    /// (its calls then go through rmcp, which reports the problem).
    pub(crate) fn new(setup: Setup<'_>) -> Option<Posts> {
        let url = reqwest::Url::parse(setup.url).ok()?;
        let authorization = match setup.bearer {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let stateless = *setup.version >= ProtocolVersion::V_2026_07_28;
        let version = HeaderValue::from_str(setup.version.as_str()).ok()?;
        let standard_headers = *setup.version >= ProtocolVersion::STANDARD_HEADERS;
        let mut common = HeaderMap::with_capacity(8);
        common.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        common.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        common.insert(MCP_PROTOCOL_VERSION, version.clone());
        if let Some(authorization) = &authorization {
            common.insert(AUTHORIZATION, authorization.clone());
        }
        if standard_headers {
            common.insert(MCP_METHOD, HeaderValue::from_static("tools/call"));
        }
        Some(Posts {
            client: super::http_client::http_client(),
            direct: Direct::for_url(&url, &common),
            url,
            authorization,
            session: setup.session,
            version,
            standard_headers,
            common,
            stateless: match stateless {
                true => Some(Stateless::new(
                    setup.version,
                    &setup.client,
                    &setup.capabilities,
                )?),
                false => None,
            },
            next: AtomicU64::new(1),
            to_connection: setup.to_connection,
        })
    }

    /// The call with `params` as it will be posted, and its request's body (asking for
    /// progress when `progress`; telling a 2026-07-28 server the calling client's
    /// `capabilities`); `params` are left as they were, for rmcp's connection if the call
    /// goes there after all. `None` when its tool's name cannot be sent in `Mcp-Name` as it
    /// is (rmcp's connection encodes it).
    pub(crate) fn prepare(
        &self,
        params: &CallToolRequestParams,
        progress: bool,
        capabilities: Option<&ClientCapabilities>,
    ) -> Option<(Posting, Vec<u8>)> {
        let name = &params.name;
        // Visible ASCII only: anything else is sent Base64-encoded (SEP-2243).
        if name.is_empty()
            || !name.bytes().all(|b| b.is_ascii_graphic())
            || name.starts_with("=?base64?")
        {
            return None;
        }
        let name = HeaderValue::from_str(name).ok()?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut label = String::with_capacity(ID_PREFIX.len() + 20);
        label.push_str(ID_PREFIX);
        label.push_str(itoa::Buffer::new().format(n));
        let label: Arc<str> = label.into();
        let token = ProgressToken(NumberOrString::String(label.clone()));
        let mut body = Vec::with_capacity(384);
        body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        serde_json::to_writer(&mut body, &*label).ok()?;
        body.extend_from_slice(br#","method":"tools/call","params":"#);
        self.write_params(&mut body, params, progress.then_some(&*label), capabilities)
            .ok()?;
        body.push(b'}');
        let posting = Posting {
            n,
            id: RequestId::String(label),
            token,
            name,
        };
        Some((posting, body))
    }

    /// Writes `params` as the call's request carries them: their `_meta` with the
    /// `progress` token (when asked for) and, to a 2026-07-28 server, the client context
    /// (`capabilities`, else the connection's own), written from what was prepared once;
    /// the caller's own members of those names left out.
    fn write_params(
        &self,
        body: &mut Vec<u8>,
        params: &CallToolRequestParams,
        progress: Option<&str>,
        capabilities: Option<&ClientCapabilities>,
    ) -> serde_json::Result<()> {
        let open = body.len();
        body.extend_from_slice(br#"{"_meta":{"#);
        let members = body.len();
        let sets = |key: &str| {
            (progress.is_some() && key == PROGRESS_TOKEN)
                || (self.stateless.is_some()
                    && matches!(key, PROTOCOL_VERSION | CLIENT_INFO | CLIENT_CAPABILITIES))
        };
        let comma = |body: &mut Vec<u8>| {
            if body.len() > members {
                body.push(b',');
            }
        };
        for (key, value) in params.meta.iter().flat_map(|meta| meta.0.0.iter()) {
            if sets(key) {
                continue;
            }
            comma(body);
            serde_json::to_writer(&mut *body, key)?;
            body.push(b':');
            serde_json::to_writer(&mut *body, value)?;
        }
        if let Some(token) = progress {
            comma(body);
            body.extend_from_slice(br#""progressToken":"#);
            serde_json::to_writer(&mut *body, token)?;
        }
        if let Some(stateless) = &self.stateless {
            comma(body);
            body.extend_from_slice(&stateless.members);
            match capabilities {
                Some(capabilities) => serde_json::to_writer(&mut *body, capabilities)?,
                None => body.extend_from_slice(&stateless.capabilities),
            }
        }
        let any = body.len() > members;
        if any {
            body.extend_from_slice(b"},");
        } else {
            body.truncate(open);
        }
        // The rest of the params, their own opening brace left out when `_meta` opened them.
        let rest = body.len();
        match &params.meta {
            None => serde_json::to_writer(&mut *body, params)?,
            // The caller's own `_meta` went out above, beside what the call sets.
            Some(_) => {
                let mut rest = params.clone();
                rest.meta = None;
                serde_json::to_writer(&mut *body, &rest)?;
            }
        }
        if any {
            body.remove(rest);
        }
        Ok(())
    }

    /// Posts the call and reads its answer; its progress goes to `calls` as it comes.
    pub(crate) async fn post(
        &self,
        posting: &Posting,
        body: Vec<u8>,
        calls: &CallRoutes,
    ) -> Result<Answer, NotPosted> {
        let session = self.session.get();
        let sent = match &self.direct {
            Some(direct) => match self.per_call_headers(posting, session.as_deref()) {
                Ok(headers) => direct.post(&headers, &body).await.map(direct::boxed),
                Err(e) => Err(e),
            },
            None => {
                self.post_through_reqwest(posting, session.as_deref(), body.into())
                    .await
            }
        };
        let response = sent.map_err(|e| NotPosted::Failed(format!("the request failed: {e}")))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND && session.is_some() {
            return Err(NotPosted::SessionExpired);
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let json = content_type.starts_with("application/json");
        if !status.is_success() {
            return refused(status, json, response).await;
        }
        if json {
            let body = bounded(response, MAX_MESSAGE)
                .await
                .map_err(NotPosted::Failed)?;
            return self.answer_in(&body, posting.n, calls).ok_or_else(|| {
                NotPosted::Failed(format!(
                    "the server answered with a message that is not this call's answer: {}",
                    excerpt(&body)
                ))
            });
        }
        if content_type.starts_with("text/event-stream") {
            return self.streamed(response, posting.n, session, calls).await;
        }
        Err(NotPosted::Failed(
            if status == reqwest::StatusCode::ACCEPTED || status == reqwest::StatusCode::NO_CONTENT
            {
                format!("the server answered the call with HTTP {status} and no result")
            } else {
                format!(
                    "the server answered with content type '{content_type}', neither JSON nor an event stream"
                )
            },
        ))
    }

    /// The headers of the call's request: its type, what it takes back, the version, the
    /// token, the session and (from 2026-07-28 on) what it calls.
    fn headers(&self, posting: &Posting, session: Option<&str>) -> Result<HeaderMap, String> {
        // A copy of those made once costs less than inserting each (each name hashed).
        let mut headers = self.common.clone();
        for (name, value) in self.per_call_headers(posting, session)? {
            headers.insert(name, value.into_owned());
        }
        Ok(headers)
    }

    /// The headers of the call's request besides those every call carries (`common`):
    /// the session and (from 2026-07-28 on) what it calls.
    fn per_call_headers<'p>(
        &self,
        posting: &'p Posting,
        session: Option<&str>,
    ) -> Result<Vec<(HeaderName, Cow<'p, HeaderValue>)>, String> {
        let mut headers = Vec::with_capacity(2);
        if let Some(session) = session {
            let value = HeaderValue::from_str(session).map_err(|_| {
                format!("the server's session id {session:?} cannot be sent back in a header")
            })?;
            headers.push((MCP_SESSION_ID, Cow::Owned(value)));
        }
        if self.standard_headers {
            headers.push((MCP_NAME, Cow::Borrowed(&posting.name)));
        }
        Ok(headers)
    }

    /// The call posted through reqwest (its redirects followed as its policy says).
    async fn post_through_reqwest(
        &self,
        posting: &Posting,
        session: Option<&str>,
        body: bytes::Bytes,
    ) -> Result<http::Response<Body>, String> {
        self.client
            .post(self.url.clone())
            .headers(self.headers(posting, session)?)
            .body(body)
            .send()
            .await
            .map(|response| direct::boxed(http::Response::from(response)))
            .map_err(|e| chain(&e))
    }

    /// Reads the call's event stream to its answer, taking it up again where it broke
    /// (`Last-Event-ID`, when the server names its events) at most [`RESUMES`] times.
    async fn streamed(
        &self,
        response: http::Response<Body>,
        n: u64,
        session: Option<Arc<str>>,
        calls: &CallRoutes,
    ) -> Result<Answer, NotPosted> {
        let mut response = response;
        let mut last_event: Option<String> = None;
        let mut wait = std::time::Duration::from_secs(1);
        let mut resumes = 0;
        loop {
            let why = match self
                .read_events(response, n, calls, &mut last_event, &mut wait)
                .await
            {
                Ok(answer) => return Ok(answer),
                Err(why) => why,
            };
            let Some(after) = last_event.clone().filter(|_| resumes < RESUMES) else {
                return Err(NotPosted::Failed(why));
            };
            resumes += 1;
            tracing::debug!(
                "a call's event stream ended before its answer ({why}); taking it up after event {after}"
            );
            tokio::time::sleep(wait).await;
            let mut request = self
                .client
                .get(self.url.clone())
                .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
                .header("mcp-protocol-version", self.version.clone())
                .header("last-event-id", after);
            if let Some(authorization) = &self.authorization {
                request = request.header(AUTHORIZATION, authorization.clone());
            }
            if let Some(session) = &session {
                request = request.header("mcp-session-id", &**session);
            }
            response = match request.send().await {
                Ok(r) if r.status().is_success() => direct::boxed(http::Response::from(r)),
                Ok(r) => {
                    return Err(NotPosted::Failed(format!(
                        "{why}, and taking it up again was answered HTTP {}",
                        r.status()
                    )));
                }
                Err(e) => {
                    return Err(NotPosted::Failed(format!(
                        "{why}, and taking it up again failed: {}",
                        chain(&e)
                    )));
                }
            };
        }
    }

    /// Reads events until the call's answer; `Err` says why the stream ended without it.
    async fn read_events(
        &self,
        response: http::Response<Body>,
        n: u64,
        calls: &CallRoutes,
        last_event: &mut Option<String>,
        wait: &mut std::time::Duration,
    ) -> Result<Answer, String> {
        // Bytes since the last whole event: an event that never ends is cut off at its
        // bound instead of growing in memory.
        let pending = Arc::new(AtomicUsize::new(0));
        let counted = pending.clone();
        let bytes = BodyDataStream::new(response.into_body()).map(move |chunk| {
            let chunk = chunk.map_err(|e| std::io::Error::other(chain(&*e)))?;
            if counted.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len() > MAX_MESSAGE {
                return Err(std::io::Error::other(format!(
                    "an event of the server's stream is over {MAX_MESSAGE} bytes"
                )));
            }
            Ok(chunk)
        });
        let mut events = sse_stream::SseStream::from_bytes_stream(bytes);
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| format!("the server's event stream broke: {e}"))?;
            pending.store(0, Ordering::Relaxed);
            if let Some(id) = event.id {
                *last_event = Some(id);
            }
            if let Some(retry) = event.retry {
                *wait = std::time::Duration::from_millis(retry.min(30_000));
            }
            let Some(data) = event.data.filter(|d| !d.is_empty()) else {
                continue;
            };
            if let Some(answer) = self.answer_in(data.as_bytes(), n, calls) {
                return Ok(answer);
            }
        }
        Err("the server's event stream ended before the call's answer".into())
    }

    /// The call's answer if `message` is it; else the message goes where it belongs (its
    /// progress to the call, anything else to the connection).
    fn answer_in(&self, message: &[u8], n: u64, calls: &CallRoutes) -> Option<Answer> {
        // Most answers are plain tool results: read in one pass, as a stdio server's are.
        if let Some((id, result)) = plain_answer(message)
            && id.direct() == Some(n)
        {
            return Some(Ok(Answered::Tool(result)));
        }
        if let Ok(envelope) = serde_json::from_slice::<Envelope<'_>>(message)
            && envelope.method.is_none()
            && envelope.id.as_ref().and_then(|id| id.direct()) == Some(n)
        {
            return envelope.answer();
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(message) {
            Ok(JsonRpcMessage::Notification(notification)) => {
                if let ServerNotification::ProgressNotification(p) = &notification.notification {
                    calls.progress(&p.params);
                } else {
                    let _ = self
                        .to_connection
                        .send(JsonRpcMessage::Notification(notification));
                }
            }
            Ok(other) => {
                let _ = self.to_connection.send(other);
            }
            Err(e) => tracing::debug!(
                "ignoring a message of a call's event stream that is no MCP message: {e}"
            ),
        }
        None
    }
}

/// A refusal of the call (a status other than success): the server's JSON-RPC error when
/// its body is one, else the status and what the body says.
async fn refused(
    status: reqwest::StatusCode,
    json: bool,
    response: http::Response<Body>,
) -> Result<Answer, NotPosted> {
    let challenge = response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = bounded(response, MAX_REFUSAL).await.unwrap_or_default();
    let auth = matches!(
        status,
        reqwest::StatusCode::UNAUTHORIZED | reqwest::StatusCode::FORBIDDEN
    );
    if json
        && !auth
        && let Ok(envelope) = serde_json::from_slice::<Envelope<'_>>(&body)
        && envelope.result.is_none()
        && let Some(Err(error)) = envelope.answer()
    {
        return Ok(Err(error));
    }
    Err(NotPosted::Failed(match challenge {
        Some(challenge) => {
            format!("the server refused toolhost's credentials (HTTP {status}, {challenge})")
        }
        None => format!("the server answered HTTP {status}: {}", excerpt(&body)),
    }))
}

/// The response's body, refused when over `max` bytes.
async fn bounded(response: http::Response<Body>, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut frames = response.into_body();
    while let Some(frame) = frames
        .frame()
        .await
        .transpose()
        .map_err(|e| format!("the answer could not be read: {}", chain(&*e)))?
    {
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        if body.len() + chunk.len() > max {
            return Err(format!("the server's answer is over {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of a body, as text, for an error message.
fn excerpt(body: &[u8]) -> Cow<'_, str> {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
    if body.len() > 300 {
        Cow::Owned(format!("{}…", text.trim_end()))
    } else {
        text
    }
}

/// An error with its causes (reqwest's own says only "error sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl NotPosted {
    /// The error a call that got no answer ends with.
    pub(crate) fn into_service_error(self) -> rmcp::ServiceError {
        let why = match self {
            NotPosted::SessionExpired => "the server no longer knows the session".to_string(),
            NotPosted::Failed(why) => why,
        };
        rmcp::ServiceError::TransportSend(rmcp::transport::DynamicTransportError::from_parts(
            "streamable HTTP",
            std::any::TypeId::of::<Posts>(),
            Box::new(std::io::Error::other(why)),
        ))
    }
}

#[cfg(test)]
mod tests;
