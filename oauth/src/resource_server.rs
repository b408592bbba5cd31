//! The resource server: a token in, the caller out; and what clients discover it by.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use serde_json::{Value, json};

use crate::MAX_TOKEN_BYTES;
use crate::client::OwnClient;
use crate::error::{Rejected, SettingsError};
use crate::exchange::{Exchanged, Exchanges};
use crate::identity::{Expected, Identity};
use crate::introspection::Introspector;
use crate::issuer::{Issuer, Unfetched};
use crate::jwt::{Jwt, looks_like_jwt};
use crate::settings::Settings;

/// Checks access tokens for one server ([`crate`] has the rules).
pub struct ResourceServer {
    settings: Settings,
    resource: String,
    issuers: Vec<Arc<Issuer>>,
    introspection: Option<Introspector>,
    /// This server as a client of its issuer, when it is one.
    own: Option<Arc<OwnClient>>,
    /// Tokens exchanged for callers.
    exchanges: Exchanges,
    /// JWTs already verified, by their SHA-256: the identity and until when it may be used
    /// without verifying again (its `exp`, at most `keys_max_age_secs` on). A caller's
    /// every request carries the same token; its signature is checked once.
    verified: crate::Kept<[u8; 32], Identity>,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("resource", &self.resource)
            .field("issuers", &self.settings.issuers)
            .finish_non_exhaustive()
    }
}

/// The most verified tokens kept at once.
const VERIFIED_ENTRIES: usize = 10_000;

impl ResourceServer {
    /// A resource server with `settings`; `default_resource` is its URI when the settings
    /// name none (`None`: they must). Reads the introspection secret from its variable.
    pub fn new(
        settings: Settings,
        default_resource: Option<String>,
    ) -> Result<ResourceServer, SettingsError> {
        settings.check()?;
        let resource = match (&settings.resource, default_resource) {
            (Some(r), _) => r.clone(),
            (None, Some(r)) => r,
            (None, None) => {
                return Err(SettingsError(
                    "resource: name the URL clients reach this server at (resource = \"https://mcp.example.com/mcp\"): a server on every address cannot tell"
                        .into(),
                ));
            }
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| SettingsError(format!("cannot make an HTTP client: {e}")))?;
        let issuers: Vec<Arc<Issuer>> = settings
            .issuers
            .iter()
            .map(|id| {
                Arc::new(Issuer::new(
                    id.clone(),
                    client.clone(),
                    Duration::from_secs(settings.keys_max_age_secs),
                    Duration::from_secs(settings.keys_min_refresh_secs),
                ))
            })
            .collect();
        let own = match (&settings.client, settings.client_issuer()) {
            (Some(c), Some(id)) => {
                let secret = std::env::var(&c.secret_env).map_err(|_| {
                    SettingsError(format!(
                        "client.secret_env: the variable {} is not set (it holds the client secret of {})",
                        c.secret_env, c.id
                    ))
                })?;
                let issuer = issuers
                    .iter()
                    .find(|x| x.id == id)
                    .cloned()
                    .ok_or_else(|| {
                        SettingsError(format!("client.issuer: {id} is not one of issuers"))
                    })?;
                Some(Arc::new(OwnClient::new(
                    c.id.clone(),
                    secret,
                    c.secret_env.clone(),
                    issuer,
                    client.clone(),
                )))
            }
            _ => None,
        };
        let introspection = match (&settings.introspection, &own) {
            (Some(i), Some(own)) => Some(Introspector::new(i.clone(), own.clone())),
            _ => None,
        };
        Ok(ResourceServer {
            settings,
            resource,
            issuers,
            introspection,
            own,
            exchanges: Exchanges::default(),
            verified: crate::Kept::new(VERIFIED_ENTRIES),
        })
    }

    /// This server's resource URI (the `aud` its tokens carry).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Fetches every issuer's keys now, so that the first caller does not wait; logs what
    /// cannot be fetched (the server starts regardless, and tries again per token).
    pub async fn prefetch(&self) {
        for issuer in &self.issuers {
            let seen = issuer.keys();
            let _ = issuer.refresh(&seen).await;
        }
    }

    /// The caller `token` admits, or why it does not.
    pub async fn authenticate(&self, token: &str) -> Result<Identity, Rejected> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Rejected::Invalid(format!(
                "it is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        if looks_like_jwt(token) {
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            if let Some(identity) = self.verified.get(&digest) {
                return Ok(identity);
            }
            let mut identity = self.jwt(token).await?;
            self.keep(digest, &mut identity);
            return Ok(identity);
        }
        match &self.introspection {
            Some(introspector) => {
                let claims = introspector.claims(token).await?;
                let mut identity = self.expected().identity(&claims, false)?;
                identity.reuse_until = introspector.reuse_until();
                Ok(identity)
            }
            None => Err(Rejected::Invalid(
                "it is not a JWT, and opaque tokens are not introspected here ([http.auth.introspection])".into(),
            )),
        }
    }

    /// Keeps a verified token's identity until it expires (or the keys are due again),
    /// and says so in it ([`Identity::reuse_until`]).
    fn keep(&self, digest: [u8; 32], identity: &mut Identity) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let left = identity
            .expires_at
            .map_or(0, |exp| exp.saturating_sub(now))
            .min(self.settings.keys_max_age_secs);
        if left == 0 {
            return;
        }
        let until = Instant::now() + Duration::from_secs(left);
        identity.reuse_until = Some(until);
        self.verified.keep(digest, until, identity.clone());
    }

    fn expected(&self) -> Expected<'_> {
        Expected {
            issuers: &self.settings.issuers,
            resource: &self.resource,
            groups_claim: &self.settings.groups_claim,
            required_scopes: &self.settings.required_scopes,
            leeway: self.settings.leeway_secs,
            now: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    async fn jwt(&self, token: &str) -> Result<Identity, Rejected> {
        let jwt = Jwt::parse(token).map_err(Rejected::Invalid)?;
        let Some(issuer) = jwt
            .issuer()
            .and_then(|iss| self.issuers.iter().find(|i| i.id == iss))
        else {
            return Err(Rejected::Invalid(match jwt.issuer() {
                Some(iss) => format!("its issuer {iss:?} is not trusted here"),
                None => "it names no issuer (iss)".into(),
            }));
        };
        let mut keys = issuer.keys();
        if !jwt.candidates(&keys.keys).is_empty() {
            if issuer.stale(&keys) {
                // The keys held still verify; fresh ones are fetched meanwhile, so that no
                // request waits on the issuer (nor on one out of reach), and a key it
                // withdrew stops verifying once they come.
                let (issuer, seen) = (issuer.clone(), keys.clone());
                tokio::spawn(async move {
                    let _ = issuer.refresh(&seen).await;
                });
            }
        } else {
            match issuer.refresh(&keys).await {
                Ok(fresh) => keys = fresh,
                Err(Unfetched::Failed(why)) => {
                    return Err(Rejected::Unavailable(format!(
                        "the keys of {} cannot be fetched: {why}",
                        issuer.id
                    )));
                }
                Err(Unfetched::TooSoon) => {}
            }
        }
        let candidates = jwt.candidates(&keys.keys);
        if candidates.is_empty() {
            return Err(Rejected::Invalid(format!(
                "no key of {} {} signs {:?}",
                issuer.id,
                match &jwt.kid {
                    Some(kid) => format!("has the key id {kid:?} and"),
                    None => "without a key id".into(),
                },
                jwt.alg
            )));
        }
        if !jwt.verify(&candidates) {
            return Err(Rejected::Invalid(
                "its signature does not verify with its issuer's key".into(),
            ));
        }
        self.expected().identity(&jwt.claims, true)
    }

    /// A token for `resource` for the caller whose access token is `subject` (RFC 8693, at
    /// the issuer this server is a client of), kept until shortly before it expires.
    pub async fn exchange(&self, subject: &str, resource: &str) -> Result<Exchanged, String> {
        let Some(own) = &self.own else {
            return Err(
                "token exchange authenticates as this server's client: add [http.auth.client] with its id and secret_env".into(),
            );
        };
        self.exchanges.exchange(own, subject, resource).await
    }

    /// What the web console needs to log its user in (`[http.auth.console]`): the
    /// issuer's authorization endpoint, the console's client id, this resource and the
    /// scopes to ask for; `None` without a console client.
    pub async fn console_login(&self) -> Option<Result<Value, String>> {
        let console = self.settings.console.as_ref()?;
        let issuer = self.console_issuer(console);
        Some(
            async {
                let metadata = issuer.metadata().await?;
                let authorize = metadata.authorization_endpoint.ok_or_else(|| {
                    format!("{}'s metadata names no authorization_endpoint", issuer.id)
                })?;
                Ok(json!({
                    "issuer": issuer.id,
                    "authorization_endpoint": authorize,
                    "client_id": console.client_id,
                    "resource": self.resource,
                    "scope": self.settings.scopes_supported.join(" "),
                }))
            }
            .await,
        )
    }

    /// The console's authorization code for tokens, at its issuer's token endpoint (as
    /// its public client, with the PKCE verifier): what the browser could not ask across
    /// origins itself.
    pub async fn console_token(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> Result<Value, String> {
        let console = self
            .settings
            .console
            .as_ref()
            .ok_or("this server has no console login ([http.auth.console])")?;
        let issuer = self.console_issuer(console);
        let metadata = issuer.metadata().await?;
        let endpoint = metadata
            .token_endpoint
            .ok_or_else(|| format!("{}'s metadata names no token_endpoint", issuer.id))?;
        let answer = crate::login::token_request(
            &crate::login::http()?,
            &endpoint,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", redirect_uri),
                ("client_id", &console.client_id),
                ("code_verifier", verifier),
                ("resource", &self.resource),
            ],
        )
        .await?;
        let token = answer
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or("the token endpoint answered no access_token")?;
        Ok(json!({"access_token": token, "expires_in": answer.get("expires_in")}))
    }

    fn console_issuer(&self, console: &crate::settings::ConsoleSettings) -> &Arc<Issuer> {
        let id = console.issuer.as_ref().unwrap_or(&self.settings.issuers[0]);
        self.issuers
            .iter()
            .find(|i| &i.id == id)
            .unwrap_or(&self.issuers[0])
    }

    /// The protected resource metadata (RFC 9728).
    pub fn metadata(&self) -> Value {
        let mut doc = json!({
            "resource": self.resource,
            "authorization_servers": self.settings.issuers,
            "bearer_methods_supported": ["header"],
            "resource_name": "toolhost",
        });
        if !self.settings.scopes_supported.is_empty() {
            doc["scopes_supported"] = json!(self.settings.scopes_supported);
        }
        doc
    }

    /// Where the metadata is served, by path: RFC 9728's well-known path with the
    /// resource's path after it (`/.well-known/oauth-protected-resource/mcp`).
    pub fn metadata_path(&self) -> String {
        let path = reqwest::Url::parse(&self.resource)
            .map(|u| u.path().trim_end_matches('/').to_string())
            .unwrap_or_default();
        format!("/.well-known/oauth-protected-resource{path}")
    }

    /// The metadata's URL, at the resource's origin.
    pub fn metadata_url(&self) -> String {
        match reqwest::Url::parse(&self.resource) {
            Ok(u) => format!(
                "{}{}",
                u.origin().ascii_serialization(),
                self.metadata_path()
            ),
            Err(_) => self.metadata_path(),
        }
    }

    /// The `WWW-Authenticate` value that answers `rejected` (RFC 6750, RFC 9728).
    pub fn challenge(&self, rejected: &Rejected) -> String {
        let metadata = self.metadata_url();
        let quoted = |s: &str| s.replace(['"', '\\'], "'");
        match rejected {
            Rejected::Missing { .. } | Rejected::Unavailable(_) => {
                format!("Bearer resource_metadata=\"{metadata}\"")
            }
            Rejected::Invalid(why) => format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{metadata}\"",
                quoted(why)
            ),
            Rejected::InsufficientScope { needed } => format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{metadata}\"",
                quoted(needed)
            ),
        }
    }
}
