//! What a plugin test sets up: a directory of plugin packages, the host's cache, a
//! workspace, a directory outside it, and the dispatcher the plugins load into.

use std::path::{Path, PathBuf};

use dispatcher_core::{Dispatcher, Session, SessionSpec, ToolResultBlock, ToolUse};
use serde_json::Value;
use toolhost_tests::{fixtures, package_library};

/// One plugin test's world (each its own temporary directories).
pub struct PluginEnv {
    /// Where plugin packages are put ([`PluginEnv::add`]) and loaded from.
    pub plugins: tempfile::TempDir,
    /// The plugin host's cache (what earlier starts remembered).
    pub cache: tempfile::TempDir,
    /// The session's workspace.
    pub workspace: tempfile::TempDir,
    /// A directory outside the workspace (where a test plants what a plugin must not read).
    pub outside: tempfile::TempDir,
    pub dispatcher: Dispatcher,
}

impl PluginEnv {
    /// Empty directories around `dispatcher`.
    pub fn new(dispatcher: Dispatcher) -> PluginEnv {
        PluginEnv {
            plugins: tempfile::tempdir().unwrap(),
            cache: tempfile::tempdir().unwrap(),
            workspace: tempfile::tempdir().unwrap(),
            outside: tempfile::tempdir().unwrap(),
            dispatcher,
        }
    }

    /// The plugin directory.
    pub fn dir(&self) -> &Path {
        self.plugins.path()
    }

    /// Packages fixture plugin `name` into the plugin directory as `dir_name`.
    pub fn add(&self, name: &str, dir_name: &str) -> PathBuf {
        package_library(&fixtures().library(name), self.dir(), dir_name)
    }

    /// A session over the workspace.
    pub fn session(&self) -> Session {
        self.dispatcher
            .open_session(SessionSpec::new("s", self.workspace.path()))
            .unwrap()
    }

    /// Calls `tool` with `input` in a session over the workspace.
    pub async fn call(&self, tool: &str, input: Value) -> ToolResultBlock {
        self.dispatcher
            .dispatch(ToolUse::new("tu", tool, input), &self.session())
            .await
    }

    /// `name` in the directory outside the workspace.
    pub fn outside(&self, name: &str) -> PathBuf {
        self.outside.path().join(name)
    }
}
