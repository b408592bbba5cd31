//! What a mounted MCP server asks the user while one of its tools runs, put to the MCP
//! client that made the call, and its answer back unchanged:
//!
//! - to a 2025-era client, a 2025-era server's `elicitation/create` (with the server's own
//!   message and schema) when the client can elicit in the form's mode, its
//!   `sampling/createMessage` when the client declared sampling;
//! - to a 2026-07-28 client, a 2026-07-28 server's `input_required` round whole, when the
//!   client can answer every request in it: the client's round ends with the server's
//!   requests, toolhost's sealed `requestState` carries the server's, and the retry's
//!   `inputResponses` go to the server with it.
//!
//! - to a 2026-07-28 client, a 2025-era server's `elicitation/create` too, in a round of
//!   the client's own while the server's call waits, parked (`mcp_toolsets`' `parked`).
//!
//! A client that cannot take the request (it did not declare the capability) leaves it to
//! the confirmation broker (elicitation) or fails the call, naming the server (sampling).

#![allow(
    deprecated,
    reason = "sampling is deprecated (SEP-2577), but 2025-era servers and clients still use it"
)]

use mcp_toolsets::{ClientRelay, RelayFuture, Relayed, Resume};
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    InputRequiredResult,
};
use rmcp::service::ElicitationMode;

use super::confirm::Routes;

impl ClientRelay for Routes {
    fn elicit(&self, call: &str, params: ElicitRequestParams) -> RelayFuture<ElicitResult> {
        let mode = match &params {
            ElicitRequestParams::UrlElicitationParams { .. } => ElicitationMode::Url,
            _ => ElicitationMode::Form,
        };
        let client = self
            .client(call)
            .filter(|peer| peer.supported_elicitation_modes().contains(&mode));
        Box::pin(async move {
            let Some(peer) = client else {
                return Relayed::CannotAsk;
            };
            match peer.create_elicitation(params).await {
                Ok(result) => Relayed::Answered(result),
                Err(e) => Relayed::Failed(e.to_string()),
            }
        })
    }

    fn sample(
        &self,
        call: &str,
        params: CreateMessageRequestParams,
    ) -> RelayFuture<CreateMessageResult> {
        let client = self.client(call).filter(|peer| {
            peer.peer_info()
                .is_some_and(|info| info.capabilities.sampling.is_some())
        });
        Box::pin(async move {
            let Some(peer) = client else {
                return Relayed::CannotAsk;
            };
            match peer.create_message(params).await {
                Ok(result) => Relayed::Answered(result),
                Err(e) => Relayed::Failed(e.to_string()),
            }
        })
    }

    fn defer(&self, call: &str, asked: &InputRequiredResult) -> bool {
        self.defer_round(call, asked)
    }

    fn resume(&self, call: &str) -> Option<Resume> {
        self.take_resume(call)
    }

    fn capabilities(&self, call: &str) -> Option<rmcp::model::ClientCapabilities> {
        self.client_capabilities(call)
    }
}
