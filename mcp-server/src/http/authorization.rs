//! The HTTP server's side of OAuth: refusing a token with the challenge that says where to
//! log in, serving the protected resource metadata (RFC 9728), and the console's login
//! (`/v1/login`). The checks themselves are the `oauth` crate's ([`oauth::ResourceServer`]).

use axum::Router;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;

use super::access::Access;

/// Where the protected resource metadata (RFC 9728) is served: this path, and this path
/// followed by the resource's own path (`/mcp`).
pub(super) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// `401`, `403` or `503` for an OAuth token refused, with the challenge that tells the
/// client where to log in, and the reason as a JSON error.
pub(super) fn token_refused(access: &Access, rejected: &oauth::Rejected) -> Response {
    let Some(oauth) = access.oauth() else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let status = match rejected {
        oauth::Rejected::Missing { .. } | oauth::Rejected::Invalid(_) => StatusCode::UNAUTHORIZED,
        oauth::Rejected::InsufficientScope { .. } => StatusCode::FORBIDDEN,
        oauth::Rejected::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let code = match rejected {
        oauth::Rejected::Missing { .. } => "unauthorized",
        oauth::Rejected::Invalid(_) => "invalid_token",
        oauth::Rejected::InsufficientScope { .. } => "insufficient_scope",
        oauth::Rejected::Unavailable(_) => "temporarily_unavailable",
    };
    let challenge = oauth.challenge(rejected);
    let mut response = (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        json!({"error": code, "error_description": rejected.to_string()}).to_string(),
    )
        .into_response();
    if let Ok(value) = http::HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, value);
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("5"),
        );
    }
    response
}

/// Where the console learns how to log its user in (`GET`) and trades the code it got back
/// for a token (`POST`).
pub(super) const LOGIN_PATH: &str = "/v1/login";

/// What the console posts after the identity provider sent its user back.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsoleCode {
    code: String,
    code_verifier: String,
    redirect_uri: String,
}

/// The console's login routes, when `[http.auth.console]` names its client.
pub(super) fn login_routes(access: &Access) -> Option<Router> {
    let oauth = access.oauth()?.clone();
    let (get, post) = (oauth.clone(), oauth);
    let failed =
        |status: StatusCode, e: String| (status, axum::Json(json!({"error": e}))).into_response();
    let router = Router::new().route(
        LOGIN_PATH,
        axum::routing::get(move || async move {
            match get.console_login().await {
                None => failed(
                    StatusCode::NOT_FOUND,
                    "the console logs in with a bearer token here: no [http.auth.console] client is configured".into(),
                ),
                Some(Ok(login)) => axum::Json(login).into_response(),
                Some(Err(e)) => failed(StatusCode::SERVICE_UNAVAILABLE, e),
            }
        })
        .post(move |body: Result<axum::Json<ConsoleCode>, axum::extract::rejection::JsonRejection>| async move {
            let axum::Json(c) = match body {
                Ok(body) => body,
                Err(e) => {
                    return failed(
                        StatusCode::BAD_REQUEST,
                        format!("expected {{\"code\", \"code_verifier\", \"redirect_uri\"}}: {e}"),
                    );
                }
            };
            match post.console_token(&c.code, &c.code_verifier, &c.redirect_uri).await {
                Ok(token) => axum::Json(token).into_response(),
                Err(e) => failed(StatusCode::BAD_REQUEST, e),
            }
        }),
    );
    Some(router)
}

/// The protected resource metadata routes, when the server takes OAuth tokens.
pub(super) fn metadata_routes(access: &Access) -> Option<Router> {
    let oauth = access.oauth()?;
    let document = oauth.metadata().to_string();
    let serve = move || {
        let document = document.clone();
        async move {
            (
                [
                    (http::header::CONTENT_TYPE, "application/json"),
                    (http::header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
                ],
                document,
            )
        }
    };
    let mut router = Router::new().route(METADATA_PATH, axum::routing::get(serve.clone()));
    let own = oauth.metadata_path();
    if own != METADATA_PATH {
        router = router.route(&own, axum::routing::get(serve));
    }
    Some(router)
}
