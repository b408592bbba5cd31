//! Who calls a mounted server's tool, as the host that authenticated them says: a caller's
//! access token by the host session its calls run in, and how to exchange it for a token
//! to a mounted server ([`TokenExchange`]). Read by the tools of a `[[mcp_servers]]` entry
//! whose `credentials` are `"caller"` or `"exchange"`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock};

/// The most sessions whose caller is remembered at once (a session's next call sets it
/// again).
const KEPT: usize = 10_000;

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

/// The callers of this process's sessions, and its token exchange.
#[derive(Default)]
pub struct Callers {
    by_session: RwLock<HashMap<String, Arc<CallerCredential>>>,
    exchange: OnceLock<Arc<dyn TokenExchange>>,
}

/// This process's callers.
pub fn callers() -> &'static Callers {
    static CALLERS: OnceLock<Callers> = OnceLock::new();
    CALLERS.get_or_init(Callers::default)
}

impl Callers {
    /// Records that `session`'s calls are made by `principal` with `token` (the latest
    /// token wins). A caller's every call says so: the same caller again costs a read.
    pub fn set(&self, session: &str, principal: &str, token: &str, audiences: &[String]) {
        let same = |known: &CallerCredential| known.token == token && known.principal == principal;
        if self
            .by_session
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .is_some_and(|known| same(known))
        {
            return;
        }
        let caller = CallerCredential {
            principal: principal.to_string(),
            token: token.to_string(),
            audiences: audiences.to_vec(),
        };
        let mut by_session = self.by_session.write().unwrap_or_else(|p| p.into_inner());
        if by_session.len() >= KEPT {
            by_session.clear();
        }
        by_session.insert(session.to_string(), Arc::new(caller));
    }

    /// The caller of `session`'s calls, if the host said.
    pub fn of(&self, session: &str) -> Option<Arc<CallerCredential>> {
        self.by_session
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned()
    }

    /// Sets how tokens are exchanged (once; a second is ignored).
    pub fn exchange_through(&self, exchange: Arc<dyn TokenExchange>) {
        let _ = self.exchange.set(exchange);
    }

    /// How tokens are exchanged, if the host said.
    pub fn exchange(&self) -> Option<&Arc<dyn TokenExchange>> {
        self.exchange.get()
    }
}
