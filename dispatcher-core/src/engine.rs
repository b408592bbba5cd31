//! The shared state of a dispatcher: its settings, its tools and toolsets, its open
//! sessions and its event stream. Every [`crate::Dispatcher`] clone, batch and call in
//! flight holds one `Arc` of it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::call::CallHeader;
use crate::config::DispatcherConfig;
use crate::confirmation::{ConfirmationBroker, Confirmer};
use crate::confirmation::{ConfirmationRequest, Resolution};
use crate::error::SessionError;
use crate::events::{EventChannel, EventKind};
use crate::hooks::{PostUseHook, PreUseHook};
use crate::policy::ConfirmationPolicy;
use crate::registry::{Changes, Registered, Registry};
use crate::runtime::RuntimePolicy;
use crate::session::{SessionSpec, SessionState};
use crate::spool;
use crate::toolset::Toolsets;
use crate::workspace::Workspace;

pub(crate) struct Engine {
    /// What the host set with the builder (its config and policy are read from `live`).
    pub(crate) settings: Settings,
    /// The config and policy in force: set at build, replaced whole by
    /// [`crate::Dispatcher::reconfigure`]; a call reads them once where it needs them.
    live: std::sync::RwLock<Arc<Live>>,
    pub(crate) broker: ConfirmationBroker,
    pub(crate) registry: Arc<Registry>,
    /// Counts changes to the tools of every registry here (see `Dispatcher::watch_tools`).
    pub(crate) changes: Changes,
    pub(crate) toolsets: Toolsets,
    sessions: Mutex<HashMap<Arc<str>, Arc<SessionState>>>,
    pub(crate) events: EventChannel,
    pub(crate) next_request: AtomicU64,
    /// The shared state: the host's, else this process's memory.
    pub(crate) store: Arc<dyn crate::store::Store>,
    /// This instance, among those sharing the store (random, per process).
    pub(crate) instance: Arc<str>,
    /// The host's text encoder for tool search, with the tool vectors it made
    /// ([`crate::Dispatcher::set_text_encoder`]); `None`: words only.
    pub(crate) meanings: std::sync::RwLock<Option<Arc<crate::search::Meanings>>>,
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
    /// The shared state ("always" grants, …); `None`: this process's memory.
    pub(crate) store: Option<Arc<dyn crate::store::Store>>,
    /// Where calls granted `remote` run.
    pub(crate) remote: Option<Arc<dyn crate::runtime::RemoteHost>>,
    /// Where every ended call is recorded (the audit log, metrics, traces); empty: nowhere.
    pub(crate) audit: Vec<Arc<dyn crate::audit::AuditSink>>,
    /// The span each call runs in; `None`: a plain `tool_call` span.
    pub(crate) spans: Option<Arc<dyn crate::audit::CallSpans>>,
}

/// The config, the policy and the rules in force, replaced together.
pub(crate) struct Live {
    pub(crate) config: Arc<DispatcherConfig>,
    pub(crate) policy: Arc<ConfirmationPolicy>,
    /// Rules over whole calls ([`crate::Dispatcher::set_rules`]), if any.
    pub(crate) rules: Option<Arc<dyn crate::rules::CallRules>>,
}

/// A random id for this instance: the keys it shares only with itself, and the ids of
/// its confirmation requests, never meet another's.
fn instance_id() -> Arc<str> {
    use std::hash::BuildHasher;
    let seed = (
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    // RandomState is keyed from the OS's randomness.
    let n = std::collections::hash_map::RandomState::new().hash_one(seed);
    format!("{n:016x}").into()
}

impl Engine {
    pub(crate) fn new(mut settings: Settings) -> Engine {
        let changes: Changes = Arc::new(tokio::sync::watch::channel(0).0);
        let store = settings
            .store
            .take()
            .unwrap_or_else(|| crate::store::MemoryStore::new());
        let broker = if store.shared() {
            ConfirmationBroker::shared_through(store.clone())
        } else {
            ConfirmationBroker::default()
        };
        settings.config.secrets.make_ahead();
        let live = std::sync::RwLock::new(Arc::new(Live {
            config: Arc::new(std::mem::take(&mut settings.config)),
            policy: Arc::new(std::mem::take(&mut settings.policy)),
            rules: None,
        }));
        Engine {
            store,
            instance: instance_id(),
            meanings: std::sync::RwLock::default(),
            live,
            settings,
            broker,
            registry: Arc::new(Registry::new(changes.clone())),
            changes,
            toolsets: Toolsets::default(),
            sessions: Mutex::new(HashMap::new()),
            events: EventChannel::new(),
            next_request: AtomicU64::new(1),
        }
    }

    /// The dispatcher config in force.
    pub(crate) fn config(&self) -> Arc<DispatcherConfig> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .config
            .clone()
    }

    /// The confirmation policy in force.
    pub(crate) fn policy(&self) -> Arc<ConfirmationPolicy> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .policy
            .clone()
    }

    /// The config, policy and rules in force.
    pub(crate) fn live(&self) -> Arc<Live> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The rules in force, if any.
    pub(crate) fn rules(&self) -> Option<Arc<dyn crate::rules::CallRules>> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .rules
            .clone()
    }

    /// Puts `config` and `policy` in force together (the rules stay): calls that already
    /// read them keep theirs.
    pub(crate) fn set_live(&self, config: DispatcherConfig, policy: ConfirmationPolicy) {
        config.secrets.make_ahead();
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        let rules = live.rules.clone();
        *live = Arc::new(Live {
            config: Arc::new(config),
            policy: Arc::new(policy),
            rules,
        });
    }

    /// Puts `rules` in force (`None`: none); the config and policy stay.
    pub(crate) fn set_rules(&self, rules: Option<Arc<dyn crate::rules::CallRules>>) {
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        *live = Arc::new(Live {
            config: live.config.clone(),
            policy: live.policy.clone(),
            rules,
        });
        drop(live);
        // Listings may differ now: whoever watches the tools looks again.
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
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

    /// The open sessions.
    pub(crate) fn states(&self) -> Vec<Arc<SessionState>> {
        self.sessions().values().cloned().collect()
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
            data_dir,
            crate::session::Surroundings {
                cap: self.config().max_concurrency,
                tool_caps: &self.config().tool_concurrency,
                changes: self.changes.clone(),
                store: self.store.clone(),
                instance: &self.instance,
            },
        ));
        self.toolsets
            .start_for(&state, &self.registry, &self.config().toolset_separator)?;
        sessions.insert(id, state.clone());
        Ok(state)
    }

    /// Forgets a session and stops the per-session toolsets it started.
    pub(crate) async fn remove_session(&self, id: &str) -> bool {
        let state = self.sessions().remove(id);
        match state {
            Some(state) => {
                state.close();
                self.toolsets.stop_for(&state);
                crate::session::forget_grants(&state).await;
                true
            }
            None => false,
        }
    }

    /// The not-found message for `name`: where it would have been routed, and the tools the
    /// session sees (at most 50).
    pub(crate) fn not_found_message(&self, name: &str, session: &SessionState) -> String {
        let mut names: Vec<String> = session
            .listing(
                &self.registry,
                &self.settings.capabilities,
                self.rules().as_deref(),
            )
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
            .route_hint(name, session, &self.config().toolset_separator);
        match hint {
            Some(hint) => format!("{hint} Available: {available}"),
            None => format!("Tool '{name}' not found. Available: {available}"),
        }
    }
}

/// How long a confirmation waits before the other instances are told of it: most are
/// answered sooner (a client that asks its user at once, a 2026 round that ends with the
/// question), and those cost the store nothing.
const PUBLISH_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// Tells the other instances of `request` once it has waited [`PUBLISH_AFTER`].
fn publish_if_it_waits(engine: &Engine, request: &ConfirmationRequest) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (broker, store, instance) = (
        engine.broker.clone(),
        engine.store.clone(),
        engine.instance.clone(),
    );
    let ttl = engine.config().timeouts.confirmation + std::time::Duration::from_secs(5);
    let request = request.clone();
    runtime.spawn(async move {
        tokio::time::sleep(PUBLISH_AFTER).await;
        if !broker.mark_published(&request.request_id) {
            return;
        }
        let id = request.request_id.clone();
        let json = serde_json::to_value(&request).unwrap_or_default();
        crate::first_answer::publish_pending(&store, &instance, &id, json, ttl).await;
        // Answered while it was being published: withdrawn at once.
        if !broker.is_pending(&id) {
            crate::first_answer::withdraw(&store, &id);
        }
    });
}

/// One question to the user, for one call: registered with the broker, announced with
/// `tool.confirmation_requested`, put to the wired-in confirmers, and closed with
/// `tool.confirmation_resolved`. The pipeline's own confirmation (step 4) and a tool's
/// mid-call question ([`tool_api::ToolContext::ask_user`]) both go through it.
/// It waits `timeout` for an answer (the call's `timeouts.confirmation`).
pub(crate) async fn ask(
    engine: &Engine,
    call: &Arc<CallHeader>,
    emit: &(dyn Fn(EventKind) + Sync),
    question: (String, Vec<String>, String),
    mid_call: bool,
    timeout: std::time::Duration,
    cancelled: impl Future<Output = ()>,
) -> Resolution {
    use std::sync::atomic::Ordering;
    let (input_summary, projected_modifications, reason) = question;
    let n = engine.next_request.fetch_add(1, Ordering::Relaxed);
    let request = ConfirmationRequest {
        request_id: Arc::from(format!("cr_{}_{n:06}", engine.instance)),
        call: call.clone(),
        input_summary,
        projected_modifications,
        reason,
        mid_call,
    };
    let pending = engine.broker.register(request.clone());
    // Other instances' consoles see it, unless a client here answers it at once.
    if engine.broker.shared().is_some()
        && !engine
            .settings
            .confirmers
            .iter()
            .any(|c| c.answers_at_once(call))
    {
        publish_if_it_waits(engine, &request);
    }
    emit(EventKind::ConfirmationRequested {
        request_id: request.request_id.clone(),
        input_summary: request.input_summary.clone(),
        projected_modifications: request.projected_modifications.clone(),
        reason: request.reason.clone(),
    });
    let waited = std::time::Instant::now();
    let resolution = pending
        .wait(&request, &engine.settings.confirmers, timeout, cancelled)
        .await;
    emit(EventKind::ConfirmationResolved {
        request_id: request.request_id.clone(),
        decision: resolution.decision_name().to_string(),
        resolved_by: resolution.resolved_by(),
        decided_by: resolution.decided_by(),
        waited_ms: waited.elapsed().as_secs_f64() * 1000.0,
    });
    resolution
}
