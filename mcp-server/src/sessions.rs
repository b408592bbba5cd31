//! Where an MCP request's calls run, and who is calling.

use std::collections::HashMap;
use std::sync::Mutex;

use dispatcher_core::Session;
use rmcp::service::{RequestContext, RoleServer};

/// Opens a dispatcher session: its id, the principal it acts for, and `shared`: the id
/// names the same client on every instance (a principal's), so its "always" grants hold on
/// all of them.
pub type SessionOpener =
    Box<dyn Fn(&str, &Principal, bool) -> Result<Session, String> + Send + Sync>;

/// Where a request's calls run.
pub enum Sessions {
    /// One client (stdio): every request runs in this session.
    One(Session),
    /// Many clients (HTTP): each 2025-era MCP session gets a dispatcher session of its own;
    /// stateless (2026-07-28) requests run in their principal's session.
    PerClient {
        /// Opens a session by id.
        open: SessionOpener,
        /// The principals' sessions.
        by_principal: Mutex<ByPrincipal>,
    },
}

/// The principals' sessions: by principal id, one per set of groups it called with.
pub type ByPrincipal = HashMap<String, Vec<(Vec<String>, Session)>>;

/// Who is calling, as the transport authenticated it (HTTP puts it in the request's
/// extensions); stdio's one client is `stdio`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The caller: `local`, `stdio`, `token-…` (a bearer token's), or `ISSUER#SUBJECT`
    /// (an OAuth access token's).
    pub id: String,
    /// Its groups or roles, from its token's claims (`[http.auth] groups_claim`).
    pub groups: Vec<String>,
    /// It sees only its own calls and confirmations in the control API and the console (a
    /// caller an identity provider vouched for); the local user and a static token's
    /// holder, the operator, see every caller's.
    pub own_calls_only: bool,
    /// The access token it called with, for a mounted server that takes its caller's
    /// credentials ([`mcp_toolsets::Credentials`]); never logged.
    pub token: Option<CallerToken>,
    /// Its token's claims, as policies read them (empty without an OAuth token).
    pub claims: std::sync::Arc<serde_json::Map<String, serde_json::Value>>,
}

/// A caller's access token and the resources it is for; `[redacted]` when printed.
#[derive(Clone, PartialEq, Eq)]
pub struct CallerToken {
    /// The token.
    pub value: std::sync::Arc<str>,
    /// Its audiences.
    pub audiences: std::sync::Arc<[String]>,
}

impl std::fmt::Debug for CallerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Principal {
    /// A caller known by `id` alone, in no group.
    pub fn named(id: impl Into<String>) -> Principal {
        Principal {
            id: id.into(),
            groups: Vec::new(),
            own_calls_only: false,
            token: None,
            claims: Default::default(),
        }
    }

    /// The id of the session its stateless requests share: `mcp-ID`, with a digest of its
    /// groups when it has some (a caller whose groups change gets the session its new
    /// groups' rule opens, not the one it had).
    pub(crate) fn session_id(&self) -> String {
        if self.groups.is_empty() {
            return format!("mcp-{}", self.id);
        }
        use sha2::Digest as _;
        let mut groups = self.groups.clone();
        groups.sort();
        let digest = sha2::Sha256::digest(groups.join("\n").as_bytes());
        let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("mcp-{}-g{hex}", self.id)
    }
}

/// The principal of a request.
pub(crate) fn principal(context: &RequestContext<RoleServer>) -> Principal {
    principal_of(&context.extensions)
}

/// The principal the transport put in a message's extensions (`stdio` when none did).
pub(crate) fn principal_of(extensions: &rmcp::model::Extensions) -> Principal {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .or_else(|| extensions.get::<Principal>())
        .cloned()
        .unwrap_or_else(|| Principal::named("stdio"))
}

/// The principal the HTTP transport admitted a request as (`stdio` when none, as
/// [`principal_of`] has it).
pub(crate) fn principal_of_parts(parts: &http::request::Parts) -> Principal {
    parts
        .extensions
        .get::<Principal>()
        .cloned()
        .unwrap_or_else(|| Principal::named("stdio"))
}
