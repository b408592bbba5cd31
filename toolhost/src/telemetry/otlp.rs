//! OpenTelemetry traces over OTLP/HTTP with JSON: one span per call that ended, named
//! `execute_tool TOOL` after the GenAI conventions, sent in batches to a collector.
//!
//! Configured by the standard variables, read when `toolhost serve` starts:
//!
//! | variable | what it does |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the URL spans are posted to, as given |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | else: its base, `/v1/traces` appended (a collector's OTLP/HTTP port is 4318) |
//! | `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` | `http/json` (the default here); another is refused, saying so |
//! | `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` | `key=value,…` sent with each batch (an API key, say) |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource (`service.name` defaults to `toolhost`) |
//! | `OTEL_SDK_DISABLED=true` | no traces |
//!
//! A span's parent is the W3C `traceparent` the client sent in the MCP request's `_meta`;
//! a parent not sampled (flags `00`) leaves the call unsampled. Spans wait in a queue of
//! 4096 (beyond it they are dropped and counted in a warning); a batch goes every second or
//! at 512 spans, a failed one is retried once, and what is queued is sent when the server
//! stops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dispatcher_core::audit::{AuditEntry, AuditSink, TraceParent};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

const QUEUE: usize = 4096;
const BATCH: usize = 512;
const EVERY: Duration = Duration::from_secs(1);

/// Where and how spans are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracesConfig {
    /// The URL batches are posted to.
    pub url: String,
    /// Headers sent with each.
    pub headers: Vec<(String, String)>,
    /// The resource's attributes (`service.name` among them).
    pub resource: BTreeMap<String, String>,
}

impl TracesConfig {
    /// The configuration the environment (`var`) asks for: `Ok(None)` without an endpoint
    /// (or with the SDK disabled); an error naming the variable when one is unusable.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<TracesConfig>, String> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let url = match (
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => checked_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url.trim())?,
            (None, Some(base)) => {
                let base = checked_url("OTEL_EXPORTER_OTLP_ENDPOINT", base.trim())?;
                format!("{}/v1/traces", base.trim_end_matches('/'))
            }
            (None, None) => return Ok(None),
        };
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = set(name) {
                if protocol.trim() != "http/json" {
                    return Err(format!(
                        "{name}={protocol}: toolhost sends traces as OTLP over HTTP with JSON only; \
                         set {name}=http/json (an OpenTelemetry Collector takes it on its OTLP/HTTP port, 4318)"
                    ));
                }
                break;
            }
        }
        let headers = match set("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .map(|h| ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", h))
            .or_else(|| {
                set("OTEL_EXPORTER_OTLP_HEADERS").map(|h| ("OTEL_EXPORTER_OTLP_HEADERS", h))
            }) {
            Some((name, text)) => pairs(name, &text)?,
            None => Vec::new(),
        };
        let mut resource: BTreeMap<String, String> = match set("OTEL_RESOURCE_ATTRIBUTES") {
            Some(text) => pairs("OTEL_RESOURCE_ATTRIBUTES", &text)?
                .into_iter()
                .collect(),
            None => BTreeMap::new(),
        };
        if let Some(name) = set("OTEL_SERVICE_NAME") {
            resource.insert("service.name".into(), name.trim().to_string());
        }
        resource
            .entry("service.name".into())
            .or_insert_with(|| "toolhost".into());
        resource.insert("service.version".into(), env!("CARGO_PKG_VERSION").into());
        Ok(Some(TracesConfig {
            url,
            headers,
            resource,
        }))
    }
}

fn checked_url(name: &str, url: &str) -> Result<String, String> {
    match url.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(url.to_string())
        }
        _ => Err(format!(
            "{name}={url:?} is not an http:// or https:// URL (e.g. http://localhost:4318)"
        )),
    }
}

/// `key=value,key=value`, values percent-decoded.
fn pairs(name: &str, text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                format!("{name}: {pair:?} is not key=value (pairs are separated by commas)")
            })?;
            Ok((k.trim().to_string(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

enum Message {
    Span(Value),
    Flush(oneshot::Sender<()>),
}

/// The exporter: an [`AuditSink`] that turns each ended call into a span and queues it.
pub struct Traces {
    queue: mpsc::Sender<Message>,
    dropped: Arc<AtomicU64>,
}

impl Traces {
    /// Starts sending to `config`'s collector (on the current tokio runtime).
    pub fn start(config: TracesConfig) -> Result<Traces, String> {
        mcp_toolsets::install_tls_provider();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot make the OTLP client: {e}"))?;
        let (queue, rx) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(send_batches(client, config, rx, dropped.clone()));
        Ok(Traces { queue, dropped })
    }

    /// Sends what is queued; returns once it was sent (or failed), at most after `limit`.
    pub async fn flush(&self, limit: Duration) {
        let (done, sent) = oneshot::channel();
        if self.queue.send(Message::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(limit, sent).await;
        }
    }
}

impl AuditSink for Traces {
    fn reads_digest(&self) -> bool {
        false
    }

    fn record(&self, entry: &AuditEntry) {
        let Some(span) = span(entry) else { return };
        if self.queue.try_send(Message::Span(span)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if getrandom::fill(&mut bytes).is_err() || bytes == [0u8; N] {
        // Never all zero (an invalid id): the clock's nanoseconds instead.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes();
        for (b, n) in bytes.iter_mut().zip(nanos.iter().cycle()) {
            *b = *n | 1;
        }
    }
    bytes
}

fn attribute(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

/// The span of an ended call; `None` when its parent was not sampled.
fn span(entry: &AuditEntry) -> Option<Value> {
    let parent = entry.trace_parent.as_deref().and_then(TraceParent::parse);
    if parent.is_some_and(|p| p.flags & 1 == 0) {
        return None;
    }
    let trace_id = parent.map_or_else(random::<16>, |p| p.trace_id);
    let start = u128::from(entry.started_ms) * 1_000_000;
    let end = start + (entry.duration_ms.max(0.0) * 1_000_000.0) as u128;
    let mut attributes = vec![
        attribute("gen_ai.operation.name", "execute_tool"),
        attribute("gen_ai.tool.name", &entry.tool),
        attribute("gen_ai.tool.call.id", &entry.tool_use_id),
        attribute("toolhost.outcome", entry.outcome),
        attribute("toolhost.principal", &entry.principal),
        attribute("toolhost.session", &entry.session),
        attribute("toolhost.instance", &entry.instance),
    ];
    if let Some(class) = entry.class {
        attributes.push(attribute("toolhost.tool.class", class.as_str()));
    }
    if let Some(decision) = &entry.decision {
        attributes.push(attribute("toolhost.decision", decision));
    }
    if let Some(by) = entry
        .decided_by
        .as_ref()
        .and_then(|b| serde_json::to_value(b).ok())
    {
        for (key, value) in by.as_object().into_iter().flatten() {
            if let Some(value) = value.as_str() {
                let key = if key == "by" {
                    "toolhost.decided_by".to_string()
                } else {
                    format!("toolhost.decided_by.{key}")
                };
                attributes.push(attribute(&key, value));
            }
        }
    }
    if let Some(command) = &entry.command_executed {
        attributes.push(attribute("toolhost.command", command));
    }
    let mut span = json!({
        "traceId": hex(&trace_id),
        "spanId": hex(&random::<8>()),
        "name": format!("execute_tool {}", entry.tool),
        "kind": 1,
        "startTimeUnixNano": start.to_string(),
        "endTimeUnixNano": end.to_string(),
        "attributes": attributes,
    });
    if let Some(p) = parent {
        span["parentSpanId"] = json!(hex(&p.parent_id));
        span["flags"] = json!(u32::from(p.flags) | 0x100);
    }
    if entry.outcome != "ok" {
        if let Some(a) = span["attributes"].as_array_mut() {
            a.push(attribute("error.type", entry.outcome));
        }
        span["status"] = json!({"code": 2, "message": entry.outcome});
    }
    Some(span)
}

async fn send_batches(
    client: reqwest::Client,
    config: TracesConfig,
    mut rx: mpsc::Receiver<Message>,
    dropped: Arc<AtomicU64>,
) {
    let resource: Vec<Value> = config
        .resource
        .iter()
        .map(|(k, v)| attribute(k, v))
        .collect();
    let mut warned_at: Option<std::time::Instant> = None;
    let mut batch = Vec::new();
    let mut flushes = Vec::new();
    loop {
        // Wait for a first span, then gather for up to a second.
        let first = rx.recv().await;
        let mut closed = first.is_none();
        let deadline = tokio::time::Instant::now() + EVERY;
        let take = |m: Message, batch: &mut Vec<Value>, flushes: &mut Vec<_>| match m {
            Message::Span(s) => batch.push(s),
            Message::Flush(done) => flushes.push(done),
        };
        if let Some(m) = first {
            take(m, &mut batch, &mut flushes);
        }
        while !closed && batch.len() < BATCH && flushes.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(m)) => take(m, &mut batch, &mut flushes),
                Ok(None) => closed = true,
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let body = json!({"resourceSpans": [{
                "resource": {"attributes": resource},
                "scopeSpans": [{
                    "scope": {"name": "toolhost", "version": env!("CARGO_PKG_VERSION")},
                    "spans": std::mem::take(&mut batch),
                }],
            }]});
            let mut failure = None;
            for attempt in 0..2 {
                match post(&client, &config, &body).await {
                    Ok(()) => {
                        failure = None;
                        break;
                    }
                    Err(e) => {
                        failure = Some(e);
                        if attempt == 0 {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            }
            let lost = dropped.swap(0, Ordering::Relaxed);
            let now = std::time::Instant::now();
            if (failure.is_some() || lost > 0)
                && warned_at.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
            {
                warned_at = Some(now);
                if let Some(e) = &failure {
                    tracing::warn!(
                        "traces could not be sent to {}: {e}; this batch is dropped",
                        config.url
                    );
                }
                if lost > 0 {
                    tracing::warn!(
                        "{lost} spans were dropped: the trace queue was full (is the collector at {} keeping up?)",
                        config.url
                    );
                }
            }
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
        if closed {
            return;
        }
    }
}

async fn post(client: &reqwest::Client, config: &TracesConfig, body: &Value) -> Result<(), String> {
    let mut request = client
        .post(&config.url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    for (k, v) in &config.headers {
        request = request.header(k, v);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        let text = response.text().await.unwrap_or_default();
        Err(format!(
            "{status}: {}",
            text.chars().take(300).collect::<String>()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<Option<TracesConfig>, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        TracesConfig::from_env(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn the_endpoint_protocol_and_headers_come_from_the_standard_variables() {
        assert_eq!(env(&[]).unwrap(), None);
        let c = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%3Db, tenant=t1"),
            ("OTEL_SERVICE_NAME", "gateway"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.url, "http://collector:4318/v1/traces");
        assert_eq!(
            c.headers,
            vec![
                ("x-api-key".to_string(), "a=b".to_string()),
                ("tenant".to_string(), "t1".to_string())
            ]
        );
        assert_eq!(c.resource["service.name"], "gateway");
        assert_eq!(c.resource["deployment.environment"], "prod");
        let c = env(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://x.example/otlp/spans",
            ),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.url, "https://x.example/otlp/spans");
        let off = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert_eq!(off.unwrap(), None);
    }

    #[test]
    fn an_unusable_variable_is_refused_naming_it() {
        for (vars, says) in [
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"),
                ],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
        ] {
            let e = env(&vars).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }

    fn entry(trace_parent: Option<&str>, outcome: &'static str) -> AuditEntry {
        AuditEntry {
            time_ms: 0,
            instance: Arc::from("i"),
            principal: Arc::from("local"),
            session: Arc::from("s"),
            tool: Arc::from("shell"),
            tool_use_id: Arc::from("t1"),
            class: Some(tool_api::SideEffect::Execute),
            arguments_sha256: String::new(),
            decision: Some("allow".into()),
            decided_by: Some(dispatcher_core::DecidedBy::User {
                client: "terminal".into(),
            }),
            outcome,
            files_modified: Vec::new(),
            command_executed: Some("ls".into()),
            duration_ms: 2.5,
            started_ms: 1_000,
            trace_parent: trace_parent.map(Arc::from),
        }
    }

    #[test]
    fn a_span_takes_its_parent_times_and_attributes() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let s = span(&entry(Some(tp), "timeout")).unwrap();
        assert_eq!(s["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s["parentSpanId"], "00f067aa0ba902b7");
        assert_eq!(s["name"], "execute_tool shell");
        assert_eq!(s["startTimeUnixNano"], "1000000000");
        assert_eq!(s["endTimeUnixNano"], "1002500000");
        assert_eq!(s["status"]["code"], 2);
        let attrs: BTreeMap<String, String> = s["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["key"].as_str().unwrap().to_string(),
                    a["value"]["stringValue"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(attrs["toolhost.decided_by"], "user");
        assert_eq!(attrs["toolhost.decided_by.client"], "terminal");
        assert_eq!(attrs["toolhost.tool.class"], "execute");
        assert_eq!(attrs["error.type"], "timeout");
        // No parent: a trace of its own; an unsampled parent: no span.
        let root = span(&entry(None, "ok")).unwrap();
        assert_eq!(root["traceId"].as_str().unwrap().len(), 32);
        assert!(root.get("parentSpanId").is_none() && root.get("status").is_none());
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(span(&entry(Some(unsampled), "ok")), None);
    }
}
