//! Rate limits per caller ([`RateLimits`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::Store;

/// Rate limits per caller: how many calls one principal ([`crate::SessionSpec::principal`])
/// may make in a minute, to every tool and to one tool. Counted in the dispatcher's store
/// ([`crate::store::Counters`]), so instances sharing a store share the count.
///
/// Windows are calendar minutes (UTC), the same on every instance: a call refused in one is
/// told how many seconds remain until the next. A call that reaches its limit is not
/// dropped: it ends with a `rate_limited` result naming the limit and when to retry, which
/// the model reads like any other. When the store cannot be reached the count cannot be
/// checked, and the call is refused the same way, saying so: a limit that a Redis outage
/// switched off would not be one.
///
/// Zero or absent: no limit. The default has none (and costs nothing). The `[limits]`
/// table:
///
/// ```toml
/// [limits]
/// calls_per_minute = 120     # one caller, every tool together (0: none)
/// [limits.per_tool]
/// shell = 10                 # one caller, this tool
/// ```
///
/// The caller is the principal of the request (`token-…` for a bearer token over HTTP,
/// `local` otherwise).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimits {
    /// Calls one principal may make per minute, to every tool together (0: no limit).
    pub calls_per_minute: u32,
    /// Calls one principal may make per minute to one tool, by its published name.
    pub per_tool: HashMap<String, u32>,
}

impl RateLimits {
    /// Whether any limit is set.
    pub fn is_empty(&self) -> bool {
        self.calls_per_minute == 0 && self.per_tool.values().all(|n| *n == 0)
    }

    /// The limits that apply to `tool`: (key suffix, limit, how it is named).
    fn applying<'a>(&'a self, tool: &'a str) -> impl Iterator<Item = (String, u32, String)> + 'a {
        let all = (self.calls_per_minute > 0).then(|| {
            (
                "*".to_string(),
                self.calls_per_minute,
                format!("{} calls per minute to all tools", self.calls_per_minute),
            )
        });
        let one = self.per_tool.get(tool).filter(|n| **n > 0).map(|n| {
            (
                format!("t:{tool}"),
                *n,
                format!("{n} calls per minute to '{tool}'"),
            )
        });
        all.into_iter().chain(one)
    }
}

/// A call over its limit, or one whose limit cannot be checked: what the model is told.
pub(crate) fn check_message(limited: &Limited) -> String {
    match limited {
        Limited::Reached {
            principal,
            limit,
            retry_in,
        } => format!(
            "rate limit reached: caller '{principal}' may make {limit}; retry in {} s",
            retry_in.as_secs().max(1)
        ),
        Limited::Unchecked { why } => format!(
            "the rate limit of this call cannot be checked ({why}); it was not run: retry in a few seconds"
        ),
    }
}

/// Why a call may not run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Limited {
    /// A limit is reached.
    Reached {
        /// Whose.
        principal: String,
        /// Which, in words ("10 calls per minute to 'shell'").
        limit: String,
        /// Until the next window.
        retry_in: Duration,
    },
    /// The store that keeps the counts cannot be reached.
    Unchecked {
        /// Why.
        why: String,
    },
}

/// Counts a call of `tool` by `principal` against every limit that applies, at `now`.
/// One round trip to the store per limit that applies (sent together); none when none
/// does.
pub(crate) async fn count(
    limits: &RateLimits,
    store: &Arc<dyn Store>,
    principal: &str,
    tool: &str,
    now: SystemTime,
) -> Result<(), Limited> {
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let minute = since_epoch.as_secs() / 60;
    let retry_in = Duration::from_secs(60) - Duration::from_secs(since_epoch.as_secs() % 60);
    let applying: Vec<_> = limits.applying(tool).collect();
    if applying.is_empty() {
        return Ok(());
    }
    // Kept a little past its minute, so that instances whose clocks differ by a few
    // seconds count in the same window.
    let window = retry_in + Duration::from_secs(5);
    let key = |scope: &str| format!("limit:{principal}:{scope}:{minute}");
    let hit = |i: usize| {
        let key = applying.get(i).map(|(scope, _, _)| key(scope));
        async move {
            match key {
                Some(key) => Some(store.hit(&key, window).await),
                None => None,
            }
        }
    };
    // At most two limits apply; their counts go to the store together.
    let (first, second) = tokio::join!(hit(0), hit(1));
    let counts = [first, second].into_iter().flatten();
    for ((_, limit, named), counted) in applying.into_iter().zip(counts) {
        match counted {
            Ok(n) if n > u64::from(limit) => {
                return Err(Limited::Reached {
                    principal: principal.to_string(),
                    limit: named,
                    retry_in,
                });
            }
            Ok(_) => {}
            Err(e) => {
                return Err(Limited::Unchecked { why: e.to_string() });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn limits(all: u32, shell: u32) -> RateLimits {
        RateLimits {
            calls_per_minute: all,
            per_tool: HashMap::from([("shell".to_string(), shell)]),
        }
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    async fn run(
        limits: &RateLimits,
        store: &Arc<dyn Store>,
        who: &str,
        tool: &str,
        t: u64,
    ) -> Result<(), Limited> {
        count(limits, store, who, tool, at(t)).await
    }

    #[tokio::test]
    async fn a_tool_limit_counts_per_caller_and_says_when_to_retry() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let l = limits(0, 2);
        let t = 6_000_000 + 15; // 15 s into a minute
        assert_eq!(run(&l, &store, "a", "shell", t).await, Ok(()));
        assert_eq!(run(&l, &store, "a", "shell", t).await, Ok(()));
        let third = run(&l, &store, "a", "shell", t).await.unwrap_err();
        assert_eq!(
            third,
            Limited::Reached {
                principal: "a".into(),
                limit: "2 calls per minute to 'shell'".into(),
                retry_in: Duration::from_secs(45),
            }
        );
        assert!(check_message(&third).contains("retry in 45 s"));
        // Another caller, another tool: counted apart.
        assert_eq!(run(&l, &store, "b", "shell", t).await, Ok(()));
        assert_eq!(run(&l, &store, "a", "read_file", t).await, Ok(()));
        // The next minute starts afresh.
        assert_eq!(run(&l, &store, "a", "shell", t + 45).await, Ok(()));
    }

    #[tokio::test]
    async fn the_limit_on_all_tools_counts_every_tool() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let l = limits(3, 0);
        let t = 6_000_000;
        for tool in ["shell", "read_file", "write_file"] {
            assert_eq!(run(&l, &store, "a", tool, t).await, Ok(()));
        }
        let fourth = run(&l, &store, "a", "list_dir", t).await.unwrap_err();
        assert!(
            check_message(&fourth).contains("3 calls per minute to all tools"),
            "{fourth:?}"
        );
    }

    #[tokio::test]
    async fn without_limits_nothing_is_counted_and_a_store_that_is_down_is_not_asked() {
        let store: Arc<dyn Store> = Arc::new(crate::store::Unreachable::new("redis://gone"));
        assert_eq!(
            run(&RateLimits::default(), &store, "a", "shell", 0).await,
            Ok(())
        );
        assert!(RateLimits::default().is_empty());
        assert!(limits(0, 0).is_empty());
    }

    #[tokio::test]
    async fn a_limit_that_cannot_be_checked_refuses_the_call_saying_why() {
        let store: Arc<dyn Store> = Arc::new(crate::store::Unreachable::new("redis://gone"));
        let refused = run(&limits(0, 5), &store, "a", "shell", 0)
            .await
            .unwrap_err();
        let said = check_message(&refused);
        assert!(
            said.contains("cannot be checked") && said.contains("redis://gone"),
            "{said}"
        );
    }
}
