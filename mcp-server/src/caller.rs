//! Who sent a `tools/call` and how to reach them: what the call's handler needs of its
//! request, from rmcp's context of it or from the stateless HTTP fast path
//! ([`crate::http`]), which answers without building rmcp's per-request service.

use std::sync::{Arc, Mutex};

use rmcp::model::{ClientCapabilities, InitializeRequestParams, RequestId, RequestMetaObject};
use rmcp::service::{ElicitationMode, Peer, RequestContext, RoleServer};
use tokio_util::sync::CancellationToken;

use super::era::Era;
use super::sessions::{Principal, principal};

/// What a `tools/call` needs of its request: rmcp's context of it, or the parts of one the
/// stateless HTTP fast path has without building rmcp's per-request service.
pub(crate) struct Caller {
    pub(super) era: Era,
    pub(super) principal: Principal,
    /// What the client can take (a 2026 client declares it with each request).
    pub(super) caps: Arc<ClientCapabilities>,
    /// What the client of a 2025-era session declared when it opened the session.
    pub(super) declared: Option<Arc<Declared>>,
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
    /// The caller of rmcp's `context`, the session's declarations worked out once in
    /// `declared` (as rmcp's context reads them: the request's `_meta` first, then the
    /// session's `initialize`).
    pub(super) fn of(context: RequestContext<RoleServer>, declared: &DeclaredOnce) -> Caller {
        let opened = declared.of(&context.peer);
        let version = context
            .meta
            .protocol_version()
            .or_else(|| opened.as_ref().map(|d| d.info.protocol_version.clone()));
        let era = Era::of_version(version.as_ref());
        let caps = match context.meta.client_capabilities() {
            Some(caps) => Arc::new(caps),
            None => opened
                .as_ref()
                .map_or_else(Arc::default, |d| d.caps.clone()),
        };
        Caller {
            era,
            principal: principal(&context),
            caps,
            declared: opened.filter(|_| era == Era::Session),
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
        principal: Principal,
        id: RequestId,
        meta: RequestMetaObject,
        ct: CancellationToken,
    ) -> Caller {
        Caller {
            era: Era::Stateless,
            principal,
            caps: Arc::new(meta.client_capabilities().unwrap_or_default()),
            declared: None,
            id,
            meta,
            peer: None,
            ct,
        }
    }
}

/// What the client of a 2025-era session declared at `initialize`, worked out once for
/// all its calls.
pub(crate) struct Declared {
    /// The handshake it was worked out from.
    info: Arc<InitializeRequestParams>,
    caps: Arc<ClientCapabilities>,
    /// What a mounted server may ask of it while a call runs
    /// ([`crate::route::asked_of`]): elicitation, sampling and roots.
    pub(super) asked: Arc<ClientCapabilities>,
    /// It takes form elicitation: toolhost's confirmation question can be asked of it.
    pub(super) elicits_form: bool,
}

/// A connection's [`Declared`], kept from its first call.
#[derive(Default)]
pub(crate) struct DeclaredOnce(Mutex<Option<Arc<Declared>>>);

impl DeclaredOnce {
    /// What `peer` declared at `initialize` (`None` before it, or in a session that
    /// declares with every request).
    fn of(&self, peer: &Peer<RoleServer>) -> Option<Arc<Declared>> {
        let info = peer.peer_info()?;
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(declared) = kept.as_ref()
            && Arc::ptr_eq(&declared.info, &info)
        {
            return Some(declared.clone());
        }
        let declared = Arc::new(Declared {
            caps: Arc::new(info.capabilities.clone()),
            asked: Arc::new(crate::route::asked_of(&info.capabilities)),
            elicits_form: peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form),
            info,
        });
        *kept = Some(declared.clone());
        Some(declared)
    }
}
