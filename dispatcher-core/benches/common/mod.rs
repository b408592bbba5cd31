//! The set-up the dispatcher benches share: the runtime they run on, the no-op tool and its
//! call, a dispatcher with the built-ins, and a workspace with the files the tools read.
//! Each bench uses the part it needs.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use dispatcher_core::{
    ConfirmationPolicy, Dispatcher, DispatcherConfig, Session, SessionSpec, ToolUse,
};
use serde_json::json;
use tool_api::{SideEffect, ToolDefinition, ToolFactory};

/// The runtime every bench dispatches on: two workers, as many as this machine's cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The no-op's definition: a three-property schema (one required), so validation does
/// real work; `inline` runs it on the polling thread.
pub fn noop_definition(name: &str, class: SideEffect, inline: bool) -> ToolDefinition {
    let def = ToolDefinition::new(
        name,
        "Does nothing.",
        class,
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "integer"},
                "c": {"type": "boolean"}
            },
            "required": ["a"]
        }),
    );
    if inline { def.inline() } else { def }
}

/// A no-op tool of class `class`.
pub fn noop(name: &str, class: SideEffect, inline: bool) -> Arc<dyn ToolFactory> {
    tool_api::testing::noop(noop_definition(name, class, inline))
}

/// A call of the no-op `name` with valid input.
pub fn call(id: impl Into<String>, name: &str) -> ToolUse {
    ToolUse::new(id, name, json!({"a": "x", "b": 1, "c": true}))
}

/// A dispatcher for up to 64 calls at once, with `policy`, the built-in tools, and `tools`.
pub fn dispatcher(
    policy: ConfirmationPolicy,
    tools: impl IntoIterator<Item = Arc<dyn ToolFactory>>,
) -> Dispatcher {
    let dispatcher = Dispatcher::builder()
        .config(DispatcherConfig {
            max_concurrency: 64,
            ..DispatcherConfig::default()
        })
        .policy(policy)
        .build();
    for tool in tools.into_iter().chain(builtin_tools::factories()) {
        dispatcher
            .register(tool)
            .expect("the bench's tools register");
    }
    dispatcher
}

/// A workspace with the files the benches read: `4k.txt` (4,096 bytes), `small.txt`
/// (512 bytes) and `twenty/` (20 empty files).
pub fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary workspace");
    let write = |name: &str, text: String| {
        std::fs::write(dir.path().join(name), text).expect("a workspace file");
    };
    write("4k.txt", "x".repeat(4096));
    write("small.txt", "x".repeat(512));
    std::fs::create_dir(dir.path().join("twenty")).expect("twenty/");
    for i in 0..20 {
        write(&format!("twenty/f{i:02}.txt"), String::new());
    }
    dir
}

/// A session on `root` with one event subscriber attached (kept alive by the caller), as a
/// host that shows events has.
pub fn session(
    dispatcher: &Dispatcher,
    root: &Path,
) -> (
    Session,
    tokio::sync::broadcast::Receiver<Arc<dispatcher_core::ToolEvent>>,
) {
    let session = dispatcher
        .open_session(SessionSpec::new("bench", root))
        .expect("a bench session");
    let subscriber = session.subscribe();
    (session, subscriber)
}
