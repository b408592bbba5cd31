//! A posted call to a plain `http://` server that no proxy stands in front of, sent on a
//! connection of hyper's that the call itself drives ([`Direct`], [`pool`]).
//!
//! reqwest takes every request through its redirect layer, which parses the request's URL
//! twice (before it goes out and again when its answer comes), and through its retry and
//! timeout layers: sent past it, a gateway in front of `serve --http` spent 32,000 fewer
//! instructions a call of its 172,000 (callgrind). A call sent here goes out on a
//! connection kept alive between calls (`TCP_NODELAY`), with nothing between.
//! What this path leaves to reqwest: `https://` servers (TLS and its roots), servers a
//! proxy from the environment applies to (`HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, read
//! as reqwest reads them). Redirects are followed as reqwest's client follows them
//! ([`crate::upstream::http_client::follows`]).

mod pool;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use reqwest::header::HeaderMap;
use tower_service::Service as _;

pub(crate) use pool::Driven;
use pool::{Line, Pool};

/// An error of the body of an answer, whichever client read it.
pub(crate) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// An answer's body, whichever client read it.
pub(crate) type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BodyError>;

/// Where one connection's calls are sent when no layer of reqwest is needed.
pub(crate) struct Direct {
    /// The connections to the server kept open between calls.
    pool: Arc<Pool>,
    /// The server's URL, as configured (redirects are resolved against it)…
    url: reqwest::Url,
    /// …as a connection is made to it…
    uri: http::Uri,
    /// …and as a request names it.
    target: Target,
}

/// What a request names of where it goes: its path (and query), and its `Host`.
struct Target {
    path: http::Uri,
    host: http::HeaderValue,
}

impl Target {
    fn of(uri: &http::Uri) -> Option<Target> {
        let authority = uri.authority()?;
        // The port is left out where it is the scheme's own, as browsers and hyper send it.
        let host = match authority.port_u16() {
            Some(80) | None => authority.host(),
            Some(_) => authority.as_str(),
        };
        Some(Target {
            path: uri.path_and_query()?.clone().into(),
            host: http::HeaderValue::from_str(host).ok()?,
        })
    }
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
            pool: Arc::default(),
            url: url.clone(),
            target: Target::of(&uri)?,
            uri,
        })
    }

    /// Posts `body` to the server with `headers` (the `Host` and the length are added),
    /// following the redirects reqwest's client would follow; `Err` says why no answer came.
    pub(crate) async fn post(
        &self,
        headers: impl Fn() -> Result<HeaderMap, String>,
        body: Bytes,
    ) -> Result<http::Response<Driven>, String> {
        let mut moved: Option<(reqwest::Url, Target)> = None;
        let mut hops = 0;
        loop {
            let target = moved.as_ref().map_or(&self.target, |(_, target)| target);
            let mut request = http::Request::new(Full::new(body.clone()));
            *request.method_mut() = http::Method::POST;
            *request.uri_mut() = target.path.clone();
            *request.headers_mut() = headers()?;
            request
                .headers_mut()
                .insert(http::header::HOST, target.host.clone());
            let response = self.send(request).await?;
            hops += 1;
            let at = moved.as_ref().map_or(&self.url, |(url, _)| url);
            let Some(next) = redirected(&response, &self.url, at, hops) else {
                return Ok(response);
            };
            // Followed only to the same origin: the same server, on the same connections.
            let target = next
                .as_str()
                .parse()
                .ok()
                .as_ref()
                .and_then(Target::of)
                .ok_or_else(|| {
                    format!("the server redirected the call to {next}, which cannot be posted to")
                })?;
            moved = Some((next, target));
        }
    }

    /// Sends `request` on a kept connection, or a new one; once more on another when the
    /// one taken had closed before the request went out.
    async fn send(
        &self,
        mut request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Driven>, String> {
        let mut again = true;
        loop {
            let line = match self.pool.take() {
                Some(line) => line,
                None => self.open().await?,
            };
            match line.send(request).await {
                Ok((response, line)) => {
                    return Ok(response.map(|body| Driven::new(body, line, &self.pool)));
                }
                Err(unanswered) => match unanswered.unsent {
                    Some(unsent) if again => {
                        again = false;
                        request = unsent;
                    }
                    _ => return Err(unanswered.error),
                },
            }
        }
    }

    /// How many connections to the server are kept for later calls.
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.pool.kept()
    }

    /// A new connection to the server.
    async fn open(&self) -> Result<Line, String> {
        let io = connector()
            .call(self.uri.clone())
            .await
            .map_err(|e| super::chain(&e))?;
        let line = Line::open(io).await.map_err(|e| super::chain(&e))?;
        self.pool.reap();
        Ok(line)
    }
}

/// Where `response` (to a request sent to `at`, the `hops`th since the first, to `first`)
/// redirects the call, when the redirect is followed.
fn redirected<B>(
    response: &http::Response<B>,
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

/// What every direct connection is made with: the system's resolver, `TCP_NODELAY`.
fn connector() -> HttpConnector {
    static CONNECTOR: OnceLock<HttpConnector> = OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            connector
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
