//! The HTTP client every server over streamable HTTP is reached with ([`http_client`]),
//! shared by rmcp's connections and the calls toolhost posts itself.

/// Installs rustls's `ring` provider for `https://` servers (once; a provider installed by
/// the host first is kept).
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The HTTP client every server over streamable HTTP is reached with, its connections
/// kept open between calls (rmcp's own client opens a connection per request: a TCP
/// handshake and a socket left in TIME_WAIT for every call, about 400 µs of the
/// gateway's CPU a call, and a gateway under load runs out of local ports). Requests go
/// out with `TCP_NODELAY`, so a reused connection never waits on a delayed ACK.
/// Redirects: only 307 and 308 (which keep the method and the body, so the message
/// arrives whole) to the same origin (the session id and the token are never replayed to
/// another host), at most [`MAX_REDIRECTS`] of them; any other comes back as the answer.
pub(crate) fn http_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            install_tls_provider();
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .redirect(reqwest::redirect::Policy::custom(redirect))
                .build()
                .unwrap_or_else(|e| {
                    tracing::warn!("the HTTP client for MCP servers could not be built as set up ({e}); using reqwest's defaults");
                    reqwest::Client::new()
                })
        })
        .clone()
}

/// The most redirects one request to a server follows.
pub(crate) const MAX_REDIRECTS: usize = 10;

/// Whether a server's redirect is followed ([`http_client`]).
fn redirect(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt.previous().first();
    if first.is_some_and(|first| {
        follows(
            attempt.status(),
            first,
            attempt.url(),
            attempt.previous().len(),
        )
    }) {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

/// Whether a redirect answered with `status` from a request first sent to `first`, to
/// `next`, after `hops` requests, is followed: only 307 and 308, to the same origin, at
/// most [`MAX_REDIRECTS`] of them (the calls toolhost posts itself follow it too).
pub(crate) fn follows(
    status: reqwest::StatusCode,
    first: &reqwest::Url,
    next: &reqwest::Url,
    hops: usize,
) -> bool {
    let keeps_body = matches!(
        status,
        reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
    );
    let follows = keeps_body && first.origin() == next.origin() && hops <= MAX_REDIRECTS;
    if follows {
        tracing::debug!(to = %next, "an MCP server redirected a request; configure its URL as the one it redirects to");
    }
    follows
}
