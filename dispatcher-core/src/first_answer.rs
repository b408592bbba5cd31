//! Where the first answer to a confirmation is taken when instances share a store: the
//! keys, the claim every answer must win, and the withdrawal of a request that no longer
//! waits. [`crate::shared`] builds on them; the broker uses them without knowing the rest.
//!
//! | in the store | what it is |
//! |---|---|
//! | record `pending:ID` | a request waiting for an answer, and the instance it waits on |
//! | claim `answered:ID` | taken by the first answer, wherever it was given |
//! | record `answer:ID` | that answer and who gave it (for the later answers' "already answered by …") |

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::store::{Store, StoreError};

pub(crate) const PENDING: &str = "pending:";
pub(crate) const ANSWERED: &str = "answered:";
pub(crate) const ANSWER: &str = "answer:";

/// How long an answer is remembered, for late answers to be told who won.
pub(crate) const ANSWER_KEPT: Duration = Duration::from_secs(3600);

/// Takes the first answer to `id` (`decision`, its wire name) given by `client`: `true`
/// when it is the first anywhere; `false` when another was. The winner is recorded for
/// the others.
pub(crate) async fn claim(
    store: &Arc<dyn Store>,
    id: &str,
    decision: &str,
    client: &str,
) -> Result<bool, StoreError> {
    if !store.claim(&format!("{ANSWERED}{id}"), ANSWER_KEPT).await? {
        return Ok(false);
    }
    let record = json!({"decision": decision, "client": client}).to_string();
    if let Err(e) = store
        .put(&format!("{ANSWER}{id}"), &record, ANSWER_KEPT)
        .await
    {
        tracing::debug!("who answered {id} is not recorded: {e}");
    }
    Ok(true)
}

/// Tells the other instances that request `id` waits on `instance`: `request` is its JSON,
/// kept `ttl`.
pub(crate) async fn publish_pending(
    store: &Arc<dyn Store>,
    instance: &str,
    id: &str,
    request: serde_json::Value,
    ttl: Duration,
) {
    let record = json!({"instance": instance, "request": request}).to_string();
    if let Err(e) = store.put(&format!("{PENDING}{id}"), &record, ttl).await {
        tracing::warn!(
            "{e}; the confirmation waits here, and other instances' consoles do not see it"
        );
    }
}

/// Withdraws `id` from the other instances (it was answered, timed out or cancelled), in
/// the background.
pub(crate) fn withdraw(store: &Arc<dyn Store>, id: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let store = store.clone();
    let key = format!("{PENDING}{id}");
    runtime.spawn(async move {
        let _ = store.delete(&key).await;
    });
}
