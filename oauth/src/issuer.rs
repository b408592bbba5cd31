//! One trusted issuer: its metadata (OpenID Connect discovery, else RFC 8414) and its
//! signing keys, fetched when first needed, kept, and fetched again for a key id they do
//! not hold (bounded) or once they are old.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::jwk::{self, Key};

/// The largest metadata or JWKS document read (bytes).
const MAX_DOCUMENT: usize = 1 << 20;

/// What this server needs of an issuer's metadata.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Metadata {
    pub(crate) issuer: String,
    pub(crate) jwks_uri: Option<String>,
    #[serde(default)]
    pub(crate) introspection_endpoint: Option<String>,
    #[serde(default)]
    pub(crate) token_endpoint: Option<String>,
    #[serde(default)]
    pub(crate) authorization_endpoint: Option<String>,
}

/// An issuer and what was fetched of it.
pub(crate) struct Issuer {
    pub(crate) id: String,
    client: reqwest::Client,
    /// The keys: read on every request, replaced whole by a fetch.
    keys: RwLock<Arc<Keys>>,
    /// One fetch at a time; the others wait for it and use what it got.
    fetching: tokio::sync::Mutex<Option<Metadata>>,
    /// The last fetch that failed, and why: within `min_refresh` of it, a request is
    /// answered with that at once instead of waiting on an issuer that is out of reach.
    failed: std::sync::Mutex<Option<(Instant, String)>>,
    max_age: Duration,
    min_refresh: Duration,
}

/// The keys as of a fetch.
#[derive(Default)]
pub(crate) struct Keys {
    pub(crate) keys: Vec<Key>,
    fetched: Option<Instant>,
}

/// Why the keys could not be had.
pub(crate) enum Unfetched {
    /// Fetched too recently to fetch again for an unknown key id.
    TooSoon,
    /// The issuer could not be reached or answered nonsense.
    Failed(String),
}

impl Issuer {
    pub(crate) fn new(
        id: String,
        client: reqwest::Client,
        max_age: Duration,
        min_refresh: Duration,
    ) -> Issuer {
        Issuer {
            id,
            client,
            keys: RwLock::default(),
            fetching: tokio::sync::Mutex::new(None),
            failed: std::sync::Mutex::new(None),
            max_age,
            min_refresh,
        }
    }

    /// The keys held now (none before the first fetch).
    pub(crate) fn keys(&self) -> Arc<Keys> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the keys held are missing or older than `max_age`.
    pub(crate) fn stale(&self, keys: &Keys) -> bool {
        keys.fetched.is_none_or(|t| t.elapsed() >= self.max_age)
    }

    /// Fetches the keys again unless `seen` (what the caller looked at) was already
    /// replaced, or was fetched within `min_refresh` (then [`Unfetched::TooSoon`]).
    pub(crate) async fn refresh(&self, seen: &Arc<Keys>) -> Result<Arc<Keys>, Unfetched> {
        let mut metadata = self.fetching.lock().await;
        let now = self.keys();
        if !Arc::ptr_eq(&now, seen) {
            return Ok(now);
        }
        if now.fetched.is_some_and(|t| t.elapsed() < self.min_refresh) {
            return Err(Unfetched::TooSoon);
        }
        if let Some((at, why)) = &*self.failed.lock().unwrap_or_else(|p| p.into_inner())
            && at.elapsed() < self.min_refresh
        {
            return Err(Unfetched::Failed(why.clone()));
        }
        let fetched = self.fetch(&mut metadata).await;
        match fetched {
            Ok(keys) => {
                tracing::info!(target: "toolhost::auth", issuer = %self.id, keys = keys.len(), "fetched the issuer's signing keys");
                let keys = Arc::new(Keys {
                    keys,
                    fetched: Some(Instant::now()),
                });
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys.clone();
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Ok(keys)
            }
            Err(why) => {
                tracing::warn!(target: "toolhost::auth", issuer = %self.id, "cannot fetch the issuer's signing keys: {why}");
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Instant::now(), why.clone()));
                Err(Unfetched::Failed(why))
            }
        }
    }

    /// The issuer's metadata (fetched once, then kept).
    pub(crate) async fn metadata(&self) -> Result<Metadata, String> {
        let mut metadata = self.fetching.lock().await;
        self.discover(&mut metadata).await
    }

    async fn discover(&self, kept: &mut Option<Metadata>) -> Result<Metadata, String> {
        if let Some(m) = kept.as_ref() {
            return Ok(m.clone());
        }
        let base = self.id.trim_end_matches('/');
        let mut tried = Vec::new();
        for url in discovery_urls(base) {
            match get_json::<Metadata>(&self.client, &url).await {
                Ok(m) if m.issuer == self.id => {
                    *kept = Some(m.clone());
                    return Ok(m);
                }
                Ok(m) => {
                    return Err(format!(
                        "{url} names the issuer {:?}, not {:?} (a metadata document must name its own issuer exactly)",
                        m.issuer, self.id
                    ));
                }
                Err(why) => tried.push(why),
            }
        }
        Err(format!("no issuer metadata found ({})", tried.join("; ")))
    }

    async fn fetch(&self, kept: &mut Option<Metadata>) -> Result<Vec<Key>, String> {
        let metadata = self.discover(kept).await?;
        let jwks_uri = metadata.jwks_uri.ok_or("its metadata has no jwks_uri")?;
        crate::settings::check_url("jwks_uri", &jwks_uri).map_err(|e| e.0)?;
        let body = get_bytes(&self.client, &jwks_uri).await?;
        jwk::parse_set(&body).map_err(|e| format!("{jwks_uri}: {e}"))
    }
}

/// Where an issuer's metadata may be: OpenID Connect discovery, then RFC 8414 (with the
/// issuer's path after the well-known part), then OpenID's form of it.
fn discovery_urls(issuer: &str) -> Vec<String> {
    let mut urls = vec![format!("{issuer}/.well-known/openid-configuration")];
    if let Some(scheme_end) = issuer.find("://") {
        let rest = &issuer[scheme_end + 3..];
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let origin = &issuer[..scheme_end + 3 + host.len()];
        urls.push(format!(
            "{origin}/.well-known/oauth-authorization-server{path}"
        ));
        if !path.is_empty() {
            urls.push(format!("{origin}/.well-known/openid-configuration{path}"));
        }
    }
    urls
}

/// `GET url`, as bytes, at most [`MAX_DOCUMENT`].
pub(crate) async fn get_bytes(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    read_limited(response)
        .await
        .map_err(|e| format!("{url}: {e}"))
}

/// A response's body, refused when it is not a success or over [`MAX_DOCUMENT`].
pub(crate) async fn read_limited(response: reqwest::Response) -> Result<Vec<u8>, String> {
    let status = response.status();
    let body = read_any(response).await?;
    if !status.is_success() {
        return Err(format!("answered {status}"));
    }
    Ok(body)
}

/// A response's body whatever its status, at most [`MAX_DOCUMENT`].
pub(crate) async fn read_any(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(format!("answered more than {MAX_DOCUMENT} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `GET url`, as the JSON document expected; errors name `url`.
pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
) -> Result<T, String> {
    let body = get_bytes(client, url).await?;
    serde_json::from_slice(&body).map_err(|e| format!("{url}: not the JSON expected: {e}"))
}

/// Sends `request` (to `endpoint`) and reads the JSON object it answers, whatever its
/// status: an OAuth endpoint says why it refused in JSON.
pub(crate) async fn send_for_json(
    request: reqwest::RequestBuilder,
    endpoint: &str,
) -> Result<(reqwest::StatusCode, Map<String, Value>), String> {
    let response = request
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("{endpoint}: {e}"))?;
    let status = response.status();
    let body = read_any(response)
        .await
        .map_err(|e| format!("{endpoint}: {e}"))?;
    let answer = serde_json::from_slice(&body)
        .map_err(|e| format!("{endpoint} answered {status} and no JSON object: {e}"))?;
    Ok((status, answer))
}

/// A successful answer, or an error naming `endpoint`, its status and its OAuth `error`.
pub(crate) fn oauth_answer(
    endpoint: &str,
    status: reqwest::StatusCode,
    answer: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    if status.is_success() {
        return Ok(answer);
    }
    let field = |name: &str| answer.get(name).and_then(Value::as_str).unwrap_or("");
    Err(format!(
        "{endpoint} answered {status}: {} {}",
        field("error"),
        field("error_description")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_issuer_out_of_reach_is_asked_again_only_after_min_refresh() {
        // An "issuer" that answers every connection by closing it, and counts them.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        let issuer = Issuer::new(
            format!("http://127.0.0.1:{port}"),
            {
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::new()
            },
            Duration::from_secs(600),
            Duration::from_secs(60),
        );
        let keys = issuer.keys();
        assert!(matches!(
            issuer.refresh(&keys).await,
            Err(Unfetched::Failed(_))
        ));
        let asked = seen.load(std::sync::atomic::Ordering::SeqCst);
        assert!(asked >= 1);
        // Within min_refresh, the failure is answered again without asking.
        let again = issuer.refresh(&keys).await;
        assert!(matches!(again, Err(Unfetched::Failed(why)) if why.contains("127.0.0.1")));
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), asked);
    }

    #[test]
    fn discovery_tries_openid_then_rfc8414_with_the_path() {
        assert_eq!(
            discovery_urls("https://idp.example/realms/team"),
            [
                "https://idp.example/realms/team/.well-known/openid-configuration",
                "https://idp.example/.well-known/oauth-authorization-server/realms/team",
                "https://idp.example/.well-known/openid-configuration/realms/team",
            ]
        );
        assert_eq!(discovery_urls("https://idp.example").len(), 2);
    }
}
