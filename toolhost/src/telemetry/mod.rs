//! What an operator watches: Prometheus metrics on the HTTP server's `GET /metrics`
//! ([`Metrics`]) and OpenTelemetry traces over OTLP ([`Traces`]), both fed every ended
//! call by the dispatcher ([`dispatcher_core::audit::AuditSink`]).

pub(crate) mod metrics;
mod otlp;

pub use metrics::Metrics;
pub use otlp::{Traces, TracesConfig};

use std::sync::Arc;
use std::time::Duration;

use dispatcher_core::audit::AuditSink;

/// The metrics and traces of a `toolhost serve`.
#[derive(Default)]
pub struct Telemetry {
    /// Served on `GET /metrics` (the HTTP server).
    pub metrics: Option<Arc<Metrics>>,
    /// Sent to a collector, when the environment names one.
    pub traces: Option<Arc<Traces>>,
}

impl Telemetry {
    /// Traces when the `OTEL_*` variables ask for them, metrics when `metrics` (a server
    /// that can serve them). An unusable variable is an error naming it.
    pub fn for_serve(metrics: bool) -> Result<Telemetry, String> {
        let traces = match TracesConfig::from_env(|name| std::env::var(name).ok())? {
            Some(config) => {
                tracing::info!(url = %config.url, "sending traces over OTLP/HTTP (JSON)");
                Some(Arc::new(Traces::start(config)?))
            }
            None => None,
        };
        Ok(Telemetry {
            metrics: metrics.then(Metrics::new),
            traces,
        })
    }

    /// What the dispatcher feeds every ended call.
    pub fn sinks(&self) -> Vec<Arc<dyn AuditSink>> {
        let mut sinks: Vec<Arc<dyn AuditSink>> = Vec::new();
        if let Some(m) = &self.metrics {
            sinks.push(m.clone());
        }
        if let Some(t) = &self.traces {
            sinks.push(t.clone());
        }
        sinks
    }

    /// Sends the spans still queued (at most 5 s), when the server stops.
    pub async fn flush(&self) {
        if let Some(t) = &self.traces {
            t.flush(Duration::from_secs(5)).await;
        }
    }
}
