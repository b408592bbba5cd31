//! The shared state of a dispatcher: its settings, its tools and toolsets, its open
//! sessions and its event stream. Every [`crate::Dispatcher`] clone, batch and call in
//! flight holds one `Arc` of it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::config::DispatcherConfig;
use crate::confirmation::{ConfirmationBroker, Confirmer};
use crate::error::SessionError;
use crate::events::EventChannel;
use crate::hooks::{PostUseHook, PreUseHook};
use crate::policy::ConfirmationPolicy;
use crate::registry::{Registered, Registry};
use crate::runtime::RuntimePolicy;
use crate::session::{SessionSpec, SessionState};
use crate::spool;
use crate::toolset::Toolsets;
use crate::workspace::Workspace;

pub(crate) struct Engine {
    /// What the host set with the builder.
    pub(crate) settings: Settings,
    pub(crate) broker: ConfirmationBroker,
    pub(crate) registry: Arc<Registry>,
    pub(crate) toolsets: Toolsets,
    sessions: Mutex<HashMap<Arc<str>, Arc<SessionState>>>,
    pub(crate) events: EventChannel,
    pub(crate) next_request: AtomicU64,
}

/// What a host sets when it builds a dispatcher (everything but the state it accumulates).
#[derive(Default)]
pub(crate) struct Settings {
    pub(crate) config: DispatcherConfig,
    pub(crate) policy: ConfirmationPolicy,
    pub(crate) capabilities: HashSet<String>,
    pub(crate) hooks: Vec<Arc<dyn PreUseHook>>,
    pub(crate) post_hooks: Vec<Arc<dyn PostUseHook>>,
    pub(crate) runtime: Option<Arc<dyn RuntimePolicy>>,
    pub(crate) confirmers: Vec<Arc<dyn Confirmer>>,
}

impl Engine {
    pub(crate) fn new(settings: Settings) -> Engine {
        Engine {
            settings,
            broker: ConfirmationBroker::default(),
            registry: Arc::new(Registry::default()),
            toolsets: Toolsets::default(),
            sessions: Mutex::new(HashMap::new()),
            events: EventChannel::new(),
            next_request: AtomicU64::new(1),
        }
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<SessionState>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tool a call of `name` in `session` reaches, if the session sees one.
    pub(crate) fn lookup(&self, name: &str, session: &SessionState) -> Option<Arc<Registered>> {
        session.lookup(name, &self.registry, &self.settings.capabilities)
    }

    /// The open session with this id.
    pub(crate) fn session(&self, id: &str) -> Option<Arc<SessionState>> {
        self.sessions().get(id).cloned()
    }

    /// The ids of the open sessions, sorted.
    pub(crate) fn session_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.sessions().keys().map(|k| k.to_string()).collect();
        ids.sort();
        ids
    }

    /// Opens a session (or returns the open one of the same id and workspace), starting
    /// the per-session toolsets it enables.
    pub(crate) fn open_session(
        &self,
        spec: SessionSpec,
    ) -> Result<Arc<SessionState>, SessionError> {
        let workspace =
            Workspace::open(&spec.workspace).map_err(|source| SessionError::Workspace {
                path: spec.workspace.display().to_string(),
                source,
            })?;
        let mut sessions = self.sessions();
        if let Some(existing) = sessions.get(spec.id.as_str()) {
            if existing.workspace.root() != workspace.root() {
                return Err(SessionError::WorkspaceMismatch {
                    id: spec.id,
                    existing: existing.workspace.root().display().to_string(),
                    requested: workspace.root().display().to_string(),
                });
            }
            return Ok(existing.clone());
        }
        let id: Arc<str> = Arc::from(spec.id.as_str());
        let data_dir = spec
            .data_dir
            .clone()
            .unwrap_or_else(|| spool::default_data_dir(workspace.root(), &spec.id));
        let state = Arc::new(SessionState::new(
            id.clone(),
            Arc::new(workspace),
            &spec,
            self.settings.config.max_concurrency,
            &self.settings.config.tool_concurrency,
            data_dir,
        ));
        self.toolsets.start_for(
            &state,
            &self.registry,
            &self.settings.config.toolset_separator,
        )?;
        sessions.insert(id, state.clone());
        Ok(state)
    }

    /// Forgets a session and stops the per-session toolsets it started.
    pub(crate) fn remove_session(&self, id: &str) -> bool {
        let state = self.sessions().remove(id);
        match state {
            Some(state) => {
                state.close();
                self.toolsets.stop_for(&state);
                true
            }
            None => false,
        }
    }

    /// The not-found message for `name`: where it would have been routed, and the tools the
    /// session sees (at most 50).
    pub(crate) fn not_found_message(&self, name: &str, session: &SessionState) -> String {
        let mut names: Vec<String> = session
            .listing(&self.registry, &self.settings.capabilities)
            .into_iter()
            .map(|l| l.definition.name)
            .collect();
        names.truncate(50);
        let available = if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        };
        let hint = self
            .toolsets
            .route_hint(name, session, &self.settings.config.toolset_separator);
        match hint {
            Some(hint) => format!("{hint} Available: {available}"),
            None => format!("Tool '{name}' not found. Available: {available}"),
        }
    }
}
