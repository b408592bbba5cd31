//! The metrics of an instance, kept by the OpenTelemetry SDK: served as Prometheus text on
//! `GET /metrics` of the HTTP server (`opentelemetry-prometheus`) and, when the `OTEL_*`
//! variables ask, pushed over OTLP as well.
//!
//! | metric (Prometheus name) | OpenTelemetry name | type | attributes | what |
//! |---|---|---|---|---|
//! | `toolhost_calls_total` | `toolhost.calls` | counter | `tool`, `outcome` | calls that ended: `ok` or the error class |
//! | `toolhost_call_duration_seconds` | `toolhost.call.duration` (s) | histogram | `tool` | from a call's start to its result |
//! | `toolhost_decisions_total` | `toolhost.decisions` | counter | `decision`, `by` | confirmation decisions and who made them (`policy`, `hook`, `approval`, `user`, `fallback`, `timeout`, `cancelled`) |
//! | `toolhost_confirmations_pending` | `toolhost.confirmations.pending` | gauge | | confirmations waiting on this instance |
//! | `toolhost_plugin_worker_up` | `toolhost.plugin.worker.up` | gauge | `plugin` | 1 while the plugin's worker process runs |
//! | `toolhost_plugin_worker_restarts_total` | `toolhost.plugin.worker.restarts` | counter | `plugin` | times it was restarted |
//! | `toolhost_store_up` | `toolhost.store.up` | gauge | `store` | 1 while the shared state store answered its last operation |
//!
//! A tool name that names no tool (a model's invention) is counted as `tool="(unknown)"`:
//! what a model writes does not grow the series.

use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use dispatcher_core::Dispatcher;
use dispatcher_core::audit::{AuditEntry, AuditSink};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{
    AsyncInstrument, Counter, Histogram, MeterProvider as _, ObservableCounter, ObservableGauge,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};
use plugin_host::PluginWorker;

/// Upper bounds of the duration histogram's buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0,
];

/// What the gauges read when the metrics are collected.
#[derive(Default)]
struct Watched {
    dispatcher: OnceLock<Dispatcher>,
    workers: Mutex<Vec<Weak<PluginWorker>>>,
}

impl Watched {
    /// Observes `value` of each watched worker, labelled with its plugin.
    fn each_worker(
        &self,
        o: &dyn AsyncInstrument<u64>,
        value: impl Fn(&plugin_host::WorkerStatus) -> u64,
    ) {
        let workers: Vec<Arc<PluginWorker>> = self
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for status in workers.iter().map(|w| w.status()) {
            o.observe(
                value(&status),
                &[KeyValue::new("plugin", status.plugin.to_string())],
            );
        }
    }
}

/// The metrics of one instance: what its calls did (fed as an [`AuditSink`]) and, when
/// collected, what its dispatcher and workers are doing now.
pub struct Metrics {
    provider: SdkMeterProvider,
    registry: prometheus::Registry,
    calls: Counter<u64>,
    durations: Histogram<f64>,
    decisions: Counter<u64>,
    watched: Arc<Watched>,
    _gauges: [ObservableGauge<u64>; 3],
    _restarts: ObservableCounter<u64>,
}

impl Metrics {
    /// Metrics of `resource`, collected for `GET /metrics`; `readers` adds others (the
    /// OTLP push).
    pub fn new(
        resource: Resource,
        readers: impl FnOnce(MeterProviderBuilder) -> MeterProviderBuilder,
    ) -> Result<Arc<Metrics>, String> {
        let registry = prometheus::Registry::new();
        let prometheus = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .scope_info_enabled(false)
            .build()
            .map_err(|e| format!("cannot set up the Prometheus metrics: {e}"))?;
        let provider = readers(
            SdkMeterProvider::builder()
                .with_resource(resource)
                .with_reader(prometheus),
        )
        .build();
        let meter = provider.meter("toolhost");
        let watched = Arc::new(Watched::default());
        let w = watched.clone();
        let pending = meter
            .u64_observable_gauge("toolhost.confirmations.pending")
            .with_description("Confirmations waiting for an answer on this instance.")
            .with_callback(move |o| {
                if let Some(d) = w.dispatcher.get() {
                    o.observe(d.broker().pending(None).len() as u64, &[]);
                }
            })
            .build();
        let w = watched.clone();
        let worker_up = meter
            .u64_observable_gauge("toolhost.plugin.worker.up")
            .with_description("1 while the plugin's worker process runs.")
            .with_callback(move |o| w.each_worker(o, |s| u64::from(s.pid.is_some())))
            .build();
        let w = watched.clone();
        let restarts = meter
            .u64_observable_counter("toolhost.plugin.worker.restarts")
            .with_description("Times the plugin's worker process was restarted.")
            .with_callback(move |o| w.each_worker(o, |s| s.restarts))
            .build();
        let w = watched.clone();
        let store_up = meter
            .u64_observable_gauge("toolhost.store.up")
            .with_description("1 while the shared state store answered its last operation.")
            .with_callback(move |o| {
                if let Some(d) = w.dispatcher.get() {
                    let health = d.store().health();
                    o.observe(
                        u64::from(health.up),
                        &[KeyValue::new("store", health.store.to_string())],
                    );
                }
            })
            .build();
        Ok(Arc::new(Metrics {
            calls: meter
                .u64_counter("toolhost.calls")
                .with_description(
                    "Tool calls that ended, by tool and outcome (ok or the error class).",
                )
                .build(),
            durations: meter
                .f64_histogram("toolhost.call.duration")
                .with_unit("s")
                .with_description("From a call's start to its result.")
                .with_boundaries(BUCKETS.to_vec())
                .build(),
            decisions: meter
                .u64_counter("toolhost.decisions")
                .with_description("Decisions on calls, and who made them.")
                .build(),
            provider,
            registry,
            watched,
            _gauges: [pending, worker_up, store_up],
            _restarts: restarts,
        }))
    }

    /// The dispatcher whose confirmations and store the gauges show (the first given).
    pub fn watch_dispatcher(&self, dispatcher: &Dispatcher) {
        let _ = self.watched.dispatcher.set(dispatcher.clone());
    }

    /// The plugin workers whose state is shown (once they are loaded; again after a
    /// plugin upgrade). Held weakly: a worker an upgrade replaced is freed, not kept here.
    pub fn watch_workers(&self, workers: &[Arc<PluginWorker>]) {
        *self
            .watched
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = workers.iter().map(Arc::downgrade).collect();
    }

    /// The Prometheus text exposition (format 0.0.4) of everything, as it is now.
    pub fn render(&self) -> String {
        use prometheus::Encoder as _;
        let mut out = Vec::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut out) {
            tracing::warn!("the metrics could not be written as Prometheus text: {e}");
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Pushes what was collected since the last push (OTLP) and stops collecting.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("the last metrics could not be sent: {e}");
        }
    }
}

impl mcp_server::http::control::MetricsExposition for Metrics {
    fn render(&self, dispatcher: &Dispatcher) -> String {
        self.watch_dispatcher(dispatcher);
        Metrics::render(self)
    }
}

impl AuditSink for Metrics {
    fn reads_digest(&self) -> bool {
        false
    }

    fn record(&self, entry: &AuditEntry) {
        let tool = KeyValue::new(
            "tool",
            if entry.class.is_some() {
                opentelemetry::Value::from(entry.tool.clone())
            } else {
                opentelemetry::Value::from("(unknown)")
            },
        );
        self.calls
            .add(1, &[tool.clone(), KeyValue::new("outcome", entry.outcome)]);
        self.durations.record(entry.duration_ms / 1000.0, &[tool]);
        if let (Some(decision), Some(by)) = (&entry.decision, &entry.decided_by) {
            self.decisions.add(
                1,
                &[
                    KeyValue::new("decision", decision.clone()),
                    KeyValue::new("by", by.by()),
                ],
            );
        }
    }
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
            secrets: None,
            duration_ms: ms,
            started_ms: 0,
            trace_parent: None,
        }
    }

    #[tokio::test]
    async fn calls_durations_and_decisions_are_counted_and_unknown_tools_folded() {
        let metrics = Metrics::new(Resource::builder_empty().build(), |b| b).unwrap();
        metrics.watch_dispatcher(&Dispatcher::new());
        metrics.record(&ended("read_file", true, "ok", 0.7));
        metrics.record(&ended("read_file", true, "ok", 30.0));
        metrics.record(&ended("read_file", true, "timeout", 200.0));
        metrics.record(&ended("made\"up\ntool", false, "not_found", 0.1));
        let text = metrics.render();
        for (series, value) in [
            (
                "toolhost_calls_total{outcome=\"ok\",tool=\"read_file\"}",
                2.0,
            ),
            (
                "toolhost_calls_total{outcome=\"timeout\",tool=\"read_file\"}",
                1.0,
            ),
            (
                "toolhost_calls_total{outcome=\"not_found\",tool=\"(unknown)\"}",
                1.0,
            ),
            (
                "toolhost_call_duration_seconds_bucket{tool=\"read_file\",le=\"0.001\"}",
                1.0,
            ),
            (
                "toolhost_call_duration_seconds_bucket{tool=\"read_file\",le=\"0.05\"}",
                2.0,
            ),
            (
                "toolhost_call_duration_seconds_bucket{tool=\"read_file\",le=\"+Inf\"}",
                3.0,
            ),
            (
                "toolhost_call_duration_seconds_count{tool=\"read_file\"}",
                3.0,
            ),
            (
                "toolhost_decisions_total{by=\"user\",decision=\"allow\"}",
                3.0,
            ),
            ("toolhost_confirmations_pending", 0.0),
            ("toolhost_store_up{store=\"memory\"}", 1.0),
        ] {
            let found = text
                .lines()
                .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
            assert_eq!(found, Some(value), "{series} in\n{text}");
        }
        assert!(!text.contains("tool=\"made"), "{text}");
    }
}
