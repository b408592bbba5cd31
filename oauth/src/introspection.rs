//! Opaque tokens, asked about at the issuer this server is a client of (RFC 7662), answers
//! kept for `cache_secs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::client::OwnClient;
use crate::error::Rejected;
use crate::settings::IntrospectionSettings;

/// The most answers kept at once.
const CACHE_ENTRIES: usize = 10_000;

type Answer = Result<Map<String, Value>, Rejected>;

/// Asks one issuer about tokens.
pub(crate) struct Introspector {
    settings: IntrospectionSettings,
    client: Arc<OwnClient>,
    /// By the token's SHA-256: the answer and when it may no longer be used.
    cache: crate::Kept<[u8; 32], Answer>,
}

impl Introspector {
    pub(crate) fn new(settings: IntrospectionSettings, client: Arc<OwnClient>) -> Introspector {
        Introspector {
            settings,
            client,
            cache: crate::Kept::new(CACHE_ENTRIES),
        }
    }

    /// The claims of an active token (its `iss` filled in from the issuer asked when the
    /// answer leaves it out), or why it does not admit.
    pub(crate) async fn claims(&self, token: &str) -> Answer {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let ttl = Duration::from_secs(self.settings.cache_secs);
        if !ttl.is_zero()
            && let Some(answer) = self.cache.get(&key)
        {
            return answer;
        }
        let answer = self.ask(token).await;
        if !ttl.is_zero() && !matches!(answer, Err(Rejected::Unavailable(_))) {
            self.cache.keep(key, Instant::now() + ttl, answer.clone());
        }
        answer
    }

    /// Until when an answer got now may be used again (`cache_secs`; `None` for 0).
    pub(crate) fn reuse_until(&self) -> Option<Instant> {
        (self.settings.cache_secs > 0)
            .then(|| Instant::now() + Duration::from_secs(self.settings.cache_secs))
    }

    async fn ask(&self, token: &str) -> Answer {
        let issuer = &self.client.issuer.id;
        let endpoint = self
            .client
            .endpoint(
                self.settings.endpoint.as_ref(),
                "introspection_endpoint",
                |m| m.introspection_endpoint.clone(),
            )
            .await
            .map_err(|e| {
                Rejected::Unavailable(format!("{e}: set [http.auth.introspection] endpoint"))
            })?;
        let mut claims = self
            .client
            .post(
                &endpoint,
                &[("token", token), ("token_type_hint", "access_token")],
            )
            .await
            .map_err(|e| Rejected::Unavailable(format!("introspection: {e}")))?;
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(Rejected::Invalid(
                "its issuer says it is not active (expired, revoked or never issued)".into(),
            ));
        }
        match claims.get("iss").and_then(Value::as_str) {
            None => {
                claims.insert("iss".into(), Value::String(issuer.clone()));
            }
            Some(iss) if iss == issuer => {}
            // An issuer vouches for its own callers only.
            Some(iss) => {
                return Err(Rejected::Invalid(format!(
                    "introspection at {issuer} says it was issued by {iss:?}"
                )));
            }
        }
        Ok(claims)
    }
}
