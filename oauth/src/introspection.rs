//! Opaque tokens, asked about at their issuer (RFC 7662), answers kept for `cache_secs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::Rejected;
use crate::issuer::{Issuer, read_limited};
use crate::settings::IntrospectionSettings;

/// The most answers kept at once.
const CACHE_ENTRIES: usize = 10_000;

type Answer = Result<Map<String, Value>, Rejected>;

/// Asks one issuer about tokens.
pub(crate) struct Introspector {
    settings: IntrospectionSettings,
    issuer: Arc<Issuer>,
    secret: String,
    client: reqwest::Client,
    /// By the token's SHA-256: the answer and when it may no longer be used.
    cache: Mutex<HashMap<[u8; 32], (Instant, Answer)>>,
}

impl Introspector {
    pub(crate) fn new(
        settings: IntrospectionSettings,
        issuer: Arc<Issuer>,
        secret: String,
        client: reqwest::Client,
    ) -> Introspector {
        Introspector {
            settings,
            issuer,
            secret,
            client,
            cache: Mutex::default(),
        }
    }

    /// The claims of an active token (its `iss` filled in from the issuer asked when the
    /// answer leaves it out), or why it does not admit.
    pub(crate) async fn claims(&self, token: &str) -> Answer {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let ttl = Duration::from_secs(self.settings.cache_secs);
        if !ttl.is_zero()
            && let Some((until, answer)) = self
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
            && *until > Instant::now()
        {
            return answer.clone();
        }
        let answer = self.ask(token).await;
        if !ttl.is_zero() && !matches!(answer, Err(Rejected::Unavailable(_))) {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() >= CACHE_ENTRIES {
                let now = Instant::now();
                cache.retain(|_, (until, _)| *until > now);
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(key, (Instant::now() + ttl, answer.clone()));
        }
        answer
    }

    async fn ask(&self, token: &str) -> Answer {
        let endpoint = match &self.settings.endpoint {
            Some(e) => e.clone(),
            None => self
                .issuer
                .metadata()
                .await
                .map_err(Rejected::Unavailable)?
                .introspection_endpoint
                .ok_or_else(|| {
                    Rejected::Unavailable(format!(
                        "{}'s metadata names no introspection_endpoint: set [http.auth.introspection] endpoint",
                        self.issuer.id
                    ))
                })?,
        };
        let response = self
            .client
            .post(&endpoint)
            .basic_auth(&self.settings.client_id, Some(&self.secret))
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await
            .map_err(|e| Rejected::Unavailable(format!("introspection at {endpoint}: {e}")))?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            tracing::error!(target: "toolhost::auth", %endpoint, %status, client_id = %self.settings.client_id,
                "the issuer refused this server's introspection credentials: check [http.auth.introspection] client_id and {}", self.settings.client_secret_env);
        }
        let body = read_limited(response)
            .await
            .map_err(|e| Rejected::Unavailable(format!("introspection at {endpoint}: {e}")))?;
        let mut claims: Map<String, Value> = serde_json::from_slice(&body).map_err(|e| {
            Rejected::Unavailable(format!(
                "introspection at {endpoint} answered no JSON object: {e}"
            ))
        })?;
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(Rejected::Invalid(
                "its issuer says it is not active (expired, revoked or never issued)".into(),
            ));
        }
        match claims.get("iss").and_then(Value::as_str) {
            None => {
                claims.insert("iss".into(), Value::String(self.issuer.id.clone()));
            }
            Some(iss) if iss == self.issuer.id => {}
            // An issuer vouches for its own callers only.
            Some(iss) => {
                return Err(Rejected::Invalid(format!(
                    "introspection at {} says it was issued by {iss:?}",
                    self.issuer.id
                )));
            }
        }
        Ok(claims)
    }
}
