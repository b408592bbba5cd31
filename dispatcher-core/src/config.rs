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

use crate::limits::RateLimits;
use crate::spool;
use tool_api::SandboxMode;

/// The default bound on a tool's own declared timeout: an hour, which a long build fits in.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Calls of one session that may execute at once unless `max_concurrency` says otherwise
/// (the spec's 4). A gateway sends the server it mounts no more than this at once under
/// the default configuration; `cargo xtask bench` measures each stdio server alone at it
/// (its at-cap rows).
pub const DEFAULT_MAX_CONCURRENCY: usize = 4;

/// Limits and timeouts of a dispatcher. Every field has a default. The sections a
/// configuration file has as tables (`[timeouts]`, `[results]`, `[limits]`) deserialize
/// themselves ([`Timeouts`], [`ResultLimits`], [`RateLimits`]).
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Calls of one session that may execute at once (default [`DEFAULT_MAX_CONCURRENCY`]).
    pub max_concurrency: usize,
    /// How long calls, confirmations and cancellations may take.
    pub timeouts: Timeouts,
    /// How much of a result the model gets inline.
    pub results: ResultLimits,
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
    pub limits: RateLimits,
    /// Secrets in results (redacted by default) and in arguments (`[secrets]`).
    pub secrets: crate::Secrets,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            timeouts: Timeouts::default(),
            results: ResultLimits::default(),
            toolset_separator: "__".to_string(),
            tool_concurrency: HashMap::new(),
            on_execute_error: OnExecuteError::Continue,
            interrupt: HashMap::new(),
            sandbox: sandbox::Settings::default(),
            limits: RateLimits::default(),
            secrets: crate::Secrets::default(),
        }
    }
}

/// How long things may take: the `[timeouts]` table, in seconds.
///
/// ```
/// let t: dispatcher_core::Timeouts = serde_json::from_str(r#"{"execute_secs": 120}"#).unwrap();
/// assert_eq!(t.execute, std::time::Duration::from_secs(120));
/// assert_eq!(t.default, std::time::Duration::from_secs(60), "the rest keep their defaults");
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Timeout of `none`/`read`/`write` tools that declare none (default 60 s).
    #[serde(rename = "default_secs", deserialize_with = "Seconds::duration")]
    pub default: Duration,
    /// Timeout of `execute`/`network` tools that declare none (default 600 s).
    #[serde(rename = "execute_secs", deserialize_with = "Seconds::duration")]
    pub execute: Duration,
    /// How long a confirmation may wait for an answer (default 5 min).
    #[serde(rename = "confirmation_secs", deserialize_with = "Seconds::duration")]
    pub confirmation: Duration,
    /// How long a cancelled tool may take to stop before it is abandoned (default 30 s).
    #[serde(rename = "cancel_grace_secs", deserialize_with = "Seconds::duration")]
    pub cancel_grace: Duration,
    /// Calls slower than this log a warning (default 10 s).
    #[serde(rename = "slow_call_warn_secs", deserialize_with = "Seconds::duration")]
    pub slow_call_warn: Duration,
    /// The longest a tool's own declared timeout may make a call (default 1 hour): a
    /// declaration may shorten the class's timeout, and lengthen it only up to this.
    /// `per_tool` (the operator's own word) is not bounded by it.
    #[serde(rename = "max_secs", deserialize_with = "Seconds::duration")]
    pub max: Duration,
    /// Per-tool timeouts; win over the tool's own declaration.
    #[serde(deserialize_with = "seconds_by_tool")]
    pub per_tool: HashMap<String, Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            // The tool contract's class defaults (tool-api), so the two cannot drift.
            default: SideEffect::None.default_timeout(),
            execute: SideEffect::Execute.default_timeout(),
            confirmation: Duration::from_secs(300),
            cancel_grace: Duration::from_secs(30),
            slow_call_warn: Duration::from_secs(10),
            max: DEFAULT_MAX_TIMEOUT,
            per_tool: HashMap::new(),
        }
    }
}

/// How much of a result the model gets: the `[results]` table, in characters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResultLimits {
    /// Characters of text a result may have (default 100 000). Beyond it the full output
    /// is spooled to a file and the model gets a preview, the size and the path ([`spool`]).
    #[serde(deserialize_with = "Chars::count")]
    pub max_chars: usize,
    /// Characters of a spooled result shown inline (default 2 000).
    #[serde(deserialize_with = "Chars::count")]
    pub preview_chars: usize,
    /// Per-tool caps; win over `max_chars`.
    #[serde(deserialize_with = "chars_by_tool")]
    pub per_tool: HashMap<String, usize>,
}

impl Default for ResultLimits {
    fn default() -> Self {
        ResultLimits {
            max_chars: 100_000,
            preview_chars: spool::DEFAULT_PREVIEW_CHARS,
            per_tool: HashMap::new(),
        }
    }
}

fn seconds_by_tool<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<HashMap<String, Duration>, D::Error> {
    let by_tool = HashMap::<String, Seconds>::deserialize(d)?;
    Ok(by_tool.into_iter().map(|(k, v)| (k, v.0)).collect())
}

fn chars_by_tool<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<HashMap<String, usize>, D::Error> {
    let by_tool = HashMap::<String, Chars>::deserialize(d)?;
    Ok(by_tool.into_iter().map(|(k, v)| (k, v.0)).collect())
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
    /// Deserializes a checked number of seconds into a plain `Duration`, for
    /// `#[serde(deserialize_with = "dispatcher_core::Seconds::duration")]`.
    pub fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Seconds::deserialize(d).map(|s| s.0)
    }

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

    /// Deserializes a checked limit into a plain count, for
    /// `#[serde(deserialize_with = "dispatcher_core::Limit::count")]`.
    pub fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        Limit::deserialize(d).map(|l| l.0)
    }
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

impl Chars {
    /// Deserializes a checked number of characters into a plain count, for
    /// `#[serde(deserialize_with = "dispatcher_core::Chars::count")]`.
    pub fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        Chars::deserialize(d).map(|c| c.0)
    }
}

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
