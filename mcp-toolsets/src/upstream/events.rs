//! What a server tells its client besides tool changes and progress, for a host that
//! passes it on ([`McpToolset::events`]): its prompt and resource lists changed (already
//! listed again when the event comes), a subscribed resource was updated, a log message.
//! And what the host asks of it for its own clients: resource subscriptions
//! ([`McpToolset::subscribe`], counted, so that two clients subscribed to one URI cost one
//! upstream subscription) and the log level ([`McpToolset::set_log_level`]).
//!
//! Both eras: a 2025-era server is asked with `resources/subscribe` and `logging/setLevel`
//! and notifies on its connection; a 2026-07-28 server is asked for its list changes on
//! the `subscriptions/listen` stream the toolset keeps, and for a resource's updates on a
//! stream of the resource's own while anyone is subscribed (its log messages come only
//! with the requests that ask for them, so none are passed on from it).

#![allow(
    deprecated,
    reason = "logging and resources/subscribe are deprecated (SEP-2577, SEP-2575), but 2025-era servers and clients still use them"
)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ProtocolVersion};

use crate::McpToolset;
use crate::upstream::Upstream;

/// What a server told its client, passed on to the host.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    /// Its prompts changed; [`McpToolset::offers`] has the new list.
    PromptsChanged,
    /// Its resources or resource templates changed; [`McpToolset::offers`] has the new
    /// lists.
    ResourcesChanged,
    /// A resource someone subscribed to was updated.
    ResourceUpdated {
        /// The resource's URI, as the server gave it.
        uri: String,
    },
    /// A log message.
    Log(LoggingMessageNotificationParam),
}

/// How many events a slow listener may fall behind before it misses some (it is told how
/// many with [`tokio::sync::broadcast::error::RecvError::Lagged`]).
pub(crate) const EVENTS: usize = 256;

/// A log level's rank: `debug` is 0, `emergency` 7.
pub fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The resource subscriptions held upstream for the host's clients, by URI, and how many
/// are on their way there.
#[derive(Default)]
pub(crate) struct Subscriptions {
    held: Mutex<HashMap<String, Held>>,
    /// Subscriptions promised to a client and not yet made upstream
    /// ([`McpToolset::subscribing`]): calls to the server wait for them.
    pending: AtomicUsize,
    /// Told when the last pending one is made.
    settled: tokio::sync::Notify,
}

impl Subscriptions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once no subscription is on its way upstream: a client told its
    /// subscription stands, then calling a tool, has the tool's updates.
    pub(crate) async fn settled(&self) {
        while self.pending.load(Ordering::Acquire) > 0 {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            if self.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            settled.await;
        }
    }
}

/// A subscription on its way upstream, counted in [`Subscriptions::pending`] until dropped.
struct Pending(Arc<Upstream>);

impl Pending {
    fn new(server: &Arc<Upstream>) -> Pending {
        server.subscriptions.pending.fetch_add(1, Ordering::AcqRel);
        Pending(server.clone())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let subscriptions = &self.0.subscriptions;
        if subscriptions.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            subscriptions.settled.notify_waiters();
        }
    }
}

struct Held {
    /// How many of the host's subscriptions want it.
    count: usize,
    /// The stream of a 2026-07-28 server's updates for it.
    listen: Option<tokio::task::AbortHandle>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(listen) = self.listen.take() {
            listen.abort();
        }
    }
}

impl Upstream {
    /// After a restart: lists its prompts and resources again (telling the host when they
    /// changed) and subscribes again to what the host's clients are subscribed to.
    pub(crate) async fn after_restart(
        self: &Arc<Self>,
        peer: rmcp::service::Peer<rmcp::service::RoleClient>,
    ) {
        let after = Arc::new(crate::upstream::offers::Offers::list(&peer, &self.config.id).await);
        let before = std::mem::replace(
            &mut *self.offers.lock().unwrap_or_else(PoisonError::into_inner),
            after.clone(),
        );
        if before.prompts != after.prompts {
            let _ = self.events.send(ServerEvent::PromptsChanged);
        }
        if before.resources != after.resources || before.templates != after.templates {
            let _ = self.events.send(ServerEvent::ResourcesChanged);
        }
        let uris: Vec<String> = self.subscriptions.lock().keys().cloned().collect();
        for uri in uris {
            let listen = match self.subscribe_upstream(&peer, &uri).await {
                Ok(listen) => listen,
                Err(e) => {
                    tracing::warn!(server = %self.config.id, "after its restart, the subscription to {uri} could not be renewed: {e}");
                    continue;
                }
            };
            let mut held = self.subscriptions.lock();
            match held.get_mut(&uri) {
                // The old stream ended with the old connection.
                Some(h) => h.listen = listen,
                None => drop(listen.map(|l| l.abort())),
            }
        }
    }

    /// Asks the server for updates of `uri`: `resources/subscribe` (2025 era) or a listen
    /// stream of its own (2026-07-28, returned).
    async fn subscribe_upstream(
        &self,
        peer: &rmcp::service::Peer<rmcp::service::RoleClient>,
        uri: &str,
    ) -> Result<Option<tokio::task::AbortHandle>, String> {
        let id = &self.config.id;
        if !Upstream::is_stateless(peer) {
            peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri))
                .await
                .map_err(|e| format!("MCP server '{id}': {e}"))?;
            return Ok(None);
        }
        let filter = rmcp::model::SubscriptionFilter::builder()
            .resource_subscription(uri)
            .build();
        let mut stream = peer
            .listen(filter)
            .await
            .map_err(|e| format!("MCP server '{id}': {e}"))?;
        let events = self.events.clone();
        Ok(Some(
            tokio::spawn(async move {
                while let Ok(Some(n)) = stream.next().await {
                    if let rmcp::model::ServerNotification::ResourceUpdatedNotification(u) = n {
                        let _ = events.send(ServerEvent::ResourceUpdated { uri: u.params.uri });
                    }
                }
            })
            .abort_handle(),
        ))
    }

    /// What happens on a prompt or resource list change: list them again, then tell.
    pub(crate) fn on_offers_changed(
        me: std::sync::Weak<Upstream>,
    ) -> Arc<dyn Fn(ServerEvent) + Send + Sync> {
        Arc::new(move |event| {
            let Some(this) = me.upgrade() else { return };
            let runtime = this.runtime.clone();
            runtime.spawn(async move {
                this.list_offers().await;
                let _ = this.events.send(event);
            });
        })
    }

    fn is_stateless(peer: &rmcp::service::Peer<rmcp::service::RoleClient>) -> bool {
        peer.peer_info()
            .is_some_and(|i| i.protocol_version >= ProtocolVersion::V_2026_07_28)
    }
}

/// Whether a server declares `resources.subscribe`.
fn subscribes(peer: &rmcp::service::Peer<rmcp::service::RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|i| i.capabilities.resources.as_ref().and_then(|r| r.subscribe) == Some(true))
}

impl McpToolset {
    /// What the server tells its client from now on ([`ServerEvent`]).
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<ServerEvent> {
        self.server.events.subscribe()
    }

    /// What the server declared when it was last reached (`None` when it cannot be).
    pub async fn capabilities(self: &Arc<Self>) -> Option<rmcp::model::ServerCapabilities> {
        let (peer, _) = self.server.live_peer().await.ok()?;
        peer.peer_info().map(|i| i.capabilities.clone())
    }

    /// Subscribes to updates of `uri` for one more of the host's clients; the first asks
    /// the server. Updates come as [`ServerEvent::ResourceUpdated`].
    pub async fn subscribe(self: &Arc<Self>, uri: &str) -> Result<(), String> {
        self.subscribing(uri).await
    }

    /// [`McpToolset::subscribe`], promised now: calls to the server made from now on wait
    /// until the subscription is made (or has failed), so that a client told its
    /// subscription stands gets the updates of whatever it calls next. The subscription
    /// is made when the future returned runs; dropping it unpolled keeps the promise no
    /// longer.
    pub fn subscribing(
        self: &Arc<Self>,
        uri: &str,
    ) -> impl Future<Output = Result<(), String>> + Send + 'static + use<> {
        let pending = Pending::new(&self.server);
        let (this, uri) = (self.clone(), uri.to_string());
        async move {
            let _pending = pending;
            this.subscribe_now(&uri).await
        }
    }

    async fn subscribe_now(self: &Arc<Self>, uri: &str) -> Result<(), String> {
        let id = &self.server.config.id;
        {
            let mut held = self.server.subscriptions.lock();
            if let Some(h) = held.get_mut(uri) {
                h.count += 1;
                return Ok(());
            }
        }
        let (peer, _) = self.server.live_peer().await.map_err(|e| e.to_string())?;
        if !subscribes(&peer) {
            return Err(format!(
                "MCP server '{id}' does not offer resource subscriptions"
            ));
        }
        let listen = self.server.subscribe_upstream(&peer, uri).await?;
        let mut held = self.server.subscriptions.lock();
        // Another client may have subscribed meanwhile: one upstream subscription serves both.
        match held.get_mut(uri) {
            Some(h) => h.count += 1,
            None => {
                held.insert(uri.to_string(), Held { count: 1, listen });
            }
        }
        Ok(())
    }

    /// One of the host's clients no longer wants updates of `uri`; the last one tells the
    /// server.
    pub async fn unsubscribe(self: &Arc<Self>, uri: &str) {
        let last = {
            let mut held = self.server.subscriptions.lock();
            match held.get_mut(uri) {
                Some(h) if h.count > 1 => {
                    h.count -= 1;
                    None
                }
                Some(_) => held.remove(uri),
                None => None,
            }
        };
        let Some(last) = last else { return };
        if last.listen.is_none()
            && let Ok((peer, _)) = self.server.live_peer().await
            && let Err(e) = peer
                .unsubscribe(rmcp::model::UnsubscribeRequestParams::new(uri))
                .await
        {
            tracing::debug!(server = %self.server.config.id, "resources/unsubscribe failed: {e}");
        }
    }

    /// Tells the server, when it is connected (2025 era: a 2026-07-28 server reads the
    /// client's roots with each round), that the roots changed: a client of toolhost's
    /// declared a change of its own roots, which the server's next `roots/list` during a
    /// call of that client's gets.
    pub async fn roots_changed(self: &Arc<Self>) {
        let Some(peer) = self.server.peer_if_up().await else {
            return;
        };
        if Upstream::is_stateless(&peer) {
            return;
        }
        if let Err(e) = peer.notify_roots_list_changed().await {
            tracing::debug!(server = %self.server.config.id, "notifications/roots/list_changed not sent: {e}");
        }
    }

    /// Asks a 2025-era server that offers logging to send log messages of `level` and
    /// above. A 2026-07-28 server is not asked (its log messages come only with the
    /// requests that ask for them).
    pub async fn set_log_level(self: &Arc<Self>, level: LoggingLevel) -> Result<(), String> {
        let (peer, _) = self.server.live_peer().await.map_err(|e| e.to_string())?;
        let logs = peer
            .peer_info()
            .is_some_and(|i| i.capabilities.logging.is_some());
        if !logs || Upstream::is_stateless(&peer) {
            return Ok(());
        }
        peer.set_level(rmcp::model::SetLevelRequestParams::new(level))
            .await
            .map_err(|e| format!("MCP server '{}': {e}", self.server.config.id))?;
        *self
            .server
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(level_rank(level));
        Ok(())
    }

    /// Makes sure the server sends log messages of `level` (asking it, as
    /// [`McpToolset::set_log_level`] does, when its level is higher or was never set); a
    /// lower level already set stays.
    pub async fn lower_log_level(self: &Arc<Self>, level: LoggingLevel) -> Result<(), String> {
        let current = *self
            .server
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if current.is_some_and(|rank| rank <= level_rank(level)) {
            return Ok(());
        }
        self.set_log_level(level).await
    }
}
