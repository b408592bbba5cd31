//! What mounted MCP servers tell toolhost, passed on to toolhost's own clients: their
//! prompt and resource list changes, updates of the resources a client subscribed to, and
//! their log messages, labelled with the server's id (`logger` is `ID` or `ID/LOGGER`);
//! with `[mcp] client_logs`, toolhost's own messages too (`logger` = `toolhost`,
//! [`super::own_logs`]).
//!
//! | the client speaks | list changes | resource updates | log messages |
//! |---|---|---|---|
//! | 2025-11-25 and older | on its connection, after `notifications/initialized` | of the URIs it `resources/subscribe`d | of `logging/setLevel`'s level and above |
//! | 2026-07-28 | on a `subscriptions/listen` stream that asks for them | of the stream's `resourceSubscriptions` | during a `tools/call` of a mounted tool whose `_meta` asks for a `logLevel`: that server's |

#![allow(
    deprecated,
    reason = "logging and resources/subscribe are deprecated (SEP-2577, SEP-2575), but 2025-era clients still use them"
)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use mcp_toolsets::ServerEvent;
use mcp_toolsets::level_rank;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};
use tokio::sync::broadcast::{self, error::RecvError};

/// The servers' events, each with its server's id.
pub(crate) type Events = broadcast::Receiver<(Arc<str>, ServerEvent)>;

/// What one 2025-era client asked to be told.
#[derive(Default)]
pub(crate) struct Interest {
    /// The URIs it subscribed to.
    subscribed: Mutex<HashSet<String>>,
    /// The least level of log message it wants; `None`: none.
    log_level: Mutex<Option<LoggingLevel>>,
}

impl Interest {
    /// Adds `uri`; `false` when it was subscribed already.
    pub(crate) fn subscribe(&self, uri: &str) -> bool {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uri.to_string())
    }

    /// Removes `uri`; `false` when it was not subscribed.
    pub(crate) fn unsubscribe(&self, uri: &str) -> bool {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uri)
    }

    /// Every URI it subscribed to, removed.
    pub(crate) fn take_all(&self) -> Vec<String> {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect()
    }

    fn wants_updates_of(&self, uri: &str) -> bool {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(uri)
    }

    /// Sets the least level of log message it wants.
    pub(crate) fn set_log_level(&self, level: LoggingLevel) {
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(level);
    }

    fn wants_log(&self, level: LoggingLevel) -> bool {
        self.log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|least| level_rank(level) >= level_rank(least))
    }
}

/// A server's log message, its logger named with the server's id.
pub(crate) fn labelled(
    id: &str,
    mut params: LoggingMessageNotificationParam,
) -> LoggingMessageNotificationParam {
    params.logger = Some(match params.logger {
        Some(logger) => format!("{id}/{logger}"),
        None => id.to_string(),
    });
    params
}

/// The next event, or `None` when the servers are gone; a client that fell behind is
/// logged and goes on.
async fn next(events: &mut Events) -> Option<(Arc<str>, ServerEvent)> {
    loop {
        match events.recv().await {
            Ok(event) => return Some(event),
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(
                    "{n} notifications of mounted MCP servers were not passed on to a client that fell behind"
                );
            }
            Err(RecvError::Closed) => return None,
        }
    }
}

/// Tells a 2025-era client, on its connection, what it asked for, until the connection
/// fails.
pub(crate) async fn tell_connection(
    mut events: Events,
    peer: Peer<RoleServer>,
    interest: Arc<Interest>,
) {
    let mut own = super::own_logs::subscribe();
    loop {
        let own_message = async {
            match own.as_mut() {
                Some(own) => own.recv().await.ok(),
                None => std::future::pending().await,
            }
        };
        let (id, event) = tokio::select! {
            next = next(&mut events) => match next {
                Some(event) => event,
                None => return,
            },
            // toolhost's own message, when `[mcp] client_logs` passes them on.
            Some(message) = own_message => {
                if interest.wants_log(message.level)
                    && peer.notify_logging_message(message).await.is_err()
                {
                    return;
                }
                continue;
            }
        };
        let sent = match event {
            ServerEvent::PromptsChanged => peer.notify_prompt_list_changed().await,
            ServerEvent::ResourcesChanged => peer.notify_resource_list_changed().await,
            ServerEvent::ResourceUpdated { uri } if interest.wants_updates_of(&uri) => {
                peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
            }
            ServerEvent::Log(params) if interest.wants_log(params.level) => {
                peer.notify_logging_message(labelled(&id, params)).await
            }
            _ => Ok(()),
        };
        if let Err(e) = sent {
            tracing::debug!("a client stopped taking notifications: {e}");
            return;
        }
    }
}

/// Tells a 2026-07-28 client, on its listen stream, the list changes and resource updates
/// its accepted filter asks for, until the stream ends.
pub(crate) async fn tell_stream(mut events: Events, sink: SubscriptionSink) {
    let accepted = sink.accepted().clone();
    while let Some((_, event)) = next(&mut events).await {
        let sent = match event {
            ServerEvent::PromptsChanged if accepted.prompts_list_changed == Some(true) => {
                sink.notify_prompt_list_changed().await
            }
            ServerEvent::ResourcesChanged if accepted.resources_list_changed == Some(true) => {
                sink.notify_resource_list_changed().await
            }
            ServerEvent::ResourceUpdated { uri }
                if accepted
                    .resource_subscriptions
                    .as_ref()
                    .is_some_and(|uris| uris.contains(&uri)) =>
            {
                sink.notify_resource_updated(uri).await
            }
            _ => Ok(()),
        };
        if let Err(e) = sent {
            tracing::debug!("a listen stream stopped taking notifications: {e}");
            return;
        }
    }
}

/// Tells the client of one call the log messages of `server` at `least` and above, as the
/// call's notifications, until `done` (what came before it is still told).
pub(crate) async fn tell_call(
    mut events: Events,
    server: Arc<str>,
    least: LoggingLevel,
    peer: Peer<RoleServer>,
    mut done: tokio::sync::oneshot::Receiver<()>,
) {
    let tell = |id: Arc<str>, event: ServerEvent| {
        let peer = peer.clone();
        let server = server.clone();
        async move {
            match event {
                ServerEvent::Log(params)
                    if id == server && level_rank(params.level) >= level_rank(least) =>
                {
                    peer.notify_logging_message(labelled(&id, params))
                        .await
                        .is_ok()
                }
                _ => true,
            }
        }
    };
    loop {
        tokio::select! {
            biased;
            event = next(&mut events) => match event {
                Some((id, event)) => {
                    if !tell(id, event).await {
                        return;
                    }
                }
                None => return,
            },
            _ = &mut done => {
                while let Ok((id, event)) = events.try_recv() {
                    if !tell(id, event).await {
                        return;
                    }
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_message_is_labelled_with_its_server() {
        let message = |logger: Option<&str>| {
            let mut p = LoggingMessageNotificationParam::new(LoggingLevel::Info, "x".into());
            p.logger = logger.map(str::to_string);
            p
        };
        assert_eq!(labelled("ev", message(None)).logger.as_deref(), Some("ev"));
        assert_eq!(
            labelled("ev", message(Some("db"))).logger.as_deref(),
            Some("ev/db")
        );
    }

    #[test]
    fn a_client_gets_log_messages_of_its_level_and_above_once_it_set_one() {
        let interest = Interest::default();
        assert!(!interest.wants_log(LoggingLevel::Emergency));
        interest.set_log_level(LoggingLevel::Warning);
        assert!(interest.wants_log(LoggingLevel::Error));
        assert!(interest.wants_log(LoggingLevel::Warning));
        assert!(!interest.wants_log(LoggingLevel::Info));
    }

    #[test]
    fn a_uri_is_subscribed_once_per_client() {
        let interest = Interest::default();
        assert!(interest.subscribe("a://1"));
        assert!(!interest.subscribe("a://1"));
        assert!(interest.wants_updates_of("a://1"));
        assert!(interest.unsubscribe("a://1"));
        assert!(!interest.unsubscribe("a://1"));
        assert!(interest.take_all().is_empty());
    }
}
