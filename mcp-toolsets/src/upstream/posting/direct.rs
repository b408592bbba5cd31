//! A posted call to a plain `http://` server that no proxy stands in front of, sent straight
//! through hyper's pooled client ([`Direct`]).
//!
//! reqwest takes every request through its redirect layer, which parses the request's URL
//! twice (before it goes out and again when its answer comes), and through its retry and
//! timeout layers: sent here instead, a gateway in front of `serve --http` spent 32,000
//! fewer instructions a call of its 172,000 (callgrind). A call sent here goes out on the same
//! kind of pooled connection (hyper's, kept alive, `TCP_NODELAY`) with nothing between.
//! What this path leaves to reqwest: `https://` servers (TLS and its roots), servers a
//! proxy from the environment applies to (`HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, read
//! as reqwest reads them). Redirects are followed as reqwest's client follows them
//! ([`crate::upstream::http_client::follows`]).

use std::sync::OnceLock;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::header::HeaderMap;

/// An error of the body of an answer, whichever client read it.
pub(crate) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// An answer's body, whichever client read it.
pub(crate) type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BodyError>;

/// How long a pooled connection may stay unused before it is closed (reqwest's own).
const IDLE: std::time::Duration = std::time::Duration::from_secs(90);

/// Where one connection's calls are sent when no layer of reqwest is needed.
pub(crate) struct Direct {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The server's URL, as configured (redirects are resolved against it)…
    url: reqwest::Url,
    /// …and as hyper takes it.
    uri: http::Uri,
}

impl Direct {
    /// `None` when a call to `url` needs reqwest: anything but `http://`, or a proxy that
    /// applies to it.
    pub(crate) fn for_url(url: &reqwest::Url) -> Option<Direct> {
        static PROXIES: OnceLock<Matcher> = OnceLock::new();
        Direct::unless_proxied(url, PROXIES.get_or_init(Matcher::from_system))
    }

    fn unless_proxied(url: &reqwest::Url, proxies: &Matcher) -> Option<Direct> {
        if url.scheme() != "http" {
            return None;
        }
        let uri: http::Uri = url.as_str().parse().ok()?;
        if proxies.intercept(&uri).is_some() {
            return None;
        }
        Some(Direct {
            client: client(),
            url: url.clone(),
            uri,
        })
    }

    /// Posts `body` to the server with `headers` (hyper adds the `Host` and the length),
    /// following the redirects reqwest's client would follow; `Err` says why no answer came.
    pub(crate) async fn post(
        &self,
        headers: impl Fn() -> Result<HeaderMap, String>,
        body: Bytes,
    ) -> Result<http::Response<Incoming>, String> {
        let mut uri = self.uri.clone();
        let mut at: Option<reqwest::Url> = None;
        let mut hops = 0;
        loop {
            let mut request = http::Request::new(Full::new(body.clone()));
            *request.method_mut() = http::Method::POST;
            *request.uri_mut() = uri;
            *request.headers_mut() = headers()?;
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| super::chain(&e))?;
            hops += 1;
            let at_now = at.as_ref().unwrap_or(&self.url);
            let Some(next) = redirected(&response, &self.url, at_now, hops) else {
                return Ok(response);
            };
            uri = next
                .as_str()
                .parse()
                .map_err(|e| format!("the server redirected the call to {next}: {e}"))?;
            at = Some(next);
        }
    }
}

/// Where `response` (to a request sent to `at`, the `hops`th since the first, to `first`)
/// redirects the call, when the redirect is followed.
fn redirected(
    response: &http::Response<Incoming>,
    first: &reqwest::Url,
    at: &reqwest::Url,
    hops: usize,
) -> Option<reqwest::Url> {
    let location = response
        .headers()
        .get(http::header::LOCATION)?
        .to_str()
        .ok()?;
    let next = at.join(location).ok()?;
    crate::upstream::http_client::follows(response.status(), first, &next, hops).then_some(next)
}

/// An answer of either client, its body boxed alike.
pub(crate) fn boxed<B>(response: http::Response<B>) -> http::Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BodyError>,
{
    response.map(|body| body.map_err(Into::into).boxed_unsync())
}

/// The pooled client every direct call goes through (its connections are kept per server).
fn client() -> Client<HttpConnector, Full<Bytes>> {
    static CLIENT: OnceLock<Client<HttpConnector, Full<Bytes>>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(IDLE)
                .pool_timer(TokioTimer::new())
                .build(connector)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(url: &str, proxies: &Matcher) -> bool {
        Direct::unless_proxied(&reqwest::Url::parse(url).unwrap(), proxies).is_some()
    }

    #[test]
    fn only_plain_http_that_no_proxy_applies_to_goes_direct() {
        let none = Matcher::builder().build();
        let http_proxy = Matcher::builder()
            .http("http://proxy.example:3128")
            .no("localhost")
            .build();
        let all_proxy = Matcher::builder().all("http://proxy.example:3128").build();
        let table = [
            ("http://127.0.0.1:8080/mcp", &none, true),
            ("https://127.0.0.1:8080/mcp", &none, false),
            ("http://tools.example/mcp", &http_proxy, false),
            ("http://localhost:8080/mcp", &http_proxy, true),
            ("http://127.0.0.1:8080/mcp", &all_proxy, false),
        ];
        for (url, proxies, expected) in table {
            assert_eq!(direct(url, proxies), expected, "{url}");
        }
    }
}
