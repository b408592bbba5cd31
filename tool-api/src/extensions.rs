//! What a host attaches to one call for the tools it runs in its own process
//! ([`Extensions`]): values typed by the host, carried by the call from where it entered
//! the host to the tool, and read back by type.

use std::any::{Any, TypeId};
use std::sync::Arc;

/// A small typed map of what belongs to one call beyond its identity: the caller's
/// credentials, the way the call's questions reach its client, what a host's transport
/// knows of the request. One value of each type; a value is shared, never copied.
///
/// A host fills it when the call is made and every part of the call sees the same map: the
/// tool's [`crate::ToolContext::extension`], and on the host's side the call's confirmation
/// request and events. It does not cross the plugin ABI: a plugin's tools (in process or
/// isolated) always see it empty. Cloning it is one reference count; an empty map
/// allocates nothing.
///
/// ```
/// use tool_api::Extensions;
/// #[derive(Debug, PartialEq)]
/// struct Caller(&'static str);
/// let extensions = Extensions::new().with(Caller("alice"));
/// assert_eq!(extensions.get::<Caller>(), Some(&Caller("alice")));
/// assert_eq!(extensions.get::<String>(), None);
/// ```
#[derive(Clone, Default)]
pub struct Extensions {
    entries: Option<Arc<[Entry]>>,
}

#[derive(Clone)]
struct Entry {
    id: TypeId,
    name: &'static str,
    value: Arc<dyn Any + Send + Sync>,
}

impl Extensions {
    /// An empty map.
    pub const fn new() -> Extensions {
        Extensions { entries: None }
    }

    /// This map with `value` in it, in place of the value of its type it held.
    #[must_use]
    pub fn with<T: Any + Send + Sync>(self, value: T) -> Extensions {
        self.with_shared(Arc::new(value))
    }

    /// [`Extensions::with`] for a value already shared: the map holds one more reference.
    #[must_use]
    pub fn with_shared<T: Any + Send + Sync>(self, value: Arc<T>) -> Extensions {
        let id = TypeId::of::<T>();
        let mut entries: Vec<Entry> = self
            .entries
            .iter()
            .flat_map(|e| e.iter())
            .filter(|e| e.id != id)
            .cloned()
            .collect();
        entries.push(Entry {
            id,
            name: std::any::type_name::<T>(),
            value,
        });
        Extensions {
            entries: Some(entries.into()),
        }
    }

    /// The value of type `T`, if the map holds one.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.entries
            .as_deref()?
            .iter()
            .find(|e| e.id == id)
            .and_then(|e| e.value.downcast_ref())
    }

    /// The value of type `T` as it is shared, if the map holds one.
    pub fn get_shared<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let id = TypeId::of::<T>();
        self.entries
            .as_deref()?
            .iter()
            .find(|e| e.id == id)
            .and_then(|e| e.value.clone().downcast().ok())
    }

    /// Whether the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.as_ref().is_none_or(|e| e.is_empty())
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.entries.iter().flat_map(|e| e.iter()).map(|e| e.name))
            .finish()
    }
}

/// Two maps are equal when they are the same map (or both empty): values are shared, and
/// the map never compares what they hold.
impl PartialEq for Extensions {
    fn eq(&self, other: &Extensions) -> bool {
        match (&self.entries, &other.entries) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => self.is_empty() && other.is_empty(),
        }
    }
}

impl Eq for Extensions {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Caller(&'static str);

    #[test]
    fn a_value_is_found_by_its_type_and_a_second_of_one_type_replaces_the_first() {
        let empty = Extensions::new();
        assert!(empty.is_empty());
        assert_eq!(empty.get::<Caller>(), None);
        let map = empty.with(Caller("alice")).with(7u32);
        assert_eq!(map.get::<Caller>(), Some(&Caller("alice")));
        assert_eq!(map.get::<u32>(), Some(&7));
        let replaced = map.clone().with(Caller("bob"));
        assert_eq!(replaced.get::<Caller>(), Some(&Caller("bob")));
        assert_eq!(replaced.get::<u32>(), Some(&7));
        // The first map is unchanged: a map is never changed in place.
        assert_eq!(map.get::<Caller>(), Some(&Caller("alice")));
        assert_eq!(format!("{map:?}").matches("Caller").count(), 1);
    }

    #[test]
    fn a_shared_value_is_handed_back_shared_and_maps_equal_only_themselves() {
        let shared = Arc::new(Caller("alice"));
        let map = Extensions::new().with_shared(shared.clone());
        assert!(Arc::ptr_eq(&map.get_shared::<Caller>().unwrap(), &shared));
        assert_eq!(map, map.clone());
        assert_ne!(map, Extensions::new().with_shared(shared));
        assert_eq!(Extensions::new(), Extensions::default());
    }
}
