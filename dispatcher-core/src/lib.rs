#![doc = include_str!("../README.md")]

// What the crate offers, each item once: at the root (the modules below it are private),
// or, for the parts an embedder reaches into less often, under its module's name.
pub mod audit;
mod blocking;
mod call;
mod config;
pub mod confines;
mod confirmation;
mod engine;
mod error;
mod events;
mod first_answer;
mod hooks;
mod host;
mod invocation;
mod limits;
mod panics;
mod policy;
pub mod provider;
mod redaction;
mod registry;
mod result;
mod rules;
mod runtime;
mod schedule;
pub mod schema;
mod search;
mod session;
pub mod shared;
pub mod spool;
pub mod store;
mod toolset;
mod visibility;
mod workspace;

use std::sync::Arc;

pub use blocking::RunTimes;
pub use call::{CallHeader, CallView};
pub use config::{
    Chars, DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_TIMEOUT, DispatcherConfig, Limit, OnExecuteError,
    ResultLimits, SEPARATORS, Seconds, Separator, Timeouts, non_empty, sandbox_mode,
};
pub use confirmation::{
    Answer, ConfirmFuture, ConfirmationBroker, ConfirmationRequest, Confirmer, DecidedBy, Decision,
    ResolveError,
};
pub use error::{CancelReason, ErrorClass, ReconfigureError, RegistrationError, SessionError};
pub use events::{CallEvents, EVENT_BUFFER, EventKind, ToolEvent};
pub use hooks::{
    COMMAND_HOOK_TIMEOUT, CommandHook, HookCall, HookDecision, HookFuture, HookMatcher,
    PostDecision, PostUseCall, PostUseHook, PreUseHook, pre_use_fn,
};
pub use invocation::Invocation;
pub use limits::RateLimits;
pub use policy::{
    ClassModes, ClassOverrides, ConfirmationPolicy, Mode, Narrowing, PerClass, PolicyDecision,
    Unset, expand_home,
};
pub use redaction::{SecretSeen, Secrets};
pub use registry::ToolListing;
pub use result::{
    SideEffectRecord, ToolResultBlock, ToolUse, anthropic_user_message, openai_tool_messages,
};
pub use rules::{
    CallRules, CallerFacts, RequestFacts, RuleCall, RuleCaller, RuleTool, RuleVerdict,
};
pub use runtime::{Grant, GrantRequest, RemoteHost, RuntimePolicy, SUPPORTED, check_supported};
pub use schedule::Batch;
pub use search::{FoundTool, TextEncoder};
/// The secret scanner and its settings (`[secrets]`), as [`Secrets`] uses them.
pub use secrets;
pub use session::{GRANTS_KEPT, Session, SessionSpec};
/// The tool-api items a host works with, re-exported so that an embedder needs one crate.
pub use tool_api::{
    InterruptBehavior, SandboxMode, SideEffect, ToolDefinition, ToolFactory, is_valid_tool_name,
};
pub use toolset::{
    Toolset, ToolsetBinding, ToolsetDef, ToolsetFactory, ToolsetHandle, check_prefix,
    is_publishable, publish_name,
};
pub use visibility::{Visibility, glob_matches};
pub use workspace::{
    FsError, INLINE_BYTES, INLINE_ENTRIES, InlineBudget, MAX_READ_BYTES, Opened, Workspace,
};

use crate::engine::{Engine, Settings};

/// Builds a [`Dispatcher`].
#[derive(Default)]
pub struct DispatcherBuilder {
    settings: Settings,
}

impl DispatcherBuilder {
    /// Sets limits and timeouts.
    pub fn config(mut self, config: DispatcherConfig) -> Self {
        self.settings.config = config;
        self
    }

    /// Sets the confirmation policy (default: none/read auto, the rest prompt).
    pub fn policy(mut self, policy: ConfirmationPolicy) -> Self {
        self.settings.policy = policy;
        self
    }

    /// Enables a capability: tools that require it become visible.
    pub fn capability(mut self, capability: impl Into<String>) -> Self {
        self.settings.capabilities.insert(capability.into());
        self
    }

    /// Adds a pre-use hook ([`PreUseHook`]); hooks run in the order added.
    pub fn hook(mut self, hook: Arc<dyn PreUseHook>) -> Self {
        self.settings.hooks.push(hook);
        self
    }

    /// Adds a post-use hook ([`PreUseHook`]); hooks run in the order added.
    pub fn post_hook(mut self, hook: Arc<dyn PostUseHook>) -> Self {
        self.settings.post_hooks.push(hook);
        self
    }

    /// Sets the runtime policy that grants each call its sandbox and limits ([`RuntimePolicy`]).
    pub fn runtime(mut self, policy: Arc<dyn RuntimePolicy>) -> Self {
        self.settings.runtime = Some(policy);
        self
    }

    /// Adds a client that answers confirmation requests.
    pub fn confirmer(mut self, confirmer: Arc<dyn Confirmer>) -> Self {
        self.settings.confirmers.push(confirmer);
        self
    }

    /// Sets the shared state ("always" grants; see [`store`]): default, this process's
    /// memory ([`store::MemoryStore`]).
    pub fn store(mut self, store: Arc<dyn store::Store>) -> Self {
        self.settings.store = Some(store);
        self
    }

    /// Runs calls granted [`SandboxMode::Remote`] on `host` ([`runtime::RemoteHost`]).
    pub fn remote(mut self, host: Arc<dyn runtime::RemoteHost>) -> Self {
        self.settings.remote = Some(host);
        self
    }

    /// Hands every call that ends to `sink` ([`audit`]: an audit log, metrics, traces)
    /// before its caller gets the result. Sinks add up, called in the order given.
    pub fn audit(mut self, sink: Arc<dyn audit::AuditSink>) -> Self {
        self.settings.audit.push(sink);
        self
    }

    /// Runs every call in the span `spans` opens, and hands it the call's end ([`audit`]:
    /// toolhost's OpenTelemetry spans).
    pub fn call_spans(mut self, spans: Arc<dyn audit::CallSpans>) -> Self {
        self.settings.spans = Some(spans);
        self
    }

    /// The dispatcher.
    pub fn build(self) -> Dispatcher {
        let engine = Arc::new(Engine::new(self.settings));
        if engine.store.shared() {
            shared::start(&engine);
        }
        Dispatcher { engine }
    }
}

/// The tool dispatcher. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Dispatcher {
    engine: Arc<Engine>,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Dispatcher::new()
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("tools", &self.engine.registry.len())
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// The shared state it was built with.
    pub fn store(&self) -> Arc<dyn store::Store> {
        self.engine.store.clone()
    }

    /// A dispatcher with default config and policy.
    pub fn new() -> Dispatcher {
        Dispatcher::builder().build()
    }

    /// A builder.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder::default()
    }

    /// The limits in force (as of now: [`Dispatcher::reconfigure`] may replace them).
    pub fn config(&self) -> Arc<DispatcherConfig> {
        self.engine.config()
    }

    /// The confirmation policy in force (as of now).
    pub fn policy(&self) -> Arc<ConfirmationPolicy> {
        self.engine.policy()
    }

    /// Puts a new config and policy in force, together, for the calls made from now on (a
    /// call already made keeps the config it was made under to its end, also while it
    /// waits for a confirmation or a place, and the policy it was judged by; a question a
    /// running tool asks the user waits as long as the config in force says). Refused, with
    /// nothing changed, when `config` changes what cannot change under a running
    /// dispatcher: the toolset separator, which is part of every published tool name.
    pub fn reconfigure(
        &self,
        config: DispatcherConfig,
        policy: ConfirmationPolicy,
    ) -> Result<(), ReconfigureError> {
        let now = self.engine.config();
        if config.toolset_separator != now.toolset_separator {
            return Err(ReconfigureError::NeedsRestart {
                setting: "toolset_separator".into(),
            });
        }
        self.engine.set_live(config, policy);
        Ok(())
    }

    /// Puts rules over whole calls in force ([`CallRules`]), or takes them away with
    /// `None`. They narrow what the confirmation policy and access rules decide, from the
    /// next call on (calls already past their decision keep it), and listings leave out
    /// the tools they say no call could run: the tools' watchers are told
    /// ([`Dispatcher::watch_tools`]).
    pub fn set_rules(&self, rules: Option<Arc<dyn CallRules>>) {
        self.engine.set_rules(rules);
    }

    /// Whether rules over whole calls are in force ([`Dispatcher::set_rules`]): a host
    /// attaches what they read ([`RequestFacts`]) only then.
    pub fn has_rules(&self) -> bool {
        self.engine.rules().is_some()
    }

    /// This instance's random id (in confirmation request ids, events seen by other
    /// instances and audit entries).
    pub fn instance(&self) -> &str {
        &self.engine.instance
    }

    /// The broker through which clients answer confirmation requests waiting on this
    /// instance.
    pub fn broker(&self) -> &ConfirmationBroker {
        &self.engine.broker
    }

    /// The confirmation requests waiting for an answer, on every instance sharing the store
    /// (each with its `instance`), optionally only one session's, oldest first; over a
    /// store of this process only, or one that cannot be read now, this instance's.
    pub async fn pending_confirmations(&self, session: Option<&str>) -> Vec<serde_json::Value> {
        let local = || {
            self.engine
                .broker
                .pending(session)
                .into_iter()
                .map(|r| {
                    let mut v = serde_json::to_value(&r).unwrap_or_default();
                    v["instance"] = serde_json::Value::from(&*self.engine.instance);
                    v
                })
                .collect()
        };
        match self.engine.broker.shared() {
            None => local(),
            Some(store) => match shared::pending(store, session).await {
                Ok(all) => all,
                Err(e) => {
                    tracing::warn!("{e}; only this instance's pending confirmations are listed");
                    local()
                }
            },
        }
    }

    /// Answers a confirmation request waiting on any instance sharing the store, on behalf
    /// of `client`: the first answer wins everywhere, and a later one gets
    /// [`confirmation::ResolveError::AlreadyResolved`] naming it.
    pub async fn answer_confirmation(
        &self,
        request_id: &str,
        decision: Decision,
        client: &str,
    ) -> Result<(), confirmation::ResolveError> {
        let broker = &self.engine.broker;
        let Some(store) = broker.shared() else {
            return broker.resolve(request_id, decision, client);
        };
        if !broker.is_pending(request_id) {
            return shared::answer_elsewhere(store, request_id, decision, client).await;
        }
        // Never published: nobody elsewhere knows of it.
        if let Ok(settled) = broker.settle_if_unpublished(request_id, decision.into(), client) {
            return settled;
        }
        match first_answer::claim(store, request_id, decision.as_str(), client).await {
            Ok(false) => Err(shared::already(store, request_id).await),
            // Won, or the store cannot be reached: the answer given here stands.
            Ok(true) | Err(_) => broker.resolve(request_id, decision, client),
        }
    }

    /// Registers a tool. Refuses an invalid name, a name already taken (naming both
    /// sources), a schema outside the subset (naming the construct and its JSON pointer),
    /// and path parameters the schema does not declare.
    pub fn register(&self, factory: Arc<dyn ToolFactory>) -> Result<(), RegistrationError> {
        self.engine.registry.insert(registry::prepare(factory)?)
    }

    /// Removes a tool; calls already running finish. Returns whether it was registered.
    pub fn unregister(&self, name: &str) -> bool {
        self.engine.registry.remove(name)
    }

    /// Replaces tools in one step (a plugin upgraded in place): the tools named `remove`
    /// go and `add` come, or, when any of `add` would be refused (an invalid definition, a
    /// name another tool keeps), nothing changes. A call already running on a removed tool
    /// finishes on it; the next call of the name reaches the new one. Clients watching the
    /// tools ([`Dispatcher::watch_tools`]) are told once.
    pub fn replace_tools(
        &self,
        remove: &[String],
        add: Vec<Arc<dyn ToolFactory>>,
    ) -> Result<(), RegistrationError> {
        let prepared = add
            .into_iter()
            .map(registry::prepare)
            .collect::<Result<Vec<_>, _>>()?;
        self.engine.registry.swap(remove, prepared)
    }

    /// The factory registered under `name` (a tool of its own, not a toolset's).
    pub fn factory(&self, name: &str) -> Option<Arc<dyn ToolFactory>> {
        self.engine
            .registry
            .get(name)
            .filter(|t| t.toolset().is_none())
            .map(|t| t.factory.clone())
    }

    /// Removes a shared toolset and its tools (its instance is the caller's to stop).
    /// Returns whether it was registered.
    pub fn unregister_toolset(&self, id: &str) -> bool {
        let e = &self.engine;
        e.toolsets.unregister(id, &e.registry)
    }

    /// Registers a toolset ([`Toolset`]). A shared toolset's tools are published at once
    /// (all or none) and it is bound ([`Toolset::bind`]); a per-session toolset starts in
    /// each session that enables it. Refuses a duplicate id or prefix, an invalid prefix,
    /// and any tool the dispatcher would refuse.
    pub fn register_toolset(&self, def: ToolsetDef) -> Result<(), RegistrationError> {
        let e = &self.engine;
        e.toolsets
            .register(def, &e.registry, &e.config().toolset_separator)
    }

    /// Re-reads a shared toolset's tools and republishes them (what its
    /// [`ToolsetHandle::tools_changed`] does). Returns how many tools it now has.
    pub fn refresh_toolset(&self, id: &str) -> Result<usize, RegistrationError> {
        let e = &self.engine;
        e.toolsets
            .refresh(id, &e.registry, &e.config().toolset_separator)
    }

    /// Every tool registered, in the dispatcher and in each open session's own toolsets,
    /// sorted by name (the first of a name kept), with no session's visibility, capability
    /// or rules applied: what rules over calls are checked against when they load.
    pub fn all_definitions(&self) -> Vec<ToolDefinition> {
        let e = &self.engine;
        let mut all: Vec<ToolDefinition> = e
            .registry
            .all()
            .iter()
            .map(|t| t.definition().clone())
            .collect();
        for state in e.states() {
            all.extend(state.tools.all().iter().map(|t| t.definition().clone()));
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.dedup_by(|a, b| a.name == b.name);
        all
    }

    /// The tools a session may see and call, sorted by name: its visibility filter applied,
    /// and tools whose required capability the host did not enable left out.
    pub fn definitions_for_session(&self, session: &Session) -> Vec<ToolDefinition> {
        let listing = self.listing_for_session(session);
        listing.into_iter().map(|l| l.definition).collect()
    }

    /// A receiver that sees a new value whenever a tool is registered, removed or
    /// republished, in the dispatcher or in any session (a toolset that re-listed its
    /// tools, a per-session toolset that started or stopped). A host that tells its clients
    /// when their tool list changes (MCP's `notifications/tools/list_changed`) waits on it
    /// and compares [`Dispatcher::definitions_for_session`] before and after: a change in
    /// another session, or one the session's visibility hides, leaves its list as it was.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let dispatcher = dispatcher_core::Dispatcher::new();
    /// let mut changes = dispatcher.watch_tools();
    /// dispatcher.unregister("nothing");          // nothing removed: no change
    /// assert!(!changes.has_changed().unwrap());
    /// # }
    /// ```
    pub fn watch_tools(&self) -> tokio::sync::watch::Receiver<u64> {
        self.engine.changes.subscribe()
    }

    /// The tools `session` may see, ranked for `query` (words, as a model would ask: "what
    /// time is it in Tokyo"), best first, at most `limit`: each with its full definition,
    /// so a host that lists only a few tools can hand the found ones to its model (MCP
    /// progressive discovery; a model API's deferred tool loading). A tool the session's
    /// visibility hides is never found; a query that is exactly a tool's name ranks that
    /// tool first. The session's index is rebuilt when a tool arrives, leaves or changes
    /// ([`Dispatcher::watch_tools`]), and kept until then.
    ///
    /// ```
    /// # let dispatcher = dispatcher_core::Dispatcher::new();
    /// # let ws = tempfile::tempdir().unwrap();
    /// # let session = dispatcher.open_session(dispatcher_core::SessionSpec::new("s", ws.path())).unwrap();
    /// let found = dispatcher.search_tools(&session, "what time is it", 5);
    /// assert!(found.len() <= 5);
    /// ```
    pub fn search_tools(&self, session: &Session, query: &str, limit: usize) -> Vec<FoundTool> {
        let generation = *self.engine.changes.borrow();
        let meanings = self
            .engine
            .meanings
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        session
            .state
            .search
            .index(generation, meanings, || self.listing_for_session(session))
            .search(query, limit)
    }

    /// Ranks [`Dispatcher::search_tools`]'s results by meaning as well as by words, with
    /// `encoder` (a sentence embedding model; `None`: by words only, the default). Each
    /// session's index is built again at its next search: every tool's text (its name's
    /// words and its description) is encoded once, on every core, and its vector kept
    /// until the tool changes; each search then encodes its query. Where words alone miss
    /// ("make a new folder" and `create_directory` share none), meaning finds; where a
    /// query names what a tool's text says, words keep it high.
    pub fn set_text_encoder(&self, encoder: Option<Arc<dyn TextEncoder>>) {
        *self
            .engine
            .meanings
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            encoder.map(|e| Arc::new(search::Meanings::new(e)));
    }

    /// Like [`Dispatcher::definitions_for_session`], with each tool's source.
    pub fn listing_for_session(&self, session: &Session) -> Vec<ToolListing> {
        let e = &self.engine;
        let rules = e.rules();
        let mut listing =
            session
                .state
                .listing(&e.registry, &e.settings.capabilities, rules.as_deref());
        // A tool whose calls are routed to the remote host runs there.
        if let Some(remote) = &e.settings.remote {
            for l in &mut listing {
                if crate::config::sandbox_mode(&e.config().sandbox, &l.definition.name)
                    == SandboxMode::Remote
                {
                    l.placement = tool_api::Placement::Remote {
                        url: remote.describe(),
                    };
                }
            }
        }
        listing
    }

    /// Opens a session over a workspace (which must exist). Opening an id that is already
    /// open returns the open session if the workspace is the same.
    pub fn open_session(&self, spec: SessionSpec) -> Result<Session, SessionError> {
        self.engine.open_session(spec).map(Session::new)
    }

    /// The open session with this id.
    pub fn session(&self, id: &str) -> Option<Session> {
        self.engine.session(id).map(Session::new)
    }

    /// The ids of the open sessions, sorted (e.g. to close them all at shutdown).
    pub fn session_ids(&self) -> Vec<String> {
        self.engine.session_ids()
    }

    /// Cancels the session's calls, stops the toolset instances it started, and forgets it.
    /// Returns whether it was open. Shared toolsets keep running.
    pub async fn close_session(&self, id: &str) -> bool {
        self.cancel_session_tools(id).await;
        self.engine.remove_session(id).await
    }

    /// The call `call` in `session`, ready to [`run`](Invocation::run); its tool is looked
    /// up now. Use it instead of [`Dispatcher::dispatch`] to watch the call's own events.
    pub fn invocation(&self, call: ToolUse, session: &Session) -> Invocation {
        Invocation::new(&self.engine, session, call)
    }

    /// Runs one call through the whole pipeline. Never fails: every outcome, including
    /// an unknown tool, invalid input, a denial, a timeout or a panic, is a result block.
    ///
    /// The call is made (and its tool looked up) when this is called; the future owns it
    /// and borrows neither the dispatcher nor the session, so it can be spawned.
    ///
    /// ```
    /// use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let dispatcher = Dispatcher::new();
    /// let session = dispatcher.open_session(SessionSpec::new("s", std::env::temp_dir())).unwrap();
    /// let call = ToolUse::new("tu_1", "no_such_tool", json!({}));
    /// let task = tokio::spawn(dispatcher.dispatch(call, &session));
    /// drop(session);
    /// let result = task.await.unwrap();
    /// assert!(result.is_error());
    /// assert_eq!(result.tool_use_id, "tu_1");
    /// # });
    /// ```
    pub fn dispatch(
        &self,
        call: ToolUse,
        session: &Session,
    ) -> impl Future<Output = ToolResultBlock> + Send + 'static {
        self.invocation(call, session).run()
    }

    /// A new, empty batch for the calls of one assistant message in `session`
    /// ([`Batch`]). Must be called inside a tokio runtime; its calls run on that runtime.
    pub fn batch(&self, session: &Session) -> Batch {
        Batch::new(&self.engine, session)
    }

    /// Runs the calls of one assistant message and returns their results in call order:
    /// a [`Batch`] with every call pushed at once.
    pub async fn dispatch_batch(
        &self,
        calls: Vec<ToolUse>,
        session: &Session,
    ) -> Vec<ToolResultBlock> {
        let batch = self.batch(session);
        for call in calls {
            batch.push(call);
        }
        batch.finish().await
    }

    /// The events of every session of every instance sharing the store (this instance's
    /// only, over a process-local store): what a console that watches them all follows.
    pub fn subscribe_everywhere(&self) -> shared::EventsEverywhere {
        shared::EventsEverywhere::new(&self.engine)
    }

    /// Events of every session.
    pub fn subscribe_all(&self) -> tokio::sync::broadcast::Receiver<Arc<ToolEvent>> {
        self.engine.events.subscribe()
    }

    /// Events of one session, if it is open.
    pub fn subscribe(
        &self,
        session_id: &str,
    ) -> Option<tokio::sync::broadcast::Receiver<Arc<ToolEvent>>> {
        self.engine
            .session(session_id)
            .map(|s| s.events.subscribe())
    }

    /// Cancels one call in flight, by its tool_use id (e.g. on an MCP `notifications/cancelled`),
    /// and waits until it has reported `cancelled`. Returns whether such a call was found.
    /// A call that cannot wait (inline, never queued) completes before it could be cancelled.
    pub async fn cancel_call(&self, session_id: &str, tool_use_id: &str) -> bool {
        let calls = self.signal_cancel(session_id, tool_use_id);
        for call in &calls {
            call.finished().await;
        }
        !calls.is_empty()
    }

    /// Like [`Dispatcher::cancel_call`] but does not wait: for the task that is itself
    /// driving the call's `dispatch` future (which must keep polling it to see it end).
    pub fn request_cancel(&self, session_id: &str, tool_use_id: &str) -> bool {
        !self.signal_cancel(session_id, tool_use_id).is_empty()
    }

    fn signal_cancel(&self, session_id: &str, tool_use_id: &str) -> Vec<Arc<session::InFlight>> {
        let Some(state) = self.engine.session(session_id) else {
            return Vec::new();
        };
        state.cancel_call(tool_use_id)
    }

    /// The user's interrupt: cancels every call in flight in the session (reason `user`):
    /// sets each call's cancellation signal, calls its tool's `cancel()`, and waits until
    /// each call has reported `cancelled` (a tool that does not stop within the grace period
    /// is abandoned with a WARN log). Calls of the session's batches that have not started
    /// are cancelled too, and so are calls pushed to those batches later. A running call of
    /// an `interrupt = block` tool runs to completion (and this waits for it). Returns how
    /// many calls were cancelled.
    pub async fn cancel_session_tools(&self, session_id: &str) -> usize {
        let Some(state) = self.engine.session(session_id) else {
            return 0;
        };
        let (queued, calls) = state.interrupt();
        for call in &calls {
            call.finished().await;
        }
        queued + calls.len()
    }
}
