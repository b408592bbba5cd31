//! A component's tools as the dispatcher sees them: [`ToolFactory`]s whose every call runs
//! in a fresh instance, or in one kept from an earlier call when the component asked for
//! reuse.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tool_api::{Content, Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput};

use super::{WasmPlugin, new_store, trap_message};
use crate::bindings;
use crate::call::{CallState, from_wit};
use crate::caller::Caller;

/// How many instances a component that asked for reuse keeps between calls, at most: past
/// it, an instance that ends a call is dropped (one per call running at once is what reuse
/// needs; each holds its pool slot and its memory).
pub const KEPT_INSTANCES: usize = 4;

/// How many calls one kept instance runs before it is dropped for a fresh one, so that
/// whatever a component leaks per call (memory, handles it never drops) stays bounded.
pub const CALLS_PER_KEPT_INSTANCE: u32 = 10_000;

/// An instance that ended a call cleanly, kept for another.
pub(crate) struct Kept {
    store: wasmtime::Store<CallState>,
    plugin: bindings::Plugin,
    calls: u32,
}

impl WasmPlugin {
    /// Whether calls run in instances kept from earlier calls (`instances = "reused"` in
    /// the package's manifest): a component's language runtime then starts once per
    /// instance instead of once per call, and what a call leaves in the component's memory
    /// the next call may see. An instance that trapped, ran out of memory, or was stopped
    /// by a cancel or timeout is never kept.
    pub fn reuse_instances(mut self, reuse: bool) -> Self {
        self.kept = reuse.then(|| Mutex::new(Vec::new()));
        self
    }

    /// Whether this component's instances are reused ([`WasmPlugin::reuse_instances`]).
    pub fn reuses_instances(&self) -> bool {
        self.kept.is_some()
    }

    fn take_kept(&self) -> Option<Kept> {
        self.kept
            .as_ref()?
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Keeps an instance whose call ended cleanly, if there is room.
    fn keep(&self, mut kept: Kept) {
        let Some(list) = &self.kept else { return };
        kept.store.data_mut().end();
        if kept.calls >= CALLS_PER_KEPT_INSTANCE {
            return;
        }
        let mut list = list.lock().unwrap_or_else(PoisonError::into_inner);
        if list.len() < KEPT_INSTANCES {
            list.push(kept);
        }
    }

    /// One factory per tool, registered under `source` (`plugin:NAME`).
    pub fn factories(self: &Arc<Self>, source: &str) -> Vec<Arc<dyn ToolFactory>> {
        self.definitions
            .iter()
            .map(|definition| {
                Arc::new(WasmToolFactory {
                    plugin: self.clone(),
                    definition: definition.clone(),
                    source: source.to_string(),
                }) as Arc<dyn ToolFactory>
            })
            .collect()
    }

    /// Runs one call of `tool` in a fresh instance. `cancel` (or the context's own
    /// cancellation) stops it at its next loop back-edge or function entry.
    pub fn execute(
        &self,
        tool: &str,
        input: &Value,
        ctx: &ToolContext,
        cancel: Arc<AtomicBool>,
    ) -> Result<ToolOutput, ToolError> {
        let caller = Caller {
            plugin: self.name.clone(),
            tool: self
                .definitions
                .iter()
                .find(|d| d.name == tool)
                .map(|d| (tool.to_string(), d.side_effects)),
            hosts: self.http_hosts.clone(),
        };
        let input = serde_json::to_string(input).map_err(|e| ToolError::internal(e.to_string()))?;
        let (mut store, warm, calls) = match self.take_kept() {
            Some(kept) => {
                let mut store = kept.store;
                store.data_mut().begin(ctx.clone(), cancel, caller);
                store.set_epoch_deadline(1);
                (store, Some(kept.plugin), kept.calls)
            }
            None => {
                let state = CallState::new(
                    Some(ctx.clone()),
                    self.runtime.limits.memory_bytes,
                    cancel,
                    caller,
                );
                (new_store(&self.runtime, state), None, 0)
            }
        };
        // A cancel that came before the store existed bumped an epoch this store never
        // waited for: it is seen here instead (one after this is seen at the next epoch).
        if store.data().stop_requested() {
            return Err(ToolError::Cancelled(format!(
                "tool '{tool}' was cancelled before it started"
            )));
        }
        let plugin = match warm {
            Some(plugin) => plugin,
            None => match self.pre.instantiate(&mut store) {
                Ok(plugin) => plugin,
                // The pool of instances is full (not the tool's fault, and said so), or the
                // component's own start-up failed.
                Err(e) => {
                    let detail = format!("{e:#}");
                    let advice = if detail.contains("concurrent") {
                        format!(
                            " Too many WebAssembly calls are running at once (at most {}); try again when some have ended.",
                            crate::runtime::POOLED_INSTANCES
                        )
                    } else {
                        String::new()
                    };
                    return Err(ToolError::Failed(format!(
                        "tool '{tool}' (WebAssembly plugin '{}') could not start: {}.{advice}",
                        self.name,
                        trap_message(&e, store.data())
                    )));
                }
            },
        };
        let result = plugin
            .toolhost_plugin_tools()
            .call_execute(&mut store, tool, &input);
        let state = store.data();
        let (stdout, stderr) = state.stdio();
        if !stdout.is_empty() || !stderr.is_empty() {
            tracing::debug!(plugin = %self.name, tool, stdout, stderr, "component output");
        }
        // Only an instance that returned (a result or its own error) in the call's time,
        // within its memory, is fit for another call.
        let clean = result.is_ok() && !state.stop_requested() && !state.limits.refused;
        let outcome = match result {
            _ if state.stop_requested() && !matches!(result, Ok(Ok(_))) => {
                Err(ToolError::Cancelled(format!("tool '{tool}' was stopped")))
            }
            Ok(Ok(output)) => Ok(converted(output, &state.files_modified)),
            Ok(Err(e)) => Err(with_refusals(from_wit(e), &state.gate.refused)),
            Err(e) => {
                tracing::warn!(plugin = %self.name, tool, error = format!("{e:?}"), "component trapped");
                let again = if self.reuses_instances() {
                    "the next call starts in another instance"
                } else {
                    "the next call starts afresh"
                };
                Err(ToolError::Failed(format!(
                    "tool '{tool}' (WebAssembly plugin '{}') crashed: {}. The call was ended; {again}.",
                    self.name,
                    trap_message(&e, state)
                )))
            }
        };
        if clean {
            self.keep(Kept {
                store,
                plugin,
                calls: calls + 1,
            });
        }
        outcome
    }
}

/// A tool's error, with why its HTTP requests were refused (the component itself only
/// learns that they were).
fn with_refusals(e: ToolError, refused: &[String]) -> ToolError {
    if refused.is_empty() {
        return e;
    }
    let note = format!(" (outgoing HTTP refused: {})", refused.join("; "));
    match e {
        ToolError::Failed(m) => ToolError::Failed(m + &note),
        ToolError::InvalidInput(m) => ToolError::InvalidInput(m + &note),
        ToolError::PermissionDenied(m) => ToolError::PermissionDenied(m + &note),
        ToolError::Cancelled(m) => ToolError::Cancelled(m),
        ToolError::Internal(m) => ToolError::Internal(m + &note),
    }
}

fn converted(output: bindings::ToolOutput, files: &[String]) -> ToolOutput {
    let content = output
        .content
        .into_iter()
        .map(|c| match c {
            bindings::Content::Text(text) => Content::Text { text },
            bindings::Content::Image(image) => Content::Image {
                mime: image.mime,
                data: image.data,
            },
        })
        .collect();
    let metadata = if output.metadata.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&output.metadata).unwrap_or(Value::String(output.metadata))
    };
    ToolOutput {
        content,
        success: output.success,
        metadata,
        files_modified: (!files.is_empty()).then(|| files.to_vec()),
        command_executed: None,
    }
}

/// Makes [`WasmTool`]s for one tool of a component.
struct WasmToolFactory {
    plugin: Arc<WasmPlugin>,
    definition: ToolDefinition,
    source: String,
}

impl ToolFactory for WasmToolFactory {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(WasmTool {
            plugin: self.plugin.clone(),
            name: self.definition.name.clone(),
            cancel: Arc::new(AtomicBool::new(false)),
        }))
    }

    fn source(&self) -> &str {
        &self.source
    }

    fn version(&self) -> Option<&str> {
        Some(&self.plugin.version)
    }

    fn placement(&self) -> tool_api::Placement {
        let network = self.definition.side_effects == tool_api::SideEffect::Network;
        tool_api::Placement::Wasm {
            http_hosts: if network {
                self.plugin.http_hosts.entries()
            } else {
                Vec::new()
            },
        }
    }
}

/// One call of a component's tool.
struct WasmTool {
    plugin: Arc<WasmPlugin>,
    name: String,
    cancel: Arc<AtomicBool>,
}

impl Tool for WasmTool {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.plugin
            .execute(&self.name, &input, ctx, self.cancel.clone())
    }

    fn cancel(&self) -> bool {
        self.cancel.store(true, Ordering::Release);
        // Every running store checks its own call at the next epoch.
        self.plugin.runtime.engine.increment_epoch();
        true
    }
}
