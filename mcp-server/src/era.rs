//! The protocol era of a request: a 2025-era session or a 2026 stateless request, which
//! decides how a call asks its questions and what its results carry.

use rmcp::model::ProtocolVersion;
use rmcp::service::{RequestContext, RoleServer};

/// The protocol era of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2025-11-25 and older: `initialize`, sessions, server-to-client requests.
    Session,
    /// 2026-07-28: stateless, `input_required` instead of server-to-client requests.
    Stateless,
}

impl Era {
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Era {
        Era::of_version(context.protocol_version().as_ref())
    }

    /// The era of a request of protocol `version` (none: a session's, before `initialize`).
    pub(crate) fn of_version(version: Option<&ProtocolVersion>) -> Era {
        match version {
            Some(v) if *v >= ProtocolVersion::V_2026_07_28 => Era::Stateless,
            _ => Era::Session,
        }
    }
}
