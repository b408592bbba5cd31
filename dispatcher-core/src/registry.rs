//! The tool registry: validated definitions, their compiled validators and factories, and
//! the map that holds them by published name.
//!
//! A dispatcher has one global `Registry` (built-ins, plugins, shared toolsets); each
//! session has one more for the tools of the per-session toolsets it started.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tool_api::{SideEffect, ToolDefinition, ToolFactory};

use crate::error::RegistrationError;
use crate::schema::{InputValidator, check_subset};

/// A visible tool with where it comes from.
#[derive(Debug, Clone)]
pub struct ToolListing {
    /// The definition, under its published name.
    pub definition: ToolDefinition,
    /// Its source (`builtin`, `plugin:NAME`, `mcp:ID`, …).
    pub source: String,
    /// The toolset it belongs to, if any.
    pub toolset: Option<String>,
    /// Its name inside the toolset (what the toolset itself calls it).
    pub original_name: Option<String>,
    /// Where its calls run and what confines them, as its factory says.
    pub placement: tool_api::Placement,
}

/// A registered tool, ready to dispatch.
pub(crate) struct Registered {
    pub(crate) name: Arc<str>,
    pub(crate) factory: Arc<dyn ToolFactory>,
    /// The definition as published (for a toolset's tool: under its qualified name).
    pub(crate) published: ToolDefinition,
    /// For a toolset's tool: the toolset id and the tool's own name.
    pub(crate) origin: Option<(Arc<str>, String)>,
    pub(crate) validator: InputValidator,
    pub(crate) side_effects: SideEffect,
    pub(crate) inline: bool,
    /// Tried inline with a file budget first (see [`crate::workspace::InlineBudget`]).
    pub(crate) inline_when_small: bool,
    /// For a toolset's tool: how many calls of its toolset's tools one session runs at
    /// once, when the toolset has a cap of its own instead of the session's
    /// ([`crate::Toolset::own_cap`]).
    pub(crate) own_cap: Option<usize>,
    /// How long its recent calls took off the async threads (recorded where they run).
    pub(crate) run_times: crate::blocking::RunTimes,
    /// Unique to this registration ([`crate::RuleTool::serial`]).
    pub(crate) serial: u64,
}

impl Registered {
    pub(crate) fn definition(&self) -> &ToolDefinition {
        &self.published
    }

    /// The toolset this tool belongs to, if any.
    pub(crate) fn toolset(&self) -> Option<&str> {
        self.origin.as_ref().map(|(t, _)| &**t)
    }

    /// Whether the host enabled the capability this tool requires (if any).
    pub(crate) fn enabled_by(&self, capabilities: &HashSet<String>) -> bool {
        self.definition()
            .requires_capability
            .as_ref()
            .is_none_or(|c| capabilities.contains(c))
    }

    /// The tool as rules see it.
    pub(crate) fn for_rules(&self) -> crate::rules::RuleTool<'_> {
        crate::rules::RuleTool {
            name: &self.name,
            serial: self.serial,
            definition: &self.published,
            side_effects: self.side_effects,
            toolset: self.toolset(),
            source: self.factory.source(),
            version: self.factory.version(),
            pinned: self.factory.pinned(),
        }
    }

    /// The tool as a listing entry.
    pub(crate) fn listing(&self) -> ToolListing {
        ToolListing {
            definition: self.definition().clone(),
            source: self.factory.source().to_string(),
            toolset: self.origin.as_ref().map(|(t, _)| t.to_string()),
            original_name: self.origin.as_ref().map(|(_, n)| n.clone()),
            placement: self.factory.placement(),
        }
    }
}

/// The dispatcher's count of changes to its tools, shared by all its registries (the
/// global one and every session's): bumped by every insert, removal or republish.
pub(crate) type Changes = Arc<tokio::sync::watch::Sender<u64>>;

/// Tools by published name, hashed with foldhash: every call looks its tool up by name,
/// and the lookup was 3.2% of an inline no-op's profile with std's SipHash, 1.8% with
/// foldhash. foldhash is seeded per process, so a server that names its tools cannot aim
/// collisions at it.
type ByName = HashMap<Arc<str>, Arc<Registered>, foldhash::fast::RandomState>;

/// Registered tools by published name.
pub(crate) struct Registry {
    tools: RwLock<ByName>,
    changes: Changes,
}

impl Registry {
    /// An empty registry that reports its changes to `changes`.
    pub(crate) fn new(changes: Changes) -> Registry {
        Registry {
            tools: RwLock::default(),
            changes,
        }
    }

    /// Tells whoever watches the dispatcher's tools that they changed (after the write
    /// lock is gone, so a watcher that lists them at once does not wait on it).
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn read(&self) -> RwLockReadGuard<'_, ByName> {
        self.tools.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, ByName> {
        self.tools.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tool of this name.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Registered>> {
        self.read().get(name).cloned()
    }

    /// The source of the tool of this name (what a clash with it names).
    pub(crate) fn source_of(&self, name: &str) -> Option<String> {
        self.read()
            .get(name)
            .map(|t| t.factory.source().to_string())
    }

    /// How many tools it holds.
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    /// Every tool.
    pub(crate) fn all(&self) -> Vec<Arc<Registered>> {
        self.read().values().cloned().collect()
    }

    /// Adds a tool; refuses a name already taken, naming both sources.
    pub(crate) fn insert(&self, tool: Registered) -> Result<(), RegistrationError> {
        let mut tools = self.write();
        if let Some(existing) = tools.get(&tool.name) {
            return Err(RegistrationError::Duplicate {
                name: tool.name.to_string(),
                existing_source: existing.factory.source().to_string(),
                new_source: tool.factory.source().to_string(),
            });
        }
        tools.insert(tool.name.clone(), Arc::new(tool));
        drop(tools);
        self.changed();
        Ok(())
    }

    /// Removes the tools named `remove` and adds `add`, atomically: refused, with nothing
    /// changed, when an added name is taken by a tool that stays (naming both sources).
    /// A call already running on a removed tool keeps it until it ends.
    pub(crate) fn swap(
        &self,
        remove: &[String],
        add: Vec<Registered>,
    ) -> Result<(), RegistrationError> {
        let mut tools = self.write();
        for tool in &add {
            if let Some(existing) = tools.get(&tool.name)
                && !remove.iter().any(|r| **r == *tool.name)
            {
                return Err(RegistrationError::Duplicate {
                    name: tool.name.to_string(),
                    existing_source: existing.factory.source().to_string(),
                    new_source: tool.factory.source().to_string(),
                });
            }
        }
        for name in remove {
            tools.remove(name.as_str());
        }
        for tool in add {
            tools.insert(tool.name.clone(), Arc::new(tool));
        }
        drop(tools);
        self.changed();
        Ok(())
    }

    /// Removes a tool; returns whether it was there.
    pub(crate) fn remove(&self, name: &str) -> bool {
        let removed = self.write().remove(name).is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// Replaces the tools of `toolset` with what `prepare` makes, atomically: `prepare`
    /// gets the owner (its source) of a name taken by another tool (here, or wherever
    /// `also_taken` says), and nothing changes if it fails. Returns how many tools the
    /// toolset now has.
    pub(crate) fn replace_toolset(
        &self,
        toolset: &str,
        also_taken: &dyn Fn(&str) -> Option<String>,
        prepare: impl FnOnce(
            &dyn Fn(&str) -> Option<String>,
        ) -> Result<Vec<Registered>, RegistrationError>,
    ) -> Result<usize, RegistrationError> {
        let mut tools = self.write();
        let prepared = prepare(&|name: &str| {
            also_taken(name).or_else(|| {
                tools
                    .get(name)
                    .filter(|t| t.toolset() != Some(toolset))
                    .map(|t| t.factory.source().to_string())
            })
        })?;
        tools.retain(|_, t| t.toolset() != Some(toolset));
        let count = prepared.len();
        for tool in prepared {
            tools.insert(tool.name.clone(), Arc::new(tool));
        }
        drop(tools);
        self.changed();
        Ok(count)
    }

    /// Forgets every tool.
    pub(crate) fn clear(&self) {
        let mut tools = self.write();
        let had_some = !tools.is_empty();
        tools.clear();
        drop(tools);
        if had_some {
            self.changed();
        }
    }
}

use tool_api::is_valid_tool_name;

/// Validates a factory's definition and compiles its validator.
pub(crate) fn prepare(factory: Arc<dyn ToolFactory>) -> Result<Registered, RegistrationError> {
    if !is_valid_tool_name(&factory.definition().name) {
        return Err(RegistrationError::InvalidName {
            name: factory.definition().name.clone(),
        });
    }
    let name = factory.definition().name.clone();
    prepare_as(factory, name, None)
}

/// The next registration's serial: unique in the process.
static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Validates a factory's definition for publication under `published_name`.
pub(crate) fn prepare_as(
    factory: Arc<dyn ToolFactory>,
    published_name: String,
    origin: Option<(Arc<str>, String)>,
) -> Result<Registered, RegistrationError> {
    let def = factory.definition();
    if !factory.schema_as_given() {
        check_subset(&def.name, &def.input_schema)?;
    }
    for param in &def.path_params {
        let declared = def
            .input_schema
            .get("properties")
            .and_then(|p| p.get(param))
            .is_some();
        if !declared {
            return Err(RegistrationError::UnknownPathParam {
                tool: def.name.clone(),
                param: param.clone(),
            });
        }
    }
    let validator = InputValidator::compile(&def.name, &def.input_schema)?;
    let mut published = def.clone();
    published.name = published_name;
    Ok(Registered {
        name: Arc::from(published.name.as_str()),
        published,
        origin,
        side_effects: def.side_effects,
        inline: def.inline,
        inline_when_small: def.inline_when_small,
        own_cap: None,
        run_times: Default::default(),
        serial: SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        validator,
        factory,
    })
}
