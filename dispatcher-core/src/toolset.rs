//! Toolsets: groups of tools published under a prefix, bound per session or shared.
//!
//! A toolset has an id and an optional prefix. Its tools are published as
//! `<prefix><separator><tool>` (separator `__` by default: providers reject `.` in tool
//! names; `.` can be configured) and routed back by that registered prefix: the toolset's
//! factory for the tool is bound to the tool's own name, so the prefix never reaches it.
//!
//! - **Shared** ([`ToolsetBinding::Shared`]): one instance for every session; a session
//!   never stops it.
//! - **Per session** ([`ToolsetBinding::PerSession`]): each session that enables it starts
//!   its own instance when it opens, and stops it when it closes.
//!
//! Sessions see a toolset only if their [`crate::SessionSpec::toolsets`] allowlist names it
//! (empty by default). Tools registered directly with [`crate::Dispatcher::register`] are
//! not in a toolset and are visible to every session.
//!
//! A qualified name longer than 64 characters, or one that clashes with a name already
//! published, is shortened deterministically: the tool part is cut and an 8-hex-digit hash
//! of the full original name is appended (`prefix__some_very_long_na_1a2b3c4d`). The
//! original toolset and tool name stay attached for routing, listings and messages.

use std::sync::Arc;

use tool_api::ToolFactory;

/// A running toolset: a set of tools (under their own, unprefixed names).
pub trait Toolset: Send + Sync {
    /// The tools it offers now.
    fn tools(&self) -> Vec<Arc<dyn ToolFactory>>;
    /// Stops it (a per-session instance, when its session closes). Default: nothing.
    fn stop(&self) {}
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
