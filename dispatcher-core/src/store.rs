//! Shared state: what one instance knows that the others behind the same load balancer
//! must know too. The core and the host see these small traits, never the database behind
//! them; [`MemoryStore`] keeps everything in this process (one instance, nothing to run),
//! and a distributed backend (Redis, in the `store-redis` crate) implements the same.
//!
//! | trait | what it holds | what uses it |
//! |---|---|---|
//! | [`Claims`] | keys taken once, for a while | the replay memory of sealed request states; the first answer to a confirmation |
//! | [`Sets`] | sets of strings | "always" grants, per session |
//! | [`Counters`] | counts over fixed windows | rate limits |
//! | [`Records`] | values with a lifetime, listed by prefix | pending confirmations, tasks |
//! | [`Bus`] | messages to every instance | answers to confirmations, the event stream |
//! | [`Generations`] | one id per life of the store's data | sealed request states: one issued before the store lost its data is refused |
//!
//! Every operation can fail ([`StoreError`]) when the backend is unreachable; each caller
//! decides what a failure means, and never lets it allow what needed the lookup: a state
//! that cannot be checked is refused, a grant that cannot be read means asking.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

/// The store could not be reached, or answered something unexpected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the state store ({store}) cannot be reached: {detail}")]
pub struct StoreError {
    /// Which store (`memory`, `redis://host:port/db` without its password).
    pub store: String,
    /// What went wrong.
    pub detail: String,
}

/// What a store operation returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Keys taken once, until they expire.
pub trait Claims: Send + Sync {
    /// Takes `key` for `ttl`; `false` when it is taken already (by anyone, anywhere).
    fn claim<'a>(&'a self, key: &'a str, ttl: Duration) -> StoreFuture<'a, bool>;
}

/// Sets of strings, each kept until emptied or until `ttl` after its last addition.
pub trait Sets: Send + Sync {
    /// Adds `member` to `set`.
    fn add<'a>(&'a self, set: &'a str, member: &'a str, ttl: Duration) -> StoreFuture<'a, ()>;
    /// Whether `member` is in `set`.
    fn contains<'a>(&'a self, set: &'a str, member: &'a str) -> StoreFuture<'a, bool>;
    /// Removes `member`; whether it was there.
    fn remove<'a>(&'a self, set: &'a str, member: &'a str) -> StoreFuture<'a, bool>;
    /// Empties `set`.
    fn clear<'a>(&'a self, set: &'a str) -> StoreFuture<'a, ()>;
}

/// Counters over fixed windows.
pub trait Counters: Send + Sync {
    /// Counts one more under `key` in the current `window`; returns the count so far in
    /// it (1 for the first).
    fn hit<'a>(&'a self, key: &'a str, window: Duration) -> StoreFuture<'a, u64>;
}

/// Values (JSON text) with a lifetime.
pub trait Records: Send + Sync {
    /// Writes `key` (replacing it), kept `ttl`.
    fn put<'a>(&'a self, key: &'a str, value: &'a str, ttl: Duration) -> StoreFuture<'a, ()>;
    /// Reads `key`.
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<String>>;
    /// Deletes `key`; whether it was there.
    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, bool>;
    /// Every record whose key starts with `prefix`, as (key, value).
    fn scan<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<(String, String)>>;
}

/// Messages to every instance (this one included).
pub trait Bus: Send + Sync {
    /// Sends `message` on `channel`.
    fn publish<'a>(&'a self, channel: &'a str, message: &'a str) -> StoreFuture<'a, ()>;
    /// What comes on `channel` from now on. A subscriber that falls behind loses the
    /// oldest messages (its receiver says how many).
    fn subscribe(&self, channel: &str) -> broadcast::Receiver<Arc<str>>;
}

/// How the store is doing, for a health check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    /// Which store.
    pub store: String,
    /// Whether its last operation (or check) reached it.
    pub up: bool,
    /// When it is down: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Which life of its data a store is in. A store that lost its data (a Redis restarted
/// without persistence, flushed, or replaced) forgot what it remembered, the claims that
/// refuse replays among it; its generation then differs from the one a sealed value
/// recorded, and that value must be refused as if it were replayed.
pub trait Generations: Send + Sync {
    /// The current generation: created at the first use (atomically, so every instance
    /// agrees), the same until the data is lost, then a new one.
    fn generation(&self) -> StoreFuture<'_, String>;
}

/// 16 random bytes in hex: a store's generation, a sealed state's nonce, a task id.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: the clock still differs per call.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = t.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The shared state of a deployment: every trait above, one backend.
pub trait Store: Claims + Sets + Counters + Records + Bus + Generations {
    /// Which store, for messages (never a password).
    fn describe(&self) -> String;
    /// Whether other instances share it (a distributed store); a process-local one's
    /// state is this process's only.
    fn shared(&self) -> bool {
        true
    }
    /// Checks that it can be reached (one round trip).
    fn check(&self) -> StoreFuture<'_, ()>;
    /// How it was doing at its last operation or check (no round trip).
    fn health(&self) -> Health;
}

/// A broadcast channel per bus channel.
#[derive(Default)]
pub struct Channels(Mutex<HashMap<String, broadcast::Sender<Arc<str>>>>);

impl Channels {
    /// How many messages a subscriber may fall behind before it loses the oldest.
    pub const CAPACITY: usize = 1024;

    /// The sender of `channel`.
    pub fn sender(&self, channel: &str) -> broadcast::Sender<Arc<str>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(channel.to_string())
            .or_insert_with(|| broadcast::channel(Self::CAPACITY).0)
            .clone()
    }

    /// Delivers `message` to this process's subscribers of `channel`.
    pub fn deliver(&self, channel: &str, message: Arc<str>) {
        let _ = self.sender(channel).send(message);
    }
}

/// Everything in this process's memory: one instance, nothing to run, never down. Its
/// generation is the same in every process (instances that share a key ring but no store
/// each keep their own replay memory, as before), and changes only when it is
/// [wiped](MemoryStore::wipe).
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<Memory>,
    channels: Channels,
    /// How many times it was wiped.
    wiped: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Memory {
    /// Claimed keys and when they are free again.
    claims: HashMap<String, Instant>,
    sets: HashMap<String, (HashSet<String>, Instant)>,
    /// Counters: their window's end and count.
    counters: HashMap<String, (Instant, u64)>,
    records: HashMap<String, (String, Instant)>,
    /// When the expired entries were last swept.
    swept: Option<Instant>,
}

impl Memory {
    /// Drops what expired (at most every second: the maps stay bounded by what is live).
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < Duration::from_secs(1))
        {
            return;
        }
        self.swept = Some(now);
        self.claims.retain(|_, until| *until > now);
        self.sets.retain(|_, (_, until)| *until > now);
        self.counters.retain(|_, (until, _)| *until > now);
        self.records.retain(|_, (_, until)| *until > now);
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Arc<Self> {
        Arc::new(MemoryStore::default())
    }

    /// Forgets everything, as a store that lost its data does: a new generation.
    pub fn wipe(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = Memory::default();
        self.wiped.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn lock(&self) -> MutexGuard<'_, Memory> {
        let mut memory = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        memory.sweep(Instant::now());
        memory
    }
}

impl Claims for MemoryStore {
    fn claim<'a>(&'a self, key: &'a str, ttl: Duration) -> StoreFuture<'a, bool> {
        let now = Instant::now();
        let mut memory = self.lock();
        let taken = memory.claims.get(key).is_some_and(|until| *until > now);
        if !taken {
            memory.claims.insert(key.to_string(), now + ttl);
        }
        ready(!taken)
    }
}

impl Sets for MemoryStore {
    fn add<'a>(&'a self, set: &'a str, member: &'a str, ttl: Duration) -> StoreFuture<'a, ()> {
        let until = Instant::now() + ttl;
        let mut memory = self.lock();
        let entry = memory
            .sets
            .entry(set.to_string())
            .or_insert_with(|| (HashSet::new(), until));
        entry.0.insert(member.to_string());
        entry.1 = until;
        ready(())
    }

    fn contains<'a>(&'a self, set: &'a str, member: &'a str) -> StoreFuture<'a, bool> {
        let now = Instant::now();
        let found = self
            .lock()
            .sets
            .get(set)
            .is_some_and(|(members, until)| *until > now && members.contains(member));
        ready(found)
    }

    fn remove<'a>(&'a self, set: &'a str, member: &'a str) -> StoreFuture<'a, bool> {
        let removed = self
            .lock()
            .sets
            .get_mut(set)
            .is_some_and(|(members, _)| members.remove(member));
        ready(removed)
    }

    fn clear<'a>(&'a self, set: &'a str) -> StoreFuture<'a, ()> {
        self.lock().sets.remove(set);
        ready(())
    }
}

impl Counters for MemoryStore {
    fn hit<'a>(&'a self, key: &'a str, window: Duration) -> StoreFuture<'a, u64> {
        let now = Instant::now();
        let mut memory = self.lock();
        let entry = memory
            .counters
            .entry(key.to_string())
            .or_insert((now + window, 0));
        if entry.0 <= now {
            *entry = (now + window, 0);
        }
        entry.1 += 1;
        let count = entry.1;
        ready(count)
    }
}

impl Records for MemoryStore {
    fn put<'a>(&'a self, key: &'a str, value: &'a str, ttl: Duration) -> StoreFuture<'a, ()> {
        let until = Instant::now() + ttl;
        self.lock()
            .records
            .insert(key.to_string(), (value.to_string(), until));
        ready(())
    }

    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<String>> {
        let now = Instant::now();
        let value = self
            .lock()
            .records
            .get(key)
            .filter(|(_, until)| *until > now)
            .map(|(v, _)| v.clone());
        ready(value)
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, bool> {
        ready(self.lock().records.remove(key).is_some())
    }

    fn scan<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<(String, String)>> {
        let now = Instant::now();
        let mut found: Vec<(String, String)> = self
            .lock()
            .records
            .iter()
            .filter(|(k, (_, until))| k.starts_with(prefix) && *until > now)
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect();
        found.sort();
        ready(found)
    }
}

impl Bus for MemoryStore {
    fn publish<'a>(&'a self, channel: &'a str, message: &'a str) -> StoreFuture<'a, ()> {
        self.channels.deliver(channel, message.into());
        ready(())
    }

    fn subscribe(&self, channel: &str) -> broadcast::Receiver<Arc<str>> {
        self.channels.sender(channel).subscribe()
    }
}

impl Generations for MemoryStore {
    fn generation(&self) -> StoreFuture<'_, String> {
        let wiped = self.wiped.load(std::sync::atomic::Ordering::Acquire);
        ready(format!("memory-{wiped}"))
    }
}

impl Store for MemoryStore {
    fn describe(&self) -> String {
        "memory".into()
    }

    fn shared(&self) -> bool {
        false
    }

    fn check(&self) -> StoreFuture<'_, ()> {
        ready(())
    }

    fn health(&self) -> Health {
        Health {
            store: self.describe(),
            up: true,
            detail: None,
        }
    }
}

/// A store that can never be reached: every operation fails as a Redis that is down
/// would. For the tests of what each caller does then (and for a host that must refuse
/// what needs shared state).
pub struct Unreachable {
    store: String,
}

impl Unreachable {
    /// A store named `store` (what its errors name).
    pub fn new(store: impl Into<String>) -> Self {
        Unreachable {
            store: store.into(),
        }
    }

    fn down<'a, T: Send + 'a>(&self) -> StoreFuture<'a, T> {
        let error = StoreError {
            store: self.store.clone(),
            detail: "Connection refused (os error 111)".into(),
        };
        Box::pin(std::future::ready(Err(error)))
    }
}

impl Claims for Unreachable {
    fn claim<'a>(&'a self, _: &'a str, _: Duration) -> StoreFuture<'a, bool> {
        self.down()
    }
}

impl Sets for Unreachable {
    fn add<'a>(&'a self, _: &'a str, _: &'a str, _: Duration) -> StoreFuture<'a, ()> {
        self.down()
    }
    fn contains<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, bool> {
        self.down()
    }
    fn remove<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, bool> {
        self.down()
    }
    fn clear<'a>(&'a self, _: &'a str) -> StoreFuture<'a, ()> {
        self.down()
    }
}

impl Counters for Unreachable {
    fn hit<'a>(&'a self, _: &'a str, _: Duration) -> StoreFuture<'a, u64> {
        self.down()
    }
}

impl Records for Unreachable {
    fn put<'a>(&'a self, _: &'a str, _: &'a str, _: Duration) -> StoreFuture<'a, ()> {
        self.down()
    }
    fn get<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Option<String>> {
        self.down()
    }
    fn delete<'a>(&'a self, _: &'a str) -> StoreFuture<'a, bool> {
        self.down()
    }
    fn scan<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Vec<(String, String)>> {
        self.down()
    }
}

impl Bus for Unreachable {
    fn publish<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, ()> {
        self.down()
    }
    fn subscribe(&self, _: &str) -> broadcast::Receiver<Arc<str>> {
        broadcast::channel(1).1
    }
}

impl Generations for Unreachable {
    fn generation(&self) -> StoreFuture<'_, String> {
        self.down()
    }
}

impl Store for Unreachable {
    fn describe(&self) -> String {
        self.store.clone()
    }
    fn check(&self) -> StoreFuture<'_, ()> {
        self.down()
    }
    fn health(&self) -> Health {
        Health {
            store: self.store.clone(),
            up: false,
            detail: Some("Connection refused (os error 111)".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_key_is_claimed_once_until_it_expires() {
        let store = MemoryStore::new();
        assert!(store.claim("k", Duration::from_millis(30)).await.unwrap());
        assert!(!store.claim("k", LONG).await.unwrap());
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(store.claim("k", LONG).await.unwrap());
    }

    #[tokio::test]
    async fn a_set_holds_its_members() {
        let store = MemoryStore::new();
        store.add("grants:s", "shell", LONG).await.unwrap();
        assert!(store.contains("grants:s", "shell").await.unwrap());
        assert!(!store.contains("grants:s", "write_file").await.unwrap());
        assert!(!store.contains("grants:other", "shell").await.unwrap());
        assert!(store.remove("grants:s", "shell").await.unwrap());
        assert!(!store.contains("grants:s", "shell").await.unwrap());
    }

    #[tokio::test]
    async fn a_counter_counts_in_its_window_and_starts_again_after() {
        let store = MemoryStore::new();
        let window = Duration::from_millis(40);
        assert_eq!(store.hit("c", window).await.unwrap(), 1);
        assert_eq!(store.hit("c", window).await.unwrap(), 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(store.hit("c", window).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn records_expire_and_scan_by_prefix() {
        let store = MemoryStore::new();
        store.put("pending:1", "a", LONG).await.unwrap();
        store
            .put("pending:2", "b", Duration::from_millis(20))
            .await
            .unwrap();
        store.put("task:1", "c", LONG).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(
            store.scan("pending:").await.unwrap(),
            [("pending:1".to_string(), "a".to_string())]
        );
        assert_eq!(store.get("pending:2").await.unwrap(), None);
        assert!(store.delete("task:1").await.unwrap());
        assert_eq!(store.get("task:1").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_message_reaches_every_subscriber_of_its_channel() {
        let store = MemoryStore::new();
        let mut a = store.subscribe("answers");
        let mut b = store.subscribe("answers");
        let mut other = store.subscribe("events");
        store.publish("answers", "hello").await.unwrap();
        assert_eq!(&*a.recv().await.unwrap(), "hello");
        assert_eq!(&*b.recv().await.unwrap(), "hello");
        assert!(other.try_recv().is_err());
    }
}
