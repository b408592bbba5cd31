//! Toolsets: groups of tools published under a prefix ([`Toolset`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use tool_api::ToolFactory;

use crate::error::{RegistrationError, SessionError};
use crate::registry::{self, Registered, Registry};
use crate::session::SessionState;

/// Toolsets: groups of tools published under a prefix, bound per session or shared.
///
/// A toolset has an id and an optional prefix. Its tools are published as
/// `<prefix><separator><tool>` (separator `__` by default: providers reject `.` in tool
/// names; `.` can be configured) and routed back by that registered prefix: the toolset's
/// factory for the tool is bound to the tool's own name, so the prefix never reaches it.
///
/// - **Shared** ([`ToolsetBinding::Shared`]): one instance for every session; a session
///   never stops it.
/// - **Per session** ([`ToolsetBinding::PerSession`]): each session that enables it starts
///   its own instance when it opens, and stops it when it closes.
///
/// Sessions see a toolset only if their [`crate::SessionSpec::toolsets`] allowlist names it
/// (empty by default). Tools registered directly with [`crate::Dispatcher::register`] are
/// not in a toolset and are visible to every session.
///
/// A qualified name longer than 64 characters, or one that clashes with a name already
/// published, is shortened deterministically: the tool part is cut and an 8-hex-digit hash
/// of the full original name is appended (`prefix__some_very_long_na_1a2b3c4d`). The
/// original toolset and tool name stay attached for routing, listings and messages.
///
/// A running toolset: a set of tools (under their own, unprefixed names).
pub trait Toolset: Send + Sync {
    /// The tools it offers now.
    fn tools(&self) -> Vec<Arc<dyn ToolFactory>>;

    /// Called once, when the toolset is registered (shared) or started for a session (per
    /// session), with the handle through which it announces that its tools changed (e.g. an
    /// MCP server's `notifications/tools/list_changed`). The default ignores it.
    fn bind(&self, handle: ToolsetHandle) {
        let _ = handle;
    }

    /// Stops it (a per-session instance, when its session closes). Default: nothing.
    fn stop(&self) {}

    /// A cap of its own for its tools' calls, when their work is done elsewhere (a mounted
    /// MCP server's): at most this many of them run at once in one session, and they take
    /// no place under the session's `max_concurrency`, which then bounds the calls that run
    /// in this process. Per-tool caps still apply on top. Default: `None` (the session's
    /// cap, as any tool's).
    fn own_cap(&self) -> Option<usize> {
        None
    }
}

/// Makes a per-session instance; gets the session id.
pub type ToolsetFactory = Arc<dyn Fn(&str) -> Result<Arc<dyn Toolset>, String> + Send + Sync>;

/// How sessions get a toolset instance.
#[derive(Clone)]
pub enum ToolsetBinding {
    /// One instance for all sessions.
    Shared(Arc<dyn Toolset>),
    /// A fresh instance per session, stopped with the session.
    PerSession(ToolsetFactory),
}

/// A toolset to register.
#[derive(Clone)]
pub struct ToolsetDef {
    /// Unique id (what allowlists name).
    pub id: String,
    /// Prefix of its published tool names; `None` publishes them unprefixed.
    pub prefix: Option<String>,
    /// Shared or per session.
    pub binding: ToolsetBinding,
}

impl std::fmt::Debug for ToolsetDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsetDef")
            .field("id", &self.id)
            .field("prefix", &self.prefix)
            .field(
                "binding",
                &match self.binding {
                    ToolsetBinding::Shared(_) => "shared",
                    ToolsetBinding::PerSession(_) => "per-session",
                },
            )
            .finish()
    }
}

/// Given to a toolset when it is bound ([`Toolset::bind`]): announces that its tools
/// changed. It holds the dispatcher (and, for a per-session instance, the session) weakly:
/// once they are gone, announcing is refused and nothing is kept alive.
#[derive(Clone)]
pub struct ToolsetHandle {
    id: Arc<str>,
    prefix: Option<String>,
    separator: String,
    instance: Weak<dyn Toolset>,
    global: Weak<Registry>,
    session: Option<Weak<SessionState>>,
}

impl std::fmt::Debug for ToolsetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsetHandle")
            .field("id", &self.id)
            .field("per_session", &self.session.is_some())
            .finish_non_exhaustive()
    }
}

impl ToolsetHandle {
    /// The toolset's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether what it publishes into is still there: the toolset's instance, the
    /// dispatcher and (per session) the session. Once not, it never is again (the host is
    /// shutting down, or the session closed): a failure to republish then is no fault.
    pub fn is_live(&self) -> bool {
        self.instance.strong_count() > 0
            && self.global.strong_count() > 0
            && self
                .session
                .as_ref()
                .is_none_or(|s| s.upgrade().is_some_and(|s| !s.is_closed()))
    }

    /// Re-reads the toolset's tools ([`Toolset::tools`]) and republishes them in place of
    /// the old ones, all or none. Returns how many tools it now has. Refused when the
    /// dispatcher or the session is gone, or when a tool is (its message says why).
    pub fn tools_changed(&self) -> Result<usize, RegistrationError> {
        let gone = |what: &str| RegistrationError::Toolset {
            id: self.id.to_string(),
            message: format!("{what} is gone; its tools were not republished"),
        };
        let instance = self.instance.upgrade().ok_or_else(|| gone("the toolset"))?;
        let global = self
            .global
            .upgrade()
            .ok_or_else(|| gone("the dispatcher"))?;
        let published = match &self.session {
            None => self.publish(instance.as_ref(), &global, &|_| None),
            Some(session) => {
                let session = session
                    .upgrade()
                    .filter(|s| !s.is_closed())
                    .ok_or_else(|| gone("the session"))?;
                self.publish(instance.as_ref(), &session.tools, &|n| global.source_of(n))
            }
        }?;
        tracing::debug!(toolset = %self.id, tools = published, "toolset republished its tools");
        Ok(published)
    }

    /// Publishes the tools of `instance` into `target` under this handle's prefix,
    /// replacing the toolset's old tools there; `also_taken` gives the owner of a name
    /// taken elsewhere. Without a prefix (a transparent mount) a tool keeps its own name,
    /// and a name another tool has is refused, naming both.
    fn publish(
        &self,
        instance: &dyn Toolset,
        target: &Registry,
        also_taken: &dyn Fn(&str) -> Option<String>,
    ) -> Result<usize, RegistrationError> {
        target.replace_toolset(&self.id, also_taken, |taken| {
            let mut prepared: Vec<Registered> = Vec::new();
            let own_cap = instance.own_cap().map(|calls| calls.max(1));
            for factory in instance.tools() {
                let tool = factory.definition().name.clone();
                let owner = |n: &str| {
                    taken(n).or_else(|| {
                        prepared
                            .iter()
                            .any(|p| &*p.name == n)
                            .then(|| format!("toolset '{}'", self.id))
                    })
                };
                let clash = |name: String, existing_source: String| RegistrationError::Duplicate {
                    name,
                    existing_source,
                    new_source: match &self.prefix {
                        Some(_) => format!("toolset '{}'", self.id),
                        None => format!("toolset '{}' (mounted without a prefix)", self.id),
                    },
                };
                if self.prefix.is_none()
                    && let Some(existing) = owner(&tool)
                {
                    return Err(clash(tool, existing));
                }
                let published = publish_name(self.prefix.as_deref(), &self.separator, &tool, |n| {
                    owner(n).is_some()
                });
                if let Some(existing) = owner(&published) {
                    return Err(clash(published, existing));
                }
                let mut registered =
                    registry::prepare_as(factory, published, Some((self.id.clone(), tool)))?;
                registered.own_cap = own_cap;
                prepared.push(registered);
            }
            Ok(prepared)
        })
    }
}

/// Whether `prefix` may prefix a toolset's published names: 1 to 32 letters, digits, `_` or
/// `-`. `Err` says what is expected.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if (1..=32).contains(&prefix.len()) && is_publishable(prefix, "") {
        Ok(())
    } else {
        Err(format!(
            "prefix '{prefix}' must be 1-32 letters, digits, '_' or '-'"
        ))
    }
}

/// The toolset instances one session started.
type Instances = Vec<Arc<dyn Toolset>>;

/// The registered toolsets of a dispatcher, and the per-session instances they started.
#[derive(Default)]
pub(crate) struct Toolsets {
    defs: RwLock<Vec<ToolsetDef>>,
    /// Per-session instances, by session id.
    started: Mutex<HashMap<Arc<str>, Instances>>,
}

fn stop_quietly(instance: &dyn Toolset) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| instance.stop()));
}

impl Toolsets {
    fn defs(&self) -> Vec<ToolsetDef> {
        self.defs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn handle(
        def: &ToolsetDef,
        separator: &str,
        instance: &Arc<dyn Toolset>,
        global: &Arc<Registry>,
        session: Option<&Arc<SessionState>>,
    ) -> ToolsetHandle {
        ToolsetHandle {
            id: Arc::from(def.id.as_str()),
            prefix: def.prefix.clone(),
            separator: separator.to_string(),
            instance: Arc::downgrade(instance),
            global: Arc::downgrade(global),
            session: session.map(Arc::downgrade),
        }
    }

    /// Registers a toolset: refuses a duplicate id or prefix, or an invalid prefix; a
    /// shared toolset's tools are published at once (all or none) and it is bound.
    pub(crate) fn register(
        &self,
        def: ToolsetDef,
        global: &Arc<Registry>,
        separator: &str,
    ) -> Result<(), RegistrationError> {
        let refuse = |message: String| RegistrationError::Toolset {
            id: def.id.clone(),
            message,
        };
        let mut defs = self.defs.write().unwrap_or_else(PoisonError::into_inner);
        if defs.iter().any(|t| t.id == def.id) {
            return Err(refuse(
                "a toolset with this id is already registered".into(),
            ));
        }
        if let Some(p) = &def.prefix {
            check_prefix(p).map_err(refuse)?;
            if let Some(other) = defs.iter().find(|t| t.prefix.as_deref() == Some(p)) {
                return Err(refuse(format!(
                    "prefix '{p}' is already used by toolset '{}'",
                    other.id
                )));
            }
        }
        if let ToolsetBinding::Shared(instance) = &def.binding {
            let handle = Self::handle(&def, separator, instance, global, None);
            handle.publish(instance.as_ref(), global, &|_| None)?;
            instance.bind(handle);
        }
        defs.push(def);
        Ok(())
    }

    /// Forgets toolset `id` and removes its tools from `global`.
    pub(crate) fn unregister(&self, id: &str, global: &Arc<Registry>) -> bool {
        let mut defs = self.defs.write().unwrap_or_else(PoisonError::into_inner);
        let before = defs.len();
        defs.retain(|t| t.id != id);
        if defs.len() == before {
            return false;
        }
        drop(defs);
        let _ = global.replace_toolset(id, &|_| None, |_| Ok(Vec::new()));
        true
    }

    /// Re-reads a shared toolset's tools and republishes them.
    pub(crate) fn refresh(
        &self,
        id: &str,
        global: &Arc<Registry>,
        separator: &str,
    ) -> Result<usize, RegistrationError> {
        let def = self
            .defs()
            .into_iter()
            .find(|t| t.id == id)
            .ok_or_else(|| RegistrationError::Toolset {
                id: id.to_string(),
                message: "no toolset with this id is registered".into(),
            })?;
        let ToolsetBinding::Shared(instance) = &def.binding else {
            return Err(RegistrationError::Toolset {
                id: id.to_string(),
                message: "per-session toolsets are refreshed through the handle each instance gets (Toolset::bind), not by id".into(),
            });
        };
        Self::handle(&def, separator, instance, global, None).tools_changed()
    }

    /// Starts the per-session toolsets `session` enables; refuses an unknown id. On a
    /// failure, whatever it started for the session is stopped again.
    pub(crate) fn start_for(
        &self,
        session: &Arc<SessionState>,
        global: &Arc<Registry>,
        separator: &str,
    ) -> Result<(), SessionError> {
        let defs = self.defs();
        let mut started: Vec<Arc<dyn Toolset>> = Vec::new();
        let fail = |started: Vec<Arc<dyn Toolset>>, e: SessionError| {
            for instance in started {
                stop_quietly(instance.as_ref());
            }
            session.tools.clear();
            Err(e)
        };
        for wanted in &session.toolsets {
            let Some(def) = defs.iter().find(|t| *t.id == **wanted) else {
                let known = defs.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
                let e = SessionError::UnknownToolset {
                    id: wanted.to_string(),
                    known: known.join(", "),
                };
                return fail(started, e);
            };
            let ToolsetBinding::PerSession(make) = &def.binding else {
                continue;
            };
            let instance = match make(&session.id) {
                Ok(instance) => instance,
                Err(message) => {
                    let id = def.id.clone();
                    return fail(started, SessionError::Toolset { id, message });
                }
            };
            started.push(instance.clone());
            let handle = Self::handle(def, separator, &instance, global, Some(session));
            if let Err(e) =
                handle.publish(instance.as_ref(), &session.tools, &|n| global.source_of(n))
            {
                let (id, message) = (def.id.clone(), e.to_string());
                return fail(started, SessionError::Toolset { id, message });
            }
            instance.bind(handle);
        }
        if !started.is_empty() {
            self.started
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(session.id.clone(), started);
        }
        Ok(())
    }

    /// Stops the per-session instances `session` started and forgets their tools.
    pub(crate) fn stop_for(&self, session: &SessionState) {
        let started = self
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&session.id)
            .unwrap_or_default();
        session.tools.clear();
        for instance in started {
            stop_quietly(instance.as_ref());
        }
    }

    /// Where an unknown name would have been routed, for the not-found message.
    pub(crate) fn route_hint(
        &self,
        name: &str,
        session: &SessionState,
        separator: &str,
    ) -> Option<String> {
        let defs = self.defs.read().unwrap_or_else(PoisonError::into_inner);
        let enabled: Vec<&ToolsetDef> = defs
            .iter()
            .filter(|t| session.toolsets.iter().any(|e| **e == *t.id))
            .collect();
        if let Some(ts) = enabled.iter().find(|t| {
            t.prefix.as_ref().is_some_and(|p| {
                name.strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with(separator))
            })
        }) {
            return Some(format!("Tool '{name}' not found in toolset '{}'.", ts.id));
        }
        let (prefix, _) = name.split_once(separator)?;
        let known: Vec<String> = enabled
            .iter()
            .filter_map(|t| {
                t.prefix
                    .as_ref()
                    .map(|p| format!("{} (prefix {p}{separator})", t.id))
            })
            .collect();
        Some(format!(
            "Toolset '{prefix}' not found. Known toolsets: {}.",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    }
}

/// FNV-1a, for short deterministic suffixes.
fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Whether `name` is publishable with `separator` (which may allow `.`).
pub fn is_publishable(name: &str, separator: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || separator.as_bytes().contains(&b)
        })
}

/// The published name of `tool` in a toolset with `prefix`: the qualified name if it fits
/// and is free, else a deterministic shortened form with a hash suffix.
pub fn publish_name(
    prefix: Option<&str>,
    separator: &str,
    tool: &str,
    taken: impl Fn(&str) -> bool,
) -> String {
    let qualified = match prefix {
        Some(p) => format!("{p}{separator}{tool}"),
        None => tool.to_string(),
    };
    if is_publishable(&qualified, separator) && !taken(&qualified) {
        return qualified;
    }
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let head = match prefix {
        Some(p) => format!("{}{separator}", clean(p)),
        None => String::new(),
    };
    let suffix = format!("_{:08x}", fnv1a(&qualified) & 0xffff_ffff);
    let room = 64usize.saturating_sub(head.len() + suffix.len());
    let tool_part: String = clean(tool).chars().take(room).collect();
    format!("{head}{tool_part}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_name_is_prefix_separator_tool() {
        assert_eq!(
            publish_name(Some("gh"), "__", "list_issues", |_| false),
            "gh__list_issues"
        );
        assert_eq!(
            publish_name(None, "__", "read_file", |_| false),
            "read_file"
        );
        assert_eq!(publish_name(Some("gh"), ".", "list", |_| false), "gh.list");
    }

    #[test]
    fn too_long_or_clashing_names_are_shortened_deterministically() {
        let long = "a".repeat(70);
        let a = publish_name(Some("srv"), "__", &long, |_| false);
        let b = publish_name(Some("srv"), "__", &long, |_| false);
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert!(a.starts_with("srv__aaa") && is_publishable(&a, "__"));
        let clash = publish_name(Some("srv"), "__", "x", |n| n == "srv__x");
        assert_ne!(clash, "srv__x");
        assert!(clash.starts_with("srv__x_") && clash.len() == "srv__x_".len() + 8);
    }

    #[test]
    fn invalid_characters_are_replaced_in_the_shortened_form() {
        let n = publish_name(Some("srv"), "__", "tool with spaces", |_| false);
        assert!(is_publishable(&n, "__"), "{n}");
    }
}
