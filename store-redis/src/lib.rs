//! # store-redis: toolhost's shared state on Redis (or Valkey)
//!
//! [`RedisStore`] implements dispatcher-core's [`Store`] over the `redis` crate's
//! connection manager: one multiplexed connection, RESP3, reconnected in the background
//! when it drops, its channel subscriptions renewed with it. Every key and channel is
//! under the prefix `toolhost:`, so one Redis can serve other programs too.
//!
//! | operation | commands | round trips |
//! |---|---|---|
//! | [`Claims::claim`] | `SET k 1 NX PX ttl` | 1 |
//! | [`Sets`] | `SADD` + `PEXPIRE` (one transaction), `SISMEMBER`, `SREM`, `DEL` | 1 |
//! | [`Counters::hit`] | `INCR` + `PEXPIRE … NX` (one transaction) | 1 |
//! | [`Records`] | `SET … PX`, `GET`, `DEL`, `SCAN MATCH` + `MGET` | 1 (scan: a few) |
//! | [`Bus`] | `PUBLISH`; `SUBSCRIBE` once per channel, messages pushed on the same connection | 1 |
//! | [`Generations::generation`] | `SET toolhost:generation NEW NX GET` (Redis ≥ 7.0, Valkey) | 1 |
//!
//! The generation key has no expiry: it goes only with the data (a restart without
//! persistence, `FLUSHALL`, a new server), and the next instance to ask makes a new one.
//!
//! **When Redis is down** every operation fails at once with a [`StoreError`] naming the
//! store and why (no command waits more than [`RESPONSE_TIMEOUT`]); the store reports it
//! in [`Store::health`] and logs the change once, and comes back by itself when Redis
//! does: the next operation reconnects, and channels subscribed before are subscribed
//! again. Starting while Redis is down is allowed: the store connects when it can.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dispatcher_core::store::{
    Bus, Channels, Claims, Counters, Generations, Health, Records, Sets, Store, StoreError,
    StoreFuture, random_id,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, PushKind, Value};
use tokio::sync::broadcast;

/// The longest any command waits for its answer.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a connection attempt takes.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// The prefix of every key and channel.
pub const PREFIX: &str = "toolhost:";

/// The key (under [`PREFIX`]) that holds the store's generation.
pub const GENERATION_KEY: &str = "generation";

/// A store on Redis or Valkey.
pub struct RedisStore {
    manager: ConnectionManager,
    /// The URL without its password.
    described: String,
    channels: Arc<Channels>,
    /// The channels subscribed on the server, and those still to subscribe.
    subscribed: Mutex<HashSet<String>>,
    wanted: Mutex<HashSet<String>>,
    /// Wakes the task that subscribes them.
    asked: Arc<tokio::sync::Notify>,
    up: AtomicBool,
    detail: Mutex<Option<String>>,
}

/// A URL without its password, for messages and logs.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            let shown = match user.split_once(':') {
                Some((name, _)) => format!("{name}:***"),
                None => "***".into(),
            };
            format!("{}://{shown}{}", &url[..scheme], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// A key glob that matches only what starts with `prefix` (its special characters escaped).
fn glob_of(prefix: &str) -> String {
    let mut glob = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            glob.push('\\');
        }
        glob.push(c);
    }
    glob.push('*');
    glob
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisStore {
    /// A store on the server at `url` (`redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS where the crate was built with it). Connects lazily: a server
    /// that is down now is reached when it is up. Must be called inside a tokio runtime.
    pub fn open(url: &str) -> Result<Arc<Self>, StoreError> {
        let described = redacted(url);
        let refused = |detail: String| StoreError {
            store: described.clone(),
            detail,
        };
        // RESP3: messages of subscribed channels come on the same connection.
        let with_resp3 = if url.contains("protocol=") {
            url.to_string()
        } else if url.contains('?') {
            format!("{url}&protocol=resp3")
        } else {
            format!("{url}?protocol=resp3")
        };
        let client = redis::Client::open(with_resp3.as_str())
            .map_err(|e| refused(format!("not a Redis URL ({e}); write redis://HOST:PORT/DB")))?;
        let channels = Arc::new(Channels::default());
        let pushed = channels.clone();
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500))
            .set_push_sender(move |info: redis::PushInfo| {
                if info.kind == PushKind::Message
                    && let [Value::BulkString(channel), Value::BulkString(message)] = &info.data[..]
                    && let Some(channel) = std::str::from_utf8(channel)
                        .ok()
                        .and_then(|c| c.strip_prefix(PREFIX))
                {
                    pushed.deliver(channel, String::from_utf8_lossy(message).into());
                }
                Ok::<(), ()>(())
            })
            .set_automatic_resubscription();
        let manager = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| refused(e.to_string()))?;
        let store = Arc::new(RedisStore {
            manager,
            described,
            channels,
            subscribed: Mutex::default(),
            wanted: Mutex::default(),
            asked: Arc::new(tokio::sync::Notify::new()),
            up: AtomicBool::new(true),
            detail: Mutex::new(None),
        });
        // Channels are subscribed on the server as soon as they are asked for, or, when it
        // was down, as soon as it is up.
        let weak = Arc::downgrade(&store);
        let asked = store.asked.clone();
        tokio::spawn(async move {
            loop {
                let _ = tokio::time::timeout(Duration::from_millis(250), asked.notified()).await;
                let Some(store) = weak.upgrade() else { return };
                store.subscribe_wanted().await;
            }
        });
        Ok(store)
    }

    /// Records how the last operation went (logging a change once) and shapes its error.
    fn outcome<T>(&self, result: redis::RedisResult<T>) -> Result<T, StoreError> {
        match result {
            Ok(value) => {
                if !self.up.swap(true, Ordering::AcqRel) {
                    tracing::warn!(store = %self.described, "the state store is reachable again");
                    *self.detail.lock().unwrap_or_else(PoisonError::into_inner) = None;
                }
                Ok(value)
            }
            Err(e) => {
                let detail = e.to_string();
                if self.up.swap(false, Ordering::AcqRel) {
                    tracing::error!(store = %self.described, "the state store cannot be reached: {detail}; what needs it is refused until it is back");
                }
                *self.detail.lock().unwrap_or_else(PoisonError::into_inner) = Some(detail.clone());
                Err(StoreError {
                    store: self.described.clone(),
                    detail,
                })
            }
        }
    }

    fn key(name: &str) -> String {
        format!("{PREFIX}{name}")
    }

    async fn subscribe_wanted(&self) {
        let wanted: Vec<String> = self
            .wanted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        for channel in wanted {
            let mut manager = self.manager.clone();
            if manager.subscribe(Self::key(&channel)).await.is_ok() {
                self.wanted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&channel);
                self.subscribed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(channel);
            }
        }
    }
}

impl Claims for RedisStore {
    fn claim<'a>(&'a self, key: &'a str, ttl: Duration) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                .arg(Self::key(key))
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl))
                .query_async(&mut c)
                .await;
            self.outcome(set).map(|ok| ok.is_some())
        })
    }
}

impl Generations for RedisStore {
    fn generation(&self) -> StoreFuture<'_, String> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let fresh = random_id();
            // One round trip, atomic: the value there, or ours when there was none.
            let before: redis::RedisResult<Option<String>> = redis::cmd("SET")
                .arg(Self::key(GENERATION_KEY))
                .arg(&fresh)
                .arg("NX")
                .arg("GET")
                .query_async(&mut c)
                .await;
            self.outcome(before).map(|before| before.unwrap_or(fresh))
        })
    }
}

impl Sets for RedisStore {
    fn add<'a>(&'a self, set: &'a str, member: &'a str, ttl: Duration) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let key = Self::key(set);
            let done: redis::RedisResult<()> = redis::pipe()
                .atomic()
                .sadd(&key, member)
                .ignore()
                .pexpire(&key, i64::try_from(millis(ttl)).unwrap_or(i64::MAX))
                .ignore()
                .query_async(&mut c)
                .await;
            self.outcome(done)
        })
    }

    fn contains<'a>(&'a self, set: &'a str, member: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let found: redis::RedisResult<bool> = c.sismember(Self::key(set), member).await;
            self.outcome(found)
        })
    }

    fn remove<'a>(&'a self, set: &'a str, member: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let removed: redis::RedisResult<u64> = c.srem(Self::key(set), member).await;
            self.outcome(removed).map(|n| n > 0)
        })
    }

    fn clear<'a>(&'a self, set: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let done: redis::RedisResult<u64> = c.del(Self::key(set)).await;
            self.outcome(done).map(drop)
        })
    }
}

impl Counters for RedisStore {
    fn hit<'a>(&'a self, key: &'a str, window: Duration) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let key = Self::key(key);
            let counted: redis::RedisResult<(u64,)> = redis::pipe()
                .atomic()
                .incr(&key, 1)
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(millis(window))
                .arg("NX")
                .ignore()
                .query_async(&mut c)
                .await;
            self.outcome(counted).map(|(n,)| n)
        })
    }
}

impl Records for RedisStore {
    fn put<'a>(&'a self, key: &'a str, value: &'a str, ttl: Duration) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let done: redis::RedisResult<()> = c.pset_ex(Self::key(key), value, millis(ttl)).await;
            self.outcome(done)
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let value: redis::RedisResult<Option<String>> = c.get(Self::key(key)).await;
            self.outcome(value)
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let removed: redis::RedisResult<u64> = c.del(Self::key(key)).await;
            self.outcome(removed).map(|n| n > 0)
        })
    }

    fn scan<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<(String, String)>> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let glob = glob_of(&Self::key(prefix));
            let keys: redis::RedisResult<Vec<String>> = async {
                use futures_util::StreamExt as _;
                let keys: Vec<redis::RedisResult<String>> = c
                    .scan_match::<_, String>(&glob)
                    .await?
                    .collect::<Vec<_>>()
                    .await;
                keys.into_iter()
                    .collect::<redis::RedisResult<Vec<String>>>()
            }
            .await;
            let mut keys = self.outcome(keys)?;
            keys.sort();
            keys.dedup();
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let values: redis::RedisResult<Vec<Option<String>>> =
                redis::cmd("MGET").arg(&keys).query_async(&mut c).await;
            let values = self.outcome(values)?;
            Ok(keys
                .into_iter()
                .zip(values)
                .filter_map(|(k, v)| Some((k.strip_prefix(PREFIX)?.to_string(), v?)))
                .collect())
        })
    }
}

impl Bus for RedisStore {
    fn publish<'a>(&'a self, channel: &'a str, message: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let done: redis::RedisResult<u64> = c.publish(Self::key(channel), message).await;
            self.outcome(done).map(drop)
        })
    }

    fn subscribe(&self, channel: &str) -> broadcast::Receiver<Arc<str>> {
        let receiver = self.channels.sender(channel).subscribe();
        let known = self
            .subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(channel);
        if !known {
            // Subscribed on the server by the background task (at once when it is up).
            self.wanted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(channel.to_string());
            self.asked.notify_one();
        }
        receiver
    }
}

impl Store for RedisStore {
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn check(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let mut c = self.manager.clone();
            let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
            self.outcome(pong).map(drop)
        })
    }

    fn health(&self) -> Health {
        Health {
            store: self.described.clone(),
            up: self.up.load(Ordering::Acquire),
            detail: self
                .detail
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_shows() {
        assert_eq!(
            redacted("redis://user:s3cret@cache:6379/0"),
            "redis://user:***@cache:6379/0"
        );
        assert_eq!(redacted("redis://:s3cret@cache/1"), "redis://:***@cache/1");
        assert_eq!(redacted("redis://cache:6379"), "redis://cache:6379");
    }

    #[test]
    fn a_prefix_glob_escapes_what_globs_read() {
        assert_eq!(glob_of("toolhost:task:a*b"), "toolhost:task:a\\*b*");
    }
}
