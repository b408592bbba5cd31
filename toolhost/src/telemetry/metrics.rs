//! Prometheus metrics of an instance, served as text on `GET /metrics` of the HTTP server.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `toolhost_calls_total` | counter | `tool`, `outcome` | calls that ended: `ok` or the error class |
//! | `toolhost_call_duration_seconds` | histogram | `tool` | from a call's start to its result |
//! | `toolhost_decisions_total` | counter | `decision`, `by` | confirmation decisions and who made them (`policy`, `hook`, `approval`, `user`, `fallback`, `timeout`, `cancelled`) |
//! | `toolhost_confirmations_pending` | gauge | | confirmations waiting on this instance |
//! | `toolhost_plugin_worker_up` | gauge | `plugin` | 1 while the plugin's worker process runs |
//! | `toolhost_plugin_worker_restarts_total` | counter | `plugin` | times it was restarted |
//! | `toolhost_store_up` | gauge | `store` | 1 while the shared state store answered its last operation |
//!
//! A tool name that names no tool (a model's invention) is counted as `tool="(unknown)"`:
//! what a model writes does not grow the series.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use dispatcher_core::Dispatcher;
use dispatcher_core::audit::{AuditEntry, AuditSink};
use plugin_host::PluginWorker;

/// Upper bounds of the duration histogram's buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0,
];

#[derive(Default)]
struct Histogram {
    /// Per bucket, observations at or under its bound (not cumulative; summed when shown).
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Counts {
    calls: BTreeMap<(Arc<str>, &'static str), u64>,
    durations: BTreeMap<Arc<str>, Histogram>,
    decisions: BTreeMap<(String, String), u64>,
}

/// The metrics of one instance: what its calls did (fed as an [`AuditSink`]) and, when
/// shown, what its dispatcher and workers are doing now.
#[derive(Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
    workers: Mutex<Vec<std::sync::Weak<PluginWorker>>>,
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Arc<Metrics> {
        Arc::default()
    }

    /// The plugin workers whose state is shown (once they are loaded; again after a
    /// plugin upgrade). Held weakly: a worker an upgrade replaced is freed, not kept here.
    pub fn watch_workers(&self, workers: &[Arc<PluginWorker>]) {
        *self.workers.lock().unwrap_or_else(PoisonError::into_inner) =
            workers.iter().map(Arc::downgrade).collect();
    }

    /// The Prometheus text exposition (format 0.0.4) of everything, `dispatcher`'s state as
    /// it is now.
    pub fn render(&self, dispatcher: &Dispatcher) -> String {
        let mut out = String::new();
        {
            let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            head(
                &mut out,
                "toolhost_calls_total",
                "counter",
                "Tool calls that ended, by tool and outcome (ok or the error class).",
            );
            for ((tool, outcome), n) in &counts.calls {
                let _ = writeln!(
                    out,
                    "toolhost_calls_total{{tool=\"{}\",outcome=\"{outcome}\"}} {n}",
                    escape(tool)
                );
            }
            head(
                &mut out,
                "toolhost_call_duration_seconds",
                "histogram",
                "From a call's start to its result.",
            );
            for (tool, h) in &counts.durations {
                let tool = escape(tool);
                let mut cumulative = 0;
                for (bound, n) in BUCKETS.iter().zip(h.counts) {
                    cumulative += n;
                    let _ = writeln!(
                        out,
                        "toolhost_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"{bound}\"}} {cumulative}"
                    );
                }
                let _ = writeln!(
                    out,
                    "toolhost_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {}\n\
                     toolhost_call_duration_seconds_sum{{tool=\"{tool}\"}} {}\n\
                     toolhost_call_duration_seconds_count{{tool=\"{tool}\"}} {}",
                    h.count, h.sum, h.count
                );
            }
            head(
                &mut out,
                "toolhost_decisions_total",
                "counter",
                "Decisions on calls, and who made them.",
            );
            for ((decision, by), n) in &counts.decisions {
                let _ = writeln!(
                    out,
                    "toolhost_decisions_total{{decision=\"{}\",by=\"{}\"}} {n}",
                    escape(decision),
                    escape(by)
                );
            }
        }
        head(
            &mut out,
            "toolhost_confirmations_pending",
            "gauge",
            "Confirmations waiting for an answer on this instance.",
        );
        let _ = writeln!(
            out,
            "toolhost_confirmations_pending {}",
            dispatcher.broker().pending(None).len()
        );
        let workers: Vec<Arc<PluginWorker>> = self
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        head(
            &mut out,
            "toolhost_plugin_worker_up",
            "gauge",
            "1 while the plugin's worker process runs.",
        );
        let statuses: Vec<_> = workers.iter().map(|w| w.status()).collect();
        for s in &statuses {
            let _ = writeln!(
                out,
                "toolhost_plugin_worker_up{{plugin=\"{}\"}} {}",
                escape(&s.plugin),
                u8::from(s.pid.is_some())
            );
        }
        head(
            &mut out,
            "toolhost_plugin_worker_restarts_total",
            "counter",
            "Times the plugin's worker process was restarted.",
        );
        for s in &statuses {
            let _ = writeln!(
                out,
                "toolhost_plugin_worker_restarts_total{{plugin=\"{}\"}} {}",
                escape(&s.plugin),
                s.restarts
            );
        }
        let store = dispatcher.store().health();
        head(
            &mut out,
            "toolhost_store_up",
            "gauge",
            "1 while the shared state store answered its last operation.",
        );
        let _ = writeln!(
            out,
            "toolhost_store_up{{store=\"{}\"}} {}",
            escape(&store.store),
            u8::from(store.up)
        );
        out
    }
}

impl mcp_server::http::control::MetricsExposition for Metrics {
    fn render(&self, dispatcher: &Dispatcher) -> String {
        Metrics::render(self, dispatcher)
    }
}

impl AuditSink for Metrics {
    fn reads_digest(&self) -> bool {
        false
    }

    fn record(&self, entry: &AuditEntry) {
        let tool: Arc<str> = if entry.class.is_some() {
            entry.tool.clone()
        } else {
            Arc::from("(unknown)")
        };
        let seconds = entry.duration_ms / 1000.0;
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        *counts
            .calls
            .entry((tool.clone(), entry.outcome))
            .or_default() += 1;
        let h = counts.durations.entry(tool).or_default();
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            h.counts[i] += 1;
        }
        h.count += 1;
        h.sum += seconds;
        if let (Some(decision), Some(by)) = (&entry.decision, &entry.decided_by) {
            let by = serde_json::to_value(by)
                .ok()
                .and_then(|v| v["by"].as_str().map(str::to_string))
                .unwrap_or_default();
            *counts.decisions.entry((decision.clone(), by)).or_default() += 1;
        }
    }
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value as the exposition format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatcher_core::DecidedBy;

    fn ended(tool: &str, known: bool, outcome: &'static str, ms: f64) -> AuditEntry {
        AuditEntry {
            time_ms: 0,
            instance: Arc::from("i"),
            principal: Arc::from("local"),
            session: Arc::from("s"),
            tool: Arc::from(tool),
            tool_use_id: Arc::from("t"),
            class: known.then_some(tool_api::SideEffect::Read),
            arguments_sha256: String::new(),
            decision: known.then(|| "allow".to_string()),
            decided_by: known.then(|| DecidedBy::User {
                client: "terminal".into(),
            }),
            outcome,
            files_modified: Vec::new(),
            command_executed: None,
            duration_ms: ms,
            started_ms: 0,
            trace_parent: None,
        }
    }

    #[tokio::test]
    async fn calls_durations_and_decisions_are_counted_and_unknown_tools_folded() {
        let metrics = Metrics::new();
        metrics.record(&ended("read_file", true, "ok", 0.7));
        metrics.record(&ended("read_file", true, "ok", 30.0));
        metrics.record(&ended("read_file", true, "timeout", 200.0));
        metrics.record(&ended("made\"up\ntool", false, "not_found", 0.1));
        let text = metrics.render(&Dispatcher::new());
        for line in [
            "toolhost_calls_total{tool=\"read_file\",outcome=\"ok\"} 2",
            "toolhost_calls_total{tool=\"read_file\",outcome=\"timeout\"} 1",
            "toolhost_calls_total{tool=\"(unknown)\",outcome=\"not_found\"} 1",
            "toolhost_call_duration_seconds_bucket{tool=\"read_file\",le=\"0.001\"} 1",
            "toolhost_call_duration_seconds_bucket{tool=\"read_file\",le=\"0.05\"} 2",
            "toolhost_call_duration_seconds_bucket{tool=\"read_file\",le=\"+Inf\"} 3",
            "toolhost_call_duration_seconds_count{tool=\"read_file\"} 3",
            "toolhost_decisions_total{decision=\"allow\",by=\"user\"} 3",
            "toolhost_confirmations_pending 0",
            "toolhost_store_up{store=\"memory\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(!text.contains("tool=\"made"), "{text}");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
