//! What goes to an OpenTelemetry collector: the spans of calls, through
//! `tracing-opentelemetry`, and the metrics, pushed; both over OTLP by
//! `opentelemetry-otlp` (gRPC, or HTTP with protobuf or JSON), as [`OtelEnv`] says.
//!
//! Every call runs in a span named `execute_tool TOOL` after the GenAI conventions. Its
//! parent is the W3C `traceparent` the client sent in the MCP request's `_meta`; with the
//! default sampler (`parentbased_always_on`), a parent not sampled (flags `00`) leaves the
//! call unsampled. Spans are batched by the SDK (`OTEL_BSP_*`); what is queued is sent
//! when the server stops.

use dispatcher_core::CallHeader;
use dispatcher_core::audit::{AuditEntry, CallSpans, TraceParent};
use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    TracerProvider as _,
};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::env::{Export, Protocol};

/// The OTLP exporter `$builder` builds for its signal, speaking `$export`'s protocol to its
/// endpoint: one recipe for spans and metrics, whose builders share no trait that picks the
/// transport.
macro_rules! exporter {
    ($builder:expr, $export:expr) => {
        match $export.protocol {
            Protocol::Grpc => $builder
                .with_tonic()
                .with_endpoint($export.endpoint.clone())
                .build(),
            Protocol::HttpProtobuf | Protocol::HttpJson => $builder
                .with_http()
                .with_protocol(otlp_protocol($export.protocol))
                .with_endpoint($export.endpoint.clone())
                .build(),
        }
    };
}

/// The target of the spans that are exported (the only ones: toolhost's own logs stay logs).
pub const CALL_TARGET: &str = "toolhost::call";

/// The spans' provider: it batches and sends them.
#[derive(Clone)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Starts sending spans to `export` (on the current tokio runtime, which gRPC needs).
    pub fn start(export: &Export, resource: Resource) -> Result<Traces, String> {
        mcp_toolsets::install_tls_provider();
        let exporter = exporter!(opentelemetry_otlp::SpanExporter::builder(), export)
            .map_err(|e| format!("cannot send traces to {}: {e}", export.endpoint))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Traces { provider })
    }

    /// The tracer the `tracing` layer turns spans into OpenTelemetry spans with.
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("toolhost")
    }

    /// Sends what is queued and stops.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("the last spans could not be sent: {e}");
        }
    }
}

/// `readers` for [`super::Metrics::new`]: the OTLP push to `export` (every
/// `OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default).
pub fn metric_reader(
    export: &Export,
) -> Result<impl FnOnce(MeterProviderBuilder) -> MeterProviderBuilder + use<>, String> {
    mcp_toolsets::install_tls_provider();
    let exporter = exporter!(opentelemetry_otlp::MetricExporter::builder(), export)
        .map_err(|e| format!("cannot send metrics to {}: {e}", export.endpoint))?;
    let reader = PeriodicReader::builder(exporter).build();
    Ok(move |builder: MeterProviderBuilder| builder.with_reader(reader))
}

fn otlp_protocol(protocol: Protocol) -> opentelemetry_otlp::Protocol {
    match protocol {
        Protocol::Grpc => opentelemetry_otlp::Protocol::Grpc,
        Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
    }
}

/// The `tracing` layer that exports spans (filtered by [`call_spans_only`]).
pub fn layer<S>(tracer: SdkTracer) -> tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
}

/// The calls' spans, and nothing else: toolhost's own logs stay logs.
pub fn call_spans_only() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new().with_target(CALL_TARGET, tracing::Level::INFO)
}

/// Each call's span, for the dispatcher ([`dispatcher_core::Dispatcher::call_spans`]).
pub struct OtelCallSpans;

impl CallSpans for OtelCallSpans {
    fn open(&self, call: &CallHeader, trace_parent: Option<&str>) -> tracing::Span {
        let span = tracing::info_span!(
            target: CALL_TARGET,
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", call.tool_name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.tool_name,
            gen_ai.tool.call.id = %call.tool_use_id,
            toolhost.session = %call.session_id,
            toolhost.principal = %call.principal,
        );
        if let Some(parent) = trace_parent.and_then(TraceParent::parse) {
            let remote = SpanContext::new(
                TraceId::from_bytes(parent.trace_id),
                SpanId::from_bytes(parent.parent_id),
                TraceFlags::new(parent.flags),
                true,
                TraceState::default(),
            );
            // Before the span starts (its first poll), so it cannot have started.
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
        }
        span
    }

    fn close(&self, span: &tracing::Span, entry: &AuditEntry) {
        span.set_attribute("toolhost.outcome", entry.outcome);
        span.set_attribute("toolhost.instance", entry.instance.to_string());
        if let Some(class) = entry.class {
            span.set_attribute("toolhost.tool.class", class.as_str());
        }
        if let Some(decision) = &entry.decision {
            span.set_attribute("toolhost.decision", decision.clone());
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
                    span.set_attribute(key, value.to_string());
                }
            }
        }
        if let Some(command) = &entry.command_executed {
            span.set_attribute("toolhost.command", command.clone());
        }
        if let Some(secrets) = &entry.secrets {
            span.set_attribute("toolhost.secrets.action", secrets.action.clone());
            let kinds: Vec<&str> = secrets.found.iter().map(|s| s.kind.as_str()).collect();
            span.set_attribute("toolhost.secrets.kinds", kinds.join(","));
            span.set_attribute("toolhost.secrets.count", secrets.found.len() as i64);
        }
        if entry.outcome != "ok" {
            span.set_attribute("error.type", entry.outcome);
            span.set_status(Status::error(entry.outcome));
        }
    }
}
