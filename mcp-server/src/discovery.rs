//! Progressive discovery (`[mcp.discovery]`): a client's `tools/list` holds a few tools that
//! are always listed and [`FIND_TOOLS`], which finds the others by what they do
//! ([`dispatcher_core::Dispatcher::search_tools`]) and answers with their full definitions.
//! A found tool is then called by its own name, so validation against its own schema,
//! policy, confirmation, pins, the audit log and traces all name the real tool. In a
//! 2025-era session the found tools join the session's list (its client is told
//! `notifications/tools/list_changed`); a client that only calls what it was listed (a
//! stateless one, or one that ignores list changes) calls a found tool through
//! [`CALL_FOUND_TOOL`], which hands the call on as the tool's own before anything checks
//! it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use dispatcher_core::{FoundTool, ToolListing};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde::Deserialize as _;
use serde_json::{Value, json};

/// The search tool's name.
pub const FIND_TOOLS: &str = "find_tools";
/// The name of the tool through which a client calls a found tool it was not listed.
pub const CALL_FOUND_TOOL: &str = "call_found_tool";

/// When discovery is on.
///
/// Off by default: toolhost in front of servers lists what they list, as a client that
/// knows those servers expects (a conformance suite, a client that ignores list changes
/// and only calls what it was listed). A server whose sessions see more than `threshold`
/// tools says once, in its log, how to turn discovery on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscoveryMode {
    /// Every visible tool is listed (the default).
    #[default]
    Off,
    /// Always.
    On,
    /// For a session that can see more tools than `threshold`.
    Auto,
}

/// The `[mcp.discovery]` table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Discovery {
    /// `off` (default), `on`, or `auto`: on once a session can see more than `threshold`
    /// tools.
    pub mode: DiscoveryMode,
    /// How many visible tools turn `auto` on, and past which a server with discovery off
    /// says how to turn it on (default 40).
    #[serde(deserialize_with = "dispatcher_core::Limit::count")]
    pub threshold: usize,
    /// The tools listed whatever the mode: names, globs (`*`, `?`) or `source:SOURCE`
    /// (`source:builtin`, `source:mcp:github`, `source:plugin:text-tools`). Default:
    /// `["source:builtin"]`, toolhost's own tools.
    pub always: Vec<String>,
    /// How many tools a search returns unless it asks for fewer or more (default 5, from
    /// 1 to 50).
    #[serde(deserialize_with = "results")]
    pub results: usize,
    /// A sentence embedding model's folder (a sentence-transformers BERT model: config.json,
    /// vocab.txt, model.safetensors; relative to the config file): with it, a search ranks
    /// tools by meaning as well as by words, and finds `create_directory` for "make a new
    /// folder". Loaded when the server starts (about 90 MB of memory for all-MiniLM-L6-v2);
    /// each search then encodes its query (milliseconds). Default: none, words only.
    pub model: Option<std::path::PathBuf>,
}

impl Default for Discovery {
    fn default() -> Self {
        Discovery {
            mode: DiscoveryMode::Off,
            threshold: 40,
            always: vec!["source:builtin".into()],
            results: 5,
            model: None,
        }
    }
}

/// The most tools one search returns.
pub const MAX_RESULTS: usize = 50;

impl Discovery {
    /// Whether discovery is on for a session that can see `visible` tools.
    pub fn applies(&self, visible: usize) -> bool {
        match self.mode {
            DiscoveryMode::Off => false,
            DiscoveryMode::On => true,
            DiscoveryMode::Auto => visible > self.threshold,
        }
    }

    /// Whether `tool` is listed whatever the mode.
    pub fn always_lists(&self, tool: &ToolListing) -> bool {
        self.always
            .iter()
            .any(|entry| match entry.strip_prefix("source:") {
                Some(source) => tool.source == source,
                None => dispatcher_core::glob_matches(entry, &tool.definition.name),
            })
    }
}

/// `results`: from 1 to [`MAX_RESULTS`].
fn results<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = i64::deserialize(d)?;
    match usize::try_from(n) {
        Ok(n @ 1..=MAX_RESULTS) => Ok(n),
        _ => Err(serde::de::Error::custom(format!(
            "expected from 1 to {MAX_RESULTS} tools a search returns, found {n}"
        ))),
    }
}

/// The tools a session's client found, which its list shows from then on (2025 era), and
/// a count of its changes, which the watcher of the client's list waits on beside the
/// dispatcher's.
pub struct Found {
    names: Mutex<HashSet<String>>,
    changed: tokio::sync::watch::Sender<u64>,
    /// A watcher tells the client of its list's changes: its connection outlives a
    /// request (a 2025 session past `notifications/initialized`), so what it finds can
    /// join its list.
    watched: std::sync::atomic::AtomicBool,
}

impl Default for Found {
    fn default() -> Self {
        Found {
            names: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            watched: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Found {
    /// A watcher of the client's list has started.
    pub(crate) fn mark_watched(&self) {
        self.watched
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether what the client finds joins its list (a watcher tells it).
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Adds `names`; whether any was new (the watchers are then told).
    pub(crate) fn add<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> bool {
        let mut found = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let mut added = false;
        for name in names {
            added |= found.insert(name.to_string());
        }
        drop(found);
        if added {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
        added
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    /// Sees a new value whenever a tool was added.
    pub(crate) fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// What `tools/list` shows of `listing` under `discovery`: everything when it does not
/// apply; else the tools always listed, those `found`, and the two discovery tools.
pub(crate) fn listed(
    listing: Vec<ToolListing>,
    discovery: &Discovery,
    found: &Found,
) -> (Vec<ToolListing>, bool) {
    if !discovery.applies(listing.len()) {
        if discovery.mode == DiscoveryMode::Off && listing.len() > discovery.threshold {
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::info!(
                    tools = listing.len(),
                    "a client is listed {} tools, each in its model's context on every turn; `mode = \"auto\"` under [mcp.discovery] lists a few and a search for the rest (docs/mcp.md, \"Progressive discovery\")",
                    listing.len()
                );
            }
        }
        return (listing, false);
    }
    let kept = listing
        .into_iter()
        .filter(|t| {
            t.definition.name != FIND_TOOLS
                && t.definition.name != CALL_FOUND_TOOL
                && (discovery.always_lists(t) || found.contains(&t.definition.name))
        })
        .collect();
    (kept, true)
}

/// The two discovery tools, as listed.
pub(crate) fn discovery_tools(results: usize) -> [Tool; 2] {
    let find = json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What the tool should do (\"create a GitHub issue\") or its name."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "description": format!("How many to return (default {results}).")
            }
        },
        "required": ["query"],
        "additionalProperties": false
    });
    let call = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The found tool's name."},
            "arguments": {"type": "object", "description": "Its arguments."}
        },
        "required": ["name"],
        "additionalProperties": false
    });
    [
        Tool::new(
            FIND_TOOLS,
            "Search the tools not listed here by what they do, when none listed fits. Returns the best matches' full definitions; call a found tool by its name.",
            Arc::new(object(find)),
        )
        .annotate(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new(
            CALL_FOUND_TOOL,
            // What a model needs to know to use it; that the call is then checked and
            // confirmed as the found tool's own is toolhost's business, not the model's.
            format!("Call a tool found with {FIND_TOOLS} that cannot be called directly."),
            Arc::new(object(call)),
        ),
    ]
}

fn object(value: Value) -> serde_json::Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// The `find_tools` query and limit from a call's `arguments`, or what is wrong.
pub(crate) fn query_of(
    arguments: &serde_json::Map<String, Value>,
    default_limit: usize,
) -> Result<(String, usize), String> {
    let query = match arguments.get("query") {
        Some(Value::String(q)) if !q.trim().is_empty() => q.clone(),
        Some(Value::String(_)) => {
            return Err("'query' is empty: say what the tool should do".into());
        }
        Some(other) => return Err(format!("'query' must be a string, found {other}")),
        None => return Err("'query' is required: say what the tool should do".into()),
    };
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => default_limit,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(n @ 1..) if n as usize <= MAX_RESULTS => n as usize,
            _ => {
                return Err(format!(
                    "'limit' must be from 1 to {MAX_RESULTS}, found {n}"
                ));
            }
        },
        Some(other) => return Err(format!("'limit' must be an integer, found {other}")),
    };
    for key in arguments.keys() {
        if key != "query" && key != "limit" {
            return Err(format!(
                "unknown argument '{key}': {FIND_TOOLS} takes 'query' and 'limit'"
            ));
        }
    }
    Ok((query, limit))
}

/// The name and arguments a `call_found_tool` call hands on, or what is wrong.
pub(crate) fn call_of(
    arguments: serde_json::Map<String, Value>,
) -> Result<(String, serde_json::Map<String, Value>), String> {
    let mut arguments = arguments;
    let name = match arguments.remove("name") {
        Some(Value::String(name)) if !name.is_empty() => name,
        Some(other) => return Err(format!("'name' must be a tool's name, found {other}")),
        None => {
            return Err(format!(
                "'name' is required: the name of a tool {FIND_TOOLS} found"
            ));
        }
    };
    if name == CALL_FOUND_TOOL || name == FIND_TOOLS {
        return Err(format!("{CALL_FOUND_TOOL} calls found tools, not '{name}'"));
    }
    let inner = match arguments.remove("arguments") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(map)) => map,
        Some(other) => return Err(format!("'arguments' must be an object, found {other}")),
    };
    if let Some(key) = arguments.keys().next() {
        return Err(format!(
            "unknown argument '{key}': {CALL_FOUND_TOOL} takes 'name' and 'arguments'"
        ));
    }
    Ok((name, inner))
}

/// The answer to a search: each found tool's definition as `tools/list` would show it,
/// as text and as structured content; `listed` says the found tools now join the list.
pub(crate) fn answer(found: &[FoundTool], tools: Vec<Tool>, listed: bool) -> CallToolResult {
    let how = if listed {
        "They are now listed: call them by name."
    } else {
        "Call them by name, or through call_found_tool if they cannot be called directly."
    };
    let structured = json!({
        "tools": tools,
        "note": if found.is_empty() {
            "No tool matched; try other words.".to_string()
        } else {
            how.to_string()
        },
    });
    let text = serde_json::to_string(&structured).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(name: &str, source: &str) -> ToolListing {
        ToolListing {
            definition: tool_api::ToolDefinition::new(
                name,
                "d",
                tool_api::SideEffect::None,
                json!({"type": "object"}),
            ),
            source: source.into(),
            toolset: None,
            original_name: None,
            placement: Default::default(),
        }
    }

    #[test]
    fn auto_turns_on_past_the_threshold_and_keeps_what_is_always_listed_and_found() {
        let discovery = Discovery {
            mode: DiscoveryMode::Auto,
            threshold: 2,
            always: vec!["source:builtin".into(), "gh__get_*".into()],
            ..Discovery::default()
        };
        let tools = || {
            vec![
                listing("read_file", "builtin"),
                listing("gh__get_issue", "mcp:gh"),
                listing("gh__create_issue", "mcp:gh"),
            ]
        };
        let found = Found::default();
        let names = |(l, on): (Vec<ToolListing>, bool)| {
            (
                l.into_iter().map(|t| t.definition.name).collect::<Vec<_>>(),
                on,
            )
        };
        assert_eq!(
            names(listed(tools()[..2].to_vec(), &discovery, &found)),
            (vec!["read_file".to_string(), "gh__get_issue".into()], false)
        );
        assert_eq!(
            names(listed(tools(), &discovery, &found)),
            (vec!["read_file".to_string(), "gh__get_issue".into()], true)
        );
        assert!(found.add(["gh__create_issue"]));
        assert!(!found.add(["gh__create_issue"]));
        assert_eq!(names(listed(tools(), &discovery, &found)).0.len(), 3);
        let off = Discovery {
            mode: DiscoveryMode::Off,
            ..discovery
        };
        assert!(!off.applies(10_000));
    }

    #[test]
    fn bad_discovery_arguments_are_named() {
        let args = |v: Value| object(v);
        let table = [
            (json!({}), "'query' is required"),
            (json!({"query": " "}), "'query' is empty"),
            (json!({"query": 3}), "'query' must be a string"),
            (
                json!({"query": "x", "limit": 0}),
                "'limit' must be from 1 to 50",
            ),
            (
                json!({"query": "x", "limit": "5"}),
                "'limit' must be an integer",
            ),
            (json!({"query": "x", "mode": 1}), "unknown argument 'mode'"),
        ];
        for (arguments, expected) in table {
            let why = query_of(&args(arguments.clone()), 5).unwrap_err();
            assert!(why.contains(expected), "{arguments}: {why}");
        }
        assert_eq!(
            query_of(&args(json!({"query": "time", "limit": 7})), 5).unwrap(),
            ("time".into(), 7)
        );
        let calls = [
            (json!({}), "'name' is required"),
            (json!({"name": "call_found_tool"}), "calls found tools"),
            (
                json!({"name": "x", "arguments": []}),
                "'arguments' must be an object",
            ),
            (json!({"name": "x", "args": {}}), "unknown argument 'args'"),
        ];
        for (arguments, expected) in calls {
            let why = call_of(args(arguments.clone())).unwrap_err();
            assert!(why.contains(expected), "{arguments}: {why}");
        }
        let (name, inner) = call_of(args(json!({"name": "t", "arguments": {"a": 1}}))).unwrap();
        assert_eq!(
            (name.as_str(), Value::Object(inner)),
            ("t", json!({"a": 1}))
        );
    }
}
