//! toolhost as the OAuth client of a remote MCP server that requires a login: discovery
//! (the server's protected resource metadata, RFC 9728, then its authorization server's
//! metadata, RFC 8414 or OpenID Connect), dynamic client registration (RFC 7591) as a
//! public client, authorization code with PKCE (S256) and the `resource` parameter
//! (RFC 8707) through the user's browser and a one-time loopback redirect, and refresh.
//! What a login keeps ([`Login`]) lives in [`crate::logins`], outside every workspace.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::issuer::{get_json, oauth_answer, send_for_json};

/// How long the browser part of a login may take.
pub const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// What a login keeps: enough to get a new access token without the user.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Login {
    /// The authorization server.
    pub issuer: String,
    /// Where tokens are refreshed.
    pub token_endpoint: String,
    /// The client toolhost registered as (or was given).
    pub client_id: String,
    /// The resource the tokens are for (the MCP server).
    pub resource: String,
    /// The refresh token.
    pub refresh_token: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("resource", &self.resource)
            .field("refresh_token", &"[redacted]")
            .finish()
    }
}

/// An access token and how long it lives.
pub struct AccessToken {
    /// The token.
    pub token: String,
    /// Its `expires_in`, when the server said.
    pub expires_in: Option<Duration>,
}

/// A client for the login's HTTP requests: no redirects followed, a timeout.
pub(crate) fn http() -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// `scheme://host[:port]` and the path of `url`.
fn split(url: &str) -> Result<(String, String), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    Ok((
        parsed.origin().ascii_serialization(),
        parsed.path().trim_end_matches('/').to_string(),
    ))
}

/// The server's protected resource metadata: at the well-known path with the server's
/// path after it, else at the root.
async fn resource_metadata(
    http: &reqwest::Client,
    server: &str,
) -> Result<Map<String, Value>, String> {
    let (origin, path) = split(server)?;
    let mut tried = Vec::new();
    for url in [
        format!("{origin}/.well-known/oauth-protected-resource{path}"),
        format!("{origin}/.well-known/oauth-protected-resource"),
    ] {
        match get_json::<Map<String, Value>>(http, &url).await {
            Ok(m) => return Ok(m),
            Err(e) => tried.push(e),
        }
    }
    Err(format!(
        "{server} publishes no protected resource metadata, so it does not say where to log in ({})",
        tried.join("; ")
    ))
}

/// The authorization server's metadata (RFC 8414, else OpenID Connect discovery); its
/// `issuer` must be the one asked for.
async fn server_metadata(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<Map<String, Value>, String> {
    let (origin, path) = split(issuer)?;
    let issuer_base = issuer.trim_end_matches('/');
    let mut tried = Vec::new();
    for url in [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer_base}/.well-known/openid-configuration"),
    ] {
        match get_json::<Map<String, Value>>(http, &url).await {
            Ok(m) if m.get("issuer").and_then(Value::as_str) == Some(issuer) => return Ok(m),
            Ok(m) => tried.push(format!("{url} names the issuer {:?}", m.get("issuer"))),
            Err(e) => tried.push(e),
        }
    }
    Err(format!(
        "no metadata of the authorization server {issuer} ({})",
        tried.join("; ")
    ))
}

fn field<'m>(metadata: &'m Map<String, Value>, name: &str, of: &str) -> Result<&'m str, String> {
    metadata
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{of}'s metadata has no {name}"))
}

fn random(bytes: usize) -> Result<String, String> {
    let mut buf = vec![0u8; bytes];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut buf)
        .map_err(|_| "no randomness for the login".to_string())?;
    Ok(URL_SAFE_NO_PAD.encode(buf))
}

/// Logs toolhost in to the MCP server at `server`: discovery, registration (unless
/// `client_id` is given), then the user's browser: `show` gets the URL to open. Waits for
/// the browser's return at most [`LOGIN_WAIT`].
pub async fn log_in(
    server: &str,
    client_id: Option<&str>,
    show: impl FnOnce(&str),
) -> Result<(Login, AccessToken), String> {
    let http = http()?;
    let resource = resource_metadata(&http, server).await?;
    let issuer = resource
        .get("authorization_servers")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!("{server}'s protected resource metadata names no authorization server")
        })?
        .to_string();
    let resource_id = resource
        .get("resource")
        .and_then(Value::as_str)
        .unwrap_or(server)
        .to_string();
    let metadata = server_metadata(&http, &issuer).await?;
    let s256 = metadata
        .get("code_challenge_methods_supported")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|x| x == "S256"));
    if !s256 {
        return Err(format!(
            "{issuer} does not offer PKCE with S256 (code_challenge_methods_supported), which MCP requires: toolhost does not log in without it"
        ));
    }
    let authorize = field(&metadata, "authorization_endpoint", &issuer)?.to_string();
    let token_endpoint = field(&metadata, "token_endpoint", &issuer)?.to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on loopback for the browser's return: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let scope = resource
        .get("scopes_supported")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty());
    let client_id = match client_id {
        Some(id) => id.to_string(),
        None => register(&http, &metadata, &issuer, &redirect, scope.as_deref()).await?,
    };
    let verifier = random(48)?;
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    let state = random(24)?;
    let mut url = reqwest::Url::parse(&authorize).map_err(|e| format!("{authorize}: {e}"))?;
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &client_id)
        .append_pair("redirect_uri", &redirect)
        .append_pair("state", &state)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256")
        .append_pair("resource", &resource_id);
    if let Some(scope) = &scope {
        url.query_pairs_mut().append_pair("scope", scope);
    }
    show(url.as_str());
    let back = crate::callback::wait(listener, LOGIN_WAIT).await?;
    if back.get("state").and_then(Value::as_str) != Some(state.as_str()) {
        return Err("the browser came back with another login's state: start again".into());
    }
    if let Some(error) = back.get("error").and_then(Value::as_str) {
        return Err(format!(
            "{issuer} refused the login: {error} {}",
            back.get("error_description")
                .and_then(Value::as_str)
                .unwrap_or("")
        ));
    }
    let code = back
        .get("code")
        .and_then(Value::as_str)
        .ok_or("the browser came back without a code")?;
    let answer = token_request(
        &http,
        &token_endpoint,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &redirect),
            ("client_id", &client_id),
            ("code_verifier", &verifier),
            ("resource", &resource_id),
        ],
    )
    .await?;
    let refresh_token = answer
        .get("refresh_token")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{issuer} issued no refresh token, so toolhost could not call the server again without you: allow offline access for the client"))?
        .to_string();
    let access = access_of(&answer)?;
    Ok((
        Login {
            issuer,
            token_endpoint,
            client_id,
            resource: resource_id,
            refresh_token,
        },
        access,
    ))
}

/// Registers toolhost as a public client (RFC 7591).
async fn register(
    http: &reqwest::Client,
    metadata: &Map<String, Value>,
    issuer: &str,
    redirect: &str,
    scope: Option<&str>,
) -> Result<String, String> {
    let endpoint = metadata
        .get("registration_endpoint")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{issuer} offers no dynamic client registration: register toolhost there (a public client with the redirect URI http://127.0.0.1/callback) and give its id with --client-id"))?;
    let mut request = json!({
        "client_name": "toolhost",
        "application_type": "native",
        "redirect_uris": [redirect],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    if let Some(scope) = scope {
        request["scope"] = json!(scope);
    }
    let request = http
        .post(endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(request.to_string());
    let (status, answer) = send_for_json(request, endpoint).await?;
    answer
        .get("client_id")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| {
            format!(
                "{endpoint} refused the registration ({status}): {}",
                Value::Object(answer)
            )
        })
}

/// POSTs `form` to the token endpoint (as a public client): its answer, or why it refused.
pub(crate) async fn token_request(
    http: &reqwest::Client,
    endpoint: &str,
    form: &[(&str, &str)],
) -> Result<Map<String, Value>, String> {
    let (status, answer) = send_for_json(http.post(endpoint).form(form), endpoint).await?;
    oauth_answer(endpoint, status, answer)
}

fn access_of(answer: &Map<String, Value>) -> Result<AccessToken, String> {
    Ok(AccessToken {
        token: answer
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or("the token endpoint answered no access_token")?
            .to_string(),
        expires_in: answer
            .get("expires_in")
            .and_then(Value::as_u64)
            .map(Duration::from_secs),
    })
}

impl Login {
    /// A new access token from the refresh token; the login comes back changed when the
    /// server rotated the refresh token (keep it).
    pub async fn refresh(&self) -> Result<(AccessToken, Option<Login>), String> {
        let http = http()?;
        let answer = token_request(
            &http,
            &self.token_endpoint,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", &self.refresh_token),
                ("client_id", &self.client_id),
                ("resource", &self.resource),
            ],
        )
        .await?;
        let rotated = answer
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|r| *r != self.refresh_token)
            .map(|r| Login {
                refresh_token: r.to_string(),
                ..self.clone()
            });
        Ok((access_of(&answer)?, rotated))
    }
}
