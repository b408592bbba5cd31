//! A posted call to a plain `http://` server that no proxy stands in front of, sent on a
//! connection that the call itself writes to and reads from ([`Direct`], [`pool`],
//! [`wire`]).
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
mod wire;

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tower_service::Service as _;

pub(crate) use pool::Driven;
use pool::Pool;
use wire::Line;

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
    /// …and the path (and query) a request names.
    path: String,
    /// The header lines every request carries, as written: its `Host` first.
    common: Vec<u8>,
}

impl Direct {
    /// `None` when a call to `url` needs reqwest: anything but `http://`, or a proxy that
    /// applies to it. Every request carries `common` headers.
    pub(crate) fn for_url(url: &reqwest::Url, common: &HeaderMap) -> Option<Direct> {
        static PROXIES: OnceLock<Matcher> = OnceLock::new();
        Direct::unless_proxied(url, common, PROXIES.get_or_init(Matcher::from_system))
    }

    fn unless_proxied(url: &reqwest::Url, common: &HeaderMap, proxies: &Matcher) -> Option<Direct> {
        if url.scheme() != "http" {
            return None;
        }
        let uri: http::Uri = url.as_str().parse().ok()?;
        if proxies.intercept(&uri).is_some() {
            return None;
        }
        let authority = uri.authority()?;
        // The port is left out where it is the scheme's own, as browsers and hyper send it.
        let host = match authority.port_u16() {
            Some(80) | None => authority.host(),
            Some(_) => authority.as_str(),
        };
        let mut lines = Vec::with_capacity(256);
        write_header(&mut lines, "host", host.as_bytes());
        for (name, value) in common {
            write_header(&mut lines, name.as_str(), value.as_bytes());
        }
        Some(Direct {
            pool: Arc::default(),
            url: url.clone(),
            path: uri.path_and_query()?.as_str().to_string(),
            common: lines,
            uri,
        })
    }

    /// Posts `body` to the server with the common headers and `headers` (the length is
    /// added), following the redirects reqwest's client would follow; `Err` says why no
    /// answer came.
    pub(crate) async fn post(
        &self,
        headers: &[(HeaderName, Cow<'_, HeaderValue>)],
        body: &[u8],
    ) -> Result<http::Response<Driven>, String> {
        let mut moved: Option<(reqwest::Url, String)> = None;
        let mut hops = 0;
        loop {
            let path = moved.as_ref().map_or(&*self.path, |(_, path)| path);
            let request = self.request(path, headers, body);
            let response = self.send(&request).await?;
            hops += 1;
            let at = moved.as_ref().map_or(&self.url, |(url, _)| url);
            let Some(next) = redirected(&response, &self.url, at, hops) else {
                return Ok(response);
            };
            // Followed only to the same origin: the same server, on the same connections.
            let path = match next.query() {
                Some(query) => format!("{}?{query}", next.path()),
                None => next.path().to_string(),
            };
            if path.bytes().any(|b| !b.is_ascii_graphic()) {
                return Err(format!(
                    "the server redirected the call to {next}, which cannot be posted to"
                ));
            }
            moved = Some((next, path));
        }
    }

    /// The request, as written: its line, the common headers, `headers`, its length, `body`.
    fn request(
        &self,
        path: &str,
        headers: &[(HeaderName, Cow<'_, HeaderValue>)],
        body: &[u8],
    ) -> Vec<u8> {
        let mut request = Vec::with_capacity(self.common.len() + path.len() + body.len() + 128);
        request.extend_from_slice(b"POST ");
        request.extend_from_slice(path.as_bytes());
        request.extend_from_slice(b" HTTP/1.1\r\n");
        request.extend_from_slice(&self.common);
        for (name, value) in headers {
            write_header(&mut request, name.as_str(), value.as_bytes());
        }
        request.extend_from_slice(b"content-length: ");
        request.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        request.extend_from_slice(b"\r\n\r\n");
        request.extend_from_slice(body);
        request
    }

    /// Sends `request` on a kept connection, or a new one; once more on a new one when the
    /// kept one taken could not be written to (the server had closed it).
    async fn send(&self, request: &[u8]) -> Result<http::Response<Driven>, String> {
        let mut again = true;
        loop {
            let (mut line, kept) = match self.pool.take() {
                Some(line) => (line, true),
                None => (self.open().await?, false),
            };
            if let Err(e) = line.write(request).await {
                if kept && again {
                    again = false;
                    continue;
                }
                return Err(format!("the request could not be sent: {e}"));
            }
            let head = line.head().await?;
            let mut response =
                http::Response::new(Driven::new(line, head.framing, head.reusable, &self.pool));
            *response.status_mut() = head.status;
            *response.headers_mut() = head.headers;
            return Ok(response);
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
        self.pool.reap();
        Ok(Line::new(io.into_inner()))
    }
}

/// Writes one header line.
fn write_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
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
        Direct::unless_proxied(
            &reqwest::Url::parse(url).unwrap(),
            &HeaderMap::new(),
            proxies,
        )
        .is_some()
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
