//! toolhost over HTTP: MCP streamable HTTP at `/mcp` (both protocol eras), the control API
//! at `/v1/…` and the web console at `/` (see [`control`]).
//!
//! In a 2025-era session, a request reusing the id of one in flight is refused, and one
//! over the request timeout gets the same error on its event stream and is cancelled
//! ([`session`]).
//!
//! Every request first passes [`access`] (`Host`, `Origin`, a bearer token or an OAuth
//! access token; a refused OAuth token is answered by `authorization`, which also serves
//! the protected resource metadata and the console's login). On `/mcp`, a
//! POST body is read with the `[mcp] max_message_bytes` limit and screened like a stdio
//! line ([`crate::screen`]) before rmcp's streamable HTTP service sees it, so a bad
//! message gets a JSON-RPC error naming the problem (`400`; `413` when too large; `200`
//! for invalid params of a valid request) and never a silent drop. A request that takes
//! longer than the request timeout gets `504` with a JSON-RPC error, and its call is
//! cancelled.
//!
//! A plain stateless (2026-07-28) `tools/call` is then answered without rmcp's per-request
//! service (the `stateless` module); anything else goes through that service.
//!
//! rmcp's own `Host`/`Origin` checks are switched off: [`access`] makes the one decision
//! for every route, MCP and control alike.
//!
//! Shutdown ([`Server::serve`], once its `shutdown` resolves): stop accepting, end the event streams, let requests in
//! flight finish within the grace period, then cancel what still runs.

pub mod access;
mod authorization;
mod connections;
pub mod control;
pub mod session;
mod stateless;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http_body_util::BodyExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::screen::{INVALID_PARAMS, MessageBuffer, Rejection, screen};
use crate::tasks_2025;
use crate::{McpServer, McpShared};
use access::{Access, Refusal};
use authorization::{LOGIN_PATH, METADATA_PATH, login_routes, metadata_routes, token_refused};

/// What an HTTP server is set up with.
pub struct HttpOptions {
    /// Who may talk to it.
    pub access: Arc<Access>,
    /// The largest MCP message, in bytes.
    pub max_message_bytes: usize,
    /// How long one request may take before `504`.
    pub request_timeout: Duration,
}

/// Requests in flight, for the drain at shutdown.
#[derive(Default)]
struct Inflight {
    count: AtomicUsize,
    idle: tokio::sync::Notify,
}

struct InflightGuard(Arc<Inflight>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// What every request is checked and counted with; shared, since the middleware clones
/// its state for every request.
type Gate = Arc<GateState>;

struct GateState {
    access: Arc<Access>,
    inflight: Arc<Inflight>,
    max_message_bytes: usize,
    request_timeout: Duration,
    /// Whether 2025-era clients are served the 2025-11-25 tasks
    /// ([`crate::tasks_2025`]).
    tasks_2025: bool,
    /// Answers a plain stateless `tools/call` without rmcp's per-request service.
    stateless: Option<stateless::StatelessCalls>,
}

/// A router and the handles its shutdown needs.
pub struct Server {
    router: Router,
    inflight: Arc<Inflight>,
    /// Ends rmcp's sessions and streams, and the event streams.
    stop: CancellationToken,
    /// The MCP handlers' `subscriptions/listen` streams, ended with their final result as
    /// soon as shutdown begins (before `stop` closes the connections they write to).
    mcp: Option<Arc<McpShared>>,
}

impl Server {
    /// The routes: `/mcp` when `mcp` is given, and the control API and console over
    /// `control`.
    pub fn new(
        mcp: Option<Arc<McpShared>>,
        control: control::Control,
        options: HttpOptions,
    ) -> Server {
        let inflight = Arc::new(Inflight::default());
        let stop = CancellationToken::new();
        let listening = mcp.clone();
        let gate = Arc::new(GateState {
            access: options.access,
            inflight: inflight.clone(),
            max_message_bytes: options.max_message_bytes,
            request_timeout: options.request_timeout,
            tasks_2025: mcp
                .as_ref()
                .is_some_and(|shared| shared.tasks.settings().enabled),
            stateless: mcp.as_ref().map(|shared| {
                stateless::StatelessCalls::new(McpServer::new(shared.clone()), stop.clone())
            }),
        });
        let mut router = control::routes(control, stop.clone());
        if let Some(metadata) = metadata_routes(&gate.access) {
            router = router.merge(metadata);
        }
        if let Some(login) = login_routes(&gate.access) {
            router = router.merge(login);
        }
        let endpoints = if mcp.is_some() {
            control::ALL_ENDPOINTS
        } else {
            control::CONTROL_ENDPOINTS
        };
        if let Some(shared) = mcp {
            let config = StreamableHttpServerConfig::default()
                .with_legacy_session_mode(true)
                .with_json_response(true)
                .with_max_request_body_bytes(options.max_message_bytes)
                .with_cancellation_token(stop.child_token())
                .disable_allowed_hosts()
                .disable_allowed_origins();
            let service = StreamableHttpService::new(
                move || Ok(McpServer::new(shared.clone())),
                Arc::new(session::SessionRequests::new(
                    LocalSessionManager::default(),
                    options.request_timeout,
                )),
                config,
            );
            let mcp = Router::new()
                .route_service("/mcp", OnDemand(Arc::new(service)))
                .layer(axum::middleware::from_fn_with_state(
                    gate.clone(),
                    screen_mcp,
                ));
            router = router.merge(mcp);
        }
        let router = router
            .fallback(move |method: http::Method, uri: http::Uri| async move {
                control::no_such_endpoint(&method, &uri, endpoints)
            })
            .method_not_allowed_fallback(move |method: http::Method, uri: http::Uri| async move {
                control::wrong_method(&method, &uri, endpoints)
            })
            .layer(axum::middleware::from_fn_with_state(gate, admit));
        Server {
            router,
            inflight,
            stop,
            mcp: listening,
        }
    }

    /// Serves on `listener` until `shutdown` resolves, then drains: no new connections,
    /// event streams end, requests in flight get up to `grace` to finish, and rmcp's
    /// sessions are closed. Returns whether everything finished within the grace period.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
        grace: Duration,
    ) -> std::io::Result<bool> {
        let (accepting_tx, accepting_rx) = tokio::sync::oneshot::channel::<()>();
        let server = connections::serve(listener, self.router.clone(), async move {
            let _ = accepting_rx.await;
        });
        let mut server = std::pin::pin!(server);
        tokio::select! {
            () = &mut server => return Ok(true),
            () = shutdown => {}
        }
        // Listen streams end first, each with its final result: their handlers return
        // within a moment, and the results get a moment to reach the wire before `stop`
        // ends the streams they go out on.
        if let Some(mcp) = &self.mcp
            && mcp.listens.end(Duration::from_secs(1)).await > 0
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = accepting_tx.send(());
        // Long-lived streams (events, MCP's GET streams) are not counted: the drain waits
        // for calls, then `stop` ends the streams.
        let drained = tokio::time::timeout(grace, async {
            loop {
                let idle = self.inflight.idle.notified();
                if self.inflight.count.load(Ordering::Acquire) == 0 {
                    break;
                }
                idle.await;
            }
        })
        .await
        .is_ok();
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut server).await;
        Ok(drained)
    }
}

/// A service the middleware in front of it clones for every request, behind an `Arc`: it
/// is cloned when a request reaches it. rmcp's is dear to clone (its config's cancellation
/// token takes a lock), and the stateless fast path answers most calls before it.
struct OnDemand<S>(Arc<S>);

impl<S> Clone for OnDemand<S> {
    fn clone(&self) -> Self {
        OnDemand(self.0.clone())
    }
}

impl<S, R> tower_service::Service<R> for OnDemand<S>
where
    S: tower_service::Service<R> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        // Readiness is asked of the clone that takes the request, in `call`.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> S::Future {
        let mut service = (*self.0).clone();
        service.call(request)
    }
}

/// Access checks for every route; counts requests in flight (long-lived streams aside).
async fn admit(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    let principal = match gate.access.check(request.headers()).await {
        Ok(p) => p,
        Err(Refusal::Forbidden(why)) => {
            return (StatusCode::FORBIDDEN, why).into_response();
        }
        // The console page holds no data and no secret: it loads without the token, asks
        // for it, and sends it with every request of its own (which are checked). The
        // protected resource metadata is how a client learns where to get a token.
        // And the console's login is how it gets a token.
        Err(Refusal::Unauthorized(_) | Refusal::Token(_))
            if (request.method() == http::Method::GET
                && (request.uri().path() == "/"
                    || request.uri().path().starts_with(METADATA_PATH)))
                || request.uri().path() == LOGIN_PATH =>
        {
            return next.run(request).await;
        }
        Err(Refusal::Unauthorized(why)) => {
            return (
                StatusCode::UNAUTHORIZED,
                [(http::header::WWW_AUTHENTICATE, "Bearer realm=\"toolhost\"")],
                why,
            )
                .into_response();
        }
        Err(Refusal::Token(rejected)) => return token_refused(&gate.access, &rejected),
    };
    // The token has done its job: nothing downstream (rmcp's logs included) sees it.
    request.headers_mut().remove(http::header::AUTHORIZATION);
    request.extensions_mut().insert(principal);
    let streaming = request.method() == http::Method::GET
        && (request.uri().path() == "/mcp" || request.uri().path() == "/v1/events");
    if streaming {
        return next.run(request).await;
    }
    gate.inflight.count.fetch_add(1, Ordering::AcqRel);
    let _counted = InflightGuard(gate.inflight.clone());
    next.run(request).await
}

/// A JSON-RPC error response with an HTTP status.
fn rejection_response(status: StatusCode, rejection: &Rejection) -> Response {
    rejection.log();
    let body = rejection
        .response()
        .unwrap_or_else(|| json!({"jsonrpc": "2.0", "id": null, "error": {"code": rejection.code, "message": rejection.message}}));
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `404` with `-32601`: a method protocol 2026-07-28 removed.
fn removed_method(id: Option<Value>, method: &str) -> Response {
    let rejection = Rejection {
        id: Some(id.unwrap_or(Value::Null)),
        code: -32601,
        message: format!(
            "Method not found: '{method}' was removed in protocol 2026-07-28; use server/discover"
        ),
        data: None,
    };
    rejection_response(StatusCode::NOT_FOUND, &rejection)
}

/// The body, or its refusal when it is over `limit` (read through up to 1 GiB without
/// being held, for its size and id).
async fn read_limited(body: Body, limit: usize) -> Result<Vec<u8>, Rejection> {
    const READ_THROUGH: usize = 1 << 30;
    let mut body = body;
    let mut message = MessageBuffer::new(limit);
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Ok(chunk) = frame.into_data() {
            message.push(&chunk);
        }
        if message.len() > READ_THROUGH {
            break;
        }
    }
    message.take()
}

/// `/mcp`: POST bodies screened before rmcp; each request under the request timeout; the
/// protocol library's plain-text refusals made JSON-RPC errors.
async fn screen_mcp(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    if request.method() != http::Method::POST {
        return as_json_rpc(next.run(request).await, Value::Null).await;
    }
    let stateless = request
        .headers()
        .get(&stateless::PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= "2026-07-28");
    let (parts, body) = request.into_parts();
    let mut bytes = match read_limited(body, gate.max_message_bytes).await {
        Ok(b) => b,
        Err(too_large) => return rejection_response(StatusCode::PAYLOAD_TOO_LARGE, &too_large),
    };
    let legacy_tasks = gate.tasks_2025 && !stateless;
    if legacy_tasks && let Some(renamed) = tasks_2025::rename(&bytes) {
        bytes = renamed;
    }
    let mut screened = screen(&bytes);
    if stateless
        && let Some(calls) = &gate.stateless
        && let Ok(message) = screened
    {
        let id = id_of(&message);
        match tokio::time::timeout(gate.request_timeout, calls.answer(&parts, message)).await {
            Ok(Ok(answered)) => return answered,
            Ok(Err(message)) => screened = Ok(message),
            Err(_) => {
                return rejection_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    &Rejection::timed_out(id, gate.request_timeout),
                );
            }
        }
    }
    // A 2025-era answer to `initialize` or `tools/list` declares the 2025-11-25 tasks.
    let mut adapt: Option<fn(&mut Value)> = None;
    let id = match screened {
        // `initialize` is gone from 2026-07-28: 404 and -32601, as that revision says.
        Ok(rmcp::model::ClientJsonRpcMessage::Request(r))
            if stateless
                && matches!(r.request, rmcp::model::ClientRequest::InitializeRequest(_)) =>
        {
            return removed_method(serde_json::to_value(&r.id).ok(), "initialize");
        }
        Err(rejection)
            if stateless
                && rejection
                    .data
                    .as_ref()
                    .is_some_and(|d| d["method"] == "initialize") =>
        {
            return removed_method(rejection.id, "initialize");
        }
        Ok(message) => match &message {
            rmcp::model::ClientJsonRpcMessage::Request(r) => {
                adapt = match &r.request {
                    rmcp::model::ClientRequest::InitializeRequest(_) if legacy_tasks => {
                        Some(tasks_2025::declare)
                    }
                    rmcp::model::ClientRequest::ListToolsRequest(_) if legacy_tasks => {
                        Some(tasks_2025::offer)
                    }
                    _ => None,
                };
                id_of(&message)
            }
            _ => Value::Null,
        },
        Err(rejection) => {
            let status = if rejection.code == INVALID_PARAMS {
                StatusCode::OK
            } else {
                StatusCode::BAD_REQUEST
            };
            return rejection_response(status, &rejection);
        }
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    match tokio::time::timeout(gate.request_timeout, next.run(request)).await {
        Ok(response) => match adapt {
            Some(adapt) => adapted(as_json_rpc(response, id).await, adapt).await,
            None => as_json_rpc(response, id).await,
        },
        Err(_) => rejection_response(
            StatusCode::GATEWAY_TIMEOUT,
            &Rejection::timed_out(id, gate.request_timeout),
        ),
    }
}

/// A request's id as JSON (`null` for anything else).
fn id_of(message: &rmcp::model::ClientJsonRpcMessage) -> Value {
    match message {
        rmcp::model::ClientJsonRpcMessage::Request(r) => {
            serde_json::to_value(&r.id).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    }
}

/// A JSON-RPC result changed by `adapt`, in a JSON body or in the event stream a 2025-era
/// session answers with (which ends with the answer); any other response as it is.
async fn adapted(response: Response, adapt: fn(&mut Value)) -> Response {
    let kind = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|t| t.as_bytes().to_vec())
        .unwrap_or_default();
    let events = kind.starts_with(b"text/event-stream");
    if !response.status().is_success() || !(events || kind.starts_with(b"application/json")) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = body.collect().await.map(|b| b.to_bytes()) else {
        return Response::from_parts(parts, Body::empty());
    };
    let change = |json: &str| -> Option<String> {
        let mut message: Value = serde_json::from_str(json).ok()?;
        adapt(message.get_mut("result")?);
        Some(message.to_string())
    };
    let text = String::from_utf8_lossy(&bytes);
    let changed = if events {
        let mut out = String::with_capacity(text.len() + 128);
        for line in text.split_inclusive('\n') {
            match line
                .strip_prefix("data:")
                .and_then(|data| change(data.trim()))
            {
                Some(data) => {
                    out.push_str("data: ");
                    out.push_str(&data);
                    out.push('\n');
                }
                None => out.push_str(line),
            }
        }
        out
    } else {
        change(&text).unwrap_or_else(|| text.into_owned())
    };
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(changed))
}

/// A refusal of rmcp's streamable HTTP transport (`400 Session ID is required`, `404
/// Session not found`, `406`, `415`, a bad `MCP-Protocol-Version`) comes as plain text with
/// no content type; a client reading JSON-RPC gets it as a JSON-RPC error (`-32000`, as the
/// TypeScript SDK's server answers them), with the same status, the request's id when
/// there is one, and what to do next. Every other response passes as it is.
async fn as_json_rpc(response: Response, id: Value) -> Response {
    let status = response.status();
    let plain = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_none_or(|t| t.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(Ok(text)) = tokio::time::timeout(
        Duration::from_secs(5),
        http_body_util::Limited::new(body, 4096).collect(),
    )
    .await
    else {
        return Response::from_parts(parts, Body::from("refused by the MCP transport"));
    };
    let text = String::from_utf8_lossy(&text.to_bytes()).trim().to_string();
    let next = if text.contains("Session ID is required") {
        "; initialize first and send the Mcp-Session-Id header it answers with (or use protocol 2026-07-28, which has no sessions)"
    } else if text.contains("Session not found") {
        "; the session was closed or has expired: initialize a new one"
    } else if status == StatusCode::METHOD_NOT_ALLOWED {
        "; /mcp answers POST (messages), GET (a session's event stream) and DELETE (end a session)"
    } else {
        ""
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32000, "message": format!("{text}{next}")},
    });
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
