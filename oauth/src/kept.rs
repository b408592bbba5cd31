//! Bounded caches of checks and tokens, each entry good until an instant.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::time::Instant;

/// Keeps `value`, good until `until`, under `key` in `map`, which holds at most `most`
/// entries: when it is full, the expired ones go first, and all of them when that is not
/// enough (each is checked again at its next use).
pub fn keep_until<K: Eq + Hash, V, S: BuildHasher>(
    map: &mut HashMap<K, (Instant, V), S>,
    most: usize,
    key: K,
    until: Instant,
    value: V,
) {
    if map.len() >= most {
        let now = Instant::now();
        map.retain(|_, (until, _)| *until > now);
        if map.len() >= most {
            map.clear();
        }
    }
    map.insert(key, (until, value));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_full_cache_drops_the_expired_first_then_everything() {
        let mut map = HashMap::new();
        let (past, later) = (Instant::now(), Instant::now() + Duration::from_secs(60));
        keep_until(&mut map, 2, "old", past, ());
        keep_until(&mut map, 2, "live", later, ());
        keep_until(&mut map, 2, "new", later, ());
        let mut keys: Vec<_> = map.keys().copied().collect();
        keys.sort();
        assert_eq!(keys, ["live", "new"]);
        keep_until(&mut map, 2, "third", later, ());
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), ["third"]);
    }
}
