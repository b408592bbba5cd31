//! The `[store]` table: where the instances of one deployment share their state (the
//! replay memory of request states, "always" grants, pending confirmations and their
//! answers, the console's events, rate limit counters, tasks).
//!
//! ```toml
//! [store]
//! url = "redis://cache.internal:6379/0"   # default "memory": this process only
//! ```
//!
//! `TOOLHOST_STORE_URL` wins over the file. A Redis (or Valkey) URL needs the `redis`
//! feature, which the `toolhost` binary has.

use std::sync::Arc;

use dispatcher_core::store::{MemoryStore, Store};
use serde::Deserialize;

/// The environment variable that names the store (wins over `[store] url`).
pub const STORE_ENV: &str = "TOOLHOST_STORE_URL";

/// The `[store]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `memory` (default) or `redis://[user:password@]HOST:PORT/DB` (`rediss://` for TLS).
    pub url: StoreUrl,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: StoreUrl("memory".into()),
        }
    }
}

/// A checked store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl(pub String);

impl StoreUrl {
    /// `text` if it names a store toolhost can use.
    pub fn parse(text: &str) -> Result<StoreUrl, String> {
        let text = text.trim();
        if text == "memory" || text.starts_with("redis://") || text.starts_with("rediss://") {
            Ok(StoreUrl(text.to_string()))
        } else {
            Err(format!(
                "expected \"memory\" or a Redis URL (redis://HOST:PORT/DB, also for Valkey), found {text:?}"
            ))
        }
    }
}

impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        StoreUrl::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl StoreConfig {
    /// The URL in force: `TOOLHOST_STORE_URL` when set, else the file's.
    pub fn url(&self) -> Result<StoreUrl, String> {
        match std::env::var(STORE_ENV) {
            Ok(text) if !text.trim().is_empty() => {
                StoreUrl::parse(&text).map_err(|e| format!("{STORE_ENV}: {e}"))
            }
            _ => Ok(self.url.clone()),
        }
    }

    /// Opens the store in force (inside a tokio runtime: a Redis store connects in the
    /// background, and a server that is down now is reached when it is up).
    pub fn open(&self) -> Result<Arc<dyn Store>, String> {
        let url = self.url()?;
        if url.0 == "memory" {
            return Ok(MemoryStore::new());
        }
        open_redis(&url.0)
    }
}

#[cfg(feature = "redis")]
fn open_redis(url: &str) -> Result<Arc<dyn Store>, String> {
    let store = store_redis::RedisStore::open(url).map_err(|e| e.to_string())?;
    Ok(store)
}

#[cfg(not(feature = "redis"))]
fn open_redis(url: &str) -> Result<Arc<dyn Store>, String> {
    Err(format!(
        "the store {} needs Redis support, and this toolhost was built without it (cargo feature `redis`)",
        url.split('@').next_back().unwrap_or(url)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_and_redis_urls_are_taken_and_anything_else_is_refused_saying_what_to_write() {
        for ok in [
            "memory",
            "redis://127.0.0.1:6379/0",
            "rediss://u:p@cache:6380/2",
        ] {
            assert_eq!(StoreUrl::parse(ok).unwrap().0, ok);
        }
        for bad in ["postgres://db", "redis", "", "mem"] {
            let e = StoreUrl::parse(bad).unwrap_err();
            assert!(e.contains("redis://HOST:PORT/DB"), "{bad}: {e}");
        }
    }
}
