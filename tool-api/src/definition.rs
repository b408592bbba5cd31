//! What a tool declares about itself: [`ToolDefinition`] and its [`SideEffect`] class.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The highest capability a tool has, by capability and not by typical usage.
///
/// A shell that a user only ever runs `ls` with is still [`SideEffect::Execute`]; a
/// read-then-write tool is [`SideEffect::Write`]. The host's confirmation policy is keyed on
/// this class, so declaring it honestly is part of the contract.
///
/// The order of the variants is the order of risk: `None < Read < Write < Execute < Network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffect {
    /// Pure computation, no I/O (calculate, format, parse).
    None,
    /// Reads the filesystem, or queries a network without mutating anything.
    Read,
    /// Mutates the filesystem inside the workspace.
    Write,
    /// Runs arbitrary code or shell commands.
    Execute,
    /// Mutates external state over a network (POST, send a message, …).
    Network,
}

impl SideEffect {
    /// Every class, in order of risk.
    pub const ALL: [SideEffect; 5] = [
        SideEffect::None,
        SideEffect::Read,
        SideEffect::Write,
        SideEffect::Execute,
        SideEffect::Network,
    ];

    /// The lowercase wire name (`"none"`, `"read"`, …), as used in events and config.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffect::None => "none",
            SideEffect::Read => "read",
            SideEffect::Write => "write",
            SideEffect::Execute => "execute",
            SideEffect::Network => "network",
        }
    }

    /// The default execution timeout for this class: 600 s for `execute` and `network`,
    /// 60 s otherwise. A host's configuration may change it (toolhost:
    /// `[timeouts] default_secs` / `execute_secs`); these are its defaults.
    pub fn default_timeout(self) -> Duration {
        match self {
            SideEffect::Execute | SideEffect::Network => Duration::from_secs(600),
            _ => Duration::from_secs(60),
        }
    }
}

impl fmt::Display for SideEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for SideEffect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SideEffect::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown side-effect class '{s}': expected one of none, read, write, execute, network")
            })
    }
}

/// What a user interrupt does to a call of this tool once it has started executing.
///
/// A call that has not started yet (waiting for confirmation or for a place under the
/// concurrency cap) is always cancelled; this only decides about a running `execute`.
/// Timeouts apply either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InterruptBehavior {
    /// Stop it: set the cancellation signal and call [`crate::Tool::cancel`] (the default).
    #[default]
    Cancel,
    /// Let it run to completion (a write that must not be torn); the interrupt still
    /// cancels the calls that have not started. Added in tool-api 1.2.
    Block,
}

impl InterruptBehavior {
    /// The config spelling (`"cancel"`, `"block"`).
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptBehavior::Cancel => "cancel",
            InterruptBehavior::Block => "block",
        }
    }

    fn is_cancel(&self) -> bool {
        *self == InterruptBehavior::Cancel
    }
}

/// Everything the host needs to know about a tool before it ever runs it.
///
/// Build one with [`ToolDefinition::new`] and the chained setters:
///
/// ```
/// use tool_api::{SideEffect, ToolDefinition};
/// use serde_json::json;
///
/// let def = ToolDefinition::new(
///     "word_count",
///     "Count the words in a text.",
///     SideEffect::None,
///     json!({
///         "type": "object",
///         "properties": { "text": { "type": "string" } },
///         "required": ["text"]
///     }),
/// )
/// .inline();
/// assert!(def.inline);
/// assert_eq!(def.effective_timeout().as_secs(), 60);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Unique tool name; the host accepts `^[a-zA-Z0-9_-]{1,64}$` (what model providers accept).
    pub name: String,
    /// What the tool does, written for the model.
    pub description: String,
    /// JSON Schema of the input; an object at the top, within the host's documented subset.
    pub input_schema: Value,
    /// The tool's highest capability.
    pub side_effects: SideEffect,
    /// Execution timeout in milliseconds; `None` takes the host default for the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Whether calls may run concurrently with other calls of the same assistant message.
    /// `None` means: yes for `none`/`read`, no for the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_safe: Option<bool>,
    /// A capability the host must enable for this tool to be listed or dispatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_capability: Option<String>,
    /// Pure and quick: the host runs it on its async worker without a thread handoff.
    /// See [`crate::Tool`] for the rule.
    #[serde(default)]
    pub inline: bool,
    /// Small file work: the host first runs the call on its async worker with a file
    /// budget, and runs it again on a blocking thread if the tool touches more than the
    /// budget allows (tool-api 1.3; see [`ToolDefinition::inline_when_small`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline_when_small: bool,
    /// Names of top-level input properties that hold workspace paths (a string or an array
    /// of strings). The host checks them against the workspace before asking the user or
    /// running the tool, and shows them as the projected impact of a `write` tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_params: Vec<String>,
    /// What a user interrupt does to a running call (tool-api 1.2; default `cancel`).
    #[serde(default, skip_serializing_if = "InterruptBehavior::is_cancel")]
    pub interrupt: InterruptBehavior,
}

impl ToolDefinition {
    /// A definition whose input schema comes from a [`TypedTool`](crate::TypedTool)'s input type.
    #[cfg(feature = "typed")]
    pub fn typed(
        name: impl Into<String>,
        description: impl Into<String>,
        side_effects: SideEffect,
    ) -> ToolDefinition {
        ToolDefinition::new(
            name,
            description,
            side_effects,
            serde_json::json!({"type": "object"}),
        )
    }

    /// A definition with the four required fields and every optional one at its default.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        side_effects: SideEffect,
        input_schema: Value,
    ) -> Self {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            input_schema,
            side_effects,
            timeout_ms: None,
            concurrency_safe: None,
            requires_capability: None,
            inline: false,
            inline_when_small: false,
            path_params: Vec::new(),
            interrupt: InterruptBehavior::Cancel,
        }
    }

    /// Marks the tool inline (pure and quick; see [`crate::Tool`]).
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }

    /// Marks a tool whose work is file access that is usually small, like reading a source
    /// file or listing a directory (tool-api 1.3). The host first runs the call on its async
    /// worker, without a thread handoff, with a budget: reading a regular file of up to
    /// 64 KiB, listing up to 1,024 entries, `exists` and `metadata` are within it; a bigger
    /// file, a FIFO or device, a bigger directory, any write, append or patch, and any file
    /// access on a network filesystem are not. The first operation over the budget fails,
    /// and the host discards that attempt and runs the call again from the start on a
    /// blocking thread (with its timeout and cancellation).
    ///
    /// So the tool must be safe to run twice up to its first file operation that can go over
    /// the budget: do nothing else with side effects before it (no process, no network,
    /// no live output that matters). Hosts older than 1.3, and isolated plugins, run such a
    /// tool on a blocking thread as usual.
    ///
    /// ```
    /// # use tool_api::*;
    /// # use serde_json::json;
    /// let def = ToolDefinition::new("cat", "Print a file.", SideEffect::Read, json!({"type": "object"}))
    ///     .inline_when_small();
    /// assert!(def.inline_when_small && !def.inline);
    /// ```
    pub fn inline_when_small(mut self) -> Self {
        self.inline_when_small = true;
        self
    }

    /// Sets the execution timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Declares whether calls may run alongside other calls of the same message.
    pub fn concurrency_safe(mut self, safe: bool) -> Self {
        self.concurrency_safe = Some(safe);
        self
    }

    /// Gates the tool behind a host capability.
    pub fn requires_capability(mut self, capability: impl Into<String>) -> Self {
        self.requires_capability = Some(capability.into());
        self
    }

    /// Declares a top-level input property as a workspace path.
    pub fn path_param(mut self, property: impl Into<String>) -> Self {
        self.path_params.push(property.into());
        self
    }

    /// Sets what a user interrupt does to a running call ([`InterruptBehavior`]).
    pub fn interrupt(mut self, behavior: InterruptBehavior) -> Self {
        self.interrupt = behavior;
        self
    }

    /// Checks what a host checks when it registers the tool: a valid name
    /// ([`is_valid_tool_name`]), an input schema within the subset ([`crate::schema`]), and
    /// path parameters the schema declares. The error says what is wrong, for the author.
    ///
    /// ```
    /// # use tool_api::{SideEffect, ToolDefinition};
    /// # use serde_json::json;
    /// let bad = ToolDefinition::new("has space", "x", SideEffect::None, json!({"type": "object"}));
    /// assert!(bad.check().unwrap_err().contains("^[a-zA-Z0-9_-]{1,64}$"));
    /// ```
    pub fn check(&self) -> Result<(), String> {
        if !is_valid_tool_name(&self.name) {
            return Err(format!(
                "tool name '{}' is invalid: names must match ^[a-zA-Z0-9_-]{{1,64}}$ (letters, digits, '_' and '-', at most 64)",
                self.name
            ));
        }
        crate::schema::check_subset(&self.input_schema)
            .map_err(|p| format!("tool '{}': input_schema {p}", self.name))?;
        for param in &self.path_params {
            if self
                .input_schema
                .pointer(&format!("/properties/{param}"))
                .is_none()
            {
                return Err(format!(
                    "tool '{}': path parameter '{param}' is not a property of input_schema",
                    self.name
                ));
            }
        }
        Ok(())
    }

    /// The timeout a host with default settings applies: the declared one, else the class
    /// default. (A host's configuration may set another per tool or per class.)
    pub fn effective_timeout(&self) -> Duration {
        self.timeout_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| self.side_effects.default_timeout())
    }

    /// Whether calls may run concurrently: the declared value, else `true` for `none`/`read`.
    /// A tool can also answer per call, from its input: [`crate::DefinedTool::is_concurrency_safe`].
    pub fn is_concurrency_safe(&self) -> bool {
        self.concurrency_safe
            .unwrap_or(self.side_effects <= SideEffect::Read)
    }
}

/// Whether `name` is what model providers accept as a tool name: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
