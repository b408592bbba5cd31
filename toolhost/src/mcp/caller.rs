//! Who sent a `tools/call` and how to reach them: what the call's handler needs of its
//! request, from rmcp's context of it or from the stateless HTTP fast path
//! ([`crate::http`]), which answers without building rmcp's per-request service.

use rmcp::model::{ClientCapabilities, RequestId, RequestMetaObject};
use rmcp::service::{Peer, RequestContext, RoleServer};
use tokio_util::sync::CancellationToken;

use super::server::Era;
use super::sessions::principal;

/// What a `tools/call` needs of its request: rmcp's context of it, or the parts of one the
/// stateless HTTP fast path has without building rmcp's per-request service.
pub(crate) struct Caller {
    pub(super) era: Era,
    pub(super) principal: String,
    /// What the client can take (a 2026 client declares it with each request).
    pub(super) caps: ClientCapabilities,
    pub(super) id: RequestId,
    pub(super) meta: RequestMetaObject,
    /// How to reach the client before the answer: progress, a mounted server's logs, a
    /// 2025 session's elicitation. `None` on the fast path, which takes no request that
    /// asks for any of them.
    pub(super) peer: Option<Peer<RoleServer>>,
    /// Cancelled when the client gives up on the request.
    pub(super) ct: CancellationToken,
}

impl Caller {
    pub(super) fn of(context: RequestContext<RoleServer>) -> Caller {
        Caller {
            era: Era::of(&context),
            principal: principal(&context),
            caps: context.client_capabilities().unwrap_or_default(),
            id: context.id,
            meta: context.meta,
            peer: Some(context.peer),
            ct: context.ct,
        }
    }

    /// A stateless request's caller, from its `_meta`, the principal its transport
    /// admitted, and the token its transport cancels when the client goes away. The
    /// transport passes only requests that ask for nothing to be sent before the answer
    /// (no progress token, no log level): this caller has no way to send it.
    pub(crate) fn stateless(
        principal: String,
        id: RequestId,
        meta: RequestMetaObject,
        ct: CancellationToken,
    ) -> Caller {
        Caller {
            era: Era::Stateless,
            principal,
            caps: meta.client_capabilities().unwrap_or_default(),
            id,
            meta,
            peer: None,
            ct,
        }
    }
}
