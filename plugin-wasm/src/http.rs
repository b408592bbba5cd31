//! Outgoing HTTP (`wasi:http`) for components: answered only for a tool declared
//! `network`, only to the hosts the plugin's configuration lists ([`HttpHosts`]), and
//! stopped when its call is cancelled or times out.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tool_api::ToolContext;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// How often a request in flight looks whether its call was cancelled.
const CANCEL_CHECK: Duration = Duration::from_millis(10);

/// The hosts a component's `network` tools may send HTTP requests to (`[plugins.NAME]
/// http_hosts` in toolhost's configuration). An entry is a host name or IP address,
/// optionally with a port (`api.example.com`, `127.0.0.1:8080`, `[::1]:8080`), or a
/// wildcard for the subdomains of a name (`*.example.com`, which does not match
/// `example.com` itself). Without a port an entry allows the scheme's own port (443 for
/// `https`, 80 for `http`). Names are compared without case and without a trailing dot;
/// a name is matched as the request gives it, before it is resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpHosts {
    entries: Vec<HostEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostEntry {
    /// The name or address, lowercase, without brackets or a trailing dot.
    host: String,
    /// `*.host`: any name ending in `.host`.
    subdomains: bool,
    port: Option<u16>,
}

impl HttpHosts {
    /// No host: every request is refused.
    pub fn none() -> HttpHosts {
        HttpHosts::default()
    }

    /// Parses the entries; an entry that is not a host (a URL, a path, a bad port, `*`
    /// alone) is an error that quotes it and says how to write it.
    pub fn new<S: AsRef<str>>(entries: impl IntoIterator<Item = S>) -> Result<HttpHosts, String> {
        let entries = entries
            .into_iter()
            .map(|e| HostEntry::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(HttpHosts { entries })
    }

    /// Whether no host is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a request to `host` on `port` is allowed (`port`: the one the request
    /// names, else its scheme's).
    pub fn allows(&self, host: &str, port: u16, scheme_port: u16) -> bool {
        let host = normalized(host);
        self.entries.iter().any(|e| {
            let name = if e.subdomains {
                host.strip_suffix(e.host.as_str())
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.'))
            } else {
                host == e.host
            };
            name && port == e.port.unwrap_or(scheme_port)
        })
    }

    /// The entries, written out (`api.example.com`, `*.cdn.example:8443`).
    pub fn entries(&self) -> Vec<String> {
        self.entries.iter().map(HostEntry::to_string).collect()
    }

    /// The entries as configured, for messages.
    fn listed(&self) -> String {
        if self.entries.is_empty() {
            return "none".into();
        }
        self.entries().join(", ")
    }
}

impl HostEntry {
    fn parse(entry: &str) -> Result<HostEntry, String> {
        let bad = |why: &str| Err(format!("http_hosts entry '{entry}': {why}"));
        let text = entry.trim();
        if text.is_empty() {
            return bad("empty; write a host name such as 'api.example.com'");
        }
        if text.contains("://") {
            return bad(
                "write the host only, without a scheme ('api.example.com', or 'api.example.com:8443' for another port)",
            );
        }
        if text.contains(['/', '?', '#', '@', ' ']) {
            return bad("write the host only, without a path, query or user");
        }
        let (host, port) = match split_port(text) {
            Ok(split) => split,
            Err(why) => return bad(&why),
        };
        let (host, subdomains) = match host.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (host, false),
        };
        if host.is_empty() || host == "*" || host.contains('*') {
            return bad(
                "every host cannot be allowed; list the hosts (a '*.' prefix allows the subdomains of one name)",
            );
        }
        Ok(HostEntry {
            host: normalized(host),
            subdomains,
            port,
        })
    }
}

impl std::fmt::Display for HostEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.subdomains {
            f.write_str("*.")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// `host[:port]` or `[v6][:port]`, split.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .map(Some)
            .ok_or_else(|| format!("'{p}' is not a port (1 to 65535)"))
    };
    if let Some(rest) = text.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err("an IPv6 address opened with '[' must close with ']'".into());
        };
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, port(p)?)),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("unexpected '{after}' after the address")),
        };
    }
    match text.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => {
            Err("write an IPv6 address in brackets ('[::1]:8080')".into())
        }
        Some((host, p)) => Ok((host, port(p)?)),
        None => Ok((text, None)),
    }
}

fn normalized(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// Whether a call was asked to stop: by the host ([`tool_api::Tool::cancel`], timeouts
/// included) or through its context.
#[derive(Clone)]
pub(crate) struct Stop {
    pub(crate) flag: Arc<AtomicBool>,
    pub(crate) ctx: Option<Arc<ToolContext>>,
}

impl Stop {
    pub(crate) fn requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
            || self.ctx.as_deref().is_some_and(ToolContext::is_cancelled)
    }
}

/// What one call's outgoing requests may do; the `wasi:http` hooks of its store.
pub(crate) struct HttpGate {
    /// The plugin, for messages.
    pub(crate) plugin: String,
    /// The tool calling and its declared class, or `None` while describing.
    pub(crate) tool: Option<(String, tool_api::SideEffect)>,
    pub(crate) hosts: Arc<HttpHosts>,
    pub(crate) stop: Stop,
    /// Why requests were refused, in order: added to the call's error.
    pub(crate) refused: Vec<String>,
}

impl HttpGate {
    pub(crate) fn new(
        caller: crate::call::Caller,
        cancel: Arc<AtomicBool>,
        ctx: Option<ToolContext>,
    ) -> HttpGate {
        HttpGate {
            plugin: caller.plugin,
            tool: caller.tool,
            hosts: caller.hosts,
            stop: Stop {
                flag: cancel,
                ctx: ctx.map(Arc::new),
            },
            refused: Vec::new(),
        }
    }

    /// No call any more: every request is refused, no context is held, and a request the
    /// call left in flight (a kept instance's) is stopped like a cancelled call's.
    pub(crate) fn end(&mut self) {
        self.stop.flag.store(true, Ordering::Release);
        self.tool = None;
        self.stop.ctx = None;
        self.refused.clear();
    }

    /// Why a request to `uri` may not be sent, if it may not.
    fn refusal(&self, uri: &http::Uri) -> Option<String> {
        let (tool, class) = match &self.tool {
            None => return Some("a component may not send HTTP requests from describe()".into()),
            Some(t) => t,
        };
        if *class != tool_api::SideEffect::Network {
            return Some(format!(
                "tool '{tool}' declares side effect '{class}'; only a tool declared 'network' may send HTTP requests"
            ));
        }
        let Some(host) = uri.host() else {
            return Some(format!("the request names no host: '{uri}'"));
        };
        let scheme_port = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
            443
        } else {
            80
        };
        let port = uri.port_u16().unwrap_or(scheme_port);
        if self.hosts.allows(host, port, scheme_port) {
            return None;
        }
        Some(format!(
            "{host}:{port} is not one of the hosts [plugins.{}] http_hosts allows ({}); add it there to allow it",
            self.plugin,
            self.hosts.listed()
        ))
    }
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
        if let Some(why) = self.refusal(request.uri()) {
            tracing::warn!(plugin = %self.plugin, uri = %request.uri(), "outgoing HTTP refused: {why}");
            self.refused.push(why);
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let stop = self.stop.clone();
        Box::new(async move {
            let sent = wasmtime_wasi_http::default_send_request(request, options);
            let (response, io) = until_stopped(&stop, sent).await?;
            let response =
                response.map(|body| Stoppable::new(body.boxed_unsync(), stop).boxed_unsync());
            Ok((
                response,
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}

fn stopped() -> Error {
    Error::InternalError(Some("the call was cancelled".into()))
}

/// `work`, ended early with an error once the call is asked to stop.
async fn until_stopped<T>(
    stop: &Stop,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut work = std::pin::pin!(work);
    let mut check = tokio::time::interval(CANCEL_CHECK);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = check.tick() => if stop.requested() {
                return Err(stopped());
            }
        }
    }
}

/// A response body that ends with an error once its call is asked to stop, so that a
/// component waiting for a slow body is not held past its call's cancel or timeout.
struct Stoppable {
    inner: WasiBody,
    stop: Stop,
    check: tokio::time::Interval,
}

impl Stoppable {
    fn new(inner: WasiBody, stop: Stop) -> Stoppable {
        let mut check = tokio::time::interval(CANCEL_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Stoppable { inner, stop, check }
    }
}

impl Body for Stoppable {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        if this.stop.requested() {
            return Poll::Ready(Some(Err(stopped())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                // Woken at the next check even when no byte comes.
                while this.check.poll_tick(cx).is_ready() {}
                Poll::Pending
            }
            ready => ready,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn entries_allow_their_host_on_the_schemes_port_or_their_own() {
        let hosts = HttpHosts::new([
            "api.example.com",
            "127.0.0.1:8080",
            "*.cdn.example.org",
            "[::1]:9000",
            "Upper.Example.NET.",
        ])
        .unwrap();
        let table: &[(&str, u16, u16, bool)] = &[
            ("api.example.com", 443, 443, true),
            ("API.example.com.", 80, 80, true),
            ("api.example.com", 8443, 443, false),
            ("example.com", 443, 443, false),
            ("evil-api.example.com", 443, 443, false),
            ("127.0.0.1", 8080, 80, true),
            ("127.0.0.1", 80, 80, false),
            ("a.cdn.example.org", 443, 443, true),
            ("a.b.cdn.example.org", 443, 443, true),
            ("cdn.example.org", 443, 443, false),
            ("xcdn.example.org", 443, 443, false),
            ("[::1]", 9000, 80, true),
            ("upper.example.net", 443, 443, true),
        ];
        for &(host, port, scheme_port, allowed) in table {
            assert_eq!(
                hosts.allows(host, port, scheme_port),
                allowed,
                "{host}:{port}"
            );
        }
    }

    #[test]
    fn an_entry_that_is_not_a_host_is_refused_naming_it() {
        let table: &[(&str, &str)] = &[
            ("https://api.example.com", "without a scheme"),
            ("api.example.com/v1", "without a path"),
            ("api.example.com:http", "is not a port"),
            ("api.example.com:0", "is not a port"),
            ("*", "list the hosts"),
            ("*.", "list the hosts"),
            ("a*.example.com", "list the hosts"),
            ("", "empty"),
            ("::1", "in brackets"),
            ("[::1", "must close"),
        ];
        for &(entry, says) in table {
            let e = HttpHosts::new([entry]).unwrap_err();
            assert!(
                e.contains(&format!("'{entry}'")) && e.contains(says),
                "{entry}: {e}"
            );
        }
    }

    #[test]
    fn no_hosts_allow_nothing_and_say_so() {
        let hosts = HttpHosts::none();
        assert!(hosts.is_empty());
        assert!(!hosts.allows("localhost", 80, 80));
        assert_eq!(hosts.listed(), "none");
    }
}
