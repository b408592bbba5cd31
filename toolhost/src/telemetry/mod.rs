//! What an operator watches: metrics (Prometheus text on the HTTP server's `GET /metrics`,
//! [`Metrics`]) and, as the standard `OTEL_*` variables ask ([`OtelEnv`]), the calls'
//! spans and the metrics sent to an OpenTelemetry collector over OTLP.

mod env;
pub(crate) mod metrics;
#[cfg(feature = "otlp")]
pub(crate) mod otlp;

pub use env::OtelEnv;
pub use metrics::Metrics;

use std::sync::Arc;

use dispatcher_core::audit::{AuditSink, CallSpans};
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

/// The metrics and traces of a `toolhost serve`.
#[derive(Default)]
pub struct Telemetry {
    /// Served on `GET /metrics` (the HTTP server), pushed over OTLP when asked.
    pub metrics: Option<Arc<Metrics>>,
    #[cfg(feature = "otlp")]
    traces: Option<otlp::Traces>,
    env: Option<OtelEnv>,
}

impl Telemetry {
    /// What the `OTEL_*` variables ask for, and metrics for `GET /metrics` when
    /// `prometheus` (a server that serves them). Run on the tokio runtime (gRPC's client
    /// lives there). An unusable variable is an error naming it.
    pub fn for_serve(prometheus: bool) -> Result<Telemetry, String> {
        let env = OtelEnv::from_env(|name| std::env::var(name).ok())?;
        let resource = Resource::builder_empty()
            .with_attributes(
                env.resource
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        #[cfg(not(feature = "otlp"))]
        if let Some(export) = env.traces.as_ref().or(env.metrics.as_ref()) {
            return Err(format!(
                "the OTEL_* variables ask for OTLP to {}, but this toolhost was built without \
                 its `otlp` feature; build it with `--features otlp`, or set \
                 OTEL_SDK_DISABLED=true",
                export.endpoint
            ));
        }
        #[cfg(feature = "otlp")]
        let traces = match &env.traces {
            Some(export) => Some(otlp::Traces::start(export, resource.clone())?),
            None => None,
        };
        #[cfg(feature = "otlp")]
        let push = env.metrics.as_ref().map(otlp::metric_reader).transpose()?;
        #[cfg(not(feature = "otlp"))]
        let push: Option<fn(_) -> _> = None;
        let metrics = if prometheus || push.is_some() {
            Some(Metrics::new(resource, |builder| match push {
                Some(reader) => reader(builder),
                None => builder,
            })?)
        } else {
            None
        };
        Ok(Telemetry {
            metrics,
            #[cfg(feature = "otlp")]
            traces,
            env: Some(env),
        })
    }

    /// The tracer of the `tracing` layer that exports spans, when traces are sent.
    #[cfg(feature = "otlp")]
    pub fn tracer(&self) -> Option<opentelemetry_sdk::trace::SdkTracer> {
        self.traces.as_ref().map(otlp::Traces::tracer)
    }

    /// Logs where spans and metrics go (once logging is set up).
    pub fn announce(&self) {
        let Some(env) = &self.env else { return };
        for (what, export) in [("traces", &env.traces), ("metrics", &env.metrics)] {
            if let Some(export) = export {
                tracing::info!(
                    "sending {what} over OTLP ({}) to {}",
                    export.protocol.as_str(),
                    export.endpoint
                );
            }
        }
    }

    /// What the dispatcher feeds every ended call.
    pub fn sinks(&self) -> Vec<Arc<dyn AuditSink>> {
        let mut sinks: Vec<Arc<dyn AuditSink>> = Vec::new();
        if let Some(m) = &self.metrics {
            sinks.push(m.clone());
        }
        sinks
    }

    /// The span each call runs in, when traces are sent.
    pub fn call_spans(&self) -> Option<Arc<dyn CallSpans>> {
        #[cfg(feature = "otlp")]
        if self.traces.is_some() {
            return Some(Arc::new(otlp::OtelCallSpans));
        }
        None
    }

    /// Sends the spans and metrics still queued (at most 5 s), when the server stops.
    pub async fn flush(&self) {
        #[cfg(feature = "otlp")]
        let traces = self.traces.clone();
        let metrics = self.metrics.clone();
        // The SDK's shutdown waits for its export thread: not on a runtime worker.
        let stopping = tokio::task::spawn_blocking(move || {
            #[cfg(feature = "otlp")]
            if let Some(traces) = traces {
                traces.shutdown();
            }
            if let Some(metrics) = metrics {
                metrics.shutdown();
            }
        });
        if tokio::time::timeout(FLUSH_LIMIT, stopping).await.is_err() {
            tracing::warn!(
                "the last spans or metrics were not sent within {} s; the collector may have \
                 missed them",
                FLUSH_LIMIT.as_secs()
            );
        }
    }
}

/// How long the last spans and metrics may take to leave when the server stops.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);
