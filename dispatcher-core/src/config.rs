//! [`DispatcherConfig`]: the limits and timeouts of a dispatcher, with their defaults, and
//! the checked value types a configuration file deserializes into.
//!
//! These defaults are the only ones: toolhost's config file deserializes onto them. The
//! value types ([`Seconds`], [`Limit`], [`Chars`]) refuse a bad value while the file is
//! deserialized, so the error keeps the file's line and the key's path.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tool_api::{InterruptBehavior, SideEffect};

use crate::spool;
use tool_api::SandboxMode;

/// The default bound on a tool's own declared timeout: an hour, which a long build fits in.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(3600);

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
    /// The longest a tool's own declared timeout may make a call (default 1 hour): a
    /// declaration may shorten the class's timeout, and lengthen it only up to this.
    /// `tool_timeouts` (the operator's own word) is not bounded by it.
    pub max_timeout: Duration,
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
    /// Where calls run, and how the programs they start are confined: the one sandbox
    /// settings record, which the host's config deserializes into (`[sandbox]`).
    pub sandbox: sandbox::Settings,
    /// Calls per minute per principal (default: none).
    pub limits: crate::limits::RateLimits,
}

/// The mode a call of `tool` is granted by `settings` (before a runtime policy), in the
/// tool contract's words.
pub fn sandbox_mode(settings: &sandbox::Settings, tool: &str) -> SandboxMode {
    match settings.mode_of(tool) {
        sandbox::Mode::Host => SandboxMode::Host,
        sandbox::Mode::ReadOnly => SandboxMode::ReadOnly,
        sandbox::Mode::WorkspaceWrite => SandboxMode::WorkspaceWrite,
        sandbox::Mode::Remote => SandboxMode::Remote,
    }
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            max_concurrency: 4,
            // The tool contract's class defaults (tool-api), so the two cannot drift.
            default_timeout: SideEffect::None.default_timeout(),
            execute_timeout: SideEffect::Execute.default_timeout(),
            tool_timeouts: HashMap::new(),
            max_timeout: DEFAULT_MAX_TIMEOUT,
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
            sandbox: sandbox::Settings::default(),
            limits: crate::limits::RateLimits::default(),
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

/// A positive, finite number of seconds (integer or fractional) below a billion.
///
/// ```
/// use dispatcher_core::Seconds;
/// let s: Seconds = serde_json::from_str("1.5").unwrap();
/// assert_eq!(s.0, std::time::Duration::from_millis(1500));
/// let e = serde_json::from_str::<Seconds>("-1").unwrap_err().to_string();
/// assert!(e.contains("expected a positive number of seconds, found -1"), "{e}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seconds(pub Duration);

impl Seconds {
    /// Checks a number of seconds.
    pub fn new(secs: f64) -> Result<Seconds, String> {
        if secs.is_finite() && secs > 0.0 && secs < 1.0e9 {
            Ok(Seconds(Duration::from_secs_f64(secs)))
        } else {
            Err(format!(
                "expected a positive number of seconds, found {secs}"
            ))
        }
    }
}

impl Serialize for Seconds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let secs = f64::deserialize(d)?;
        Seconds::new(secs).map_err(serde::de::Error::custom)
    }
}

/// A concurrency limit: an integer from 1 to [`Limit::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Limit(pub usize);

impl Limit {
    /// The largest limit a configuration may set.
    pub const MAX: usize = 1024;
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0 as u64)
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        match usize::try_from(n) {
            Ok(n) if (1..=Limit::MAX).contains(&n) => Ok(Limit(n)),
            _ => Err(serde::de::Error::custom(format!(
                "expected an integer from 1 to {}, found {n}",
                Limit::MAX
            ))),
        }
    }
}

/// A positive number of characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Chars(pub usize);

impl Serialize for Chars {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0 as u64)
    }
}

impl<'de> Deserialize<'de> for Chars {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        match usize::try_from(n) {
            Ok(n) if n > 0 => Ok(Chars(n)),
            _ => Err(serde::de::Error::custom(format!(
                "expected a positive number of characters, found {n}"
            ))),
        }
    }
}

/// The separators a toolset prefix may be joined to tool names with: what model providers
/// accept in tool names.
pub const SEPARATORS: [&str; 5] = ["__", "_", "-", "--", "."];

/// A toolset separator, one of [`SEPARATORS`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Separator(pub String);

impl Serialize for Separator {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Separator {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if SEPARATORS.contains(&s.as_str()) {
            Ok(Separator(s))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected one of \"__\", \"_\", \"-\", \"--\" or \".\" (providers reject other characters), found {s:?}"
            )))
        }
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0.as_secs_f64())
    }
}

/// Deserializes a string that must not be empty or blank (a command, an id), for
/// `#[serde(deserialize_with = "dispatcher_core::non_empty")]`.
pub fn non_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        Err(serde::de::Error::custom("expected a non-empty string"))
    } else {
        Ok(s)
    }
}
