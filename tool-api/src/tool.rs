//! The traits a tool implements ([`Tool`], [`DefinedTool`]) and the one the host sees
//! ([`ToolFactory`]).

use std::sync::Arc;

use serde_json::Value;

use crate::context::ToolContext;
use crate::definition::ToolDefinition;
use crate::output::{ToolError, ToolOutput};

/// A tool instance. The host makes a fresh one for every call (see [`ToolFactory`]), so
/// per-call state (a child process, a counter) can live in `self`.
///
/// # Where `execute` runs: the inline rule
///
/// A tool whose definition says [`ToolDefinition::inline`] runs directly on the host's
/// async worker thread, with no thread handoff (about 20 µs saved per call). That is only
/// right for work that is **pure and quick**: no file, network or process I/O, no sleeping,
/// no locks that can be held long, and well under a millisecond of CPU. An inline call can
/// not be interrupted by its timeout in process. Every other tool runs on a blocking thread,
/// where timeouts and cancellation reach it and it may block as long as it likes.
///
/// A host may run a plugin *isolated*, in a worker process of its own: then an inline tool
/// runs on the worker's reading thread, its call still ends at its timeout, and a tool that
/// ignores cancellation past the host's grace period has its worker killed. A crash, an
/// `abort()` or a memory bomb then ends only that plugin's calls. The same library works
/// both ways; nothing in this crate changes.
///
/// # Cancellation
///
/// [`Tool::cancel`] is called from another thread while `execute` runs. It must be
/// idempotent and quick: set a flag, signal a child process. Tools that loop should also
/// poll [`ToolContext::is_cancelled`].
///
/// # Errors
///
/// Return `Ok(ToolOutput)` for results, including handled failures
/// (`ToolOutput::failure`), and `Err(ToolError)` when the tool could not do its job. A panic
/// is contained by the host and reported as an internal error.
pub trait Tool: Send + Sync {
    /// Runs the call. `input` has already been validated against the definition's schema.
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// Asks a running `execute` to stop. Returns `true` if there was something to stop.
    /// The default does nothing and returns `false`.
    fn cancel(&self) -> bool {
        false
    }

    /// Runs the call on its input as JSON text, as the input crosses the plugin ABI. The
    /// default parses the text into a [`Value`] for [`Tool::execute`]; a
    /// [`crate::TypedTool`] parses it straight into its input type, with no tree between.
    /// Implement [`Tool::execute`]; the export machinery calls this.
    fn execute_text(&self, input: &str, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input = serde_json::from_str(input)
            .map_err(|e| ToolError::InvalidInput(format!("the input is not JSON: {e}")))?;
        self.execute(input, ctx)
    }

    /// Runs the call on a borrowed input, for a host that keeps the input (to run the call
    /// again elsewhere, as a small read that turns out large is run again on a blocking
    /// thread). The default clones the input for [`Tool::execute`]; a [`crate::TypedTool`]
    /// reads its input type from it straight, copying only the strings it keeps.
    fn execute_ref(&self, input: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.execute(input.clone(), ctx)
    }

    /// Runs the call without a thread of its own, for a tool that only waits on something
    /// outside the process (a worker process, a server) and can be woken when it answers:
    /// the host then polls the returned future on its async threads, saving the two thread
    /// hand-offs of a blocking call. Return the input and context to decline (the default),
    /// and the host runs [`Tool::execute`] on a blocking thread as usual.
    ///
    /// The future must never block: anything that may wait (a file, a question to the
    /// user) belongs on a blocking thread of its own. The host races it against the call's
    /// timeout and cancellation exactly as a blocking call, calling [`Tool::cancel`], and
    /// drops it when it gives up on the call: the tool finishes stopping from its `Drop`.
    /// Hosts call this; a plugin's tools never need it.
    fn execute_async(
        self: Arc<Self>,
        input: Value,
        ctx: ToolContext,
    ) -> Result<ToolFuture, (Value, ToolContext)> {
        Err((input, ctx))
    }
}

/// A call run by [`Tool::execute_async`].
pub type ToolFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ToolOutput, ToolError>> + Send>>;

/// A tool type that knows its definition and makes fresh instances with `Default`.
///
/// This is what [`crate::export_plugin!`] and [`factory`] take.
pub trait DefinedTool: Tool + Default + 'static {
    /// The tool's definition. Called once per load, not per call.
    fn definition() -> ToolDefinition;

    /// Whether *this* call may run alongside the other calls of its assistant message,
    /// judged from its (already validated) input; `None` (the default) defers to
    /// [`ToolDefinition::is_concurrency_safe`]. Keep it quick and pure: the host asks
    /// before it schedules the call. Added in tool-api 1.2.
    ///
    /// ```
    /// # use tool_api::*;
    /// # use serde_json::{json, Value};
    /// #[derive(Default)]
    /// struct Git;
    /// # impl Tool for Git {
    /// #     fn execute(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> { Ok(ToolOutput::text("")) }
    /// # }
    /// impl DefinedTool for Git {
    ///     fn definition() -> ToolDefinition {
    ///         ToolDefinition::new("git", "Run git.", SideEffect::Execute, json!({"type": "object"}))
    ///     }
    ///     // `git status` and `git log` only read: they may run next to other reads.
    ///     fn is_concurrency_safe(input: &Value) -> Option<bool> {
    ///         Some(matches!(input["subcommand"].as_str(), Some("status" | "log")))
    ///     }
    /// }
    /// let f = factory::<Git>();
    /// assert!(f.is_concurrency_safe(&json!({"subcommand": "status"})));
    /// assert!(!f.is_concurrency_safe(&json!({"subcommand": "push"})));
    /// ```
    fn is_concurrency_safe(input: &Value) -> Option<bool> {
        let _ = input;
        None
    }
}

/// What a host registers: a definition and a way to make a fresh [`Tool`] per call.
///
/// The dispatcher never knows where a tool came from (built in, a plugin, an MCP server):
/// it only sees this trait. `create` must return a new instance each time unless the tool
/// has no per-call state at all.
pub trait ToolFactory: Send + Sync {
    /// The tool's definition.
    fn definition(&self) -> &ToolDefinition;
    /// A fresh instance for one call.
    fn create(&self) -> Result<Box<dyn Tool>, ToolError>;
    /// Where the tool comes from, for listings and messages (`builtin`, `plugin:name`, …).
    fn source(&self) -> &str {
        "builtin"
    }
    /// Whether a call with this (validated) input may run alongside other calls of the
    /// same assistant message. The default is the definition's
    /// [`ToolDefinition::is_concurrency_safe`].
    fn is_concurrency_safe(&self, input: &Value) -> bool {
        let _ = input;
        self.definition().is_concurrency_safe()
    }
    /// Where its calls run and what confines them (default: in the host's process).
    fn placement(&self) -> crate::sandbox::Placement {
        crate::sandbox::Placement::InProcess
    }
    /// The version of the plugin or server it comes from, when known (rules over calls
    /// may name it). Default: `None`.
    fn version(&self) -> Option<&str> {
        None
    }
    /// Whether its definition is held to a pinned digest (a mounted server's, with pins
    /// on): rules over calls may require it. Default: `false`.
    fn pinned(&self) -> bool {
        false
    }
    /// Whether its input schema is published as its author gave it, even outside the
    /// subset ([`crate::schema`]): a tool a gateway passes on to clients that take any
    /// JSON Schema (a mounted MCP server's, when its entry says so). Inputs are still
    /// validated against it (Draft 2020-12; references must be local). Default: `false`.
    fn schema_as_given(&self) -> bool {
        false
    }
}

/// The factory of a [`DefinedTool`] type.
pub struct TypedFactory<T> {
    definition: ToolDefinition,
    source: String,
    _tool: std::marker::PhantomData<fn() -> T>,
}

impl<T: DefinedTool> ToolFactory for TypedFactory<T> {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(T::default()))
    }

    fn source(&self) -> &str {
        &self.source
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        <T as DefinedTool>::is_concurrency_safe(input)
            .unwrap_or_else(|| self.definition.is_concurrency_safe())
    }
}

/// A factory for tool type `T`, labelled as a built-in.
///
/// ```
/// # use tool_api::*;
/// # use serde_json::{json, Value};
/// #[derive(Default)]
/// struct Echo;
/// impl Tool for Echo {
///     fn execute(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput::text(input.to_string()))
///     }
/// }
/// impl DefinedTool for Echo {
///     fn definition() -> ToolDefinition {
///         ToolDefinition::new("echo", "Echo the input.", SideEffect::None,
///             json!({"type": "object"})).inline()
///     }
/// }
/// let f = factory::<Echo>();
/// assert_eq!(f.definition().name, "echo");
/// ```
pub fn factory<T: DefinedTool>() -> Arc<dyn ToolFactory> {
    factory_from::<T>("builtin")
}

/// A factory for tool type `T` with the given source label.
pub fn factory_from<T: DefinedTool>(source: impl Into<String>) -> Arc<dyn ToolFactory> {
    Arc::new(TypedFactory::<T> {
        definition: T::definition(),
        source: source.into(),
        _tool: std::marker::PhantomData,
    })
}
