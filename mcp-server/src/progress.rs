//! A call's live output, forwarded to the client that asked for progress
//! (`_meta.progressToken`) as `notifications/progress`: `progress` counts the characters
//! streamed so far and `message` holds the chunk.

use dispatcher_core::{CallEvents, EventKind};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};

/// Forwards a call's live output to the client as progress notifications; once `done`
/// fires, forwards what is already queued and returns.
pub(crate) async fn watch_call(
    mut events: CallEvents,
    (token, peer): (ProgressToken, Peer<RoleServer>),
    mut done: tokio::sync::oneshot::Receiver<()>,
) {
    let mut streamed = 0usize;
    let mut finishing = false;
    loop {
        let event = if finishing {
            match events.try_recv() {
                Some(e) => e,
                None => return,
            }
        } else {
            tokio::select! {
                e = events.recv() => match e {
                    Some(e) => e,
                    None => return,
                },
                _ = &mut done => {
                    finishing = true;
                    continue;
                }
            }
        };
        if let EventKind::OutputDelta { chunk } = &event.kind {
            streamed += chunk.chars().count();
            let note = ProgressNotificationParam::new(token.clone(), streamed as f64)
                .with_message(chunk.clone());
            if peer.notify_progress(note).await.is_err() {
                tracing::debug!("the MCP client stopped taking progress notifications");
            }
        }
    }
}
