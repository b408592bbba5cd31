//! The WebAssembly tests' set-up: component packages copied from the fixtures
//! `cargo xtask test` builds, loaded into a dispatcher over a temporary workspace.

use std::path::PathBuf;

use dispatcher_core::{Dispatcher, DispatcherBuilder, ErrorClass, ToolResultBlock, ToolUse};
use plugin_host::{LoadReport, Refusal};
use serde_json::Value;

use super::{Fixture, allow_all};

/// The built components, or `None` (skipped) outside `cargo xtask test`.
pub fn components() -> Option<PathBuf> {
    toolhost_tests::peer("TOOLHOST_TEST_COMPONENTS")
}

/// A plugin directory with copies of component packages, a dispatcher with them loaded,
/// and a session over a temporary workspace.
pub struct Components {
    pub plugins: tempfile::TempDir,
    pub cache: tempfile::TempDir,
    pub compiled: PathBuf,
    pub fx: Fixture,
}

impl Components {
    /// `packages` copied from the fixtures, nothing loaded yet; `None` when skipped.
    pub fn new(packages: &[&str], builder: DispatcherBuilder) -> Option<Components> {
        let dir = components()?;
        let plugins = tempfile::tempdir().unwrap();
        for name in packages {
            toolhost_tests::copy_dir(&dir.join("packages").join(name), &plugins.path().join(name));
        }
        Some(Components {
            plugins,
            cache: tempfile::tempdir().unwrap(),
            compiled: dir.join("cache"),
            fx: Fixture::new(builder.build()),
        })
    }

    pub fn host(&self) -> plugin_host::PluginHost {
        plugin_host::PluginHost::new([self.plugins.path()])
            .cache_dir(self.cache.path())
            .wasm_cache_dir(&self.compiled)
    }

    pub fn load(&self) -> LoadReport {
        self.load_with(self.host())
    }

    /// Loaded by `host` (made with [`Components::host`] and set up further).
    pub fn load_with(&self, host: plugin_host::PluginHost) -> LoadReport {
        host.load_into(&self.fx.dispatcher)
    }

    /// Loaded, every package asserted loaded.
    pub fn loaded(packages: &[&str], builder: DispatcherBuilder) -> Option<Components> {
        Components::loaded_by(packages, builder, Components::host)
    }

    /// Loaded by the host `host` makes, every package asserted loaded.
    pub fn loaded_by(
        packages: &[&str],
        builder: DispatcherBuilder,
        host: impl FnOnce(&Components) -> plugin_host::PluginHost,
    ) -> Option<Components> {
        let env = Components::new(packages, builder)?;
        let report = env.load_with(host(&env));
        assert_eq!(
            report.loaded().count(),
            packages.len(),
            "{:?}",
            report.lines()
        );
        Some(env)
    }

    pub fn d(&self) -> &Dispatcher {
        &self.fx.dispatcher
    }

    pub async fn call(&self, tool: &str, input: Value) -> ToolResultBlock {
        self.d()
            .dispatch(
                ToolUse::new(format!("tu_{tool}"), tool, input),
                &self.fx.session,
            )
            .await
    }

    pub fn manifest(&self, package: &str) -> PathBuf {
        self.plugins
            .path()
            .join(package)
            .join(plugin_host::MANIFEST_FILE)
    }

    pub fn edit_manifest(&self, package: &str, from: &str, to: &str) {
        let file = self.manifest(package);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
    }
}

pub fn faults() -> Option<Components> {
    Components::loaded(&["faults"], Dispatcher::builder().policy(allow_all()))
}

/// `r` failed with `class`, its text saying `says` (anything, when empty).
pub fn assert_fails(r: &ToolResultBlock, class: ErrorClass, says: &str) {
    let text = r.text();
    assert_eq!(r.error_class, Some(class), "{text}");
    assert!(text.contains(says), "expected it to say {says:?}: {text}");
}

pub fn refusal(report: &LoadReport) -> &Refusal {
    report
        .refused()
        .next()
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("nothing was refused: {:?}", report.lines()))
}

/// A fresh tool `tool` of the built component `package`, outside any dispatcher, whose
/// `network` tools may reach `hosts`; `None` outside `cargo xtask test`.
pub fn lone_tool(
    package: &str,
    tool: &str,
    hosts: plugin_host::plugin_wasm::HostList,
) -> Option<std::sync::Arc<dyn tool_api::Tool>> {
    let dir = components()?;
    let runtime =
        plugin_host::plugin_wasm::WasmRuntime::new(Some(dir.join("cache")), Default::default())
            .unwrap();
    let component = dir.join(format!("packages/{package}/{package}.wasm"));
    let sha = plugin_host::digest::sha256_file(&component).unwrap();
    let plugin = std::sync::Arc::new(runtime.load(&component, &sha, hosts).unwrap());
    let factory = plugin
        .factories(&format!("plugin:{package}"))
        .into_iter()
        .find(|f| f.definition().name == tool)
        .unwrap();
    Some(std::sync::Arc::from(factory.create().unwrap()))
}

/// What a tool's call on a thread of its own returns, once it returns.
pub type Ended = std::sync::mpsc::Receiver<Result<tool_api::ToolOutput, tool_api::ToolError>>;

/// Runs `tool` with `input` on a thread of its own, in a test host's context.
pub fn run_on_thread(tool: std::sync::Arc<dyn tool_api::Tool>, input: Value) -> Ended {
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let host = tool_api::testing::TestHost::new();
        let _ = done.send(tool.execute(input, &host.context()));
    });
    ended
}

/// Asserts the call on its thread returns within 5 s, cancelled; `what` names that thread.
pub fn assert_returns_cancelled(ended: &Ended, what: &str) {
    let result = ended
        .recv_timeout(std::time::Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("{what} returns"));
    assert!(
        matches!(result, Err(tool_api::ToolError::Cancelled(_))),
        "{result:?}"
    );
}
