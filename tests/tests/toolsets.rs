//! Toolsets: prefix routing, per-session vs shared binding, allowlists, name shortening.
#![cfg(test)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dispatcher_core::{
    Dispatcher, DispatcherConfig, ErrorClass, RegistrationError, SessionSpec, ToolUse, Toolset,
    ToolsetBinding, ToolsetDef, ToolsetHandle,
};
use serde_json::{Value, json};
use tool_api::{SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolFactory, ToolOutput};

/// A tool that answers with its own (unprefixed) name and its toolset instance number.
struct Named {
    def: ToolDefinition,
    instance: usize,
}

impl ToolFactory for Named {
    fn definition(&self) -> &ToolDefinition {
        &self.def
    }
    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(NamedTool(format!(
            "{}#{}",
            self.def.name, self.instance
        ))))
    }
    fn source(&self) -> &str {
        "test-toolset"
    }
}

struct NamedTool(String);
impl Tool for NamedTool {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self.0.clone()))
    }
}

struct Set {
    names: Vec<String>,
    instance: usize,
    stopped: Arc<AtomicUsize>,
}

impl Toolset for Set {
    fn tools(&self) -> Vec<Arc<dyn ToolFactory>> {
        self.names
            .iter()
            .map(|n| {
                Arc::new(Named {
                    def: ToolDefinition::new(
                        n,
                        "A tool.",
                        SideEffect::None,
                        json!({"type": "object"}),
                    )
                    .inline(),
                    instance: self.instance,
                }) as Arc<dyn ToolFactory>
            })
            .collect()
    }
    fn stop(&self) {
        self.stopped.fetch_add(1, Ordering::SeqCst);
    }
}

fn shared(id: &str, prefix: &str, names: &[&str], stopped: &Arc<AtomicUsize>) -> ToolsetDef {
    ToolsetDef {
        id: id.into(),
        prefix: Some(prefix.into()),
        binding: ToolsetBinding::Shared(Arc::new(Set {
            names: names.iter().map(|s| s.to_string()).collect(),
            instance: 0,
            stopped: stopped.clone(),
        })),
    }
}

async fn call(
    d: &Dispatcher,
    s: &dispatcher_core::Session,
    name: &str,
) -> dispatcher_core::ToolResultBlock {
    d.dispatch(ToolUse::new("tu", name, json!({})), s).await
}

#[tokio::test]
async fn prefixed_names_route_to_the_toolset_with_the_prefix_stripped() {
    let d = Dispatcher::new();
    let stopped = Arc::new(AtomicUsize::new(0));
    d.register_toolset(shared(
        "github",
        "gh",
        &["list_issues", "comment"],
        &stopped,
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = d
        .open_session(SessionSpec::new("s", dir.path()).toolsets(["github"]))
        .unwrap();
    let listing = d.listing_for_session(&s);
    let names: Vec<&str> = listing.iter().map(|l| l.definition.name.as_str()).collect();
    assert_eq!(names, ["gh__comment", "gh__list_issues"]);
    assert_eq!(listing[1].original_name.as_deref(), Some("list_issues"));
    assert_eq!(listing[1].toolset.as_deref(), Some("github"));
    assert_eq!(
        call(&d, &s, "gh__list_issues").await.text(),
        "list_issues#0"
    );
}

#[tokio::test]
async fn unknown_prefix_is_toolset_not_found_naming_the_known_ones() {
    let d = Dispatcher::new();
    let stopped = Arc::new(AtomicUsize::new(0));
    d.register_toolset(shared("github", "gh", &["list_issues"], &stopped))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = d
        .open_session(SessionSpec::new("s", dir.path()).toolsets(["github"]))
        .unwrap();
    let r = call(&d, &s, "jira__list").await;
    assert_eq!(r.error_class, Some(ErrorClass::NotFound));
    assert!(
        r.text()
            .starts_with("Toolset 'jira' not found. Known toolsets: github (prefix gh__)."),
        "{}",
        r.text()
    );
    let r = call(&d, &s, "gh__nope").await;
    assert!(
        r.text()
            .starts_with("Tool 'gh__nope' not found in toolset 'github'."),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn allowlist_is_empty_by_default_and_blocks_until_enabled() {
    let d = Dispatcher::new();
    let stopped = Arc::new(AtomicUsize::new(0));
    d.register_toolset(shared("github", "gh", &["list_issues"], &stopped))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plain = d
        .open_session(SessionSpec::new("plain", dir.path()))
        .unwrap();
    assert!(d.listing_for_session(&plain).is_empty());
    assert_eq!(
        call(&d, &plain, "gh__list_issues").await.error_class,
        Some(ErrorClass::NotFound)
    );
    let enabled = d
        .open_session(SessionSpec::new("enabled", dir.path()).toolsets(["github"]))
        .unwrap();
    assert!(!call(&d, &enabled, "gh__list_issues").await.is_error());
    assert!(
        d.open_session(SessionSpec::new("bad", dir.path()).toolsets(["nope"]))
            .is_err()
    );
}

#[tokio::test]
async fn per_session_toolsets_start_per_session_and_stop_with_it_shared_ones_do_not() {
    let d = Dispatcher::new();
    let started = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicUsize::new(0));
    let shared_stopped = Arc::new(AtomicUsize::new(0));
    let (st, sp) = (started.clone(), stopped.clone());
    d.register_toolset(ToolsetDef {
        id: "scratch".into(),
        prefix: Some("tmp".into()),
        binding: ToolsetBinding::PerSession(Arc::new(move |_session: &str| {
            let n = st.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Arc::new(Set {
                names: vec!["note".into()],
                instance: n,
                stopped: sp.clone(),
            }) as Arc<dyn Toolset>)
        })),
    })
    .unwrap();
    d.register_toolset(shared("github", "gh", &["list_issues"], &shared_stopped))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = d
        .open_session(SessionSpec::new("a", dir.path()).toolsets(["scratch", "github"]))
        .unwrap();
    let b = d
        .open_session(SessionSpec::new("b", dir.path()).toolsets(["scratch", "github"]))
        .unwrap();
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert_eq!(call(&d, &a, "tmp__note").await.text(), "note#1");
    assert_eq!(call(&d, &b, "tmp__note").await.text(), "note#2");
    assert!(d.close_session("a").await);
    assert_eq!(stopped.load(Ordering::SeqCst), 1);
    assert_eq!(shared_stopped.load(Ordering::SeqCst), 0);
    assert_eq!(
        call(&d, &b, "gh__list_issues").await.text(),
        "list_issues#0"
    );
    assert_eq!(call(&d, &b, "tmp__note").await.text(), "note#2");
}

#[tokio::test]
async fn long_and_clashing_names_are_shortened_and_keep_their_identity() {
    let d = Dispatcher::new();
    let stopped = Arc::new(AtomicUsize::new(0));
    let long = "x".repeat(70);
    d.register_toolset(shared("long", "srv", &[&long], &stopped))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = d
        .open_session(SessionSpec::new("s", dir.path()).toolsets(["long"]))
        .unwrap();
    let listing = d.listing_for_session(&s);
    let published = listing[0].definition.name.clone();
    assert_eq!(published.len(), 64);
    assert_eq!(listing[0].original_name.as_deref(), Some(long.as_str()));
    assert_eq!(call(&d, &s, &published).await.text(), format!("{long}#0"));
}

#[tokio::test]
async fn dot_separator_can_be_configured() {
    let d = Dispatcher::builder()
        .config(DispatcherConfig {
            toolset_separator: ".".into(),
            ..Default::default()
        })
        .build();
    let stopped = Arc::new(AtomicUsize::new(0));
    d.register_toolset(shared("github", "gh", &["list"], &stopped))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = d
        .open_session(SessionSpec::new("s", dir.path()).toolsets(["github"]))
        .unwrap();
    assert_eq!(call(&d, &s, "gh.list").await.text(), "list#0");
}

#[test]
fn duplicate_toolset_ids_and_prefixes_are_refused() {
    let d = Dispatcher::new();
    let stopped = Arc::new(AtomicUsize::new(0));
    d.register_toolset(shared("github", "gh", &["a"], &stopped))
        .unwrap();
    let e = d
        .register_toolset(shared("github", "gh2", &["a"], &stopped))
        .unwrap_err();
    assert!(matches!(e, RegistrationError::Toolset { .. }), "{e}");
    let e = d
        .register_toolset(shared("other", "gh", &["a"], &stopped))
        .unwrap_err();
    assert!(
        e.to_string().contains("already used by toolset 'github'"),
        "{e}"
    );
    let e = d
        .register_toolset(shared("bad", "has space", &["a"], &stopped))
        .unwrap_err();
    assert!(e.to_string().contains("prefix"), "{e}");
}

/// A toolset whose tool list the test changes, and which keeps the handle it was bound with.
struct Changing {
    names: std::sync::Mutex<Vec<String>>,
    handle: std::sync::Mutex<Option<ToolsetHandle>>,
}

impl Changing {
    fn new(names: &[&str]) -> Arc<Changing> {
        Arc::new(Changing {
            names: std::sync::Mutex::new(names.iter().map(|s| s.to_string()).collect()),
            handle: std::sync::Mutex::new(None),
        })
    }

    /// Changes the tools and announces it, as an MCP server's list_changed would.
    fn change_to(&self, names: &[&str]) -> Result<usize, RegistrationError> {
        *self.names.lock().unwrap() = names.iter().map(|s| s.to_string()).collect();
        let handle = self.handle.lock().unwrap().clone().expect("bound at start");
        handle.tools_changed()
    }
}

impl Toolset for Changing {
    fn tools(&self) -> Vec<Arc<dyn ToolFactory>> {
        let names = self.names.lock().unwrap().clone();
        Set {
            names,
            instance: 0,
            stopped: Arc::new(AtomicUsize::new(0)),
        }
        .tools()
    }
    fn bind(&self, handle: ToolsetHandle) {
        *self.handle.lock().unwrap() = Some(handle);
    }
}

#[tokio::test]
async fn per_session_toolset_republishes_its_tools_through_its_handle() {
    let d = Dispatcher::new();
    let instances: Arc<std::sync::Mutex<Vec<Arc<Changing>>>> = Arc::default();
    let made = instances.clone();
    d.register_toolset(ToolsetDef {
        id: "live".into(),
        prefix: Some("live".into()),
        binding: ToolsetBinding::PerSession(Arc::new(move |_session: &str| {
            let set = Changing::new(&["old"]);
            made.lock().unwrap().push(set.clone());
            Ok(set as Arc<dyn Toolset>)
        })),
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = d
        .open_session(SessionSpec::new("a", dir.path()).toolsets(["live"]))
        .unwrap();
    let b = d
        .open_session(SessionSpec::new("b", dir.path()).toolsets(["live"]))
        .unwrap();
    assert_eq!(call(&d, &a, "live__old").await.text(), "old#0");
    let set_a = instances.lock().unwrap()[0].clone();
    assert_eq!(set_a.change_to(&["new", "newer"]).unwrap(), 2);
    assert_eq!(call(&d, &a, "live__new").await.text(), "new#0");
    let gone = call(&d, &a, "live__old").await;
    assert_eq!(
        gone.error_class,
        Some(ErrorClass::NotFound),
        "{}",
        gone.text()
    );
    // The other session's instance did not change.
    assert_eq!(call(&d, &b, "live__old").await.text(), "old#0");
    assert_eq!(
        call(&d, &b, "live__new").await.error_class,
        Some(ErrorClass::NotFound)
    );
    // Once the session is closed, its instance's handle refuses to republish.
    assert!(d.close_session("a").await);
    let e = set_a.change_to(&["again"]).unwrap_err().to_string();
    assert!(e.contains("session is gone"), "{e}");
}

#[tokio::test]
async fn shared_toolset_republishes_through_its_handle_and_refuses_once_the_dispatcher_is_gone() {
    let d = Dispatcher::new();
    let set = Changing::new(&["one"]);
    d.register_toolset(ToolsetDef {
        id: "srv".into(),
        prefix: Some("srv".into()),
        binding: ToolsetBinding::Shared(set.clone()),
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = d
        .open_session(SessionSpec::new("s", dir.path()).toolsets(["srv"]))
        .unwrap();
    assert_eq!(set.change_to(&["two"]).unwrap(), 1);
    assert_eq!(call(&d, &s, "srv__two").await.text(), "two#0");
    assert_eq!(
        call(&d, &s, "srv__one").await.error_class,
        Some(ErrorClass::NotFound)
    );
    drop(s);
    drop(d);
    let e = set.change_to(&["three"]).unwrap_err().to_string();
    assert!(e.contains("dispatcher is gone"), "{e}");
}

#[tokio::test]
async fn watch_tools_sees_every_change_to_the_tools_and_none_without_one() {
    let d = Dispatcher::new();
    let mut changes = d.watch_tools();
    let set = Changing::new(&["one"]);
    d.register_toolset(ToolsetDef {
        id: "srv".into(),
        prefix: Some("srv".into()),
        binding: ToolsetBinding::Shared(set.clone()),
    })
    .unwrap();
    assert!(changes.has_changed().unwrap(), "a toolset published");
    changes.mark_unchanged();
    // A republish wakes a watcher that is waiting.
    let waiting = tokio::spawn(async move {
        changes.changed().await.unwrap();
        changes
    });
    tokio::task::yield_now().await;
    set.change_to(&["two"]).unwrap();
    let mut changes = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("the republish woke the watcher")
        .unwrap();
    // Removing a tool that is not there changes nothing; removing one that is does.
    assert!(!d.unregister("nothing"));
    assert!(!changes.has_changed().unwrap());
    assert!(d.unregister("srv__two"));
    assert!(changes.has_changed().unwrap());
    changes.mark_unchanged();
    // A per-session toolset starting in a session is a change too.
    d.register_toolset(ToolsetDef {
        id: "live".into(),
        prefix: Some("live".into()),
        binding: ToolsetBinding::PerSession(Arc::new(|_session: &str| {
            Ok(Changing::new(&["x"]) as Arc<dyn Toolset>)
        })),
    })
    .unwrap();
    changes.mark_unchanged();
    let dir = tempfile::tempdir().unwrap();
    let s = d
        .open_session(SessionSpec::new("s", dir.path()).toolsets(["live"]))
        .unwrap();
    assert!(changes.has_changed().unwrap());
    let names: Vec<String> = d
        .definitions_for_session(&s)
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["live__x"]);
}

#[tokio::test]
async fn a_toolset_without_a_prefix_keeps_its_names_and_a_clash_names_both_owners() {
    let d = Dispatcher::new();
    for f in builtin_tools::factories() {
        d.register(f).unwrap();
    }
    let stopped = Arc::new(AtomicUsize::new(0));
    let mut plain = shared("plain", "", &["lookup"], &stopped);
    plain.prefix = None;
    d.register_toolset(plain).unwrap();
    let s = d
        .open_session(SessionSpec::new("s", std::env::temp_dir()).toolsets(["plain"]))
        .unwrap();
    assert_eq!(call(&d, &s, "lookup").await.text(), "lookup#0");
    let mut clashing = shared("clash", "", &["read_file"], &stopped);
    clashing.prefix = None;
    let e = d.register_toolset(clashing).unwrap_err().to_string();
    assert!(
        e.contains("tool 'read_file' from toolset 'clash' (mounted without a prefix) clashes")
            && e.contains("from builtin"),
        "{e}"
    );
}
