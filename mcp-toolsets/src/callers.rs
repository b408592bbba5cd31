//! Who calls a mounted server's tool, as the host that authenticated them says: a caller's
//! access token ([`CallerCredential`]), and how to exchange it for a token to a mounted
//! server ([`TokenExchange`]). Each call carries its own ([`crate::Origin`]); the tools of
//! a `[[mcp_servers]]` entry whose `credentials` are `"caller"` or `"exchange"` read them
//! there.

use std::future::Future;
use std::pin::Pin;

/// A caller's credential: its principal and the access token it called with.
#[derive(Clone, PartialEq, Eq)]
pub struct CallerCredential {
    /// Who calls (`ISSUER#SUBJECT`).
    pub principal: String,
    /// The access token it sent.
    pub token: String,
    /// The resources that token is for (its `aud`).
    pub audiences: Vec<String>,
}

impl std::fmt::Debug for CallerCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerCredential")
            .field("principal", &self.principal)
            .field("token", &"[redacted]")
            .field("audiences", &self.audiences)
            .finish()
    }
}

/// A token exchange's future: the new token, or why there is none.
pub type ExchangeFuture<'a> = Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;

/// Obtains a token for `resource` for the caller of `subject` (RFC 8693): the host's
/// identity provider, as a client of its own.
pub trait TokenExchange: Send + Sync {
    /// A token for `resource`, for the caller whose access token is `subject`.
    fn exchange<'a>(&'a self, subject: &'a str, resource: &'a str) -> ExchangeFuture<'a>;
}
