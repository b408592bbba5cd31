//! Calls that outlive their request: MCP tasks (the `io.modelcontextprotocol/tasks`
//! extension, SEP-2663).
//!
//! toolhost declares the extension, and a client that declares it too (for its session, or
//! for one request in `_meta`) may get a task instead of a result: a `tools/call` still
//! running after `[mcp.tasks] after_ms` (default 1000), or one whose mounted MCP server
//! made a task of it, answers with a `CreateTaskResult` and goes on in the background. The
//! client then polls `tasks/get` (the result or the error inlined once it ends), answers
//! what the call asks through `tasks/update`, and stops it with `tasks/cancel`. A quick call
//! still answers at once, as it would without the extension.
//!
//! What a task's call asks while it runs waits in the task's `inputRequests` (status
//! `input_required`) until `tasks/update` answers it: toolhost's own confirmation (a form
//! under a key starting `confirm`), and a mounted server's elicitation, sampling and roots
//! requests, under the server's own keys when it asked in a task of its own.
//!
//! A task belongs to the principal that made it: another principal's `tasks/get`,
//! `tasks/update` or `tasks/cancel` is told the task does not exist (`-32602`), as for an
//! id that never did. It stays readable for `ttl_ms` after it ends; a call still running
//! `ttl_ms` after it began is cancelled and its task fails. Each principal keeps at most
//! `max_per_client` tasks: past that the oldest ended one is forgotten, and when all are
//! running a call answers in its request, as without the extension.
//!
//! A task's call runs on the instance that made it. Over a shared store ([`Tasks::share_through`],
//! `shared`) every change of a task is mirrored there, so that `tasks/get`,
//! `tasks/list` and `tasks/result` at any instance read it, and `tasks/update` and
//! `tasks/cancel` at any instance reach it; over a store of this process only, another
//! instance is told the task does not exist.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, DetailedTask, InputRequest, InputResponses, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde_json::Value;
use tokio::sync::oneshot;

mod shared;

/// How tasks are made and kept: the `[mcp.tasks]` table (seconds, a count).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskSettings {
    /// Whether toolhost declares the tasks extension at all (default `true`).
    pub enabled: bool,
    /// A call of a client that takes tasks, still running after this, becomes a task
    /// (default 1 s).
    #[serde(deserialize_with = "dispatcher_core::Seconds::duration")]
    pub after: Duration,
    /// How long a task stays readable after it ends, and the longest its call may run
    /// (default 3600 s).
    #[serde(deserialize_with = "dispatcher_core::Seconds::duration")]
    pub ttl: Duration,
    /// The polling interval suggested to clients (default 0.5 s).
    #[serde(deserialize_with = "dispatcher_core::Seconds::duration")]
    pub poll_interval: Duration,
    /// The most tasks one principal keeps (default 100).
    #[serde(deserialize_with = "dispatcher_core::Limit::count")]
    pub max_per_client: usize,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            enabled: true,
            after: Duration::from_millis(1000),
            ttl: Duration::from_secs(3600),
            poll_interval: Duration::from_millis(500),
            max_per_client: 100,
        }
    }
}

/// How a task's call ended.
#[derive(Debug)]
pub enum Outcome {
    /// It ran and has a result (which may be a tool error, `isError: true`).
    Completed(CallToolResult),
    /// A protocol-level failure, with its JSON-RPC error.
    Failed(McpError),
    /// It was cancelled.
    Cancelled,
}

/// Stops a task's call (the dispatcher's cancellation of it).
pub type Canceller = Box<dyn FnOnce() + Send>;

/// A question a running task waits on.
struct Pending {
    request: InputRequest,
    reply: oneshot::Sender<Value>,
}

struct Entry {
    owner: String,
    /// The dispatcher session the call runs in.
    session: String,
    task: Task,
    created: Instant,
    /// How it ended, and when.
    ended: Option<(TaskPayload, Instant)>,
    pending: BTreeMap<String, Pending>,
    /// Every key asked under, so that no key is used twice in one task.
    used: HashSet<String>,
    cancel: Option<Canceller>,
    /// How long it is kept after it ends, and the longest its call may run.
    ttl: Duration,
}

impl Entry {
    fn status(&self) -> TaskStatus {
        match &self.ended {
            Some((payload, _)) => payload.status(),
            None if self.pending.is_empty() => TaskStatus::Working,
            None => TaskStatus::InputRequired,
        }
    }

    fn detailed(&self) -> DetailedTask {
        let payload = match &self.ended {
            Some((payload, _)) => payload.clone(),
            None if self.pending.is_empty() => TaskPayload::Working,
            None => TaskPayload::InputRequired {
                input_requests: self
                    .pending
                    .iter()
                    .map(|(k, p)| (k.clone(), p.request.clone()))
                    .collect(),
            },
        };
        DetailedTask::new(self.task.clone(), payload)
    }

    fn touch(&mut self) {
        self.task.last_updated_at = rmcp::task_manager::current_timestamp();
        self.task.status = self.status();
    }

    /// Ends it (once): the questions it waits on are withdrawn.
    fn end(&mut self, payload: TaskPayload) {
        if self.ended.is_none() {
            self.ended = Some((payload, Instant::now()));
            self.pending.clear();
            self.cancel = None;
            self.touch();
        }
    }

    /// Cancels its call (once) and withdraws its questions; the call decides how it ends.
    fn cancel(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel();
        }
        if self.ended.is_none() {
            self.pending.clear();
            self.touch();
        }
    }
}

/// The tasks of one server (every connection and request).
pub struct Tasks {
    table: Mutex<HashMap<String, Entry>>,
    settings: TaskSettings,
    /// The store shared with other instances, where tasks are mirrored.
    pub(super) shared: std::sync::OnceLock<Arc<dyn dispatcher_core::store::Store>>,
    /// Counts the tasks that ended, for those waiting on one.
    ended: tokio::sync::watch::Sender<u64>,
    /// The records of tasks to mirror to the shared store, written in order.
    outbox: Arc<shared::Outbox>,
    /// The mirror's writer, while it writes.
    writes: tokio_util::task::TaskTracker,
}

/// The running side of one task: its call asks through it and ends it.
#[derive(Clone)]
pub struct TaskHandle {
    tasks: Arc<Tasks>,
    id: String,
}

/// `-32602` for a task this principal cannot see.
fn unknown(id: &str, ttl: Duration) -> McpError {
    McpError::invalid_params(
        format!(
            "Unknown task: '{id}' (no task of yours has that id here: it never existed on this \
             instance, or it ended over {} s ago and was forgotten)",
            ttl.as_secs()
        ),
        Some(serde_json::json!({"taskId": id})),
    )
}

/// A JSON-RPC error as the `error` of a failed task.
fn error_object(error: &McpError) -> JsonObject {
    match serde_json::to_value(error) {
        Ok(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

impl Tasks {
    /// An empty table.
    pub fn new(settings: TaskSettings) -> Arc<Self> {
        Arc::new(Tasks {
            table: Mutex::new(HashMap::new()),
            settings,
            shared: std::sync::OnceLock::new(),
            ended: tokio::sync::watch::channel(0).0,
            outbox: Arc::default(),
            writes: tokio_util::task::TaskTracker::new(),
        })
    }

    /// How tasks are made and kept.
    pub fn settings(&self) -> &TaskSettings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        self.sweep(&mut table);
        table
    }

    /// Forgets tasks that ended over a TTL ago, and stops calls that ran past theirs.
    fn sweep(&self, table: &mut HashMap<String, Entry>) {
        let mut expired = false;
        table.retain(|_, entry| match &entry.ended {
            Some((_, at)) => at.elapsed() < entry.ttl,
            None => {
                let ttl = entry.ttl;
                if entry.created.elapsed() >= ttl {
                    entry.cancel();
                    let error = McpError::internal_error(
                        format!(
                            "the call ran past its task's ttlMs ({} ms) and was stopped",
                            ttl.as_millis()
                        ),
                        None,
                    );
                    entry.end(TaskPayload::Failed {
                        error: error_object(&error),
                    });
                    self.mirror(&entry.task.task_id, entry);
                    expired = true;
                }
                true
            }
        });
        if expired {
            self.ended.send_modify(|n| *n += 1);
        }
    }

    /// Makes a task for `owner`'s call running in `session`, stopped by `cancel`, kept
    /// `ttl` after it ends (at most, and by default, `[mcp.tasks] ttl`). `None` when
    /// `owner` already has `max_per_client` tasks running.
    pub(crate) fn create(
        self: &Arc<Self>,
        owner: &str,
        session: &str,
        cancel: Canceller,
        ttl: Option<Duration>,
    ) -> Option<(Task, TaskHandle)> {
        let mut table = self.lock();
        let mine: Vec<(&String, &Entry)> = table.iter().filter(|(_, e)| e.owner == owner).collect();
        if mine.len() >= self.settings.max_per_client {
            let oldest_ended = mine
                .iter()
                .filter_map(|(id, e)| e.ended.as_ref().map(|(_, at)| (*at, (*id).clone())))
                .min();
            match oldest_ended {
                Some((_, id)) => {
                    table.remove(&id);
                }
                None => {
                    tracing::warn!(
                        %owner,
                        limit = self.settings.max_per_client,
                        "this client's tasks are all running; the call answers in its request ([mcp.tasks] max_per_client)"
                    );
                    return None;
                }
            }
        }
        let id = dispatcher_core::store::random_id();
        let now = rmcp::task_manager::current_timestamp();
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let ttl = ttl.map_or(self.settings.ttl, |t| t.min(self.settings.ttl));
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(millis(ttl))
            .with_poll_interval_ms(millis(self.settings.poll_interval).max(1));
        let entry = table.entry(id.clone()).insert_entry(Entry {
            owner: owner.to_string(),
            session: session.to_string(),
            task: task.clone(),
            created: Instant::now(),
            ended: None,
            pending: BTreeMap::new(),
            used: HashSet::new(),
            cancel: Some(cancel),
            ttl,
        });
        self.mirror(&id, entry.get());
        Some((
            task,
            TaskHandle {
                tasks: self.clone(),
                id,
            },
        ))
    }

    /// Mirrors `entry` (task `id`) to the shared store, if there is one, in the background.
    fn mirror(&self, id: &str, entry: &Entry) {
        let Some(store) = self.shared.get() else {
            return;
        };
        let record = serde_json::json!({"owner": entry.owner, "task": entry.detailed()});
        self.outbox
            .put(store.clone(), &self.writes, id, &record, entry.ttl);
    }

    /// Forgets a task made by mistake (its creation was never told to anyone).
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// `tasks/get`: the task as it is now.
    pub fn get(&self, owner: &str, id: &str) -> Result<DetailedTask, McpError> {
        let table = self.lock();
        match table.get(id) {
            Some(entry) if entry.owner == owner => Ok(entry.detailed()),
            _ => Err(unknown(id, self.settings.ttl)),
        }
    }

    /// `tasks/update`: answers to the questions the task waits on. A key it does not wait
    /// on (answered already, or never asked) is ignored, as the extension says.
    pub fn update(&self, owner: &str, id: &str, responses: InputResponses) -> Result<(), McpError> {
        let mut table = self.lock();
        let entry = match table.get_mut(id) {
            Some(entry) if entry.owner == owner => entry,
            _ => return Err(unknown(id, self.settings.ttl)),
        };
        for (key, answer) in responses {
            match entry.pending.remove(&key) {
                Some(pending) => {
                    let _ = pending.reply.send(answer);
                }
                None => {
                    tracing::debug!(task = %id, %key, "an answer to nothing the task waits on, ignored")
                }
            }
        }
        entry.touch();
        self.mirror(id, entry);
        Ok(())
    }

    /// `tasks/cancel`: stops the call (its task then ends `cancelled`, or as the call
    /// ends if it ends first); a task that already ended is left as it is.
    pub fn cancel(&self, owner: &str, id: &str) -> Result<(), McpError> {
        let mut table = self.lock();
        match table.get_mut(id) {
            Some(entry) if entry.owner == owner => {
                entry.cancel();
                self.mirror(id, entry);
                Ok(())
            }
            _ => Err(unknown(id, self.settings.ttl)),
        }
    }

    /// Whether `owner` may have one more task (`Tasks::create` would make it).
    pub fn room_for(&self, owner: &str) -> bool {
        let table = self.lock();
        let mine = table.values().filter(|e| e.owner == owner);
        let (all, running) = mine.fold((0, 0), |(all, running), e| {
            (all + 1, running + usize::from(e.ended.is_none()))
        });
        all < self.settings.max_per_client || running < all
    }

    /// `owner`'s tasks, the oldest first.
    pub fn list(&self, owner: &str) -> Vec<Task> {
        let table = self.lock();
        let mut mine: Vec<&Entry> = table.values().filter(|e| e.owner == owner).collect();
        mine.sort_by_key(|e| e.created);
        mine.into_iter()
            .map(|e| {
                let mut task = e.task.clone();
                task.status = e.status();
                task
            })
            .collect()
    }

    /// The task once it has ended, waiting at most `patience` (then as it is).
    pub async fn ended(
        &self,
        owner: &str,
        id: &str,
        patience: Duration,
    ) -> Result<DetailedTask, McpError> {
        let mut ends = self.ended.subscribe();
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let task = self.get(owner, id)?;
            if task.status().is_terminal() {
                return Ok(task);
            }
            match tokio::time::timeout_at(deadline, ends.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.get(owner, id),
            }
        }
    }

    /// For a stopping instance: waits until no task runs here (each ended: finished, or
    /// cancelled by whoever could), at most `within`. Whether none runs.
    pub async fn settle(&self, within: Duration) -> bool {
        let mut ends = self.ended.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.lock().values().all(|e| e.ended.is_some()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, ends.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    /// For a stopping instance: waits (at most `within`) until every task's last change
    /// reached the shared store, where the other instances read it.
    pub async fn flush(&self, within: Duration) {
        self.writes.close();
        let _ = tokio::time::timeout(within, self.writes.wait()).await;
        self.writes.reopen();
    }

    /// How many tasks run calls in the dispatcher session `session`.
    pub fn running_in(&self, session: &str) -> usize {
        self.lock()
            .values()
            .filter(|e| e.session == session && e.ended.is_none())
            .count()
    }
}

impl TaskHandle {
    /// The task's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Puts `request` in the task's `inputRequests` under `key` (made unique in the task:
    /// `key-2`, `key-3`… when taken) and waits for its answer; `None` when the task ended
    /// or was cancelled first.
    pub async fn ask(&self, key: &str, request: InputRequest) -> Option<Value> {
        let answer = {
            let mut table = self.tasks.lock();
            let entry = table.get_mut(&self.id)?;
            if entry.ended.is_some() || entry.cancel.is_none() {
                return None;
            }
            let mut unique = key.to_string();
            let mut n = 1;
            while entry.used.contains(&unique) {
                n += 1;
                unique = format!("{key}-{n}");
            }
            entry.used.insert(unique.clone());
            let (reply, answer) = oneshot::channel();
            entry.pending.insert(unique, Pending { request, reply });
            entry.touch();
            self.tasks.mirror(&self.id, entry);
            answer
        };
        answer.await.ok()
    }

    /// Ends the task with its call's outcome.
    pub fn finish(&self, outcome: Outcome) {
        let payload = match outcome {
            Outcome::Completed(result) => {
                let result = match serde_json::to_value(&result) {
                    Ok(Value::Object(map)) => map,
                    _ => JsonObject::new(),
                };
                TaskPayload::Completed { result }
            }
            Outcome::Failed(error) => TaskPayload::Failed {
                error: error_object(&error),
            },
            Outcome::Cancelled => TaskPayload::Cancelled,
        };
        if let Some(entry) = self.tasks.lock().get_mut(&self.id) {
            entry.end(payload);
            self.tasks.mirror(&self.id, entry);
        }
        self.tasks.ended.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ContentBlock, ElicitRequest, ElicitRequestParams};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn tasks() -> Arc<Tasks> {
        Tasks::new(TaskSettings::default())
    }

    fn no_cancel() -> Canceller {
        Box::new(|| {})
    }

    fn form() -> InputRequest {
        InputRequest::Elicitation(ElicitRequest::new(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "ok?".into(),
                requested_schema: serde_json::from_value(serde_json::json!({
                    "type": "object", "properties": {"ok": {"type": "boolean"}}
                }))
                .unwrap(),
            },
        ))
    }

    fn status(tasks: &Tasks, owner: &str, id: &str) -> TaskStatus {
        tasks.get(owner, id).unwrap().status()
    }

    #[test]
    fn a_new_task_is_working_and_carries_its_ttl_and_poll_interval() {
        let tasks = tasks();
        let (task, handle) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        assert_eq!(task.status, TaskStatus::Working);
        assert_eq!(task.ttl_ms, Some(3_600_000));
        assert_eq!(task.poll_interval_ms, Some(500));
        assert_eq!(status(&tasks, "alice", handle.id()), TaskStatus::Working);
    }

    #[test]
    fn another_principal_cannot_see_update_or_cancel_a_task() {
        let tasks = tasks();
        let (_, handle) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        for refused in [
            tasks.get("bob", handle.id()).map(drop),
            tasks.update("bob", handle.id(), InputResponses::new()),
            tasks.cancel("bob", handle.id()),
        ] {
            let e = refused.unwrap_err();
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(e.message.contains("Unknown task"), "{}", e.message);
        }
    }

    #[test]
    fn a_completed_task_inlines_its_result() {
        let tasks = tasks();
        let (_, handle) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        handle.finish(Outcome::Completed(CallToolResult::success(vec![
            ContentBlock::text("done"),
        ])));
        let got = serde_json::to_value(tasks.get("alice", handle.id()).unwrap()).unwrap();
        assert_eq!(got["status"], "completed");
        assert_eq!(got["result"]["content"][0]["text"], "done");
        assert!(got.get("error").is_none());
    }

    #[test]
    fn a_failed_task_inlines_its_error_and_no_result() {
        let tasks = tasks();
        let (_, handle) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        handle.finish(Outcome::Failed(McpError::internal_error("boom", None)));
        let got = serde_json::to_value(tasks.get("alice", handle.id()).unwrap()).unwrap();
        assert_eq!(got["status"], "failed");
        assert_eq!(got["error"]["code"], -32603);
        assert_eq!(got["error"]["message"], "boom");
        assert!(got.get("result").is_none());
    }

    #[tokio::test]
    async fn a_question_waits_in_input_requests_until_answered() {
        let tasks = tasks();
        let (_, handle) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        let asking = tokio::spawn({
            let handle = handle.clone();
            async move { handle.ask("confirm", form()).await }
        });
        while status(&tasks, "alice", handle.id()) != TaskStatus::InputRequired {
            tokio::task::yield_now().await;
        }
        let got = serde_json::to_value(tasks.get("alice", handle.id()).unwrap()).unwrap();
        assert_eq!(
            got["inputRequests"]["confirm"]["method"],
            "elicitation/create"
        );
        let mut answers = InputResponses::new();
        answers.insert("confirm".into(), serde_json::json!({"action": "accept"}));
        answers.insert("unknown".into(), serde_json::json!(1));
        tasks.update("alice", handle.id(), answers).unwrap();
        assert_eq!(
            asking.await.unwrap(),
            Some(serde_json::json!({"action": "accept"}))
        );
        assert_eq!(status(&tasks, "alice", handle.id()), TaskStatus::Working);
    }

    #[tokio::test]
    async fn keys_are_unique_within_a_task() {
        let tasks = tasks();
        let (_, handle) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        for _ in 0..2 {
            let h = handle.clone();
            tokio::spawn(async move { h.ask("confirm", form()).await });
        }
        loop {
            let got = serde_json::to_value(tasks.get("alice", handle.id()).unwrap()).unwrap();
            if let Some(map) = got["inputRequests"].as_object()
                && map.len() == 2
            {
                let keys: Vec<&String> = map.keys().collect();
                assert_eq!(keys, ["confirm", "confirm-2"]);
                break;
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn cancelling_stops_the_call_once_and_withdraws_its_questions() {
        let tasks = tasks();
        let stopped = Arc::new(AtomicUsize::new(0));
        let counter = stopped.clone();
        let (_, handle) = tasks
            .create(
                "alice",
                "s",
                Box::new(move || {
                    counter.fetch_add(1, Ordering::SeqCst);
                }),
                None,
            )
            .unwrap();
        let asking = tokio::spawn({
            let handle = handle.clone();
            async move { handle.ask("confirm", form()).await }
        });
        while status(&tasks, "alice", handle.id()) != TaskStatus::InputRequired {
            tokio::task::yield_now().await;
        }
        tasks.cancel("alice", handle.id()).unwrap();
        tasks.cancel("alice", handle.id()).unwrap();
        assert_eq!(stopped.load(Ordering::SeqCst), 1);
        assert_eq!(asking.await.unwrap(), None);
        assert_eq!(handle.ask("again", form()).await, None);
        handle.finish(Outcome::Cancelled);
        assert_eq!(status(&tasks, "alice", handle.id()), TaskStatus::Cancelled);
        // Idempotent on an ended task.
        tasks.cancel("alice", handle.id()).unwrap();
        assert_eq!(status(&tasks, "alice", handle.id()), TaskStatus::Cancelled);
    }

    #[test]
    fn the_first_outcome_stands() {
        let tasks = tasks();
        let (_, handle) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        handle.finish(Outcome::Cancelled);
        handle.finish(Outcome::Completed(CallToolResult::success(vec![])));
        assert_eq!(status(&tasks, "alice", handle.id()), TaskStatus::Cancelled);
    }

    #[test]
    fn a_call_past_its_ttl_is_stopped_and_its_task_fails() {
        let tasks = Tasks::new(TaskSettings {
            ttl: Duration::from_millis(30),
            ..TaskSettings::default()
        });
        let stopped = Arc::new(AtomicUsize::new(0));
        let counter = stopped.clone();
        let (_, handle) = tasks
            .create(
                "alice",
                "s",
                Box::new(move || {
                    counter.fetch_add(1, Ordering::SeqCst);
                }),
                None,
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(40));
        let got = serde_json::to_value(tasks.get("alice", handle.id()).unwrap()).unwrap();
        assert_eq!(got["status"], "failed");
        assert!(
            got["error"]["message"]
                .as_str()
                .unwrap()
                .contains("ran past its task's ttlMs"),
            "{got}"
        );
        assert_eq!(stopped.load(Ordering::SeqCst), 1);
        // Ended, it is forgotten a TTL later.
        std::thread::sleep(Duration::from_millis(40));
        assert!(tasks.get("alice", handle.id()).is_err());
    }

    #[test]
    fn past_the_limit_the_oldest_ended_task_is_forgotten_and_then_none_is_made() {
        let tasks = Tasks::new(TaskSettings {
            max_per_client: 2,
            ..TaskSettings::default()
        });
        let (_, first) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        let (_, _second) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        first.finish(Outcome::Cancelled);
        let (_, _third) = tasks.create("alice", "s", no_cancel(), None).unwrap();
        assert!(tasks.get("alice", first.id()).is_err());
        assert!(tasks.create("alice", "s", no_cancel(), None).is_none());
        // Another principal has a limit of its own.
        assert!(tasks.create("bob", "s", no_cancel(), None).is_some());
        assert_eq!(tasks.running_in("s"), 3);
    }
}
