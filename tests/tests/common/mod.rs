//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dispatcher_core::{
    ConfirmationPolicy, ConfirmationRequest, Confirmer, Decision, Dispatcher, DispatcherBuilder,
    Session, SessionSpec, ToolEvent,
};
use tokio::sync::broadcast;

pub mod plugin_env;
pub mod wasm;

/// Registers the built-in tools.
pub fn builtins(d: &Dispatcher) {
    for f in builtin_tools::factories() {
        d.register(f).unwrap();
    }
}

/// A confirmation policy from its TOML.
pub fn policy(text: &str) -> ConfirmationPolicy {
    toml::from_str(text).unwrap()
}

/// A policy that asks for nothing.
pub fn allow_all() -> ConfirmationPolicy {
    policy(r#"default = { write = "auto", execute = "auto", network = "auto" }"#)
}

/// A confirmer that answers every request with the same decision.
pub struct Scripted(pub Decision);

impl Confirmer for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn confirm(&self, _r: ConfirmationRequest) -> dispatcher_core::ConfirmFuture {
        let d = self.0;
        Box::pin(async move { d.into() })
    }
}

/// A temporary workspace and a session over it.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub dispatcher: Dispatcher,
    pub session: Session,
}

impl Fixture {
    pub fn new(dispatcher: Dispatcher) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let session = dispatcher
            .open_session(SessionSpec::new("s1", dir.path()))
            .unwrap();
        Fixture {
            dir,
            dispatcher,
            session,
        }
    }

    /// The usual prologue: the dispatcher `builder` makes, with the built-in tools, and a
    /// fixture over it.
    pub fn with_builtins(builder: DispatcherBuilder) -> (Dispatcher, Fixture) {
        let d = builder.build();
        builtins(&d);
        (d.clone(), Fixture::new(d))
    }

    pub fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, content).unwrap();
    }
}

/// Collects the events received so far (non-blocking).
pub fn drain(rx: &mut broadcast::Receiver<Arc<ToolEvent>>) -> Vec<Arc<ToolEvent>> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

/// Waits for the next event of the given kind.
pub async fn next_of(rx: &mut broadcast::Receiver<Arc<ToolEvent>>, kind: &str) -> Arc<ToolEvent> {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = rx.recv().await.unwrap();
            if e.kind.name() == kind {
                return e;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind} event within 10s"))
}

/// A `tracing` writer that keeps everything written, for log assertions.
#[derive(Clone, Default)]
pub struct LogCapture(pub Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Waits for the next event of any kind.
pub async fn next_of_any(rx: &mut broadcast::Receiver<Arc<ToolEvent>>) -> Arc<ToolEvent> {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no event within 10s")
        .unwrap()
}

/// The isolation the plugin suite runs under: `TOOLHOST_TEST_ISOLATION=process` isolates,
/// anything else loads in process.
pub fn isolation_under_test() -> plugin_host::Isolation {
    match std::env::var("TOOLHOST_TEST_ISOLATION").as_deref() {
        Ok("process") => plugin_host::Isolation::Process,
        _ => plugin_host::Isolation::InProcess,
    }
}

/// A plugin host over `dirs` with this isolation, whose workers are this crate's
/// `plugin-worker` binary.
pub fn plugin_host<P: Into<std::path::PathBuf>>(
    dirs: impl IntoIterator<Item = P>,
    isolation: plugin_host::Isolation,
) -> plugin_host::PluginHost {
    plugin_host::PluginHost::new(dirs)
        .isolation(isolation)
        .worker(worker_settings())
}

/// Workers started from this crate's `plugin-worker` binary.
pub fn worker_settings() -> plugin_host::WorkerSettings {
    plugin_host::WorkerSettings::new(env!("CARGO_BIN_EXE_plugin-worker"), Vec::<String>::new())
}

/// Runs every file operation from tools `probe_none`, `probe_read`, `probe_write` and
/// `probe_execute` (each does the operation its input names) and checks that a tool may do
/// what its declared class covers and gets `permission_denied`, naming the class and the
/// operation, for the rest. `write` puts a file in the session's workspace.
pub async fn assert_file_access_follows_the_declared_class(
    d: &Dispatcher,
    session: &Session,
    write: impl Fn(&str, &str),
) {
    use dispatcher_core::{ErrorClass, ToolUse};
    let reads = ["read", "read_bytes", "exists", "list", "metadata"];
    let writes = ["write", "write_bytes", "append", "delete", "patch"];
    for class in ["none", "read", "write", "execute"] {
        for op in reads.iter().chain(&writes) {
            write("seen.txt", "seen");
            let r = d
                .dispatch(
                    ToolUse::new(
                        "tu",
                        format!("probe_{class}"),
                        serde_json::json!({"op": op}),
                    ),
                    session,
                )
                .await;
            let allowed = match class {
                "none" => false,
                "read" => reads.contains(op),
                _ => true,
            };
            let text: String = r
                .content
                .iter()
                .filter_map(tool_api::Content::as_text)
                .collect();
            if allowed {
                assert!(!r.is_error(), "{class} {op}: {text}");
            } else {
                assert_eq!(
                    r.error_class,
                    Some(ErrorClass::PermissionDenied),
                    "{class} {op}: {text}"
                );
                let needed = if reads.contains(op) { "read" } else { "write" };
                // Text and bytes cross the ABI as one write operation.
                let op = if *op == "write_bytes" { "write" } else { op };
                assert!(
                    text.contains(&format!(
                        "tool 'probe_{class}' declares side effects '{class}'"
                    )) && text.contains(&format!("({op} '"))
                        && text.contains(&format!("must declare '{needed}'")),
                    "{class} {op}: {text}"
                );
            }
        }
    }
}
