//! Where an MCP request's calls run, and who is calling.

use std::collections::HashMap;
use std::sync::Mutex;

use dispatcher_core::Session;
use rmcp::service::{RequestContext, RoleServer};

/// Opens a dispatcher session: its id, the principal it acts for, and `shared`: the id
/// names the same client on every instance (a principal's), so its "always" grants hold on
/// all of them.
pub type SessionOpener = Box<dyn Fn(&str, &str, bool) -> Result<Session, String> + Send + Sync>;

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
        by_principal: Mutex<HashMap<String, Session>>,
    },
}

/// Who is calling, as the transport authenticated it (HTTP puts it in the request's
/// extensions); stdio's one client is `stdio`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

/// The principal of a request.
pub(crate) fn principal(context: &RequestContext<RoleServer>) -> String {
    principal_of(&context.extensions)
}

/// The principal the transport put in a message's extensions (`stdio` when none did).
pub(crate) fn principal_of(extensions: &rmcp::model::Extensions) -> String {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .or_else(|| extensions.get::<Principal>())
        .map_or_else(|| "stdio".to_string(), |p| p.0.clone())
}

/// The principal the HTTP transport admitted a request as (`stdio` when none, as
/// [`principal_of`] has it).
pub(crate) fn principal_of_parts(parts: &http::request::Parts) -> String {
    parts
        .extensions
        .get::<Principal>()
        .map_or_else(|| "stdio".to_string(), |p| p.0.clone())
}
