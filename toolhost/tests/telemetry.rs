//! What an operator watches: Prometheus metrics on `GET /metrics`, and OpenTelemetry spans
//! and metrics sent over OTLP (gRPC, HTTP with protobuf, HTTP with JSON) to a receiver that
//! decodes them with the protocol's official protobuf definitions
//! (`tests/python/otlp_receiver.py`), the client's W3C trace context
//! (`_meta.traceparent`) as the spans' parent.
#![cfg(test)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::raw_http::{post_stateless, post_stateless_with, request, stateless};
use common::{Server, command, start, workspace};

/// The receiver: what it decoded, one export per message.
struct Receiver {
    child: Child,
    _stdin: ChildStdin,
    grpc: u16,
    http: u16,
    exports: mpsc::Receiver<Value>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The receiver, when `cargo xtask test` installed its Python (else the test skips).
fn receiver() -> Option<Receiver> {
    let python = toolhost_tests::peer("TOOLHOST_TEST_OTLP_PYTHON")?;
    let mut child = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/otlp_receiver.py"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ports: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let (tx, exports) = mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
        }
    });
    Some(Receiver {
        child,
        _stdin: stdin,
        grpc: u16::try_from(ports["grpc"].as_u64().unwrap()).unwrap(),
        http: u16::try_from(ports["http"].as_u64().unwrap()).unwrap(),
        exports,
    })
}

impl Receiver {
    /// The base URL a collector speaking `protocol` has.
    fn endpoint(&self, protocol: &str) -> String {
        let port = if protocol == "grpc" {
            self.grpc
        } else {
            self.http
        };
        format!("http://127.0.0.1:{port}")
    }

    /// The next export of `signal` that `accept` takes, within `wait`; every export
    /// must have been decoded and must carry the test's header.
    fn export_within(
        &self,
        signal: &str,
        wait: Duration,
        mut accept: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let export = self.exports.recv_timeout(left).ok()?;
            assert_eq!(export["error"], Value::Null, "refused: {export:#}");
            assert_eq!(export["headers"]["x-tenant"], "t=1", "{export:#}");
            if export["signal"] == signal && accept(&export) {
                return Some(export);
            }
        }
    }

    /// The spans that arrive within `wait`, until there are `wanted`.
    fn spans_within(&self, wanted: usize, wait: Duration) -> Vec<(Value, Value)> {
        let deadline = Instant::now() + wait;
        let mut spans = Vec::new();
        while spans.len() < wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(export) = self.export_within("traces", left, |_| true) else {
                break;
            };
            for rs in export["body"]["resourceSpans"].as_array().unwrap() {
                for ss in rs["scopeSpans"].as_array().unwrap() {
                    for span in ss["spans"].as_array().unwrap() {
                        spans.push((rs["resource"].clone(), span.clone()));
                    }
                }
            }
        }
        spans
    }
}

/// The attributes of a span, a resource or a data point, as strings.
fn attributes(item: &Value) -> std::collections::BTreeMap<String, String> {
    item["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let value = &a["value"];
            let text = value["stringValue"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            (a["key"].as_str().unwrap().to_string(), text)
        })
        .collect()
}

/// The data points of the metric `name` in an export of metrics.
fn points(export: &Value, name: &str) -> Vec<Value> {
    let mut found = Vec::new();
    for rm in export["body"]["resourceMetrics"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
            for m in sm["metrics"].as_array().into_iter().flatten() {
                if m["name"] == name {
                    for kind in ["sum", "gauge", "histogram"] {
                        found.extend(
                            m[kind]["dataPoints"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .cloned(),
                        );
                    }
                }
            }
        }
    }
    found
}

/// `serve --http` exporting to `receiver` over `protocol`, with `more` variables.
fn traced(
    receiver: &Receiver,
    protocol: &str,
    more: &[(&str, &str)],
) -> (Server, tempfile::TempDir) {
    let ws = workspace();
    let mut cmd = command(ws.path(), &["serve", "--http", "127.0.0.1:0"]);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint(protocol))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t%3D1")
        .env("OTEL_SERVICE_NAME", "toolhost-under-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300");
    for (k, v) in more {
        cmd.env(k, v);
    }
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

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Two reads (one a child of the client's trace) and a call of a tool that does not
/// exist: three spans and their counts arrive over `protocol`.
fn calls_become_spans_and_metrics_over(protocol: &str, more: &[(&str, &str)]) {
    let Some(receiver) = receiver() else { return };
    let (server, _ws) = traced(&receiver, protocol, more);
    let r = post_stateless(&server.addr, &read_call(1, Some(PARENT)));
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

    let spans = receiver.spans_within(3, Duration::from_secs(15));
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let (resource, child) = &spans[0];
    assert_eq!(attributes(resource)["service.name"], "toolhost-under-test");
    assert_eq!(
        child["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736",
        "{child:#}"
    );
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
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["gen_ai.tool.name"], "read_file");
    assert_eq!(a["toolhost.tool.class"], "read");
    assert_eq!(a["toolhost.decision"], "allow");
    assert_eq!(a["toolhost.decided_by"], "policy");
    assert_eq!(a["toolhost.outcome"], "ok");
    // Without a parent: a trace of its own.
    let root = &spans[1].1;
    assert_ne!(root["traceId"], child["traceId"]);
    assert!(root.get("parentSpanId").is_none_or(|p| p == ""), "{root}");
    // A failed call: an error span.
    let failed = &spans[2].1;
    assert_eq!(failed["status"]["code"], "STATUS_CODE_ERROR", "{failed}");
    assert_eq!(attributes(failed)["error.type"], "not_found");

    let counted = |export: &Value| {
        points(export, "toolhost.calls").iter().any(|p| {
            let a = attributes(p);
            a.get("tool").map(String::as_str) == Some("read_file")
                && a.get("outcome").map(String::as_str) == Some("ok")
                && p["asInt"] == "2"
        })
    };
    let metrics = receiver
        .export_within("metrics", Duration::from_secs(15), counted)
        .expect("no export counted the two reads");
    assert_eq!(metrics["protocol"], protocol);
    let durations = points(&metrics, "toolhost.call.duration");
    assert!(
        durations.iter().any(|p| p["count"] == "2"),
        "{durations:#?}"
    );
}

#[test]
fn calls_become_spans_and_metrics_over_grpc() {
    calls_become_spans_and_metrics_over("grpc", &[]);
}

#[test]
fn calls_become_spans_and_metrics_over_http_with_protobuf_compressed() {
    calls_become_spans_and_metrics_over(
        "http/protobuf",
        &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
    );
}

#[test]
fn calls_become_spans_and_metrics_over_http_with_json() {
    calls_become_spans_and_metrics_over("http/json", &[]);
}

#[test]
fn compression_is_what_the_variable_asks() {
    let Some(receiver) = receiver() else { return };
    let (server, _ws) = traced(
        &receiver,
        "http/protobuf",
        &[("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")],
    );
    post_stateless(&server.addr, &read_call(1, None));
    let traces = receiver
        .export_within("traces", Duration::from_secs(15), |_| true)
        .unwrap();
    assert_eq!(traces["encoding"], "gzip", "{traces:#}");
    // The metrics' own variable is not set: plain.
    let metrics = receiver
        .export_within("metrics", Duration::from_secs(15), |_| true)
        .unwrap();
    assert_eq!(metrics["encoding"], Value::Null, "{metrics:#}");
}

#[test]
fn a_parent_that_was_not_sampled_leaves_the_call_unsampled() {
    let Some(receiver) = receiver() else { return };
    let (server, _ws) = traced(&receiver, "http/protobuf", &[]);
    let unsampled = "00-11111111111111111111111111111111-2222222222222222-00";
    post_stateless(&server.addr, &read_call(1, Some(unsampled)));
    post_stateless(&server.addr, &read_call(2, Some(PARENT)));
    // The sampled one arrives; by then the other would have (one batch every 100 ms).
    let spans = receiver.spans_within(1, Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(500));
    let late = receiver.spans_within(1, Duration::from_millis(500));
    let all: Vec<_> = spans
        .iter()
        .chain(&late)
        .map(|(_, s)| s["traceId"].clone())
        .collect();
    assert_eq!(all, vec![json!("4bf92f3577b34da6a3ce929d0e0e4736")]);
}

#[test]
fn a_sampler_that_keeps_nothing_sends_no_span_but_the_metrics_still_go() {
    let Some(receiver) = receiver() else { return };
    let (server, _ws) = traced(
        &receiver,
        "http/json",
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ],
    );
    post_stateless(&server.addr, &read_call(1, None));
    let metrics = receiver.export_within("metrics", Duration::from_secs(15), |e| {
        !points(e, "toolhost.calls").is_empty()
    });
    assert!(metrics.is_some());
    assert!(
        receiver
            .spans_within(1, Duration::from_millis(800))
            .is_empty()
    );
}

#[test]
fn spans_still_queued_are_sent_when_the_server_stops() {
    let Some(receiver) = receiver() else { return };
    let (mut server, _ws) = traced(
        &receiver,
        "grpc",
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "600000"),
        ],
    );
    let r = post_stateless(&server.addr, &read_call(1, None));
    assert_eq!(r.json()["result"]["isError"], false);
    toolhost_tests::send_signal(server.child.id(), rustix::process::Signal::TERM);
    toolhost_tests::wait_exit(&mut server.child);
    let spans = receiver.spans_within(1, Duration::from_secs(5));
    assert_eq!(spans.len(), 1, "the queued span was lost at shutdown");
    let metrics = receiver.export_within("metrics", Duration::from_secs(5), |e| {
        !points(e, "toolhost.calls").is_empty()
    });
    assert!(metrics.is_some(), "the last metrics were lost at shutdown");
}

#[test]
fn an_otel_variable_toolhost_cannot_use_stops_it_naming_it() {
    let ws = workspace();
    for (var, value) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift"),
        ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
    ] {
        let out = command(ws.path(), &["serve", "--http", "127.0.0.1:0"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
            .env(var, value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(&format!("{var}={value}")), "{said}");
    }
}

/// The value of the sample `name` with exactly `labels` in a Prometheus text exposition.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    wanted.sort();
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
        let mut have: Vec<String> = rest
            .trim_end_matches('}')
            .split(',')
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        have.sort();
        (n == name && have == wanted).then(|| value.parse().ok())?
    })
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
    for (name, labels, value) in [
        (
            "toolhost_calls_total",
            &[("tool", "read_file"), ("outcome", "ok")][..],
            3.0,
        ),
        (
            "toolhost_calls_total",
            &[("tool", "write_file"), ("outcome", "user_denied")],
            1.0,
        ),
        (
            "toolhost_calls_total",
            &[("tool", "(unknown)"), ("outcome", "not_found")],
            1.0,
        ),
        (
            "toolhost_call_duration_seconds_count",
            &[("tool", "read_file")],
            3.0,
        ),
        (
            "toolhost_call_duration_seconds_bucket",
            &[("tool", "read_file"), ("le", "+Inf")],
            3.0,
        ),
        (
            "toolhost_decisions_total",
            &[("decision", "allow"), ("by", "policy")],
            3.0,
        ),
        (
            "toolhost_decisions_total",
            &[("decision", "deny"), ("by", "fallback")],
            1.0,
        ),
        ("toolhost_confirmations_pending", &[], 0.0),
        ("toolhost_store_up", &[("store", "memory")], 1.0),
    ] {
        assert_eq!(
            sample(&text, name, labels),
            Some(value),
            "{name}{labels:?} in\n{text}"
        );
    }
    assert!(!text.contains("rm_rf"), "{text}");
}

#[test]
fn a_stdio_server_sends_its_spans_over_grpc_from_its_single_thread() {
    let Some(receiver) = receiver() else { return };
    let ws = workspace();
    let mut child = command(ws.path(), &["serve", "--mcp"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint("grpc"))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t%3D1")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut answers = BufReader::new(child.stdout.take().unwrap()).lines();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "read_file", "arguments": {"path": "README.md"},
            "_meta": {"traceparent": PARENT}}}),
    ] {
        use std::io::Write as _;
        writeln!(stdin, "{message}").unwrap();
    }
    for _ in 0..2 {
        let answer: Value = serde_json::from_str(&answers.next().unwrap().unwrap()).unwrap();
        assert!(answer.get("error").is_none(), "{answer}");
    }
    // While the server still runs (its exporter lives on its one runtime thread).
    let spans = receiver.spans_within(1, Duration::from_secs(15));
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0].1["parentSpanId"], "00f067aa0ba902b7");
    drop(stdin);
    toolhost_tests::wait_exit(&mut child);
}

/// The README's and the docs' collector commands, run as written against the receiver: its
/// gRPC port in place of the collector's, port 0 in place of the server's, and the
/// receiver's header added.
#[test]
fn the_documented_collector_commands_send_spans_as_written() {
    let Some(receiver) = receiver() else { return };
    for marker in [
        "## Metrics and traces",
        "With a collector named, `toolhost serve`",
    ] {
        let block = toolhost_tests::docs::block(marker, "sh").replace("\\\n", " ");
        let words: Vec<&str> = block.split_whitespace().collect();
        let program = words.iter().position(|w| *w == "toolhost").unwrap();
        let ws = workspace();
        let args: Vec<&str> = words[program + 1..]
            .iter()
            .map(|a| {
                if *a == "127.0.0.1:8765" {
                    "127.0.0.1:0"
                } else {
                    a
                }
            })
            .collect();
        let mut cmd = command(ws.path(), &args);
        for assignment in &words[..program] {
            let (name, value) = assignment.split_once('=').unwrap();
            let value = value.replace("http://127.0.0.1:4317", &receiver.endpoint("grpc"));
            let value = value.replace("http://collector:4317", &receiver.endpoint("grpc"));
            cmd.env(name, value);
        }
        cmd.env("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t%3D1");
        let server = start(cmd);
        let r = post_stateless(&server.addr, &read_call(1, Some(PARENT)));
        assert_eq!(r.json()["result"]["isError"], false, "{marker}: {r:?}");
        // The SDK's own batch delay (5 s) is what a user gets.
        let spans = receiver.spans_within(1, Duration::from_secs(15));
        assert_eq!(spans.len(), 1, "{marker}: {block}");
        assert_eq!(spans[0].1["parentSpanId"], "00f067aa0ba902b7");
    }
}
