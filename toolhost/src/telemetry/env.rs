//! The `OTEL_*` variables, checked before anything is started: each one toolhost (or the
//! OpenTelemetry SDK under it) reads is parsed here as the SDK specification describes it,
//! and one that does not parse stops `toolhost serve` with an error naming it, where the SDK
//! alone would log a warning and fall back to a default.
//!
//! Why beside the SDK rather than instead of it: toolhost hands the SDK only each signal's
//! endpoint and protocol (resolved here per signal) and the resource; the headers,
//! compression, timeouts, sampler and batching the SDK reads itself. What this module adds
//! is the refusal: read alone (opentelemetry 0.33), a `traceidratio` argument of `0,5`
//! samples every trace (a warning in a log nobody may be reading), and a header written
//! without `=` is dropped without a word.
//!
//! | variable | what it does |
//! |---|---|
//! | `OTEL_SDK_DISABLED=true` | no traces and no OTLP metrics (`/metrics` stays) |
//! | `OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER` | `otlp` or `none` (metrics also `prometheus`: `/metrics` only); unset: `otlp` when an endpoint is set |
//! | `OTEL_EXPORTER_OTLP_[TRACES_\|METRICS_]ENDPOINT` | where to send; the general one gets `/v1/traces` or `/v1/metrics` appended over HTTP |
//! | `OTEL_EXPORTER_OTLP_[TRACES_\|METRICS_]PROTOCOL` | `http/protobuf` (the default), `http/json` or `grpc` |
//! | `OTEL_EXPORTER_OTLP_[TRACES_\|METRICS_]HEADERS` | `key=value,…`, values percent-decoded (an API key, say) |
//! | `OTEL_EXPORTER_OTLP_[TRACES_\|METRICS_]COMPRESSION` | `gzip` or `none` |
//! | `OTEL_EXPORTER_OTLP_[TRACES_\|METRICS_]TIMEOUT` | milliseconds per export (10000) |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | `parentbased_always_on` (the default), `always_on`, `always_off`, `traceidratio`, `parentbased_always_off`, `parentbased_traceidratio`; the ratio in `[0, 1]` |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource; `service.name` defaults to `toolhost` |
//! | `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` | how spans are batched (5000 ms, 2048, 512) |
//! | `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_METRIC_EXPORT_TIMEOUT` | how often metrics are pushed (60000 ms) |
//! | `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` | `cumulative` (the default), `delta` or `lowmemory` |

use std::collections::BTreeMap;

/// How OTLP is spoken to a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// gRPC (a collector's port 4317).
    Grpc,
    /// HTTP, protobuf bodies (port 4318): the specification's default.
    HttpProtobuf,
    /// HTTP, JSON bodies (port 4318).
    HttpJson,
}

impl Protocol {
    fn parse(name: &str, value: &str) -> Result<Protocol, String> {
        match value {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "http/json" => Ok(Protocol::HttpJson),
            _ => Err(format!(
                "{name}={value}: not an OTLP protocol; set it to http/protobuf (the default), \
                 http/json or grpc"
            )),
        }
    }

    /// As the variables spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
        }
    }
}

/// One signal's export: how, and where (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// How.
    pub protocol: Protocol,
    /// Where, as the exporter will resolve it.
    pub endpoint: String,
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelEnv {
    /// Spans over OTLP; `None`: none sent.
    pub traces: Option<Export>,
    /// Metrics over OTLP; `None`: none pushed (`/metrics` is served either way).
    pub metrics: Option<Export>,
    /// The resource's attributes, `service.name` and `service.version` among them.
    pub resource: BTreeMap<String, String>,
}

/// The two signals toolhost exports, as their variables name them.
#[derive(Clone, Copy)]
enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    fn upper(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
        }
    }
}

impl OtelEnv {
    /// Reads and checks the variables (`var` looks one up): an error names the variable
    /// and says what it takes.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<OtelEnv, String> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let disabled = match set("OTEL_SDK_DISABLED").as_deref() {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => return Err(format!("OTEL_SDK_DISABLED={v}: set it to true or false")),
        };
        let mut resource: BTreeMap<String, String> = match set("OTEL_RESOURCE_ATTRIBUTES") {
            Some(text) => pairs("OTEL_RESOURCE_ATTRIBUTES", &text)?
                .into_iter()
                .collect(),
            None => BTreeMap::new(),
        };
        if let Some(name) = set("OTEL_SERVICE_NAME") {
            resource.insert("service.name".into(), name);
        }
        resource
            .entry("service.name".into())
            .or_insert_with(|| "toolhost".into());
        resource.insert("service.version".into(), env!("CARGO_PKG_VERSION").into());
        let traces = export(&set, Signal::Traces)?;
        let metrics = export(&set, Signal::Metrics)?;
        if traces.is_some() {
            sampler(&set)?;
            for name in [
                "OTEL_BSP_SCHEDULE_DELAY",
                "OTEL_BSP_MAX_QUEUE_SIZE",
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                "OTEL_BSP_EXPORT_TIMEOUT",
            ] {
                number(&set, name)?;
            }
        }
        if metrics.is_some() {
            for name in ["OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT"] {
                number(&set, name)?;
            }
            const VAR: &str = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
            if let Some(v) = set(VAR)
                && !["cumulative", "delta", "lowmemory"].contains(&v.to_ascii_lowercase().as_str())
            {
                return Err(format!(
                    "{VAR}={v}: set it to cumulative (the default), delta or lowmemory"
                ));
            }
        }
        let (traces, metrics) = if disabled {
            (None, None)
        } else {
            (traces, metrics)
        };
        Ok(OtelEnv {
            traces,
            metrics,
            resource,
        })
    }
}

/// A signal's export, checked: `None` when it is off.
fn export(set: &impl Fn(&str) -> Option<String>, signal: Signal) -> Result<Option<Export>, String> {
    let upper = signal.upper();
    let exporter_var = format!("OTEL_{upper}_EXPORTER");
    let signal_endpoint_var = format!("OTEL_EXPORTER_OTLP_{upper}_ENDPOINT");
    let signal_endpoint = set(&signal_endpoint_var);
    let endpoint = set("OTEL_EXPORTER_OTLP_ENDPOINT");
    let on = match set(&exporter_var).as_deref() {
        None => signal_endpoint.is_some() || endpoint.is_some(),
        Some("otlp") => true,
        Some("none") => false,
        Some("prometheus") if matches!(signal, Signal::Metrics) => false,
        Some(other) => {
            let takes = match signal {
                Signal::Traces => "otlp or none",
                Signal::Metrics => "otlp, prometheus (GET /metrics only) or none",
            };
            return Err(format!(
                "{exporter_var}={other}: toolhost exports {takes}; set {exporter_var} to one of them"
            ));
        }
    };
    // Checked whether or not the signal is on: a mistake is named at once.
    let protocol = match (
        set(&format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL")),
        set("OTEL_EXPORTER_OTLP_PROTOCOL"),
    ) {
        (Some(p), _) => Protocol::parse(&format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL"), &p)?,
        (None, Some(p)) => Protocol::parse("OTEL_EXPORTER_OTLP_PROTOCOL", &p)?,
        (None, None) => Protocol::HttpProtobuf,
    };
    let endpoint = match (signal_endpoint, endpoint) {
        (Some(url), _) => checked_url(&signal_endpoint_var, &url)?,
        (None, Some(base)) => {
            let base = checked_url("OTEL_EXPORTER_OTLP_ENDPOINT", &base)?;
            match protocol {
                Protocol::Grpc => base,
                _ => format!("{}{}", base.trim_end_matches('/'), signal.path()),
            }
        }
        (None, None) => match protocol {
            Protocol::Grpc => "http://localhost:4317".to_string(),
            _ => format!("http://localhost:4318{}", signal.path()),
        },
    };
    for general in [false, true] {
        let name = |what: &str| {
            if general {
                format!("OTEL_EXPORTER_OTLP_{what}")
            } else {
                format!("OTEL_EXPORTER_OTLP_{upper}_{what}")
            }
        };
        if let Some(text) = set(&name("HEADERS")) {
            for (key, value) in pairs(&name("HEADERS"), &text)? {
                if http::HeaderName::from_bytes(key.as_bytes()).is_err()
                    || http::HeaderValue::from_str(&value).is_err()
                {
                    return Err(format!(
                        "{}: {key:?} cannot be sent as an HTTP header or gRPC metadata",
                        name("HEADERS")
                    ));
                }
            }
        }
        if let Some(v) = set(&name("COMPRESSION"))
            && v != "gzip"
            && v != "none"
        {
            return Err(format!(
                "{}={v}: toolhost compresses with gzip; set it to gzip or none",
                name("COMPRESSION")
            ));
        }
        number(set, &name("TIMEOUT"))?;
    }
    Ok(on.then_some(Export { protocol, endpoint }))
}

/// The sampler variables, checked as the SDK will read them.
fn sampler(set: &impl Fn(&str) -> Option<String>) -> Result<(), String> {
    const SAMPLERS: &str = "parentbased_always_on (the default), always_on, always_off, \
                            traceidratio, parentbased_always_off or parentbased_traceidratio";
    let Some(sampler) = set("OTEL_TRACES_SAMPLER") else {
        return Ok(());
    };
    match sampler.as_str() {
        "always_on" | "always_off" | "parentbased_always_on" | "parentbased_always_off" => Ok(()),
        "traceidratio" | "parentbased_traceidratio" => {
            match set("OTEL_TRACES_SAMPLER_ARG").map(|a| (a.parse::<f64>(), a)) {
                Some((Ok(ratio), _)) if (0.0..=1.0).contains(&ratio) => Ok(()),
                Some((_, arg)) => Err(format!(
                    "OTEL_TRACES_SAMPLER_ARG={arg}: {sampler} takes the share of traces to keep, \
                     a number from 0 to 1 (0.25: a quarter)"
                )),
                None => Err(format!(
                    "OTEL_TRACES_SAMPLER={sampler} needs OTEL_TRACES_SAMPLER_ARG, the share of \
                     traces to keep, from 0 to 1"
                )),
            }
        }
        other => Err(format!(
            "OTEL_TRACES_SAMPLER={other}: toolhost samples with {SAMPLERS}"
        )),
    }
}

/// A variable that must be a whole number (of milliseconds, or spans).
fn number(set: &impl Fn(&str) -> Option<String>, name: &str) -> Result<(), String> {
    match set(name) {
        Some(v) if v.parse::<u64>().is_err() => Err(format!(
            "{name}={v}: not a whole number (milliseconds, or for a size a count)"
        )),
        _ => Ok(()),
    }
}

fn checked_url(name: &str, url: &str) -> Result<String, String> {
    match url.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(url.to_string())
        }
        _ => Err(format!(
            "{name}={url:?} is not an http:// or https:// URL (e.g. http://localhost:4318, or \
             http://localhost:4317 for grpc)"
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

/// `%XX` decoded (percent-encoding's decoding: a hand-written one took `%+1` for byte 1,
/// as `from_str_radix` reads a sign).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<OtelEnv, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        OtelEnv::from_env(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    fn export(protocol: Protocol, endpoint: &str) -> Option<Export> {
        Some(Export {
            protocol,
            endpoint: endpoint.into(),
        })
    }

    #[test]
    fn without_an_endpoint_nothing_is_exported() {
        let e = env(&[]).unwrap();
        assert_eq!((e.traces, e.metrics), (None, None));
        assert_eq!(e.resource["service.name"], "toolhost");
    }

    #[test]
    fn what_is_sent_where_follows_the_specifications_table() {
        for (vars, traces, metrics) in [
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")],
                export(Protocol::HttpProtobuf, "http://c:4318/v1/traces"),
                export(Protocol::HttpProtobuf, "http://c:4318/v1/metrics"),
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                export(Protocol::Grpc, "http://c:4317"),
                export(Protocol::Grpc, "http://c:4317"),
            ),
            (
                vec![
                    (
                        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                        "https://x.example/spans",
                    ),
                    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
                    ("OTEL_METRICS_EXPORTER", "prometheus"),
                ],
                export(Protocol::HttpJson, "https://x.example/spans"),
                None,
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_TRACES_EXPORTER", "none"),
                ],
                None,
                export(Protocol::HttpProtobuf, "http://c:4318/v1/metrics"),
            ),
            (
                vec![("OTEL_TRACES_EXPORTER", "otlp")],
                export(Protocol::HttpProtobuf, "http://localhost:4318/v1/traces"),
                None,
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_SDK_DISABLED", "true"),
                ],
                None,
                None,
            ),
        ] {
            let e = env(&vars).unwrap();
            assert_eq!((e.traces, e.metrics), (traces, metrics), "{vars:?}");
        }
    }

    #[test]
    fn the_resource_names_the_service() {
        let e = env(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,team=a%2Cb",
            ),
            ("OTEL_SERVICE_NAME", "gateway"),
        ])
        .unwrap();
        assert_eq!(e.resource["service.name"], "gateway");
        assert_eq!(e.resource["deployment.environment"], "prod");
        assert_eq!(e.resource["team"], "a,b");
        assert_eq!(e.resource["service.version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn an_unusable_variable_is_refused_naming_it() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        for (var, value) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "ftp://c/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "bad header=x"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
            ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
            ("OTEL_METRICS_EXPORTER", "console"),
            ("OTEL_BSP_SCHEDULE_DELAY", "-1"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1m"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                "sometimes",
            ),
            ("OTEL_RESOURCE_ATTRIBUTES", "just-a-word"),
            ("OTEL_SDK_DISABLED", "yes"),
        ] {
            let vars = if var == base.0 {
                vec![(var, value)]
            } else {
                vec![base, (var, value)]
            };
            let e = env(&vars).unwrap_err();
            assert!(e.contains(var), "{var}={value}: {e}");
        }
        let ratio = env(&[
            base,
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
        ])
        .unwrap_err();
        assert!(ratio.contains("OTEL_TRACES_SAMPLER_ARG=1.5"), "{ratio}");
        env(&[
            base,
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ])
        .unwrap();
    }

    #[test]
    fn header_values_are_percent_decoded_and_a_sign_is_not_a_digit() {
        for (written, read) in [
            ("Bearer%20abc", "Bearer abc"),
            ("a%2Cb", "a,b"),
            ("%+1", "%+1"),
            ("100%", "100%"),
            ("%zz", "%zz"),
        ] {
            assert_eq!(percent_decode(written), read, "{written}");
        }
    }
}
