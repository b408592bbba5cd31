//! Token exchange (RFC 8693): a caller's access token for one to another resource, for
//! the same caller, at the issuer this server is a client of. What a mounted MCP server
//! that acts with its caller's own identity is given: never the caller's token itself.

use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::client::OwnClient;

/// The most exchanged tokens kept at once.
const KEPT: usize = 10_000;

/// An exchanged token is used until this long before it expires.
const MARGIN: Duration = Duration::from_secs(30);

const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// A token obtained for a caller.
#[derive(Clone, PartialEq, Eq)]
pub struct Exchanged {
    /// The access token, for the resource it was asked for.
    pub token: String,
    /// When it is no longer used (its `expires_in`, less a margin).
    pub until: Instant,
}

impl std::fmt::Debug for Exchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanged")
            .field("token", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// A subject token's SHA-256, and the resource a token was asked for.
type Subject = ([u8; 32], String);

/// Exchanges and keeps the tokens exchanged, by subject token and resource.
pub(crate) struct Exchanges {
    kept: crate::Kept<Subject, Exchanged>,
}

impl Default for Exchanges {
    fn default() -> Self {
        Exchanges {
            kept: crate::Kept::new(KEPT),
        }
    }
}

impl Exchanges {
    /// A token for `resource` for the caller of `subject`: one kept, else a new one from
    /// `client`'s issuer.
    pub(crate) async fn exchange(
        &self,
        client: &OwnClient,
        subject: &str,
        resource: &str,
    ) -> Result<Exchanged, String> {
        let key = (
            <[u8; 32]>::from(Sha256::digest(subject.as_bytes())),
            resource.to_string(),
        );
        if let Some(kept) = self.kept.get(&key) {
            return Ok(kept);
        }
        let endpoint = client
            .endpoint(None, "token_endpoint", |m| m.token_endpoint.clone())
            .await?;
        let answer = client
            .post(
                &endpoint,
                &[
                    ("grant_type", GRANT),
                    ("subject_token", subject),
                    ("subject_token_type", ACCESS_TOKEN),
                    ("requested_token_type", ACCESS_TOKEN),
                    ("resource", resource),
                    ("audience", resource),
                ],
            )
            .await
            .map_err(|e| format!("token exchange for {resource}: {e}"))?;
        let token = answer
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("token exchange at {endpoint} answered no access_token"))?;
        let lifetime = answer
            .get("expires_in")
            .and_then(Value::as_u64)
            .map_or(Duration::from_secs(60), Duration::from_secs);
        let exchanged = Exchanged {
            token: token.to_string(),
            until: Instant::now() + lifetime.saturating_sub(MARGIN),
        };
        self.kept.keep(key, exchanged.until, exchanged.clone());
        Ok(exchanged)
    }
}
