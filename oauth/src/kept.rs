//! Bounded caches of checks and tokens, each entry good until an instant: [`Kept`].

use std::hash::{BuildHasher, Hash};
use std::time::Instant;

/// At most `most` entries, each good until its instant: `quick_cache`'s cache (CLOCK-Pro
/// eviction: when it is full, the entries least worth keeping go, one at a time, where a
/// hand-written map emptied itself whole), read without a lock held across calls. An
/// entry past its instant is never returned, and is dropped when it is found so.
pub struct Kept<K, V, S = std::hash::RandomState> {
    cache: Cache<K, V, S>,
}

/// The cache beneath a [`Kept`]: each entry counts one, with its instant.
type Cache<K, V, S> = quick_cache::sync::Cache<
    K,
    (Instant, V),
    quick_cache::UnitWeighter,
    S,
    quick_cache::sync::DefaultLifecycle<K, (Instant, V)>,
>;

impl<K: Eq + Hash + Clone, V: Clone> Kept<K, V> {
    /// A cache of at most `most` entries.
    pub fn new(most: usize) -> Kept<K, V> {
        Kept::with_hasher(most, std::hash::RandomState::new())
    }
}

impl<K: Eq + Hash + Clone, V: Clone, S: BuildHasher + Clone> Kept<K, V, S> {
    /// A cache of at most `most` entries whose keys are hashed by `hasher` (a fast one for
    /// a key that is itself a secret's hash or a token checked on every request).
    pub fn with_hasher(most: usize, hasher: S) -> Kept<K, V, S> {
        let most = most.max(1);
        Kept {
            cache: quick_cache::sync::Cache::with(
                most,
                most as u64,
                quick_cache::UnitWeighter,
                hasher,
                quick_cache::sync::DefaultLifecycle::default(),
            ),
        }
    }

    /// What `key` holds, while it is good (`key` may be a borrowed form: `&str` for
    /// `Arc<str>`).
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + quick_cache::Equivalent<K> + ?Sized,
    {
        let (until, value) = self.cache.get(key)?;
        if until > Instant::now() {
            return Some(value);
        }
        self.cache.remove(key);
        None
    }

    /// Keeps `value` under `key`, good until `until`.
    pub fn keep(&self, key: K, until: Instant, value: V) {
        self.cache.insert(key, (until, value));
    }

    /// How many entries it holds (some perhaps past their instant).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

impl<K: Eq + Hash + Clone, V: Clone, S: BuildHasher + Clone> std::fmt::Debug for Kept<K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").field("len", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_entry_past_its_instant_is_not_returned() {
        let kept = Kept::new(4);
        let later = Instant::now() + Duration::from_secs(60);
        kept.keep("old", Instant::now(), 1);
        kept.keep("live", later, 2);
        assert_eq!(kept.get(&"old"), None);
        assert_eq!(kept.get(&"live"), Some(2));
        assert_eq!(kept.len(), 1, "the expired entry was dropped when found");
    }

    #[test]
    fn a_full_cache_keeps_most_of_what_it_held_rather_than_emptying() {
        let kept = Kept::new(100);
        let later = Instant::now() + Duration::from_secs(60);
        for i in 0..100 {
            kept.keep(i, later, i);
        }
        for i in 100..110 {
            kept.keep(i, later, i);
        }
        assert!(kept.len() <= 100, "{}", kept.len());
        let still = (0..100).filter(|i| kept.get(i).is_some()).count();
        assert!(still >= 80, "only {still} of the first 100 kept");
    }
}
