//! Why a token is refused, and why the settings are.

/// Why a request's token does not admit it. The messages are for the caller, and never
/// hold the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// No token was sent: `401`, a challenge without an error code (RFC 6750).
    #[error(
        "this server needs an OAuth access token: send Authorization: Bearer TOKEN (where to get one: {metadata})"
    )]
    Missing {
        /// The protected resource metadata's URL.
        metadata: String,
    },
    /// A token that is not valid here: `401` with `error="invalid_token"`.
    #[error("the access token is not valid here: {0}")]
    Invalid(String),
    /// A valid token without a scope this server needs: `403` with
    /// `error="insufficient_scope"`.
    #[error("the access token lacks the scope {needed:?}: log in again asking for it")]
    InsufficientScope {
        /// The scopes needed, space-separated.
        needed: String,
    },
    /// The token could not be checked (its issuer's keys or introspection endpoint cannot be
    /// reached): `503`.
    #[error("cannot check the access token now: {0}")]
    Unavailable(String),
}

/// `[http.auth]` that cannot be used; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[http.auth] {0}")]
pub struct SettingsError(pub String);
