//! The `[limits]` table: rate limits per caller, counted in the `[store]` (so instances
//! sharing one share the count).
//!
//! ```toml
//! [limits]
//! calls_per_minute = 120     # one caller, every tool together (0: none)
//! [limits.per_tool]
//! shell = 10                 # one caller, this tool
//! ```
//!
//! The caller is the principal of the request: `token-…` for a bearer token over HTTP,
//! `local` otherwise. A call over a limit ends with a `rate_limited` result naming the
//! limit and when to retry.

use std::collections::BTreeMap;

use dispatcher_core::RateLimits;
use serde::Deserialize;

/// The `[limits]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Calls per minute per caller, to all tools (0: no limit).
    pub calls_per_minute: u32,
    /// Calls per minute per caller to one tool, by its published name (0: no limit).
    pub per_tool: BTreeMap<String, u32>,
}

impl Limits {
    /// The dispatcher's form.
    pub fn rate_limits(&self) -> RateLimits {
        RateLimits {
            calls_per_minute: self.calls_per_minute,
            per_tool: self
                .per_tool
                .iter()
                .map(|(tool, n)| (tool.clone(), *n))
                .collect(),
        }
    }
}
