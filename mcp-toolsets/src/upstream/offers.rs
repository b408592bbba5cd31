//! What a server offers besides tools: its prompts, resources and resource templates
//! (listed on demand, when it declares them: a host that passes them through lists them
//! when it starts serving, and a CLI call pays nothing for them), and the requests that
//! reach them (`prompts/get`, `resources/read`, `completion/complete`), passed through
//! unchanged.

use std::sync::{Arc, PoisonError};

use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate,
};
use rmcp::service::{Peer, RoleClient};

use crate::McpToolset;
use crate::upstream::Upstream;

/// A server's prompts, resources and resource templates, as it listed them.
#[derive(Debug, Clone, Default)]
pub struct Offers {
    /// Its prompts.
    pub prompts: Vec<Prompt>,
    /// Its resources.
    pub resources: Vec<Resource>,
    /// Its resource templates.
    pub templates: Vec<ResourceTemplate>,
}

impl Offers {
    /// Lists what the server declares (a listing that fails is logged and left empty: its
    /// tools still come through).
    pub(crate) async fn list(peer: &Peer<RoleClient>, id: &str) -> Offers {
        let Some(caps) = peer.peer_info().map(|i| i.capabilities.clone()) else {
            return Offers::default();
        };
        let mut offers = Offers::default();
        if caps.prompts.is_some() {
            match peer.list_all_prompts().await {
                Ok(p) => offers.prompts = p,
                Err(e) => tracing::warn!(server = %id, "listing its prompts failed: {e}"),
            }
        }
        if caps.resources.is_some() {
            match peer.list_all_resources().await {
                Ok(r) => offers.resources = r,
                Err(e) => tracing::warn!(server = %id, "listing its resources failed: {e}"),
            }
            match peer.list_all_resource_templates().await {
                Ok(t) => offers.templates = t,
                Err(e) => {
                    tracing::warn!(server = %id, "listing its resource templates failed: {e}")
                }
            }
        }
        offers
    }
}

impl Upstream {
    /// Lists its prompts, resources and resource templates and keeps them.
    pub(crate) async fn list_offers(self: &Arc<Self>) {
        let id = &self.config.id;
        let offers = match self.live_peer().await {
            Ok((peer, _)) => Offers::list(&peer, id).await,
            Err(e) => {
                tracing::warn!(server = %id, "its prompts and resources are not listed: {e}");
                Offers::default()
            }
        };
        *self.offers.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(offers);
    }
}

impl McpToolset {
    /// The prompts, resources and resource templates the server offered when they were
    /// last listed ([`McpToolset::list_offers`]; empty before).
    pub fn offers(&self) -> Arc<Offers> {
        self.server
            .offers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Lists the server's prompts, resources and resource templates (what it declares)
    /// and keeps them for [`McpToolset::offers`]. A server that cannot be reached offers
    /// nothing, logged.
    pub async fn list_offers(self: &Arc<Self>) {
        self.server.list_offers().await;
    }

    /// `prompts/get` of one of its prompts (by its own name): its messages, or (a
    /// 2026-07-28 server) an `input_required` round. `client` is what the asking client can
    /// be asked, told to a 2026-07-28 server with the request.
    pub async fn get_prompt(
        self: &Arc<Self>,
        params: GetPromptRequestParams,
        client: Option<rmcp::model::ClientCapabilities>,
    ) -> Result<GetPromptResponse, String> {
        let id = &self.server.config.id;
        let (peer, _) = self.server.live_peer().await.map_err(|e| e.to_string())?;
        let mut options = rmcp::service::PeerRequestOptions::no_options();
        let stateless = peer
            .peer_info()
            .is_some_and(|i| i.protocol_version >= rmcp::model::ProtocolVersion::V_2026_07_28);
        if let (true, Some(caps)) = (stateless, client) {
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.set_client_capabilities(caps);
            options.meta = Some(meta);
        }
        let request = rmcp::model::ClientRequest::GetPromptRequest(
            rmcp::model::GetPromptRequest::new(params),
        );
        let answer = peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| format!("MCP server '{id}': {e}"))?
            .await_response()
            .await
            .map_err(|e| format!("MCP server '{id}': {e}"))?;
        match answer {
            rmcp::model::ServerResult::GetPromptResult(got) => Ok(GetPromptResponse::Complete(got)),
            rmcp::model::ServerResult::InputRequiredResult(asked) => {
                Ok(GetPromptResponse::InputRequired(asked))
            }
            _ => Err(format!(
                "MCP server '{id}' answered prompts/get with something else"
            )),
        }
    }

    /// `resources/read` of one of its resources.
    pub async fn read_resource(
        self: &Arc<Self>,
        params: ReadResourceRequestParams,
    ) -> Result<ReadResourceResult, String> {
        let (peer, _) = self.server.live_peer().await.map_err(|e| e.to_string())?;
        peer.read_resource(params)
            .await
            .map_err(|e| format!("MCP server '{}': {e}", self.server.config.id))
    }

    /// `completion/complete` for one of its prompts or resource templates.
    pub async fn complete(
        self: &Arc<Self>,
        params: CompleteRequestParams,
    ) -> Result<CompleteResult, String> {
        let (peer, _) = self.server.live_peer().await.map_err(|e| e.to_string())?;
        peer.complete(params)
            .await
            .map_err(|e| format!("MCP server '{}': {e}", self.server.config.id))
    }
}
