//! # dispatcher-core: one pipeline for every tool call
//!
//! The [`Dispatcher`] registers tools (as [`ToolFactory`]s: it never knows whether a tool is
//! built in, a plugin or an MCP server), and turns every `tool_use` block of a model into a
//! [`ToolResultBlock`], never an error. For each call, in order:
//!
//! 1. **look up** the name among the tools visible to the session → `not_found`, listing
//!    the available tools;
//! 2. **validate** the input against the compiled schema → `validation_error` with every
//!    violation and its JSON pointer (event `tool.input_invalid`);
//! 3. **scope** the path arguments ([`tool_api::ToolDefinition::path_params`]) to the
//!    workspace → `permission_denied`;
//! 4. **hooks and policy**: pre-use hooks ([`hooks`]) may allow, deny, ask or rewrite the
//!    input (a rewrite is validated and scoped again), then the confirmation policy
//!    ([`policy`]) decides; a `prompt` waits for an answer through the
//!    [`ConfirmationBroker`] → `user_denied`, `confirmation_timeout` (default 5 min). A
//!    hook's allow never bypasses a `deny` in the policy;
//! 5. **grant**: the runtime policy ([`runtime`]) says where the call runs (only `host`
//!    exists; another sandbox mode is refused, `permission_denied`) and its limits
//!    (timeout, result size);
//! 6. wait for a place under the **per-tool cap** (if configured) and the session's
//!    **concurrency cap** (default 4), emit `tool.called`, make a **fresh instance**, and
//!    **execute** under the granted timeout (default 60 s; 600 s for `execute`/`network`)
//!    → `tool.completed` or `tool.failed`; live output becomes `tool.output_delta` events;
//! 7. **post-use hooks** may annotate or replace the result, and a result over its size
//!    cap is **spooled** to a file under the session's data directory: the model gets a
//!    preview, the size and the path, which `read_file` pages through ([`spool`]);
//! 8. **cancellation** ([`Dispatcher::cancel_session_tools`]) sets the call's signal, calls
//!    the tool's `cancel()`, and abandons a tool that does not stop within the grace period
//!    (default 30 s) with a WARN log → `cancelled`, with the reason (`user`,
//!    `sibling_error`, `aborted`). A running tool whose interrupt behaviour is `block`
//!    runs to completion.
//!
//! An unexpected failure inside a tool (a panic, [`tool_api::ToolError::Internal`]) is
//! logged at ERROR with its detail and reported to the model with a redacted message.
//!
//! ```
//! use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
//! use serde_json::{json, Value};
//! use tool_api::*;
//!
//! #[derive(Default)]
//! struct Add;
//! impl Tool for Add {
//!     fn execute(&self, input: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
//!         Ok(ToolOutput::text((input["a"].as_i64().unwrap_or(0) + input["b"].as_i64().unwrap_or(0)).to_string()))
//!     }
//! }
//! impl DefinedTool for Add {
//!     fn definition() -> ToolDefinition {
//!         ToolDefinition::new("add", "Add two integers.", SideEffect::None, json!({
//!             "type": "object",
//!             "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
//!             "required": ["a", "b"]
//!         })).inline()
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dispatcher = Dispatcher::new();
//! dispatcher.register(factory::<Add>()).unwrap();
//! let dir = std::env::temp_dir();
//! let session = dispatcher.open_session(SessionSpec::new("s1", &dir)).unwrap();
//!
//! let ok = dispatcher.dispatch(ToolUse::new("tu_1", "add", json!({"a": 2, "b": 3})), &session).await;
//! assert_eq!((ok.text().as_str(), ok.is_error), ("5", false));
//!
//! let bad = dispatcher.dispatch(ToolUse::new("tu_2", "add", json!({"a": "x"})), &session).await;
//! assert!(bad.is_error);
//! assert!(bad.text().contains("/a"));
//! # });
//! ```
//!
//! Calls of one assistant message go through a [`Batch`] ([`Dispatcher::batch`], fed as
//! the model streams its tool_use blocks) or [`Dispatcher::dispatch_batch`]: safe calls run
//! concurrently, unsafe ones alone and in order, and results come back in call order
//! ([`schedule`]). [`anthropic_user_message`] and [`openai_tool_messages`] render results
//! in the two common provider shapes.
//!
//! # Decisions where DESIGN.md is silent
//!
//! - A session's data directory defaults to `.toolhost/sessions/<id>/` *inside* the
//!   workspace, so the model can read spooled results back with `read_file` (which stays
//!   workspace-scoped); a `.gitignore` in `.toolhost/` keeps it out of version control.
//!   Hosts can put it elsewhere with [`SessionSpec::data_dir`].
//! - A user interrupt ([`Dispatcher::cancel_session_tools`]) also cancels the calls of the
//!   session's batches that have not started, and those pushed to them later.
//! - Command hooks fail open: exit codes other than 0 and 2, crashes and timeouts are
//!   logged at WARN and let the call go on (a hook blocks only by saying so, with exit 2).
//! - Events report what the tool did: post-use hooks and spooling change the result the
//!   model gets, not the `tool.completed`/`tool.failed` event.

pub mod confirmation;
mod dispatch;
pub mod error;
pub mod events;
pub mod hooks;
mod host;
pub mod policy;
mod registry;
pub mod result;
pub mod runtime;
pub mod schedule;
pub mod schema;
pub mod session;
pub mod spool;
pub mod toolset;
pub mod workspace;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

pub use confirmation::{
    ConfirmationBroker, ConfirmationRequest, Confirmer, Decision, ResolveError,
};
pub use error::{CancelReason, ErrorClass, RegistrationError, SessionError};
pub use events::{EventKind, ToolEvent};
pub use hooks::{
    CommandHook, HookCall, HookDecision, PostDecision, PostUseCall, PostUseHook, PreUseHook,
};
pub use policy::{ConfirmationPolicy, Mode};
pub use registry::is_valid_tool_name;
pub use result::{ToolResultBlock, ToolUse, anthropic_user_message, openai_tool_messages};
pub use runtime::{Grant, GrantRequest, RuntimePolicy, SandboxMode};
pub use schedule::{Batch, OnExecuteError};
pub use session::{Session, SessionSpec, Visibility};
pub use tool_api::{InterruptBehavior, SideEffect, ToolDefinition, ToolFactory};
pub use toolset::{Toolset, ToolsetBinding, ToolsetDef, ToolsetFactory};
pub use workspace::{FsError, Workspace};

use crate::events::EventChannel;
use crate::registry::Registered;
use crate::session::SessionState;

/// Limits and timeouts of a dispatcher. Every field has a default.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Calls of one session that may execute at once (default 4).
    pub max_concurrency: usize,
    /// Timeout of `none`/`read`/`write` tools that declare none (default 60 s).
    pub default_timeout: Duration,
    /// Timeout of `execute`/`network` tools that declare none (default 600 s).
    pub execute_timeout: Duration,
    /// Per-tool timeouts; win over the tool's own declaration.
    pub tool_timeouts: HashMap<String, Duration>,
    /// How long a confirmation may wait for an answer (default 5 min).
    pub confirmation_timeout: Duration,
    /// How long a cancelled tool may take to stop before it is abandoned (default 30 s).
    pub cancel_grace: Duration,
    /// Calls slower than this log a warning (default 10 s).
    pub slow_call_threshold: Duration,
    /// Characters of text a result may have (default 100 000). Beyond it the full output
    /// is spooled to a file and the model gets a preview, the size and the path ([`spool`]).
    pub max_result_chars: usize,
    /// Per-tool result caps; win over `max_result_chars`.
    pub tool_result_chars: HashMap<String, usize>,
    /// Characters of a spooled result shown inline (default 2 000).
    pub result_preview_chars: usize,
    /// Between a toolset's prefix and a tool name in published names (default `__`).
    pub toolset_separator: String,
    /// Per-tool concurrency caps in each session, on top of `max_concurrency`
    /// (e.g. `shell = 1`: one command at a time).
    pub tool_concurrency: HashMap<String, usize>,
    /// What a failed `execute` call does to the rest of its batch (default `continue`).
    pub on_execute_error: OnExecuteError,
    /// Per-tool interrupt behaviour; wins over the tool's own declaration.
    pub interrupt: HashMap<String, InterruptBehavior>,
    /// Where calls run (default and only supported mode: `host`).
    pub sandbox: SandboxMode,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            max_concurrency: 4,
            default_timeout: Duration::from_secs(60),
            execute_timeout: Duration::from_secs(600),
            tool_timeouts: HashMap::new(),
            confirmation_timeout: Duration::from_secs(300),
            cancel_grace: Duration::from_secs(30),
            slow_call_threshold: Duration::from_secs(10),
            max_result_chars: 100_000,
            tool_result_chars: HashMap::new(),
            result_preview_chars: spool::DEFAULT_PREVIEW_CHARS,
            toolset_separator: "__".to_string(),
            tool_concurrency: HashMap::new(),
            on_execute_error: OnExecuteError::Continue,
            interrupt: HashMap::new(),
            sandbox: SandboxMode::Host,
        }
    }
}

/// Builds a [`Dispatcher`].
#[derive(Default)]
pub struct DispatcherBuilder {
    config: DispatcherConfig,
    policy: ConfirmationPolicy,
    capabilities: HashSet<String>,
    hooks: Vec<Arc<dyn PreUseHook>>,
    post_hooks: Vec<Arc<dyn PostUseHook>>,
    runtime: Option<Arc<dyn RuntimePolicy>>,
    confirmers: Vec<Arc<dyn Confirmer>>,
}

impl DispatcherBuilder {
    /// Sets limits and timeouts.
    pub fn config(mut self, config: DispatcherConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the confirmation policy (default: none/read auto, the rest prompt).
    pub fn policy(mut self, policy: ConfirmationPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Enables a capability: tools that require it become visible.
    pub fn capability(mut self, capability: impl Into<String>) -> Self {
        self.capabilities.insert(capability.into());
        self
    }

    /// Adds a pre-use hook ([`hooks`]); hooks run in the order added.
    pub fn hook(mut self, hook: Arc<dyn PreUseHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Adds a post-use hook ([`hooks`]); hooks run in the order added.
    pub fn post_hook(mut self, hook: Arc<dyn PostUseHook>) -> Self {
        self.post_hooks.push(hook);
        self
    }

    /// Sets the runtime policy that grants each call its sandbox and limits ([`runtime`]).
    pub fn runtime(mut self, policy: Arc<dyn RuntimePolicy>) -> Self {
        self.runtime = Some(policy);
        self
    }

    /// Adds a client that answers confirmation requests.
    pub fn confirmer(mut self, confirmer: Arc<dyn Confirmer>) -> Self {
        self.confirmers.push(confirmer);
        self
    }

    /// The dispatcher.
    pub fn build(self) -> Dispatcher {
        Dispatcher {
            inner: Arc::new(Inner {
                config: self.config,
                policy: self.policy,
                capabilities: self.capabilities,
                hooks: self.hooks,
                post_hooks: self.post_hooks,
                runtime: self.runtime,
                confirmers: self.confirmers,
                broker: ConfirmationBroker::default(),
                registry: RwLock::new(HashMap::new()),
                toolsets: RwLock::new(Vec::new()),
                sessions: Mutex::new(HashMap::new()),
                events: EventChannel::new(),
                next_request: AtomicU64::new(1),
            }),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) config: DispatcherConfig,
    pub(crate) policy: ConfirmationPolicy,
    pub(crate) capabilities: HashSet<String>,
    pub(crate) hooks: Vec<Arc<dyn PreUseHook>>,
    pub(crate) post_hooks: Vec<Arc<dyn PostUseHook>>,
    pub(crate) runtime: Option<Arc<dyn RuntimePolicy>>,
    pub(crate) confirmers: Vec<Arc<dyn Confirmer>>,
    pub(crate) broker: ConfirmationBroker,
    registry: RwLock<HashMap<Arc<str>, Arc<Registered>>>,
    toolsets: RwLock<Vec<ToolsetDef>>,
    sessions: Mutex<HashMap<Arc<str>, Arc<SessionState>>>,
    pub(crate) events: EventChannel,
    pub(crate) next_request: AtomicU64,
}

/// The tool dispatcher. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Dispatcher {
    pub(crate) inner: Arc<Inner>,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Dispatcher::new()
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("tools", &self.read_registry().len())
            .finish_non_exhaustive()
    }
}

/// A visible tool with where it comes from.
#[derive(Debug, Clone)]
pub struct ToolListing {
    /// The definition, under its published name.
    pub definition: ToolDefinition,
    /// Its source (`builtin`, `plugin:NAME`, `mcp:ID`, …).
    pub source: String,
    /// The toolset it belongs to, if any.
    pub toolset: Option<String>,
    /// Its name inside the toolset (what the toolset itself calls it).
    pub original_name: Option<String>,
}

impl Dispatcher {
    /// A dispatcher with default config and policy.
    pub fn new() -> Dispatcher {
        Dispatcher::builder().build()
    }

    /// A builder.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder::default()
    }

    /// The limits in force.
    pub fn config(&self) -> &DispatcherConfig {
        &self.inner.config
    }

    /// The confirmation policy in force.
    pub fn policy(&self) -> &ConfirmationPolicy {
        &self.inner.policy
    }

    /// The broker through which clients answer confirmation requests.
    pub fn broker(&self) -> &ConfirmationBroker {
        &self.inner.broker
    }

    fn read_registry(&self) -> RwLockReadGuard<'_, HashMap<Arc<str>, Arc<Registered>>> {
        self.inner
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<SessionState>>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a tool. Refuses an invalid name, a name already taken (naming both
    /// sources), a schema outside the subset (naming the construct and its JSON pointer),
    /// and path parameters the schema does not declare.
    pub fn register(&self, factory: Arc<dyn ToolFactory>) -> Result<(), RegistrationError> {
        let prepared = registry::prepare(factory)?;
        let mut tools = self
            .inner
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = tools.get(&prepared.name) {
            return Err(RegistrationError::Duplicate {
                name: prepared.name.to_string(),
                existing_source: existing.factory.source().to_string(),
                new_source: prepared.factory.source().to_string(),
            });
        }
        tools.insert(prepared.name.clone(), Arc::new(prepared));
        Ok(())
    }

    /// Registers a toolset. A shared toolset's tools are published at once (all or none);
    /// a per-session toolset starts in each session that enables it. Refuses a duplicate id
    /// or prefix, an invalid prefix, and any tool the dispatcher would refuse.
    pub fn register_toolset(&self, def: ToolsetDef) -> Result<(), RegistrationError> {
        let sep = self.inner.config.toolset_separator.clone();
        {
            let toolsets = self
                .inner
                .toolsets
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if toolsets.iter().any(|t| t.id == def.id) {
                return Err(RegistrationError::Toolset {
                    id: def.id.clone(),
                    message: "a toolset with this id is already registered".into(),
                });
            }
            if let Some(p) = &def.prefix {
                if !toolset::is_publishable(p, "") || p.len() > 32 {
                    return Err(RegistrationError::Toolset {
                        id: def.id.clone(),
                        message: format!("prefix '{p}' must be 1-32 letters, digits, '_' or '-'"),
                    });
                }
                if let Some(other) = toolsets.iter().find(|t| t.prefix.as_deref() == Some(p)) {
                    return Err(RegistrationError::Toolset {
                        id: def.id.clone(),
                        message: format!("prefix '{p}' is already used by toolset '{}'", other.id),
                    });
                }
            }
        }
        if let ToolsetBinding::Shared(instance) = &def.binding {
            self.publish_shared(&def, instance.as_ref(), &sep)?;
        }
        self.inner
            .toolsets
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(def);
        Ok(())
    }

    fn prepare_toolset_tools(
        &self,
        def: &ToolsetDef,
        instance: &dyn Toolset,
        sep: &str,
        taken: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Registered>, RegistrationError> {
        let toolset_id: Arc<str> = Arc::from(def.id.as_str());
        let mut prepared: Vec<Registered> = Vec::new();
        for factory in instance.tools() {
            let tool = factory.definition().name.clone();
            let published = toolset::publish_name(def.prefix.as_deref(), sep, &tool, |n| {
                taken(n) || prepared.iter().any(|p| &*p.name == n)
            });
            if taken(&published) || prepared.iter().any(|p| *p.name == *published) {
                return Err(RegistrationError::Duplicate {
                    name: published,
                    existing_source: "another tool".into(),
                    new_source: format!("toolset '{}'", def.id),
                });
            }
            prepared.push(registry::prepare_as(
                factory,
                published,
                Some((toolset_id.clone(), tool)),
            )?);
        }
        Ok(prepared)
    }

    fn publish_shared(
        &self,
        def: &ToolsetDef,
        instance: &dyn Toolset,
        sep: &str,
    ) -> Result<(), RegistrationError> {
        let mut tools = self
            .inner
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let prepared =
            self.prepare_toolset_tools(def, instance, sep, &|n| tools.contains_key(n))?;
        for r in prepared {
            tools.insert(r.name.clone(), Arc::new(r));
        }
        Ok(())
    }

    /// Re-reads a shared toolset's tools (e.g. after an MCP server's `tools/list_changed`)
    /// and republishes them. Returns how many tools it now has.
    pub fn refresh_toolset(&self, id: &str) -> Result<usize, RegistrationError> {
        let def = self
            .inner
            .toolsets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|t| t.id == id)
            .cloned()
            .ok_or_else(|| RegistrationError::Toolset {
                id: id.to_string(),
                message: "no toolset with this id is registered".into(),
            })?;
        let ToolsetBinding::Shared(instance) = &def.binding else {
            return Err(RegistrationError::Toolset {
                id: id.to_string(),
                message: "only shared toolsets can be refreshed; per-session ones restart with their session".into(),
            });
        };
        let sep = self.inner.config.toolset_separator.clone();
        let mut tools = self
            .inner
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        tools.retain(|_, r| r.origin.as_ref().is_none_or(|(t, _)| &**t != id));
        let prepared =
            self.prepare_toolset_tools(&def, instance.as_ref(), &sep, &|n| tools.contains_key(n))?;
        let count = prepared.len();
        for r in prepared {
            tools.insert(r.name.clone(), Arc::new(r));
        }
        Ok(count)
    }

    fn start_session_toolsets(&self, state: &SessionState) -> Result<(), SessionError> {
        let toolsets = self
            .inner
            .toolsets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let sep = self.inner.config.toolset_separator.clone();
        for wanted in &state.toolsets {
            let Some(def) = toolsets.iter().find(|t| *t.id == **wanted) else {
                state.stop_toolsets();
                return Err(SessionError::UnknownToolset {
                    id: wanted.to_string(),
                    known: toolsets
                        .iter()
                        .map(|t| t.id.clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            if let ToolsetBinding::PerSession(make) = &def.binding {
                let instance = make(&state.id).map_err(|message| {
                    state.stop_toolsets();
                    SessionError::Toolset {
                        id: def.id.clone(),
                        message,
                    }
                })?;
                let global = self.read_registry();
                let prepared = self
                    .prepare_toolset_tools(def, instance.as_ref(), &sep, &|n| {
                        global.contains_key(n) || state.session_tool(n).is_some()
                    })
                    .map_err(|e| {
                        instance.stop();
                        state.stop_toolsets();
                        SessionError::Toolset {
                            id: def.id.clone(),
                            message: e.to_string(),
                        }
                    })?;
                state.add_toolset(instance, prepared.into_iter().map(Arc::new).collect());
            }
        }
        Ok(())
    }

    /// Where an unknown name would have been routed, for the not-found message.
    pub(crate) fn route_hint(&self, name: &str, session: &SessionState) -> Option<String> {
        let sep = &self.inner.config.toolset_separator;
        let toolsets = self
            .inner
            .toolsets
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let enabled: Vec<&ToolsetDef> = toolsets
            .iter()
            .filter(|t| session.toolsets.iter().any(|e| **e == *t.id))
            .collect();
        if let Some(ts) = enabled.iter().find(|t| {
            t.prefix
                .as_ref()
                .is_some_and(|p| name.starts_with(&format!("{p}{sep}")))
        }) {
            return Some(format!("Tool '{name}' not found in toolset '{}'.", ts.id));
        }
        let (prefix, _) = name.split_once(sep.as_str())?;
        let known: Vec<String> = enabled
            .iter()
            .filter_map(|t| {
                t.prefix
                    .as_ref()
                    .map(|p| format!("{} (prefix {p}{sep})", t.id))
            })
            .collect();
        Some(format!(
            "Toolset '{prefix}' not found. Known toolsets: {}.",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    }

    /// Removes a tool; calls already running finish. Returns whether it was registered.
    pub fn unregister(&self, name: &str) -> bool {
        self.inner
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
            .is_some()
    }

    fn visible(&self, reg: &Registered, session: &SessionState) -> bool {
        reg.origin
            .as_ref()
            .is_none_or(|(toolset, _)| session.toolsets.iter().any(|t| t == toolset))
            && session.visibility.allows(&reg.name)
            && reg
                .definition()
                .requires_capability
                .as_ref()
                .is_none_or(|c| self.inner.capabilities.contains(c))
    }

    pub(crate) fn lookup(&self, name: &str, session: &SessionState) -> Option<Arc<Registered>> {
        if let Some(r) = session.session_tool(name) {
            return Some(r).filter(|r| self.visible(r, session));
        }
        self.read_registry()
            .get(name)
            .filter(|r| self.visible(r, session))
            .cloned()
    }

    /// The tools a session may see and call, sorted by name: its visibility filter applied,
    /// and tools whose required capability the host did not enable left out.
    pub fn definitions_for_session(&self, session: &Session) -> Vec<ToolDefinition> {
        self.listing_for_session(session)
            .into_iter()
            .map(|l| l.definition)
            .collect()
    }

    /// Like [`Dispatcher::definitions_for_session`], with each tool's source.
    pub fn listing_for_session(&self, session: &Session) -> Vec<ToolListing> {
        let session_tools = session.state.session_tools();
        let global = self.read_registry();
        let mut out: Vec<ToolListing> = session_tools
            .iter()
            .chain(global.values())
            .filter(|r| self.visible(r, &session.state))
            .map(|r| ToolListing {
                definition: r.definition().clone(),
                source: r.factory.source().to_string(),
                toolset: r.origin.as_ref().map(|(t, _)| t.to_string()),
                original_name: r.origin.as_ref().map(|(_, n)| n.clone()),
            })
            .collect();
        out.sort_by(|a, b| a.definition.name.cmp(&b.definition.name));
        out
    }

    /// Opens a session over a workspace (which must exist). Opening an id that is already
    /// open returns the open session if the workspace is the same.
    pub fn open_session(&self, spec: SessionSpec) -> Result<Session, SessionError> {
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
            return Ok(Session {
                state: existing.clone(),
                turn_id: Arc::from("turn-1"),
            });
        }
        let id: Arc<str> = Arc::from(spec.id.as_str());
        let data_dir = spec
            .data_dir
            .clone()
            .unwrap_or_else(|| spool::default_data_dir(workspace.root(), &spec.id));
        let state = Arc::new(SessionState::new(
            id.clone(),
            Arc::new(workspace),
            spec.visibility,
            spec.toolsets
                .iter()
                .map(|t| Arc::from(t.as_str()))
                .collect(),
            self.inner.config.max_concurrency,
            &self.inner.config.tool_concurrency,
            data_dir,
        ));
        self.start_session_toolsets(&state)?;
        sessions.insert(id, state.clone());
        Ok(Session {
            state,
            turn_id: Arc::from("turn-1"),
        })
    }

    /// The open session with this id.
    pub fn session(&self, id: &str) -> Option<Session> {
        self.sessions().get(id).map(|state| Session {
            state: state.clone(),
            turn_id: Arc::from("turn-1"),
        })
    }

    /// Cancels the session's calls, stops the toolset instances it started, and forgets it.
    /// Returns whether it was open. Shared toolsets keep running.
    pub async fn close_session(&self, id: &str) -> bool {
        self.cancel_session_tools(id).await;
        let state = self.sessions().remove(id);
        match state {
            Some(state) => {
                state.stop_toolsets();
                true
            }
            None => false,
        }
    }

    /// Events of every session.
    pub fn subscribe_all(&self) -> tokio::sync::broadcast::Receiver<Arc<ToolEvent>> {
        self.inner.events.subscribe()
    }

    /// Events of one session, if it is open.
    pub fn subscribe(
        &self,
        session_id: &str,
    ) -> Option<tokio::sync::broadcast::Receiver<Arc<ToolEvent>>> {
        self.sessions()
            .get(session_id)
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
        let Some(state) = self.sessions().get(session_id).cloned() else {
            return Vec::new();
        };
        let calls: Vec<_> = state
            .inflight()
            .into_iter()
            .filter(|c| &*c.tool_use_id == tool_use_id)
            .collect();
        for call in &calls {
            call.interrupt(CancelReason::User, None);
        }
        calls
    }

    /// The user's interrupt: cancels every call in flight in the session (reason `user`):
    /// sets each call's cancellation signal, calls its tool's `cancel()`, and waits until
    /// each call has reported `cancelled` (a tool that does not stop within the grace period
    /// is abandoned with a WARN log). Calls of the session's batches that have not started
    /// are cancelled too, and so are calls pushed to those batches later. A running call of
    /// an `interrupt = block` tool runs to completion (and this waits for it). Returns how
    /// many calls were cancelled.
    pub async fn cancel_session_tools(&self, session_id: &str) -> usize {
        let Some(state) = self.sessions().get(session_id).cloned() else {
            return 0;
        };
        let queued: usize = state.batches().iter().map(|b| b.interrupt()).sum();
        let calls = state.inflight();
        for call in &calls {
            call.interrupt(CancelReason::User, None);
        }
        for call in &calls {
            call.finished().await;
        }
        queued + calls.len()
    }
}
