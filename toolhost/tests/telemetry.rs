//! What an operator watches: Prometheus metrics on `GET /metrics`, and OpenTelemetry spans
//! sent over OTLP/HTTP (JSON) to a receiver in the test that decodes what arrives, the
//! client's W3C trace context (`_meta.traceparent`) as their parent.
#![cfg(test)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::raw_http::{post_stateless, post_stateless_with, request, stateless};
use common::{Server, command, start, workspace};

/// What the collector received: a request's path, headers and JSON body.
type Received = (String, Vec<(String, String)>, Value);

/// A collector: each request received, on a channel; answers 200.
fn receiver() -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut headers = Vec::new();
                    let mut length = 0;
                    loop {
                        let mut h = String::new();
                        reader.read_line(&mut h).unwrap();
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap();
                        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
                        if k == "content-length" {
                            length = v.parse().unwrap();
                        }
                        headers.push((k, v));
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let _ = tx.send((path, headers, serde_json::from_slice(&body).unwrap()));
                    let _ = out.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
                    );
                }
            });
        }
    });
    (url, rx)
}

/// The spans in what arrived within `wait`, with the resource of each.
fn spans_within(
    rx: &mpsc::Receiver<Received>,
    wanted: usize,
    wait: Duration,
) -> Vec<(Value, Value)> {
    let deadline = Instant::now() + wait;
    let mut spans = Vec::new();
    while spans.len() < wanted {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((path, headers, body)) = rx.recv_timeout(left) else {
            break;
        };
        assert_eq!(path, "/v1/traces");
        assert!(
            headers
                .iter()
                .any(|(k, v)| k == "content-type" && v == "application/json"),
            "{headers:?}"
        );
        assert!(
            headers.iter().any(|(k, v)| k == "x-tenant" && v == "t=1"),
            "{headers:?}"
        );
        for rs in body["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for span in ss["spans"].as_array().unwrap() {
                    spans.push((rs["resource"].clone(), span.clone()));
                }
            }
        }
    }
    spans
}

fn attributes(span: &Value) -> std::collections::BTreeMap<String, String> {
    span["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["key"].as_str().unwrap().to_string(),
                a["value"]["stringValue"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn traced(collector: &str) -> (Server, tempfile::TempDir) {
    let ws = workspace();
    let mut cmd = command(ws.path(), &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t%3D1")
        .env("OTEL_SERVICE_NAME", "toolhost-under-test");
    (start(cmd), ws)
}

fn read_call(id: i64, traceparent: Option<&str>) -> Value {
    let mut message = stateless(
        id,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "README.md"}}),
        false,
    );
    if let Some(tp) = traceparent {
        message["params"]["_meta"]["traceparent"] = json!(tp);
    }
    message
}

#[test]
fn a_call_becomes_a_span_whose_parent_is_the_clients_trace_context() {
    let (collector, arrived) = receiver();
    let (server, _ws) = traced(&collector);
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = post_stateless(&server.addr, &read_call(1, Some(parent)));
    assert_eq!(r.json()["result"]["isError"], false, "{r:?}");
    let r = post_stateless(&server.addr, &read_call(2, None));
    assert_eq!(r.json()["result"]["isError"], false, "{r:?}");
    let unknown = stateless(
        3,
        "tools/call",
        json!({"name": "nope", "arguments": {}}),
        false,
    );
    post_stateless(&server.addr, &unknown);
    let spans = spans_within(&arrived, 3, Duration::from_secs(15));
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let (resource, child) = &spans[0];
    assert_eq!(
        attributes(resource)["service.name"],
        "toolhost-under-test",
        "{resource}"
    );
    assert_eq!(child["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(child["parentSpanId"], "00f067aa0ba902b7");
    assert_eq!(child["name"], "execute_tool read_file");
    let start: u128 = child["startTimeUnixNano"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let end: u128 = child["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
    assert!(end >= start && start > 1_700_000_000_000_000_000, "{child}");
    let a = attributes(child);
    assert_eq!(a["gen_ai.tool.name"], "read_file");
    assert_eq!(a["toolhost.tool.class"], "read");
    assert_eq!(a["toolhost.decision"], "allow");
    assert_eq!(a["toolhost.decided_by"], "policy");
    assert_eq!(a["toolhost.outcome"], "ok");
    // Without a parent: a trace of its own.
    let root = &spans[1].1;
    assert_ne!(root["traceId"], child["traceId"]);
    assert!(root.get("parentSpanId").is_none(), "{root}");
    // A failed call: an error span.
    let failed = &spans[2].1;
    assert_eq!(failed["status"]["code"], 2, "{failed}");
    assert_eq!(attributes(failed)["error.type"], "not_found");
}

#[test]
fn spans_still_queued_are_sent_when_the_server_stops() {
    let (collector, arrived) = receiver();
    let (mut server, _ws) = traced(&collector);
    let r = post_stateless(&server.addr, &read_call(1, None));
    assert_eq!(r.json()["result"]["isError"], false);
    // At once, before the batch's second is up.
    toolhost_tests::send_signal(server.child.id(), rustix::process::Signal::TERM);
    toolhost_tests::wait_exit(&mut server.child);
    let spans = spans_within(&arrived, 1, Duration::from_secs(5));
    assert_eq!(spans.len(), 1, "the queued span was lost at shutdown");
}

#[test]
fn an_otlp_protocol_toolhost_does_not_speak_stops_it_saying_so() {
    let ws = workspace();
    let out = command(ws.path(), &["serve", "--http", "127.0.0.1:0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc") && said.contains("http/json"),
        "{said}"
    );
}

/// The value of the sample `name{labels}` in a Prometheus text exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn metrics_count_calls_by_tool_and_outcome_and_show_the_instance_state() {
    let ws = workspace();
    let token = "metrics-scraper-token-0123456789";
    let mut cmd = command(ws.path(), &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("TOOLHOST_HTTP_TOKEN", token);
    let server = start(cmd);
    let auth = format!("Bearer {token}");
    let headers = [("Authorization", auth.as_str())];
    for id in 1..=3 {
        post_stateless_with(&server.addr, &headers, &read_call(id, None));
    }
    // A client that cannot be asked: the write is denied by the fallback.
    let write = stateless(
        4,
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}),
        false,
    );
    post_stateless_with(&server.addr, &headers, &write);
    let invented = stateless(
        5,
        "tools/call",
        json!({"name": "rm_rf", "arguments": {}}),
        false,
    );
    post_stateless_with(&server.addr, &headers, &invented);
    let unauthorized = request(&server.addr, "GET", "/metrics", &[], b"");
    assert_eq!(unauthorized.status, 401);
    let r = request(&server.addr, "GET", "/metrics", &headers, b"");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = String::from_utf8(r.body).unwrap();
    for (series, value) in [
        (
            "toolhost_calls_total{tool=\"read_file\",outcome=\"ok\"}",
            3.0,
        ),
        (
            "toolhost_calls_total{tool=\"write_file\",outcome=\"user_denied\"}",
            1.0,
        ),
        (
            "toolhost_calls_total{tool=\"(unknown)\",outcome=\"not_found\"}",
            1.0,
        ),
        (
            "toolhost_call_duration_seconds_count{tool=\"read_file\"}",
            3.0,
        ),
        (
            "toolhost_call_duration_seconds_bucket{tool=\"read_file\",le=\"+Inf\"}",
            3.0,
        ),
        (
            "toolhost_decisions_total{decision=\"allow\",by=\"policy\"}",
            3.0,
        ),
        (
            "toolhost_decisions_total{decision=\"deny\",by=\"fallback\"}",
            1.0,
        ),
        ("toolhost_confirmations_pending", 0.0),
        ("toolhost_store_up{store=\"memory\"}", 1.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    assert!(!text.contains("rm_rf"), "{text}");
}
