//! What mounted MCP servers offer besides tools, passed through to toolhost's own clients:
//! their prompts (named with the server's prefix, like its tools; under their own names
//! with `prefix = ""`), resources and resource templates (URIs as the server gave them),
//! `prompts/get`, `resources/read` and `completion/complete` routed to the server that owns
//! the prompt, resource or template.
//!
//! Two servers offering the same prompt name, resource URI or template: the first in
//! `[[mcp_servers]]` order keeps it, the other's is left out of the lists, and the log says
//! so once, naming both.

use std::collections::HashSet;
use std::sync::Arc;

use mcp_toolsets::McpToolset;
use rmcp::model::{Prompt, Resource, ResourceTemplate};

/// One mounted server.
struct Mounted {
    id: String,
    /// The published name of each of its prompts: `PREFIX SEP NAME` (or `NAME`).
    prefix: Option<String>,
    toolset: Arc<McpToolset>,
}

/// The mounted servers, in configuration order.
#[derive(Default)]
pub struct Upstreams {
    servers: Vec<Mounted>,
    separator: String,
}

impl Upstreams {
    /// The servers that started (id, prefix, toolset), in configuration order, their
    /// prompts and resources listed and what they ask the user relayed to the clients that
    /// made the calls through `relay`; prompt names join the prefix with `separator`. Logs
    /// what two servers both offer.
    pub async fn new(
        started: Vec<(String, String, Arc<McpToolset>)>,
        separator: &str,
        relay: Arc<dyn mcp_toolsets::ClientRelay>,
    ) -> Upstreams {
        for (_, _, toolset) in &started {
            toolset.list_offers().await;
            toolset.relay_through(relay.clone());
        }
        let upstreams = Upstreams {
            servers: started
                .into_iter()
                .map(|(id, prefix, toolset)| Mounted {
                    id,
                    prefix: Some(prefix).filter(|p| !p.is_empty()),
                    toolset,
                })
                .collect(),
            separator: separator.to_string(),
        };
        upstreams.report_overlaps();
        upstreams
    }

    /// Whether any server offers prompts or resource templates (what completion serves).
    pub fn completes(&self) -> bool {
        self.servers.iter().any(|s| {
            let o = s.toolset.offers();
            !o.prompts.is_empty() || !o.templates.is_empty()
        })
    }

    fn published(&self, server: &Mounted, name: &str) -> String {
        match &server.prefix {
            Some(p) => format!("{p}{}{name}", self.separator),
            None => name.to_string(),
        }
    }

    /// Every server's prompts under their published names; a name taken by an earlier
    /// server is left out.
    pub fn prompts(&self) -> Vec<Prompt> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for server in &self.servers {
            for prompt in &server.toolset.offers().prompts {
                let mut prompt = prompt.clone();
                prompt.name = self.published(server, &prompt.name);
                if seen.insert(prompt.name.clone()) {
                    out.push(prompt);
                }
            }
        }
        out
    }

    /// The server of the prompt published as `name`, and the prompt's own name there.
    pub fn prompt(&self, name: &str) -> Option<(Arc<McpToolset>, String)> {
        self.servers.iter().find_map(|server| {
            server
                .toolset
                .offers()
                .prompts
                .iter()
                .find(|p| self.published(server, &p.name) == name)
                .map(|p| (server.toolset.clone(), p.name.clone()))
        })
    }

    /// Every server's resources; a URI an earlier server offers is left out.
    pub fn resources(&self) -> Vec<Resource> {
        let mut seen = HashSet::new();
        self.servers
            .iter()
            .flat_map(|s| s.toolset.offers().resources.clone())
            .filter(|r| seen.insert(r.uri.clone()))
            .collect()
    }

    /// Every server's resource templates; a template an earlier server offers is left out.
    pub fn templates(&self) -> Vec<ResourceTemplate> {
        let mut seen = HashSet::new();
        self.servers
            .iter()
            .flat_map(|s| s.toolset.offers().templates.clone())
            .filter(|t| seen.insert(t.uri_template.clone()))
            .collect()
    }

    /// The server that serves `uri`: the first that lists it, else the one whose template's
    /// fixed beginning (up to its first `{`) is the longest beginning of `uri`.
    pub fn resource(&self, uri: &str) -> Option<Arc<McpToolset>> {
        if let Some(server) = self
            .servers
            .iter()
            .find(|s| s.toolset.offers().resources.iter().any(|r| r.uri == uri))
        {
            return Some(server.toolset.clone());
        }
        let mut best: Option<(usize, &Mounted)> = None;
        for server in &self.servers {
            for t in &server.toolset.offers().templates {
                let fixed = t.uri_template.split('{').next().unwrap_or_default();
                let longer = best.is_none_or(|(len, _)| fixed.len() > len);
                if !fixed.is_empty() && uri.starts_with(fixed) && longer {
                    best = Some((fixed.len(), server));
                }
            }
        }
        best.map(|(_, s)| s.toolset.clone())
    }

    /// The server that offers the template `uri_template`.
    pub fn template(&self, uri_template: &str) -> Option<Arc<McpToolset>> {
        self.servers
            .iter()
            .find(|s| {
                s.toolset
                    .offers()
                    .templates
                    .iter()
                    .any(|t| t.uri_template == uri_template)
            })
            .map(|s| s.toolset.clone())
    }

    /// Logs, once, what two servers both offer and which one keeps it.
    fn report_overlaps(&self) {
        let mut owners: Vec<(String, &str)> = Vec::new();
        for server in &self.servers {
            let offers = server.toolset.offers();
            let names = offers
                .prompts
                .iter()
                .map(|p| format!("prompt '{}'", self.published(server, &p.name)))
                .chain(
                    offers
                        .resources
                        .iter()
                        .map(|r| format!("resource '{}'", r.uri)),
                )
                .chain(
                    offers
                        .templates
                        .iter()
                        .map(|t| format!("resource template '{}'", t.uri_template)),
                );
            for what in names {
                match owners.iter().find(|(w, _)| *w == what) {
                    Some((_, first)) => tracing::warn!(
                        "MCP servers '{first}' and '{}' both offer {what}: '{first}' (the first in \
                         [[mcp_servers]]) serves it; give one of them a prefix, or remove one",
                        server.id
                    ),
                    None => owners.push((what, &server.id)),
                }
            }
        }
    }
}
