//! Sessions: a workspace, a tool visibility filter, a concurrency cap, the calls in flight
//! and the grants a user made ("always allow this tool").

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tool_api::Tool;

use crate::events::EventChannel;
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
}

impl SessionSpec {
    /// A session seeing every tool.
    pub fn new(id: impl Into<String>, workspace: impl Into<PathBuf>) -> Self {
        SessionSpec {
            id: id.into(),
            workspace: workspace.into(),
            visibility: Visibility::All,
        }
    }

    /// Restricts the tools the session sees.
    pub fn visibility(mut self, visibility: Visibility) -> Self {
        self.visibility = visibility;
        self
    }
}

/// A call in flight, as cancellation sees it.
pub(crate) struct InFlight {
    pub(crate) token: CancellationToken,
    pub(crate) done: CancellationToken,
    pub(crate) tool: Mutex<Option<Arc<dyn Tool>>>,
}

pub(crate) struct SessionState {
    pub(crate) id: Arc<str>,
    pub(crate) workspace: Arc<Workspace>,
    pub(crate) visibility: Visibility,
    pub(crate) semaphore: Arc<Semaphore>,
    pub(crate) events: EventChannel,
    inflight: Mutex<HashMap<u64, Arc<InFlight>>>,
    grants: Mutex<HashSet<String>>,
    next_call: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SessionState {
    pub(crate) fn new(
        id: Arc<str>,
        workspace: Arc<Workspace>,
        visibility: Visibility,
        cap: usize,
    ) -> Self {
        SessionState {
            id,
            workspace,
            visibility,
            semaphore: Arc::new(Semaphore::new(cap.max(1))),
            events: EventChannel::new(),
            inflight: Mutex::new(HashMap::new()),
            grants: Mutex::new(HashSet::new()),
            next_call: AtomicU64::new(0),
        }
    }

    pub(crate) fn track(self: &Arc<Self>) -> CallGuard {
        let key = self.next_call.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(InFlight {
            token: CancellationToken::new(),
            done: CancellationToken::new(),
            tool: Mutex::new(None),
        });
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

    pub(crate) fn is_granted(&self, tool: &str) -> bool {
        lock(&self.grants).contains(tool)
    }

    pub(crate) fn grant(&self, tool: &str) {
        lock(&self.grants).insert(tool.to_string());
    }
}

/// Registration of one call in its session; removes it when dropped.
pub(crate) struct CallGuard {
    session: Arc<SessionState>,
    key: u64,
    pub(crate) entry: Arc<InFlight>,
}

impl CallGuard {
    pub(crate) fn set_tool(&self, tool: Arc<dyn Tool>) {
        *lock(&self.entry.tool) = Some(tool);
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        lock(&self.session.inflight).remove(&self.key);
        self.entry.done.cancel();
    }
}

impl InFlight {
    pub(crate) fn cancel(&self) {
        self.token.cancel();
        let tool = lock(&self.tool).clone();
        if let Some(tool) = tool {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.cancel()));
        }
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

    /// Subscribes to this session's events.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::ToolEvent>> {
        self.state.events.subscribe()
    }
}
