//! Sessions: a workspace, a tool visibility filter, a concurrency cap, the calls in flight
//! and the grants a user made ("always allow this tool").

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use futures_util::task::AtomicWaker;
use tokio::sync::{Notify, Semaphore};
use tool_api::Tool;

use crate::error::CancelReason;
use crate::events::EventChannel;
use crate::policy::{ConfirmationPolicy, Narrowing};
use crate::registry::{Changes, Registered, Registry, ToolListing};
use crate::visibility::Visibility;
use crate::workspace::Workspace;

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
    /// This session's confirmation policy; `None` (the default): the dispatcher's.
    pub policy: Option<ConfirmationPolicy>,
    /// Whether its id names the same client on every instance that shares the store (a
    /// server's session per authenticated caller): then its "always" grants hold on every
    /// instance, and outlive it. Default `false`: they are this instance's, and end with
    /// the session.
    pub shared: bool,
    /// Who the session acts for: the caller the host authenticated (a bearer token's
    /// principal, say). Rate limits count per principal, and the audit log names it.
    /// Default `local` (the one user of this machine).
    pub principal: String,
    /// Modes that narrow the policy for this session's caller ([`Narrowing`]).
    pub narrowing: Option<Narrowing>,
    /// The caller's groups and claims, as rules over calls see them ([`crate::CallRules`]).
    pub caller: crate::rules::CallerFacts,
    /// Whether it sees the tools of every shared toolset, also one registered after it
    /// opened (a server's sessions while its config is reloaded); `false` (the default):
    /// those of [`SessionSpec::toolsets`] only.
    pub every_shared_toolset: bool,
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
            policy: None,
            shared: false,
            principal: "local".into(),
            narrowing: None,
            caller: crate::rules::CallerFacts::default(),
            every_shared_toolset: false,
        }
    }

    /// The caller's groups and claims ([`SessionSpec::caller`]).
    pub fn caller(mut self, facts: crate::rules::CallerFacts) -> Self {
        self.caller = facts;
        self
    }

    /// Sees the tools of every shared toolset, also those registered later
    /// ([`SessionSpec::every_shared_toolset`]).
    pub fn every_shared_toolset(mut self) -> Self {
        self.every_shared_toolset = true;
        self
    }

    /// Names who the session acts for ([`SessionSpec::principal`]).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = principal.into();
        self
    }

    /// Marks the session as the same client on every instance ([`SessionSpec::shared`]).
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Gives the session its own confirmation policy instead of the dispatcher's (e.g. a
    /// stricter one for an unattended agent). Approvals and hooks work as usual on top.
    pub fn policy(mut self, policy: ConfirmationPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Narrows the policy for this session ([`Narrowing`]): its caller's access rule.
    pub fn narrowing(mut self, narrowing: Narrowing) -> Self {
        self.narrowing = Some(narrowing);
        self
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
    /// The call's own future, waiting for its cancellation ([`InFlight::cancelled_here`]):
    /// one waiter at a time, that every wake-up of a call polls again, kept out of
    /// `cancel_notify`'s locked list (a lock to enter it, each poll and leaving it: about
    /// 1,200 instructions a wait, and a call to a mounted server waits twice: for its place
    /// under the cap, and for its future).
    call_waiter: AtomicWaker,
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
            call_waiter: AtomicWaker::new(),
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

    /// Resolves once cancellation was requested, for a wait of the call's own future: its
    /// place under the cap, its hooks, its confirmation, its execution; one at a time (a
    /// second waiter here would take the first one's place). A wait elsewhere (a tool's
    /// question, asked from its blocking thread) takes [`InFlight::cancelled`].
    pub(crate) fn cancelled_here(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.is_cancelled() {
                return std::task::Poll::Ready(());
            }
            self.call_waiter.register(cx.waker());
            // Cancelled between the look and the registration: its wake found no waker.
            if self.is_cancelled() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
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
        self.call_waiter.wake();
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

/// Something a user interrupt of the session must reach besides the calls in flight: a
/// batch with calls that have not started. It subscribes with
/// [`SessionState::on_interrupt`].
pub(crate) trait Interruptible: Send + Sync {
    /// The session was interrupted: cancel what has not started (reason `user`); returns
    /// how many calls that cancelled.
    fn interrupt(&self) -> usize;
}

pub(crate) struct SessionState {
    pub(crate) id: Arc<str>,
    /// Who it acts for ([`SessionSpec::principal`]).
    pub(crate) principal: Arc<str>,
    /// Its caller's groups and claims ([`SessionSpec::caller`]).
    caller: crate::rules::CallerFacts,
    pub(crate) workspace: Arc<Workspace>,
    /// Which tools it sees and what narrows its policy: replaced whole by
    /// [`Session::set_access`] (its caller's access rules reloaded).
    access: std::sync::RwLock<Arc<Access>>,
    pub(crate) toolsets: Vec<Arc<str>>,
    /// It sees every shared toolset's tools ([`SessionSpec::every_shared_toolset`]).
    every_shared_toolset: bool,
    pub(crate) semaphore: Arc<Semaphore>,
    /// Per-tool caps on top of the session cap (`tool_concurrency` in the config).
    pub(crate) tool_caps: HashMap<String, Arc<Semaphore>>,
    /// The caps of toolsets that have their own instead of the session's, by toolset id
    /// ([`crate::Toolset::own_cap`]), made at a toolset's first call: each with the number
    /// of calls it was made for (a toolset whose number changes, its entry reloaded, gets a
    /// new one; calls holding places in the old one keep them).
    own_caps: Mutex<OwnCaps>,
    /// Where spooled results go.
    pub(crate) data_dir: PathBuf,
    pub(crate) events: EventChannel,
    /// The tools of the per-session toolsets this session started.
    pub(crate) tools: Registry,
    /// Calls in flight by a per-session number, hashed with foldhash (every call that is
    /// not `inline` is entered and removed here; the keys are this session's own counter).
    inflight: Mutex<HashMap<u64, Arc<InFlight>, foldhash::fast::RandomState>>,
    grants: Mutex<HashSet<String>>,
    next_call: AtomicU64,
    /// What else a user interrupt must reach (the session's live batches).
    interruptible: Mutex<Vec<Weak<dyn Interruptible>>>,
    /// Set when the dispatcher closed the session (handles on it may still exist).
    closed: AtomicBool,
    /// The session's own confirmation policy, if it has one.
    pub(crate) policy: Option<ConfirmationPolicy>,
    /// The dispatcher's tool changes: a new access is told as one.
    changes: Changes,
    /// The shared state its grants are kept in.
    store: Arc<dyn crate::store::Store>,
    /// `None` for a shared session; else the instance its grants belong to.
    scope: Option<Arc<str>>,
    /// Its tools' search index ([`crate::Dispatcher::search_tools`]).
    pub(crate) search: crate::search::Cached,
}

/// A session's caps of toolsets with their own, by toolset id: the number of calls each was
/// made for, and the cap.
type OwnCaps = HashMap<Arc<str>, (usize, Arc<Semaphore>), foldhash::fast::RandomState>;

/// Which tools a session sees, and what narrows its policy.
pub(crate) struct Access {
    pub(crate) visibility: Visibility,
    pub(crate) narrowing: Option<Narrowing>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a new session takes from the dispatcher that opens it.
pub(crate) struct Surroundings<'a> {
    /// Its concurrency cap.
    pub(crate) cap: usize,
    /// Per-tool caps.
    pub(crate) tool_caps: &'a HashMap<String, usize>,
    /// The dispatcher's tool changes, for the session's own registry.
    pub(crate) changes: Changes,
    /// The shared state.
    pub(crate) store: Arc<dyn crate::store::Store>,
    /// This instance.
    pub(crate) instance: &'a Arc<str>,
}

impl SessionState {
    pub(crate) fn new(
        id: Arc<str>,
        workspace: Arc<Workspace>,
        spec: &SessionSpec,
        data_dir: PathBuf,
        around: Surroundings<'_>,
    ) -> Self {
        let Surroundings {
            cap,
            tool_caps,
            changes,
            store,
            instance,
        } = around;
        SessionState {
            id,
            principal: spec.principal.as_str().into(),
            caller: spec.caller.clone(),
            workspace,
            access: std::sync::RwLock::new(Arc::new(Access {
                visibility: spec.visibility.clone(),
                narrowing: spec.narrowing.clone(),
            })),
            toolsets: spec
                .toolsets
                .iter()
                .map(|t| Arc::from(t.as_str()))
                .collect(),
            every_shared_toolset: spec.every_shared_toolset,
            tool_caps: tool_caps
                .iter()
                .map(|(tool, cap)| (tool.clone(), Arc::new(Semaphore::new((*cap).max(1)))))
                .collect(),
            data_dir,
            tools: Registry::new(changes.clone()),
            semaphore: Arc::new(Semaphore::new(cap.max(1))),
            own_caps: Mutex::default(),
            events: EventChannel::new(),
            inflight: Mutex::default(),
            grants: Mutex::new(HashSet::new()),
            next_call: AtomicU64::new(0),
            interruptible: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            policy: spec.policy.clone(),
            changes: changes.clone(),
            store,
            scope: (!spec.shared).then(|| instance.clone()),
            search: crate::search::Cached::default(),
        }
    }

    /// The cap a call of a toolset with a cap of its own takes its place under: this
    /// session's one for `toolset`, of `calls` places.
    pub(crate) fn own_cap(&self, toolset: &Arc<str>, calls: usize) -> Arc<Semaphore> {
        let mut caps = lock(&self.own_caps);
        match caps.get(toolset) {
            Some((made_for, sem)) if *made_for == calls => sem.clone(),
            _ => {
                let sem = Arc::new(Semaphore::new(calls));
                caps.insert(toolset.clone(), (calls, sem.clone()));
                sem
            }
        }
    }

    /// Marks the session closed.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the dispatcher closed the session.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Subscribes `what` to the session's user interrupts, for as long as it lives.
    pub(crate) fn on_interrupt(&self, what: Weak<dyn Interruptible>) {
        let mut subscribed = lock(&self.interruptible);
        subscribed.retain(|w| w.strong_count() > 0);
        subscribed.push(what);
    }

    /// A user interrupt: reaches every subscriber, then every call in flight (reason
    /// `user`). Returns how many calls that had not started it cancelled, and the calls in
    /// flight (to wait for).
    pub(crate) fn interrupt(&self) -> (usize, Vec<Arc<InFlight>>) {
        let subscribed: Vec<Arc<dyn Interruptible>> = lock(&self.interruptible)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let queued = subscribed.iter().map(|s| s.interrupt()).sum();
        let calls = self.inflight();
        for call in &calls {
            call.interrupt(CancelReason::User, None);
        }
        (queued, calls)
    }

    /// Which tools it sees and what narrows its policy, as of now.
    pub(crate) fn access(&self) -> Arc<Access> {
        self.access
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Its caller, as rules over calls see it.
    pub(crate) fn caller(&self) -> crate::rules::RuleCaller<'_> {
        crate::rules::RuleCaller {
            principal: &self.principal,
            facts: &self.caller,
        }
    }

    /// Whether the session sees `tool`: its toolset is enabled, the visibility filter lets
    /// it through, and its required capability (if any) is enabled.
    pub(crate) fn sees(&self, tool: &Registered, capabilities: &HashSet<String>) -> bool {
        tool.toolset()
            .is_none_or(|t| self.every_shared_toolset || self.toolsets.iter().any(|e| **e == *t))
            && self
                .access()
                .visibility
                .allows_tool(&tool.name, tool.toolset())
            && tool.enabled_by(capabilities)
    }

    /// The tool a call of `name` reaches: the session's own toolset tools first, then the
    /// global registry; `None` if there is none or the session does not see it.
    pub(crate) fn lookup(
        &self,
        name: &str,
        global: &Registry,
        capabilities: &HashSet<String>,
    ) -> Option<Arc<Registered>> {
        let own = if self.toolsets.is_empty() {
            None
        } else {
            self.tools.get(name)
        };
        own.or_else(|| global.get(name))
            .filter(|t| self.sees(t, capabilities))
    }

    /// Every tool the session sees, sorted by name.
    /// A tool no call of its caller could run under `rules` is left out.
    pub(crate) fn listing(
        &self,
        global: &Registry,
        capabilities: &HashSet<String>,
        rules: Option<&dyn crate::rules::CallRules>,
    ) -> Vec<ToolListing> {
        let caller = self.caller();
        let mut out: Vec<ToolListing> = self
            .tools
            .all()
            .iter()
            .chain(global.all().iter())
            .filter(|t| self.sees(t, capabilities))
            .filter(|t| rules.is_none_or(|r| r.lists(&caller, &t.for_rules())))
            .map(|t| t.listing())
            .collect();
        out.sort_by(|a, b| a.definition.name.cmp(&b.definition.name));
        out
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

    /// Interrupts the calls in flight with this tool_use id (reason `user`); returns them.
    pub(crate) fn cancel_call(&self, tool_use_id: &str) -> Vec<Arc<InFlight>> {
        let calls: Vec<_> = self
            .inflight()
            .into_iter()
            .filter(|c| &*c.tool_use_id == tool_use_id)
            .collect();
        for call in &calls {
            call.interrupt(CancelReason::User, None);
        }
        calls
    }

    /// Records a grant made here (the shared state holds it for every instance).
    fn granted_here(&self, tool: &str) {
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

/// How long a session's "always" grants are kept in the shared state after the last one.
pub const GRANTS_KEPT: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// Where a session's grants are kept in the shared state: a shared session's by its id
/// (the same client on every instance); another's under this instance too.
fn grants_key(session: &SessionState) -> String {
    match &session.scope {
        None => format!("grants:shared:{}", session.id),
        Some(instance) => format!("grants:{instance}:{}", session.id),
    }
}

/// Whether the user answered "always allow" for `tool` in `session`, on any instance. A
/// grant that cannot be read is no grant: the user is asked.
pub(crate) async fn granted(
    store: &Arc<dyn crate::store::Store>,
    session: &SessionState,
    tool: &str,
) -> bool {
    match store.contains(&grants_key(session), tool).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(%tool, session = %session.id, "{e}; the \"always\" grants cannot be read, so the user is asked");
            false
        }
    }
}

/// Records the user's "always allow" for `tool` in `session`, for every instance.
pub(crate) async fn grant(
    store: &Arc<dyn crate::store::Store>,
    session: &SessionState,
    tool: &str,
) {
    session.granted_here(tool);
    if let Err(e) = store.add(&grants_key(session), tool, GRANTS_KEPT).await {
        tracing::warn!(%tool, session = %session.id, "{e}; the \"always\" grant holds on this instance only until the store is back, and is asked again elsewhere");
    }
}

/// Forgets the session's grants on every instance (it closed).
pub(crate) async fn forget_grants(session: &SessionState) {
    if session.scope.is_none() {
        // A shared session's grants belong to its client on every instance.
        return;
    }
    if let Err(e) = session.store.clear(&grants_key(session)).await {
        tracing::warn!(session = %session.id, "{e}; its \"always\" grants stay in the store until they expire");
    }
}

/// Takes the grants of `tools` back in the shared state too.
async fn revoke_shared(session: &SessionState, tools: Vec<String>) {
    let key = grants_key(session);
    for tool in tools {
        if let Err(e) = session.store.remove(&key, &tool).await {
            tracing::warn!(%tool, "{e}; the revoked grant still holds on other instances until the store is back");
        }
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
    /// Replaces which tools the session sees and what narrows its policy (its caller's
    /// access rules were reloaded): calls from now on go by them; clients watching the
    /// tools are told. A call already past its policy step keeps what it was decided.
    pub fn set_access(&self, visibility: Visibility, narrowing: Option<Narrowing>) {
        *self
            .state
            .access
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(Access {
            visibility,
            narrowing,
        });
        self.state.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A handle on `state`, in its first turn.
    pub(crate) fn new(state: Arc<SessionState>) -> Session {
        Session {
            state,
            turn_id: Arc::from("turn-1"),
        }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Who the session acts for ([`SessionSpec::principal`]).
    pub fn principal(&self) -> &str {
        &self.state.principal
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
    pub async fn revoke_approval(&self, tool: &str) -> bool {
        revoke_shared(&self.state, vec![tool.to_string()]).await;
        self.state.revoke(tool)
    }

    /// Takes back every approval of the session; returns how many there were.
    pub async fn revoke_all_approvals(&self) -> usize {
        let all: Vec<String> = std::mem::take(&mut *lock(&self.state.grants))
            .into_iter()
            .collect();
        let n = all.len();
        revoke_shared(&self.state, all).await;
        n
    }

    /// Where the session keeps its files (spooled results).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.state.data_dir
    }

    /// Subscribes to this session's events.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::events::ToolEvent>> {
        self.state.events.subscribe()
    }
}
