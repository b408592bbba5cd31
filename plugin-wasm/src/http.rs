//! Outgoing HTTP (`wasi:http`) for components: answered only for a tool declared
//! `network`, only to the hosts the plugin's configuration lists ([`HostList`]), and
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
/// http_hosts` in toolhost's configuration): the one host-list syntax of every way out
/// ([`HostList`]). An entry without a port allows the request's scheme's port (443 for
/// `https`, 80 for `http`); a name is matched as the request gives it, before it is
/// resolved.
pub use sandbox::HostList;

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
    pub(crate) hosts: Arc<HostList>,
    pub(crate) stop: Stop,
    /// Why requests were refused, in order: added to the call's error.
    pub(crate) refused: Vec<String>,
}

impl HttpGate {
    pub(crate) fn new(
        caller: crate::caller::Caller,
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
        if self.hosts.matches(host, port, &[scheme_port]) {
            return None;
        }
        Some(format!(
            "{host}:{port} is not one of the hosts [plugins.{}] http_hosts allows ({}); add it there to allow it",
            self.plugin, self.hosts
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
