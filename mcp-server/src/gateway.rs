//! What mounted MCP servers offer besides tools, passed through to toolhost's own clients:
//! their prompts (named with the server's prefix, like its tools; under their own names
//! with `prefix = ""`), resources and resource templates (URIs as the server gave them),
//! `prompts/get`, `resources/read` and `completion/complete` routed to the server that owns
//! the prompt, resource or template.
//!
//! Two servers offering the same prompt name, resource URI or template: the first in
//! `[[mcp_servers]]` order keeps it, the other's is left out of the lists, and the log says
//! so once, naming both.

#![allow(
    deprecated,
    reason = "logging is deprecated (SEP-2577), but 2025-era servers and clients still use it"
)]

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use mcp_toolsets::{McpToolset, ServerEvent};
use rmcp::model::{LoggingLevel, Prompt, Resource, ResourceTemplate};
use tokio::sync::broadcast;

/// How far a slow client may fall behind the servers' events before it misses some.
const EVENTS: usize = 256;

/// Passes one server's events on, labelled with its id, until it or toolhost is gone.
async fn pass_on(
    mut from: broadcast::Receiver<ServerEvent>,
    id: Arc<str>,
    to: broadcast::Sender<(Arc<str>, ServerEvent)>,
) {
    loop {
        match from.recv().await {
            Ok(event) => {
                let _ = to.send((id.clone(), event));
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(server = %id, "{n} of its notifications were dropped: toolhost fell behind");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// One mounted server.
#[derive(Clone)]
struct Mounted {
    id: Arc<str>,
    /// What it declared when it started.
    caps: rmcp::model::ServerCapabilities,
    /// The published name of each of its prompts: `PREFIX SEP NAME` (or `NAME`).
    prefix: Option<String>,
    toolset: Arc<McpToolset>,
}

impl Mounted {
    fn subscribes(&self) -> bool {
        self.caps.resources.as_ref().and_then(|r| r.subscribe) == Some(true)
    }
}

/// The mounted servers, in configuration order (replaced whole when a reload changes
/// them: [`Upstreams::replace`]).
pub struct Upstreams {
    servers: RwLock<Arc<Vec<Mounted>>>,
    separator: String,
    /// What they tell toolhost ([`ServerEvent`]), with the id of the server that told it.
    events: broadcast::Sender<(Arc<str>, ServerEvent)>,
}

impl Default for Upstreams {
    fn default() -> Self {
        Upstreams {
            servers: RwLock::default(),
            separator: String::new(),
            events: broadcast::channel(1).0,
        }
    }
}

/// A server as [`Upstreams::new`] and [`Upstreams::replace`] take it: id, prefix, toolset.
pub type Started = (String, String, Arc<McpToolset>);

impl Upstreams {
    /// The servers that started (id, prefix, toolset), in configuration order, their
    /// prompts and resources listed; prompt names join the prefix with `separator`. Logs
    /// what two servers both offer. (What a server asks the user during a call goes to the
    /// client that made the call through the route the call carries.)
    pub async fn new(started: Vec<Started>, separator: &str) -> Upstreams {
        let upstreams = Upstreams {
            servers: RwLock::default(),
            separator: separator.to_string(),
            events: broadcast::channel(EVENTS).0,
        };
        upstreams.replace(started).await;
        upstreams
    }

    /// Puts `started` in place of the servers mounted now (a reload added, restarted or
    /// removed some): a server kept (the same toolset) keeps its state; the others' prompts
    /// and resources are listed, and the clients are told the lists changed.
    pub async fn replace(&self, started: Vec<Started>) {
        let before = self.servers();
        let mut servers = Vec::with_capacity(started.len());
        let mut changed = before.len() != started.len();
        for (id, prefix, toolset) in started {
            if let Some(kept) = before.iter().find(|m| Arc::ptr_eq(&m.toolset, &toolset)) {
                servers.push(Mounted {
                    id: kept.id.clone(),
                    caps: kept.caps.clone(),
                    prefix: kept.prefix.clone(),
                    toolset,
                });
                continue;
            }
            changed = true;
            toolset.list_offers().await;
            let id: Arc<str> = id.into();
            tokio::spawn(pass_on(toolset.events(), id.clone(), self.events.clone()));
            servers.push(Mounted {
                caps: toolset.capabilities().await.unwrap_or_default(),
                id,
                prefix: Some(prefix).filter(|p| !p.is_empty()),
                toolset,
            });
        }
        let replacing = !before.is_empty();
        *self.servers.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(servers);
        self.report_overlaps();
        if replacing && changed {
            for event in [ServerEvent::PromptsChanged, ServerEvent::ResourcesChanged] {
                let _ = self.events.send(("toolhost".into(), event));
            }
        }
    }

    /// The servers mounted now.
    fn servers(&self) -> Arc<Vec<Mounted>> {
        self.servers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the servers tell toolhost from now on, each with its server's id.
    pub fn events(&self) -> broadcast::Receiver<(Arc<str>, ServerEvent)> {
        self.events.subscribe()
    }

    /// Whether any server offers resource subscriptions.
    pub fn subscribes(&self) -> bool {
        self.servers().iter().any(Mounted::subscribes)
    }

    /// Whether any server says when its prompts change.
    pub fn prompts_change(&self) -> bool {
        self.servers()
            .iter()
            .any(|s| s.caps.prompts.as_ref().and_then(|p| p.list_changed) == Some(true))
    }

    /// Whether any server says when its resources change.
    pub fn resources_change(&self) -> bool {
        self.servers()
            .iter()
            .any(|s| s.caps.resources.as_ref().and_then(|r| r.list_changed) == Some(true))
    }

    /// Whether a client may subscribe to `uri`: a server that offers subscriptions serves
    /// it.
    pub fn can_subscribe(&self, uri: &str) -> bool {
        self.resource_server(uri).is_some_and(|s| s.subscribes())
    }

    /// Subscribes one more client to updates of `uri` at the server that serves it.
    pub async fn subscribe(&self, uri: &str) -> Result<(), String> {
        self.subscribing(uri).await
    }

    /// [`Upstreams::subscribe`], promised now: the server's calls made from now on wait
    /// for the subscription, which is made when the future runs
    /// ([`mcp_toolsets::McpToolset::subscribing`]).
    pub fn subscribing(
        &self,
        uri: &str,
    ) -> impl Future<Output = Result<(), String>> + Send + 'static + use<> {
        let promised = match self.resource_server(uri) {
            Some(server) if server.subscribes() => Ok(server.toolset.subscribing(uri)),
            Some(server) => Err(format!(
                "MCP server '{}', which serves {uri}, does not offer resource subscriptions",
                server.id
            )),
            None => Err(format!(
                "no mounted MCP server offers {uri} (resources/list shows what there is)"
            )),
        };
        async move { promised?.await }
    }

    /// One client no longer wants updates of `uri`.
    pub async fn unsubscribe(&self, uri: &str) {
        if let Some(server) = self.resource_server(uri) {
            server.toolset.unsubscribe(uri).await;
        }
    }

    /// Asks every server that offers logging to send messages of `level` and above.
    pub async fn set_log_level(&self, level: LoggingLevel) {
        for server in self.servers().iter() {
            if let Err(e) = server.toolset.set_log_level(level).await {
                tracing::warn!(server = %server.id, "logging/setLevel not passed on: {e}");
            }
        }
    }

    /// Makes sure the server `id` sends log messages of `level` and above (a lower level
    /// already set stays).
    pub async fn lower_log_level(&self, id: &str, level: LoggingLevel) {
        if let Some(server) = self.servers().iter().find(|s| &*s.id == id)
            && let Err(e) = server.toolset.lower_log_level(level).await
        {
            tracing::warn!(server = %id, "its log level could not be set: {e}");
        }
    }

    /// Tells every connected server that a client's roots changed.
    pub async fn roots_changed(&self) {
        for server in self.servers().iter() {
            server.toolset.roots_changed().await;
        }
    }

    /// The id of the server whose tool is published as `tool`.
    pub fn server_of_tool(&self, tool: &str) -> Option<Arc<str>> {
        self.servers()
            .iter()
            .find(|s| match &s.prefix {
                Some(p) => tool
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with(&self.separator)),
                None => dispatcher_core::Toolset::tools(s.toolset.as_ref())
                    .iter()
                    .any(|t| t.definition().name == tool),
            })
            .map(|s| s.id.clone())
    }

    /// Whether any server offers prompts or resource templates (what completion serves).
    pub fn completes(&self) -> bool {
        self.servers().iter().any(|s| {
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
        for server in self.servers().iter() {
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
        self.servers().iter().find_map(|server| {
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
        self.servers()
            .iter()
            .flat_map(|s| s.toolset.offers().resources.clone())
            .filter(|r| seen.insert(r.uri.clone()))
            .collect()
    }

    /// Every server's resource templates; a template an earlier server offers is left out.
    pub fn templates(&self) -> Vec<ResourceTemplate> {
        let mut seen = HashSet::new();
        self.servers()
            .iter()
            .flat_map(|s| s.toolset.offers().templates.clone())
            .filter(|t| seen.insert(t.uri_template.clone()))
            .collect()
    }

    /// The server that serves `uri`: the first that lists it, else the one whose template's
    /// fixed beginning (up to its first `{`) is the longest beginning of `uri`.
    pub fn resource(&self, uri: &str) -> Option<Arc<McpToolset>> {
        self.resource_server(uri).map(|s| s.toolset.clone())
    }

    fn resource_server(&self, uri: &str) -> Option<Mounted> {
        let servers = self.servers();
        if let Some(server) = servers
            .iter()
            .find(|s| s.toolset.offers().resources.iter().any(|r| r.uri == uri))
        {
            return Some(server.clone());
        }
        let mut best: Option<(usize, &Mounted)> = None;
        for server in servers.iter() {
            for t in &server.toolset.offers().templates {
                let fixed = t.uri_template.split('{').next().unwrap_or_default();
                let longer = best.is_none_or(|(len, _)| fixed.len() > len);
                if !fixed.is_empty() && uri.starts_with(fixed) && longer {
                    best = Some((fixed.len(), server));
                }
            }
        }
        best.map(|(_, s)| s.clone())
    }

    /// The server that offers the template `uri_template`.
    pub fn template(&self, uri_template: &str) -> Option<Arc<McpToolset>> {
        self.servers()
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
        let mut owners: Vec<(String, &Arc<str>)> = Vec::new();
        for server in self.servers().iter() {
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
