//! The control API and the web console: where a person watches the calls and answers the
//! confirmations of every session this process serves (stdio or HTTP), from a browser or
//! an IDE.
//!
//! | route | what it does |
//! |---|---|
//! | `GET /` | the console: pending confirmations with Allow / Deny / Always, a live event log |
//! | `GET /v1/events[?session=ID]` | server-sent events of the `tool.*` stream, one per event: `event:` its name, `data:` the same JSON as the library's events |
//! | `GET /v1/confirmations[?session=ID]` | the pending confirmation requests, oldest first (JSON array) |
//! | `POST /v1/confirmations/{id}` | answers one: `{"decision": "allow" \| "deny" \| "always"}`; `200`, or `409` when another client (terminal, MCP client, another console) answered first, naming it; `404` for an unknown id |
//! | `GET /v1/health` | `{"status": "ok" \| "degraded", "store": {"store", "up", "detail"?}}`: always `200` while the process serves (the instances share one store, so a load balancer that dropped every instance when it is down would serve nobody); `degraded` while the shared state store cannot be reached, which is checked on the spot |
//!
//! The console is one HTML file in the binary: no build step, nothing fetched from
//! elsewhere. It reads the event stream with `fetch` (so a bearer token can be sent) and
//! asks for the token when the server answers `401`.
//!
//! A caller an identity provider vouched for ([`crate::Principal::own_calls_only`]) sees
//! the events and confirmations of its own calls only, and a confirmation of another's is
//! unknown to it (`404`); the local user and a static token's holder see every caller's.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use dispatcher_core::ResolveError;
use dispatcher_core::shared::Seen;
use dispatcher_core::{Decision, Dispatcher};
use futures_util::Stream;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{Consoles, Principal};

/// The console page.
const CONSOLE: &str = include_str!("console.html");

/// The name answers from the control API are recorded under (`decided_by`).
pub const CLIENT_NAME: &str = "web-console";

/// What `GET /metrics` serves: a text exposition of the instance (the program's
/// Prometheus metrics), rendered from the dispatcher's state as it is at each request.
pub trait MetricsExposition: Send + Sync {
    /// The exposition's `Content-Type`.
    fn content_type(&self) -> &'static str {
        "text/plain; version=0.0.4; charset=utf-8"
    }
    /// The body, `dispatcher`'s state as it is now.
    fn render(&self, dispatcher: &Dispatcher) -> String;
}

/// What the control API works on.
#[derive(Clone)]
pub struct Control {
    dispatcher: Dispatcher,
    consoles: Arc<Consoles>,
    metrics: Option<Arc<dyn MetricsExposition>>,
}

impl Control {
    /// The control API over a dispatcher's events and confirmation broker; a console
    /// following the events is registered with `consoles` as watching the calls it sees
    /// (every caller's, or its own caller's).
    pub fn new(dispatcher: Dispatcher, consoles: Arc<Consoles>) -> Self {
        Control {
            dispatcher,
            consoles,
            metrics: None,
        }
    }

    /// Serves `metrics` on `GET /metrics` (without: `404`).
    pub fn metrics(mut self, metrics: Option<Arc<dyn MetricsExposition>>) -> Self {
        self.metrics = metrics;
        self
    }
}

#[derive(Clone)]
struct ControlState {
    control: Control,
    stop: CancellationToken,
}

/// The routes; event streams end when `stop` is cancelled.
pub fn routes(control: Control, stop: CancellationToken) -> Router {
    Router::new()
        .route("/", get(console))
        .route("/v1/events", get(events))
        .route("/v1/confirmations", get(pending))
        .route("/v1/confirmations/{id}", post(answer))
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(ControlState { control, stop })
}

async fn console() -> impl IntoResponse {
    (
        [
            (http::header::CACHE_CONTROL, "no-store"),
            (
                http::header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            ),
        ],
        Html(CONSOLE),
    )
}

async fn metrics(State(state): State<ControlState>) -> Response {
    match &state.control.metrics {
        Some(metrics) => (
            [(http::header::CONTENT_TYPE, metrics.content_type())],
            metrics.render(&state.control.dispatcher),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "GET /metrics is served by `toolhost serve --http`, not beside stdio"})),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct SessionFilter {
    session: Option<String>,
}

fn matches(event: &serde_json::Value, session: Option<&str>, caller: Option<&str>) -> bool {
    session.is_none_or(|s| event["session_id"] == s)
        && caller.is_none_or(|p| event["principal"] == p)
}

/// The principal whose calls alone `caller` may see (`None`: every caller's).
fn only_of(caller: Option<&axum::Extension<Principal>>) -> Option<String> {
    caller.filter(|c| c.own_calls_only).map(|c| c.id.clone())
}

async fn events(
    State(state): State<ControlState>,
    Query(filter): Query<SessionFilter>,
    caller: Option<axum::Extension<Principal>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let only = only_of(caller.as_ref());
    // Every instance's, when they share a store: a console on one follows them all.
    let rx = state.control.dispatcher.subscribe_everywhere();
    let stop = state.stop.clone();
    let watching = state.control.consoles.watch(only.as_deref());
    let stream = futures_util::stream::unfold(
        (rx, stop, filter.session, watching, only),
        |(mut rx, stop, session, watching, only)| async move {
            loop {
                let received = tokio::select! {
                    r = rx.next() => r,
                    () = stop.cancelled() => return None,
                };
                let event = match received? {
                    Seen::Event {
                        mut event,
                        instance,
                    } if matches(&event, session.as_deref(), only.as_deref()) => {
                        let name = event["type"].as_str().unwrap_or("tool.event").to_string();
                        event["instance"] = json!(&*instance);
                        Event::default().event(name).data(event.to_string())
                    }
                    Seen::Event { .. } => continue,
                    Seen::Missed(n) => Event::default()
                        .event("lagged")
                        .data(json!({"missed": n}).to_string()),
                };
                return Some((Ok(event), (rx, stop, session, watching, only)));
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

async fn pending(
    State(state): State<ControlState>,
    Query(filter): Query<SessionFilter>,
    caller: Option<axum::Extension<Principal>>,
) -> Response {
    // Every instance's, when they share a store.
    let mut pending = state
        .control
        .dispatcher
        .pending_confirmations(filter.session.as_deref())
        .await;
    if let Some(only) = only_of(caller.as_ref()) {
        pending.retain(|request| request["principal"] == only.as_str());
    }
    axum::Json(json!(pending)).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    decision: String,
}

/// The endpoints of a server with the control API only (`serve --mcp --control`).
pub const CONTROL_ENDPOINTS: &str = "GET / (the console), GET /v1/events, GET /v1/confirmations, \
                                     POST /v1/confirmations/{id}, GET /v1/health";

/// The endpoints of `serve --http`: MCP as well.
pub const ALL_ENDPOINTS: &str = "GET / (the console), /mcp (MCP over streamable HTTP), \
                                 GET /v1/events, GET /v1/confirmations, POST /v1/confirmations/{id}, \
                                 GET /v1/health, GET /metrics";

/// How this instance is doing: its shared state store, checked now.
async fn health(State(state): State<ControlState>) -> Response {
    let store = state.control.dispatcher.store();
    let reached = store.check().await;
    let mut health = store.health();
    if let Err(e) = reached {
        health.up = false;
        health.detail = Some(e.detail);
    }
    let status = if health.up { "ok" } else { "degraded" };
    axum::Json(json!({"status": status, "store": health})).into_response()
}

/// `404` for a path the server does not serve, naming the `endpoints` it does.
pub fn no_such_endpoint(method: &http::Method, uri: &http::Uri, endpoints: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no endpoint {method} {}; this server answers {endpoints}",
            uri.path()
        ),
    )
}

/// `405` for a path served with other methods, naming the `endpoints` it serves.
pub fn wrong_method(method: &http::Method, uri: &http::Uri, endpoints: &str) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} does not take {method}; this server answers {endpoints}",
            uri.path()
        ),
    )
}

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

async fn answer(
    State(state): State<ControlState>,
    Path(id): Path<String>,
    caller: Option<axum::Extension<Principal>>,
    body: Result<axum::Json<AnswerBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Some(only) = only_of(caller.as_ref()) {
        let pending = state.control.dispatcher.pending_confirmations(None).await;
        let own = pending
            .iter()
            .any(|r| r["request_id"] == id.as_str() && r["principal"] == only.as_str());
        if !own {
            return error(
                StatusCode::NOT_FOUND,
                format!("no pending confirmation {id} of a call of yours"),
            );
        }
    }
    let body = match body {
        Ok(axum::Json(b)) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "expected a JSON body {{\"decision\": \"allow\" | \"deny\" | \"always\"}}: {e}"
                ),
            );
        }
    };
    let decision = match body.decision.as_str() {
        "allow" => Decision::Allow,
        "deny" => Decision::Deny,
        "always" | "always_allow" => Decision::AlwaysAllow,
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("unknown decision '{other}': use allow, deny or always"),
            );
        }
    };
    // Wherever it waits, when the instances share a store: the first answer wins.
    match state
        .control
        .dispatcher
        .answer_confirmation(&id, decision, CLIENT_NAME)
        .await
    {
        Ok(()) => axum::Json(json!({
            "request_id": id,
            "decision": decision.as_str(),
            "decided_by": CLIENT_NAME,
        }))
        .into_response(),
        Err(e @ ResolveError::AlreadyResolved { .. }) => error(StatusCode::CONFLICT, e.to_string()),
        Err(e @ ResolveError::Unknown { .. }) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ ResolveError::Unreachable { .. }) => {
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
    }
}
