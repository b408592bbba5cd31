//! Who may talk to the HTTP server: the `Host` and `Origin` checks against DNS rebinding,
//! and bearer tokens. One check for every route (MCP, control API, console).
//!
//! - `Host` must name a loopback host (`localhost`, `127.0.0.1`, `[::1]`), the address the
//!   server is bound to, or a name given with `--allowed-host` (`*`: any, for a server
//!   behind a load balancer that already requires a token). Otherwise `403`.
//! - `Origin`, when a browser sends one, must be this server's own origin (an allowed host
//!   with the bound port) or one given with `--allowed-origin`. Otherwise `403`.
//! - With tokens configured (`--token-file FILE` or `TOOLHOST_HTTP_TOKEN`), every request
//!   needs `Authorization: Bearer TOKEN`, compared in constant time; otherwise `401` with
//!   `WWW-Authenticate: Bearer`. A server bound to a non-loopback address refuses to start
//!   without one. The one exception is the console page itself (`GET /`): it holds no data,
//!   asks the person for the token and sends it with each of its requests.
//! - With `[http.auth]` (an OAuth resource server, [`oauth::ResourceServer`]), a token that
//!   is not one of those is checked as an OAuth access token: `401` with the challenge that
//!   points at the protected resource metadata when it is missing or not valid, `403` when
//!   it lacks a required scope, `503` when its issuer cannot be reached. Both kinds of token
//!   may be on at once.
//!
//! The caller's principal, `token-` and the first 12 hex digits of the token's SHA-256
//! (`local` without tokens), or `ISSUER#SUBJECT` with its groups for an OAuth token, names
//! whose "always allow" grants and sessions a request uses and which `[[access]]` rule
//! applies. Tokens are never logged.

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderMap;
use oauth::{Rejected, ResourceServer};
use sha2::{Digest, Sha256};

use crate::Principal;

/// The environment variable that may hold the bearer token (one; a file may hold several).
pub const TOKEN_ENV: &str = "TOOLHOST_HTTP_TOKEN";

/// OAuth callers by token: until when, and who.
type Admitted = oauth::Kept<Arc<str>, Principal, foldhash::fast::RandomState>;

/// The most OAuth callers kept admitted at once.
const ADMITTED: usize = 10_000;

/// Why a request is turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `403`: a `Host` or `Origin` this server does not serve.
    Forbidden(String),
    /// `401`: no token, or a wrong one (bearer tokens only).
    Unauthorized(String),
    /// An OAuth access token missing or refused ([`Access::oauth`] answers it).
    Token(Rejected),
}

/// The access rules of one server.
#[derive(Debug)]
pub struct Access {
    /// SHA-256 of each accepted token.
    tokens: Vec<[u8; 32]>,
    /// OAuth access tokens, when `[http.auth]` is set.
    oauth: Option<Arc<ResourceServer>>,
    /// The callers of OAuth tokens checked lately, by token, until their check may be
    /// reused ([`oauth::Identity::reuse_until`]): a caller's every request carries the same
    /// token, which is hashed once here (a fast hash, then compared whole).
    admitted: Admitted,
    hosts: Vec<String>,
    any_host: bool,
    origins: Vec<String>,
    port: u16,
}

impl Access {
    /// Rules for a server bound to `bind`, taking `tokens` and, with `oauth`, OAuth access
    /// tokens. Refuses a non-loopback address with neither.
    pub fn new(
        bind: SocketAddr,
        tokens: Vec<String>,
        oauth: Option<Arc<ResourceServer>>,
        extra_hosts: &[String],
        extra_origins: &[String],
    ) -> Result<Access, String> {
        if !bind.ip().is_loopback() && tokens.is_empty() && oauth.is_none() {
            return Err(format!(
                "serving on {bind}, which is not a loopback address, needs callers to prove who they are: \
                 --token-file FILE (one token per line), {TOKEN_ENV}=TOKEN, or an identity provider in [http.auth]"
            ));
        }
        if let Some(t) = tokens.iter().find(|t| t.len() < 16) {
            return Err(format!(
                "a bearer token of {} characters is too easy to guess; use at least 16 (e.g. `head -c 32 /dev/urandom | base64`)",
                t.len()
            ));
        }
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(String::from)
            .collect();
        if !bind.ip().is_unspecified() {
            hosts.push(match bind {
                SocketAddr::V4(a) => a.ip().to_string(),
                SocketAddr::V6(a) => format!("[{}]", a.ip()),
            });
        }
        let any_host = extra_hosts.iter().any(|h| h == "*");
        hosts.extend(
            extra_hosts
                .iter()
                .filter(|h| *h != "*")
                .map(|h| h.to_ascii_lowercase()),
        );
        Ok(Access {
            tokens: tokens
                .iter()
                .map(|t| Sha256::digest(t.as_bytes()).into())
                .collect(),
            oauth,
            admitted: oauth::Kept::with_hasher(ADMITTED, foldhash::fast::RandomState::default()),
            hosts,
            any_host,
            origins: extra_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            port: bind.port(),
        })
    }

    /// The same rules for a server that ended up on `port` (bound to port 0, say): its own
    /// origin is judged with that port.
    pub fn on_port(mut self, port: u16) -> Access {
        self.port = port;
        self
    }

    /// The OAuth resource server, when `[http.auth]` is set.
    pub fn oauth(&self) -> Option<&Arc<ResourceServer>> {
        self.oauth.as_ref()
    }

    /// Checks a request's headers; the caller's principal when it may pass.
    pub async fn check(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
        self.check_host(headers)?;
        if self.tokens.is_empty() && self.oauth.is_none() {
            return Ok(Principal::named("local"));
        }
        let given = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim);
        let Some(given) = given else {
            return Err(match &self.oauth {
                Some(oauth) => Refusal::Token(Rejected::Missing {
                    metadata: oauth.metadata_url(),
                }),
                None => {
                    Refusal::Unauthorized("Unauthorized: send Authorization: Bearer TOKEN".into())
                }
            });
        };
        if let Some(principal) = self.known_token(given) {
            return Ok(principal);
        }
        let Some(oauth) = &self.oauth else {
            return Err(Refusal::Unauthorized(
                "Unauthorized: the bearer token is not valid".into(),
            ));
        };
        if let Some(principal) = self.admitted.get(given) {
            return Ok(principal);
        }
        match oauth.authenticate(given).await {
            Ok(identity) => {
                let token: Arc<str> = given.into();
                let reuse_until = identity.reuse_until;
                let principal = Principal {
                    id: identity.principal(),
                    groups: identity.groups,
                    claims: std::sync::Arc::new(identity.claims),
                    own_calls_only: true,
                    token: Some(crate::sessions::CallerToken {
                        value: token.clone(),
                        audiences: identity.audiences.into(),
                    }),
                };
                if let Some(until) = reuse_until {
                    self.admitted.keep(token, until, principal.clone());
                }
                Ok(principal)
            }
            Err(rejected) => {
                tracing::info!(target: "toolhost::auth", "refused an access token: {rejected}");
                Err(Refusal::Token(rejected))
            }
        }
    }

    /// The `Host` and `Origin` checks.
    fn check_host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or_else(|| Refusal::Forbidden("Forbidden: no Host header".into()))?;
        if !self.any_host && !self.host_allowed(host) {
            tracing::warn!(
                host,
                "refused a request for a host this server does not serve (DNS rebinding?)"
            );
            return Err(Refusal::Forbidden(format!(
                "Forbidden: Host '{host}' is not served here (add it with --allowed-host)"
            )));
        }
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("").trim_end_matches('/');
            if !self.origin_allowed(origin) {
                tracing::warn!(origin, "refused a request from a foreign origin");
                return Err(Refusal::Forbidden(format!(
                    "Forbidden: Origin '{origin}' may not use this server (add it with --allowed-origin)"
                )));
            }
        }
        Ok(())
    }

    /// The principal of one of the configured bearer tokens.
    fn known_token(&self, given: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        // Every token is compared, each in constant time (`subtle`), so the time taken
        // says nothing about which bytes matched.
        let mut matched = None;
        for known in &self.tokens {
            if bool::from(subtle::ConstantTimeEq::ct_eq(&known[..], &digest[..])) {
                matched = Some(known);
            }
        }
        matched.map(|known| {
            Principal::named(format!(
                "token-{}",
                known[..6]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ))
        })
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let authority = authority.to_ascii_lowercase();
        let host = split_port(&authority).0;
        self.hosts.iter().any(|h| h == host || *h == authority)
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.to_ascii_lowercase();
        if self.origins.contains(&origin) {
            return true;
        }
        let Some(authority) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        let (host, port) = split_port(authority);
        let port = port.or(if origin.starts_with("https://") {
            Some(443)
        } else {
            Some(80)
        });
        port == Some(self.port) && (self.any_host || self.hosts.iter().any(|h| h == host))
    }
}

/// `host[:port]` (IPv6 in brackets) into its host and port.
fn split_port(authority: &str) -> (&str, Option<u16>) {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => (
                &authority[..=end],
                authority[end + 1..]
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok()),
            ),
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().ok()),
        None => (authority, None),
    }
}

/// Reads tokens: one per line of `file` (blank lines and `#` comments skipped), or the
/// one in `TOOLHOST_HTTP_TOKEN`.
pub fn load_tokens(file: Option<&std::path::Path>) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    if let Some(file) = file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read the token file {}: {e}", file.display()))?;
        tokens.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
        if tokens.is_empty() {
            return Err(format!("the token file {} holds no token", file.display()));
        }
    }
    if let Ok(token) = std::env::var(TOKEN_ENV)
        && !token.trim().is_empty()
    {
        tokens.push(token.trim().to_string());
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;

    impl Access {
        /// The check of a request that needs no network (no OAuth token).
        fn check_now(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
            self.check(headers).now_or_never().unwrap()
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn local() -> Access {
        Access::new("127.0.0.1:8080".parse().unwrap(), vec![], None, &[], &[]).unwrap()
    }

    #[test]
    fn a_foreign_host_is_forbidden() {
        let a = local();
        assert!(a.check_now(&headers(&[("host", "127.0.0.1:8080")])).is_ok());
        assert!(a.check_now(&headers(&[("host", "localhost:8080")])).is_ok());
        assert!(matches!(
            a.check_now(&headers(&[("host", "evil.example.com")])),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(
            a.check_now(&headers(&[("host", "evil.example.com:8080")])),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn a_foreign_origin_is_forbidden_and_the_own_origin_passes() {
        let a = local();
        let ok = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ];
        assert!(a.check_now(&headers(&ok)).is_ok());
        for origin in [
            "http://evil.example.com",
            "http://localhost:3000",
            "null",
            "file://",
        ] {
            let h = headers(&[("host", "127.0.0.1:8080"), ("origin", origin)]);
            assert!(
                matches!(a.check_now(&h), Err(Refusal::Forbidden(_))),
                "{origin}"
            );
        }
        let listed = Access::new(
            "127.0.0.1:8080".parse().unwrap(),
            vec![],
            None,
            &[],
            &["https://ide.example.com".into()],
        )
        .unwrap();
        let h = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://ide.example.com"),
        ]);
        assert!(listed.check_now(&h).is_ok());
    }

    #[test]
    fn a_non_loopback_bind_needs_a_token() {
        let e = Access::new("0.0.0.0:8080".parse().unwrap(), vec![], None, &[], &[]).unwrap_err();
        assert!(e.contains("--token-file") && e.contains(TOKEN_ENV), "{e}");
        assert!(
            Access::new(
                "0.0.0.0:8080".parse().unwrap(),
                vec!["short".into()],
                None,
                &[],
                &[]
            )
            .is_err()
        );
    }

    #[test]
    fn tokens_are_checked_and_name_the_principal() {
        let token = "0123456789abcdef-secret";
        let a = Access::new(
            "0.0.0.0:8080".parse().unwrap(),
            vec![token.into()],
            None,
            &["mcp.example.com".into()],
            &[],
        )
        .unwrap();
        let host = ("host", "mcp.example.com");
        assert!(matches!(
            a.check_now(&headers(&[host])),
            Err(Refusal::Unauthorized(_))
        ));
        let wrong = headers(&[host, ("authorization", "Bearer 0123456789abcdef-secreT")]);
        assert!(matches!(a.check_now(&wrong), Err(Refusal::Unauthorized(_))));
        let bearer = format!("Bearer {token}");
        let right = headers(&[host, ("authorization", bearer.as_str())]);
        let p = a.check_now(&right).unwrap();
        assert!(p.id.starts_with("token-") && !p.id.contains(token), "{p:?}");
    }
}
