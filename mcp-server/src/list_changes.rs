//! Telling a client that its tool list changed (`notifications/tools/list_changed`): an MCP
//! server configured as a toolset re-listed its tools, a per-session toolset started, a
//! tool was registered or removed.
//!
//! A 2025-era client (stdio, or an HTTP `Mcp-Session-Id` session) is told on its
//! connection from `notifications/initialized` on; a 2026-07-28 client is told on the
//! `subscriptions/listen` stream it opens with `toolsListChanged`. Either way the watcher
//! compares the session's list with the one it last saw, so a change in another session,
//! or one the session's visibility hides, sends nothing.

use std::future::Future;

use tokio::sync::watch;

/// Waits on the dispatcher's tool changes (`Dispatcher::watch_tools`) and calls `notify`
/// each time `list` (the session's `tools/list`) differs from the last one seen. Ends when
/// `notify` fails (the client is gone) or the dispatcher is dropped.
///
/// `changes` is subscribed when the client's subscription began (before its
/// acknowledgment went out); a change between then and this first look at the list cannot
/// be compared with a list from before it, so it is told at once (at worst a client lists
/// again for nothing).
///
/// `also` is a second source of changes to the list, of this client's own (the tools it
/// found through progressive discovery, which join its list): watched the same way.
pub async fn tell_of_changes<T, Fut>(
    mut changes: watch::Receiver<u64>,
    mut also: Option<watch::Receiver<u64>>,
    list: impl Fn() -> Vec<T>,
    notify: impl Fn() -> Fut,
) where
    T: PartialEq,
    Fut: Future<Output = Result<(), String>>,
{
    let mut tell = changes.has_changed().unwrap_or(false)
        || also
            .as_ref()
            .is_some_and(|own| own.has_changed().unwrap_or(false));
    changes.mark_unchanged();
    if let Some(own) = &mut also {
        own.mark_unchanged();
    }
    let mut seen = list();
    loop {
        if tell && let Err(e) = notify().await {
            tracing::debug!("stopped telling a client of tool list changes: {e}");
            return;
        }
        let changed = match &mut also {
            Some(own) => tokio::select! {
                changed = changes.changed() => changed.is_ok(),
                own_changed = own.changed() => {
                    if own_changed.is_err() {
                        also = None;
                    }
                    true
                }
            },
            None => changes.changed().await.is_ok(),
        };
        if !changed {
            return;
        }
        let now = list();
        tell = now != seen;
        seen = now;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn a_change_before_the_first_look_is_told_at_once() {
        let (tx, rx) = watch::channel(0u64);
        tx.send_modify(|n| *n += 1);
        let told = Arc::new(Mutex::new(0));
        let watcher = tokio::spawn({
            let told = told.clone();
            async move {
                tell_of_changes(
                    rx,
                    None,
                    || vec!["a"],
                    || {
                        *told.lock().unwrap() += 1;
                        async { Err("enough".to_string()) }
                    },
                )
                .await;
            }
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), watcher)
            .await
            .expect("told at once")
            .unwrap();
        assert_eq!(*told.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn only_a_list_that_differs_is_told_and_a_failed_notice_ends_the_watch() {
        let (tx, rx) = watch::channel(0u64);
        let list = Arc::new(Mutex::new(vec!["a"]));
        let told = Arc::new(Mutex::new(Vec::new()));
        let watcher = tokio::spawn({
            let (list, told) = (list.clone(), told.clone());
            async move {
                tell_of_changes(
                    rx,
                    None,
                    || list.lock().unwrap().clone(),
                    || {
                        let now = list.lock().unwrap().clone();
                        told.lock().unwrap().push(now.clone());
                        async move {
                            if now.contains(&"gone") {
                                Err("the client is gone".to_string())
                            } else {
                                Ok(())
                            }
                        }
                    },
                )
                .await;
            }
        });
        let settle = || async {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        };
        settle().await;
        // A change elsewhere: the list is the same, so nothing is told.
        tx.send_modify(|n| *n += 1);
        settle().await;
        assert!(told.lock().unwrap().is_empty());
        *list.lock().unwrap() = vec!["a", "b"];
        tx.send_modify(|n| *n += 1);
        settle().await;
        assert_eq!(*told.lock().unwrap(), [vec!["a", "b"]]);
        *list.lock().unwrap() = vec!["gone"];
        tx.send_modify(|n| *n += 1);
        tokio::time::timeout(std::time::Duration::from_secs(5), watcher)
            .await
            .expect("a failed notice ends the watch")
            .unwrap();
        assert_eq!(told.lock().unwrap().len(), 2);
    }
}

/// The `subscriptions/listen` streams open on a server. A stopping server ends them first,
/// so that each sends its final result (the 2026-07-28 sign of a server going away) while
/// its connection is still open, rather than being cut off with it.
#[derive(Default)]
pub struct Listens {
    pub(crate) stop: tokio_util::sync::CancellationToken,
    open: tokio::sync::watch::Sender<usize>,
}

impl Listens {
    /// Ends every listen stream, and any opened from now on, and waits up to `within`
    /// for their handlers to return. Returns how many were open.
    pub async fn end(&self, within: std::time::Duration) -> usize {
        let open = *self.open.borrow();
        self.stop.cancel();
        let mut watch = self.open.subscribe();
        let _ = tokio::time::timeout(within, watch.wait_for(|n| *n == 0)).await;
        open
    }

    /// Counts a listen stream as open until the guard drops.
    pub(crate) fn enter(&self) -> ListenGuard<'_> {
        self.open.send_modify(|n| *n += 1);
        ListenGuard(self)
    }
}

/// An open listen stream, counted until dropped.
pub(crate) struct ListenGuard<'a>(&'a Listens);

impl Drop for ListenGuard<'_> {
    fn drop(&mut self) {
        self.0.open.send_modify(|n| *n -= 1);
    }
}
