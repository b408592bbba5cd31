//! Tasks across instances ([`Tasks`] over a shared store): every change of a task is
//! mirrored as a record, so that `tasks/get`, `tasks/list` and `tasks/result` answer at
//! any instance, and `tasks/update` and `tasks/cancel` at another instance go to the one
//! whose call it is, over the store's channel.
//!
//! | in the store | what it is |
//! |---|---|
//! | record `task:ID` | the task as `tasks/get` shows it, and its owner (kept its `ttl` past its last change) |
//! | channel `tasks` | `update` and `cancel` for the instance running the call |

use std::sync::Arc;
use std::time::Duration;

use dispatcher_core::store::{Records, Store};
use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, InputResponses, Task};
use serde_json::{Value, json};

use super::Tasks;

const RECORD: &str = "task:";
const CHANNEL: &str = "tasks";

/// How often a `tasks/result` for another instance's task looks again.
const POLL: Duration = Duration::from_millis(100);

/// The task records waiting to be written to the shared store, the latest of each task
/// only, and whether a writer is at them. Each task's records reach the store in the order
/// they were made: one writer drains the outbox, and a task's next record waits until its
/// previous write ended (two writes of one key under way at once could land in either
/// order, and leave another instance reading a task as it was before its last change).
#[derive(Default)]
pub(super) struct Outbox {
    state: std::sync::Mutex<OutboxState>,
    /// Told each time a batch of writes ends ([`Outbox::written`]).
    wrote: tokio::sync::Notify,
}

#[derive(Default)]
struct OutboxState {
    records: std::collections::HashMap<String, (String, Duration)>,
    /// The keys of the batch being written.
    writing: std::collections::HashSet<String>,
    draining: bool,
}

impl Outbox {
    fn state(&self) -> std::sync::MutexGuard<'_, OutboxState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues task `id`'s `record`, kept `ttl` past its write (replacing one of the same
    /// task not written yet), and starts a writer if none is at work: in the background,
    /// tracked by `writes` so that a stopping instance can wait for it ([`Tasks::flush`]).
    pub(super) fn put(
        self: &Arc<Self>,
        store: Arc<dyn Records>,
        writes: &tokio_util::task::TaskTracker,
        id: &str,
        record: &Value,
        ttl: Duration,
    ) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let mut state = self.state();
        state
            .records
            .insert(format!("{RECORD}{id}"), (record.to_string(), ttl));
        if state.draining {
            return;
        }
        state.draining = true;
        drop(state);
        let outbox = self.clone();
        writes.spawn(async move { outbox.drain(store.as_ref()).await });
    }

    /// Writes what is queued, the records of different tasks at once, until nothing is.
    async fn drain(&self, store: &dyn Records) {
        // A writer that ends early (its task dropped, or a store that panicked) lets the
        // next record start another, rather than leave every later one queued for good.
        struct Stopped<'a>(&'a Outbox);
        impl Drop for Stopped<'_> {
            fn drop(&mut self) {
                let mut state = self.0.state();
                state.draining = false;
                state.writing.clear();
                drop(state);
                self.0.wrote.notify_waiters();
            }
        }
        let stopped = Stopped(self);
        loop {
            let batch = {
                let mut state = self.state();
                if state.records.is_empty() {
                    // Ended with nothing queued, under the lock a new record takes: the
                    // next one starts a writer.
                    state.draining = false;
                    std::mem::forget(stopped);
                    return;
                }
                let batch = std::mem::take(&mut state.records);
                state.writing = batch.keys().cloned().collect();
                batch
            };
            let written = batch.iter().map(|(key, (record, ttl))| async move {
                if let Err(e) = store.put(key, record, *ttl).await {
                    tracing::warn!("{e}; other instances cannot see this task now");
                }
            });
            futures_util::future::join_all(written).await;
            self.state().writing.clear();
            self.wrote.notify_waiters();
        }
    }

    /// Waits until task `id`'s records queued so far are written (or their writes
    /// failed, which the writer logs): none of them is queued or being written.
    pub(super) async fn written(&self, id: &str) {
        let key = format!("{RECORD}{id}");
        loop {
            let wrote = self.wrote.notified();
            let mut wrote = std::pin::pin!(wrote);
            // Listening before looking: a batch that ends in between still wakes it.
            wrote.as_mut().enable();
            {
                let state = self.state();
                if !state.records.contains_key(&key) && !state.writing.contains(&key) {
                    return;
                }
            }
            wrote.await;
        }
    }
}

impl Tasks {
    /// Waits (at most `within`) until task `id`'s record is in the shared store, so that
    /// the client given its handle finds it at any instance; at once without a shared
    /// store. Past `within` (a store that hangs) it goes on, and says so.
    pub async fn mirrored(&self, id: &str, within: Duration) {
        if self.shared.get().is_none() {
            return;
        }
        if tokio::time::timeout(within, self.outbox.written(id))
            .await
            .is_err()
        {
            tracing::warn!(
                task = %id,
                "the task's record did not reach the shared store within {} s: other instances may not find it yet",
                within.as_secs()
            );
        }
    }

    /// Mirrors tasks to `store` and takes the updates and cancellations other instances
    /// receive for the tasks running here (a store of this process only: nothing to do).
    pub fn share_through(self: &Arc<Self>, store: Arc<dyn Store>) {
        if !store.shared() || self.shared.set(store.clone()).is_err() {
            return;
        }
        let mut told = store.subscribe(CHANNEL);
        let tasks = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let message = match told.recv().await {
                    Ok(message) => message,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!("{n} task updates from other instances were missed");
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(tasks) = tasks.upgrade() else { return };
                let Ok(m) = serde_json::from_str::<Value>(&message) else {
                    continue;
                };
                let (Some(op), Some(id), Some(owner)) =
                    (m["op"].as_str(), m["id"].as_str(), m["owner"].as_str())
                else {
                    continue;
                };
                // Only the instance that runs the call has it; the others ignore it.
                let _ = match op {
                    "cancel" => tasks.cancel(owner, id),
                    "update" => match serde_json::from_value(m["responses"].clone()) {
                        Ok(responses) => tasks.update(owner, id, responses),
                        Err(_) => continue,
                    },
                    _ => continue,
                };
            }
        });
    }

    /// `owner`'s task `id` as another instance mirrored it.
    async fn elsewhere(&self, owner: &str, id: &str) -> Option<DetailedTask> {
        let store = self.shared.get()?;
        let text = store.get(&format!("{RECORD}{id}")).await.ok()??;
        let record: Value = serde_json::from_str(&text).ok()?;
        if record["owner"] != owner {
            return None;
        }
        serde_json::from_value(record["task"].clone()).ok()
    }

    /// `tasks/get` at any instance.
    pub async fn get_anywhere(&self, owner: &str, id: &str) -> Result<DetailedTask, McpError> {
        match self.get(owner, id) {
            Ok(task) => Ok(task),
            Err(unknown) => self.elsewhere(owner, id).await.ok_or(unknown),
        }
    }

    /// Sends `op` for a task another instance runs, if `owner` has it there.
    async fn tell(&self, owner: &str, id: &str, op: Value) -> bool {
        let (Some(store), Some(_)) = (self.shared.get(), self.elsewhere(owner, id).await) else {
            return false;
        };
        let mut message = op;
        message["id"] = json!(id);
        message["owner"] = json!(owner);
        store.publish(CHANNEL, &message.to_string()).await.is_ok()
    }

    /// `tasks/update` at any instance.
    pub async fn update_anywhere(
        &self,
        owner: &str,
        id: &str,
        responses: InputResponses,
    ) -> Result<(), McpError> {
        match self.update(owner, id, responses.clone()) {
            Ok(()) => Ok(()),
            Err(unknown) => {
                let op = json!({"op": "update", "responses": responses});
                if self.tell(owner, id, op).await {
                    Ok(())
                } else {
                    Err(unknown)
                }
            }
        }
    }

    /// `tasks/cancel` at any instance.
    pub async fn cancel_anywhere(&self, owner: &str, id: &str) -> Result<(), McpError> {
        match self.cancel(owner, id) {
            Ok(()) => Ok(()),
            Err(unknown) => {
                if self.tell(owner, id, json!({"op": "cancel"})).await {
                    Ok(())
                } else {
                    Err(unknown)
                }
            }
        }
    }

    /// The task once it has ended, waiting at most `patience`, at any instance.
    pub async fn ended_anywhere(
        &self,
        owner: &str,
        id: &str,
        patience: Duration,
    ) -> Result<DetailedTask, McpError> {
        if self.get(owner, id).is_ok() || self.shared.get().is_none() {
            return self.ended(owner, id, patience).await;
        }
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let task = self.get_anywhere(owner, id).await?;
            if task.task.status.is_terminal() || tokio::time::Instant::now() >= deadline {
                return Ok(task);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `owner`'s tasks on every instance, the oldest first.
    pub async fn list_anywhere(&self, owner: &str) -> Vec<Task> {
        let mut tasks = self.list(owner);
        if let Some(store) = self.shared.get()
            && let Ok(records) = store.scan(RECORD).await
        {
            for (_, text) in records {
                let Ok(record) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if record["owner"] != owner {
                    continue;
                }
                if let Ok(task) = serde_json::from_value::<DetailedTask>(record["task"].clone())
                    && !tasks.iter().any(|t| t.task_id == task.task.task_id)
                {
                    tasks.push(task.task);
                }
            }
            tasks.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        }
        tasks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatcher_core::store::{StoreError, StoreFuture};
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Records whose first write is slow: a later one written beside it would land first.
    #[derive(Default)]
    struct SlowFirst {
        calls: std::sync::atomic::AtomicUsize,
        written: Mutex<HashMap<String, String>>,
        started: tokio::sync::Notify,
    }

    impl Records for SlowFirst {
        fn put<'a>(&'a self, key: &'a str, value: &'a str, _: Duration) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let first = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
                self.started.notify_one();
                if first {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                self.written
                    .lock()
                    .unwrap()
                    .insert(key.into(), value.into());
                Ok(())
            })
        }
        fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<String>> {
            let value = self.written.lock().unwrap().get(key).cloned();
            Box::pin(async move { Ok(value) })
        }
        fn delete<'a>(&'a self, _: &'a str) -> StoreFuture<'a, bool> {
            Box::pin(async {
                Err::<bool, _>(StoreError {
                    store: "test".into(),
                    detail: "unused".into(),
                })
            })
        }
        fn scan<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Vec<(String, String)>> {
            Box::pin(async { Ok(Vec::new()) })
        }
    }

    /// An outbox writing to a [`SlowFirst`] store, and its writer's tracker.
    #[derive(Default)]
    struct Mirror {
        outbox: Arc<Outbox>,
        writes: tokio_util::task::TaskTracker,
        store: Arc<SlowFirst>,
    }

    impl Mirror {
        /// Queues task `id`'s `record`.
        fn put(&self, id: &str, record: Value) {
            let store = self.store.clone();
            self.outbox
                .put(store, &self.writes, id, &record, Duration::from_secs(60));
        }

        /// Waits until everything queued is written.
        async fn settled(&self) {
            self.writes.close();
            self.writes.wait().await;
        }

        /// Task `id`'s record as the store has it.
        async fn stored(&self, id: &str) -> Option<String> {
            self.store.get(&format!("{RECORD}{id}")).await.unwrap()
        }
    }

    #[tokio::test]
    async fn a_tasks_records_reach_the_store_in_the_order_they_were_made() {
        let mirror = Mirror::default();
        mirror.put("t", json!("working"));
        // The first write is under way (and slow) when the task changes again.
        mirror.store.started.notified().await;
        mirror.put("t", json!("input_required"));
        mirror.settled().await;
        assert_eq!(
            mirror.stored("t").await.as_deref(),
            Some("\"input_required\"")
        );
    }

    #[tokio::test]
    async fn records_queued_while_one_is_written_are_written_once_the_latest_of_each() {
        let mirror = Mirror::default();
        mirror.put("a", json!(1));
        mirror.store.started.notified().await;
        for n in 2..=4 {
            mirror.put("a", json!(n));
            mirror.put("b", json!(n * 10));
        }
        mirror.settled().await;
        assert_eq!(mirror.stored("a").await.as_deref(), Some("4"));
        assert_eq!(mirror.stored("b").await.as_deref(), Some("40"));
        let state = mirror.outbox.state();
        assert!(state.records.is_empty() && !state.draining);
    }

    #[tokio::test]
    async fn a_new_tasks_handle_waits_for_its_record_and_for_no_other() {
        let mirror = Mirror::default();
        mirror.put("t", json!("working"));
        // Its (slow) write is under way: another task's wait is not held by it.
        mirror.store.started.notified().await;
        assert!(futures_util::FutureExt::now_or_never(mirror.outbox.written("other")).is_some());
        mirror.outbox.written("t").await;
        assert_eq!(mirror.stored("t").await.as_deref(), Some("\"working\""));
    }

    #[tokio::test]
    async fn a_writer_that_stops_early_lets_the_next_record_start_another() {
        let mirror = Mirror::default();
        {
            let mut state = mirror.outbox.state();
            state.draining = true;
            state
                .records
                .insert(format!("{RECORD}a"), ("1".into(), Duration::from_secs(60)));
        }
        let writer = tokio::spawn({
            let (outbox, store) = (mirror.outbox.clone(), mirror.store.clone());
            async move { outbox.drain(store.as_ref()).await }
        });
        mirror.store.started.notified().await;
        writer.abort();
        let _ = writer.await;
        assert!(!mirror.outbox.state().draining);
        mirror.put("a", json!(2));
        mirror.settled().await;
        assert_eq!(mirror.stored("a").await.as_deref(), Some("2"));
    }
}
