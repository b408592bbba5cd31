//! Sessions: a workspace, a tool visibility filter, a concurrency cap, the calls in flight
//! and the grants a user made ("always allow this tool").

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, Semaphore};
use tool_api::Tool;

use crate::error::CancelReason;
use crate::events::EventChannel;
use crate::registry::Registered;
use crate::toolset::Toolset;
use crate::workspace::Workspace;

/// Which registered tools a session sees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Visibility {
    /// Every tool (subject to capability gating).
    #[default]
    All,
    /// Only these tools.
    Only(HashSet<String>),
    /// Every tool except these.
    Except(HashSet<String>),
}

impl Visibility {
    /// Whether `tool` is visible.
    pub fn allows(&self, tool: &str) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Only(set) => set.contains(tool),
            Visibility::Except(set) => !set.contains(tool),
        }
    }
}

/// How to open a session.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Session id.
    pub id: String,
    /// The workspace root (must exist).
    pub workspace: PathBuf,
    /// Which tools it sees.
    pub visibility: Visibility,
    /// The toolsets it enables, by id (empty by default: no toolsets).
    pub toolsets: Vec<String>,
    /// Where the session keeps its files (spooled large results). `None` (the default):
    /// `.toolhost/sessions/<id>/` inside the workspace, so that `read_file` can page
    /// through a spooled result; toolhost puts a `.gitignore` in `.toolhost/`.
    pub data_dir: Option<PathBuf>,
}

impl SessionSpec {
    /// A session seeing every tool.
    pub fn new(id: impl Into<String>, workspace: impl Into<PathBuf>) -> Self {
        SessionSpec {
            id: id.into(),
            workspace: workspace.into(),
            visibility: Visibility::All,
            toolsets: Vec::new(),
            data_dir: None,
        }
    }

    /// Keeps the session's files (spooled results) in `dir` instead of the workspace.
    /// A model can only read them back if `dir` is inside the workspace.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Enables toolsets by id.
    pub fn toolsets<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.toolsets = ids.into_iter().map(Into::into).collect();
        self
    }

    /// Restricts the tools the session sees.
    pub fn visibility(mut self, visibility: Visibility) -> Self {
        self.visibility = visibility;
        self
    }
}

/// A call in flight, as cancellation sees it: one allocation holding its cancellation
/// signal, its completion signal and (once made) its tool instance.
pub(crate) struct InFlight {
    pub(crate) tool_use_id: Arc<str>,
    cancelled: AtomicBool,
    cancel_notify: Notify,
    finished: AtomicBool,
    finished_notify: Notify,
    tool: Mutex<Option<Arc<dyn Tool>>>,
    /// The first interrupt's reason, and what caused it (for `sibling_error`: which call
    /// failed).
    why: std::sync::OnceLock<(CancelReason, Option<String>)>,
    /// A running call of an `interrupt = block` tool: interrupts leave it alone.
    shielded: AtomicBool,
}

/// Waits until `flag` is set; `notify` is signalled right after each set.
async fn wait_for(flag: &AtomicBool, notify: &Notify) {
    let notified = notify.notified();
    tokio::pin!(notified);
    loop {
        // Register before checking, so a set between the check and the wait is not lost.
        notified.as_mut().enable();
        if flag.load(Ordering::Acquire) {
            return;
        }
        notified.as_mut().await;
        notified.set(notify.notified());
    }
}

impl InFlight {
    pub(crate) fn new(tool_use_id: Arc<str>) -> Self {
        InFlight {
            tool_use_id,
            cancelled: AtomicBool::new(false),
            cancel_notify: Notify::new(),
            finished: AtomicBool::new(false),
            finished_notify: Notify::new(),
            tool: Mutex::new(None),
            why: std::sync::OnceLock::new(),
            shielded: AtomicBool::new(false),
        }
    }

    /// Why it was cancelled, if it was by an interrupt (not by its timeout).
    pub(crate) fn reason(&self) -> Option<CancelReason> {
        self.why.get().map(|(reason, _)| *reason)
    }

    /// What caused the interrupt, if it was recorded.
    pub(crate) fn cause(&self) -> Option<&str> {
        self.why.get().and_then(|(_, cause)| cause.as_deref())
    }

    /// Marks a started call of an `interrupt = block` tool: from now on interrupts leave it
    /// running. Returns `false` if an interrupt already came (then it must not start).
    pub(crate) fn shield(&self) -> bool {
        self.shielded.store(true, Ordering::SeqCst);
        !self.cancelled.load(Ordering::SeqCst)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Resolves once cancellation was requested.
    pub(crate) async fn cancelled(&self) {
        wait_for(&self.cancelled, &self.cancel_notify).await
    }

    /// Resolves once the call has produced its result.
    pub(crate) async fn finished(&self) {
        wait_for(&self.finished, &self.finished_notify).await
    }

    /// An interrupt: sets the signal and calls the tool's `cancel()` (if it was made yet),
    /// unless the call is a running `interrupt = block` one. The first reason (and its
    /// cause) sticks.
    pub(crate) fn interrupt(&self, reason: CancelReason, cause: Option<&str>) {
        if self.shielded.load(Ordering::SeqCst) {
            tracing::debug!(
                tool_use_id = %self.tool_use_id,
                reason = %reason,
                "interrupt left a running 'block' tool to complete"
            );
            return;
        }
        let _ = self.why.set((reason, cause.map(str::to_string)));
        self.cancelled.store(true, Ordering::SeqCst);
        // A `shield` that raced with this store sees the flag and does not start.
        self.stop_tool();
    }

    /// Stops the call whatever its interrupt behaviour (its time limit ran out).
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.stop_tool();
    }

    fn stop_tool(&self) {
        self.cancel_notify.notify_waiters();
        let tool = lock(&self.tool).clone();
        if let Some(tool) = tool {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.cancel()));
        }
    }

    /// Records the tool instance, so that `cancel` reaches it.
    pub(crate) fn set_tool(&self, tool: Arc<dyn Tool>) {
        *lock(&self.tool) = Some(tool);
    }

    fn finish(&self) {
        self.finished.store(true, Ordering::Release);
        self.finished_notify.notify_waiters();
    }
}

pub(crate) struct SessionState {
    pub(crate) id: Arc<str>,
    pub(crate) workspace: Arc<Workspace>,
    pub(crate) visibility: Visibility,
    pub(crate) toolsets: Vec<Arc<str>>,
    pub(crate) semaphore: Arc<Semaphore>,
    /// Per-tool caps on top of the session cap (`tool_concurrency` in the config).
    pub(crate) tool_caps: HashMap<String, Arc<Semaphore>>,
    /// Where spooled results go.
    pub(crate) data_dir: PathBuf,
    pub(crate) events: EventChannel,
    tools: std::sync::RwLock<HashMap<Arc<str>, Arc<Registered>>>,
    instances: Mutex<Vec<Arc<dyn Toolset>>>,
    inflight: Mutex<HashMap<u64, Arc<InFlight>>>,
    grants: Mutex<HashSet<String>>,
    next_call: AtomicU64,
    /// The session's batches that may still have unfinished calls.
    batches: Mutex<Vec<std::sync::Weak<crate::schedule::Shared>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SessionState {
    pub(crate) fn new(
        id: Arc<str>,
        workspace: Arc<Workspace>,
        visibility: Visibility,
        toolsets: Vec<Arc<str>>,
        cap: usize,
        tool_caps: &HashMap<String, usize>,
        data_dir: PathBuf,
    ) -> Self {
        SessionState {
            id,
            workspace,
            visibility,
            toolsets,
            tool_caps: tool_caps
                .iter()
                .map(|(tool, cap)| (tool.clone(), Arc::new(Semaphore::new((*cap).max(1)))))
                .collect(),
            data_dir,
            tools: std::sync::RwLock::new(HashMap::new()),
            instances: Mutex::new(Vec::new()),
            semaphore: Arc::new(Semaphore::new(cap.max(1))),
            events: EventChannel::new(),
            inflight: Mutex::new(HashMap::new()),
            grants: Mutex::new(HashSet::new()),
            next_call: AtomicU64::new(0),
            batches: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn add_batch(&self, batch: &Arc<crate::schedule::Shared>) {
        let mut batches = lock(&self.batches);
        batches.retain(|b| b.strong_count() > 0);
        batches.push(Arc::downgrade(batch));
    }

    /// The session's live batches.
    pub(crate) fn batches(&self) -> Vec<Arc<crate::schedule::Shared>> {
        lock(&self.batches)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect()
    }

    /// Registers a call for cancellation, with the entry its batch made for it, if any.
    pub(crate) fn track(
        self: &Arc<Self>,
        tool_use_id: &Arc<str>,
        preset: Option<&Arc<InFlight>>,
    ) -> CallGuard {
        let key = self.next_call.fetch_add(1, Ordering::Relaxed);
        let entry = preset
            .cloned()
            .unwrap_or_else(|| Arc::new(InFlight::new(tool_use_id.clone())));
        lock(&self.inflight).insert(key, entry.clone());
        CallGuard {
            session: self.clone(),
            key,
            entry,
        }
    }

    pub(crate) fn inflight(&self) -> Vec<Arc<InFlight>> {
        lock(&self.inflight).values().cloned().collect()
    }

    pub(crate) fn session_tool(&self, name: &str) -> Option<Arc<Registered>> {
        let tools = self.tools.read().unwrap_or_else(PoisonError::into_inner);
        if tools.is_empty() {
            return None;
        }
        tools.get(name).cloned()
    }

    pub(crate) fn session_tools(&self) -> Vec<Arc<Registered>> {
        self.tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    pub(crate) fn add_toolset(&self, instance: Arc<dyn Toolset>, tools: Vec<Arc<Registered>>) {
        lock(&self.instances).push(instance);
        let mut map = self.tools.write().unwrap_or_else(PoisonError::into_inner);
        for t in tools {
            map.insert(t.name.clone(), t);
        }
    }

    /// Stops the per-session toolset instances this session started.
    pub(crate) fn stop_toolsets(&self) {
        let instances = std::mem::take(&mut *lock(&self.instances));
        self.tools
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        for instance in instances {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| instance.stop()));
        }
    }

    pub(crate) fn is_granted(&self, tool: &str) -> bool {
        lock(&self.grants).contains(tool)
    }

    pub(crate) fn grant(&self, tool: &str) {
        lock(&self.grants).insert(tool.to_string());
    }

    /// Every session-scoped approval, sorted.
    pub(crate) fn approvals(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.grants).iter().cloned().collect();
        v.sort();
        v
    }

    pub(crate) fn revoke(&self, tool: &str) -> bool {
        lock(&self.grants).remove(tool)
    }
}

/// Registration of one call in its session; removes it when dropped.
pub(crate) struct CallGuard {
    session: Arc<SessionState>,
    key: u64,
    pub(crate) entry: Arc<InFlight>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        lock(&self.session.inflight).remove(&self.key);
        self.entry.finish();
    }
}

/// A handle on an open session, passed to `dispatch`. Cheap to clone.
#[derive(Clone)]
pub struct Session {
    pub(crate) state: Arc<SessionState>,
    pub(crate) turn_id: Arc<str>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.state.id)
            .field("turn_id", &self.turn_id)
            .field("workspace", &self.state.workspace.root())
            .finish()
    }
}

impl Session {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// The current turn id.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The same session in another turn (events and tool contexts carry this turn id).
    pub fn with_turn(&self, turn_id: impl Into<Arc<str>>) -> Session {
        Session {
            state: self.state.clone(),
            turn_id: turn_id.into(),
        }
    }

    /// The session's workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.state.workspace
    }

    /// How many calls are in flight.
    pub fn calls_in_flight(&self) -> usize {
        lock(&self.state.inflight).len()
    }

    /// The tools the user answered "always allow" for in this session, sorted. Such a tool
    /// runs without a prompt until the session closes or the approval is revoked; a policy
    /// `deny` still wins over it.
    pub fn approvals(&self) -> Vec<String> {
        self.state.approvals()
    }

    /// Takes back an "always allow" approval: the tool prompts again. Returns whether there
    /// was one.
    pub fn revoke_approval(&self, tool: &str) -> bool {
        self.state.revoke(tool)
    }

    /// Takes back every approval of the session; returns how many there were.
    pub fn revoke_all_approvals(&self) -> usize {
        std::mem::take(&mut *lock(&self.state.grants)).len()
    }

    /// Where the session keeps its files (spooled results).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.state.data_dir
    }

    /// Subscribes to this session's events.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::ToolEvent>> {
        self.state.events.subscribe()
    }
}
