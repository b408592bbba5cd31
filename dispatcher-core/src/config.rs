//! [`DispatcherConfig`]: the limits and timeouts of a dispatcher, with their defaults.
//!
//! These defaults are the only ones: toolhost's config file deserializes onto them.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tool_api::InterruptBehavior;

use crate::runtime::SandboxMode;
use crate::spool;

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

/// What a failed `execute` call does to the other calls of its batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExecuteError {
    /// Nothing: the other calls go on (the default).
    #[default]
    Continue,
    /// Cancel every other unfinished call of the batch (reason `sibling_error`).
    CancelSiblings,
}

impl OnExecuteError {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExecuteError::Continue => "continue",
            OnExecuteError::CancelSiblings => "cancel_siblings",
        }
    }
}
