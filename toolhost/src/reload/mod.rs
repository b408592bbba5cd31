//! A running `serve` takes changes without a restart.
//!
//! - **Plugins** ([`plugins`]): a package added, replaced by a newer version or removed
//!   in a plugin directory is noticed (the directories are watched; `SIGHUP` rescans
//!   them too), verified exactly as at start, and swapped in at once: calls in flight
//!   finish on the old version, new calls reach the new one, and MCP clients are sent
//!   `tools/list_changed`. A new version that is refused leaves the old one serving.
//! - **The configuration file** ([`config`]), on `SIGHUP` and when the file changes: a file
//!   that does not load is refused whole, with the error it would stop a start with, and
//!   the running configuration stays. Policy, limits, timeouts, result limits and access
//!   rules apply to the next calls; `[[mcp_servers]]` added, removed or changed are
//!   started, stopped or restarted (an unchanged server keeps running, with its pins).
//!   What cannot change under a running server is named, as needing a restart.
//!
//! Every change is logged (target `toolhost::reload`).

mod access;
mod config;
mod plugins;
mod watch;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use dispatcher_core::Dispatcher;

pub(crate) use access::Access;

use crate::config::Config;
use crate::host::{Host, Sources};
use crate::telemetry::metrics::Metrics;

/// A configured MCP server: its id, and its toolset or why it did not start.
type Mounted = (String, Result<Arc<mcp_toolsets::McpToolset>, String>);

/// What a reload changes, and what it needs to redo what a start did.
pub(crate) struct Reloader {
    file: PathBuf,
    extra_plugin_dirs: Vec<PathBuf>,
    worker: Option<(PathBuf, Vec<OsString>)>,
    workspace: PathBuf,
    dispatcher: Dispatcher,
    config: Mutex<Config>,
    plugins: Mutex<plugins::Loaded>,
    servers: tokio::sync::Mutex<Vec<Mounted>>,
    access: Arc<Access>,
    metrics: Option<Arc<Metrics>>,
    /// The MCP server whose gateway passes the mounted servers' prompts and resources on.
    shared: std::sync::OnceLock<Arc<mcp_server::McpShared>>,
    /// One reload at a time.
    busy: tokio::sync::Mutex<()>,
}

impl Reloader {
    /// Takes over `host`'s plugins and servers (stopped when the reloader is dropped), and
    /// the access rules the server's sessions are opened with.
    pub(crate) fn take(
        sources: &Sources<'_>,
        workspace: &Path,
        host: &mut Host,
        access: Arc<Access>,
        metrics: Option<Arc<Metrics>>,
    ) -> Arc<Reloader> {
        let dirs = sources.plugin_dirs();
        Arc::new(Reloader {
            file: sources.file.to_path_buf(),
            extra_plugin_dirs: sources.extra_plugin_dirs.to_vec(),
            worker: sources.worker.clone(),
            workspace: workspace.to_path_buf(),
            dispatcher: host.dispatcher.clone(),
            config: Mutex::new(sources.config.clone()),
            plugins: Mutex::new(plugins::Loaded {
                fingerprint: plugins::fingerprint(&dirs),
                report: std::mem::take(&mut host.plugins),
            }),
            servers: tokio::sync::Mutex::new(std::mem::take(&mut host.mcp)),
            access,
            metrics,
            shared: std::sync::OnceLock::new(),
            busy: tokio::sync::Mutex::new(()),
        })
    }

    /// The MCP server whose gateway follows the mounted servers a reload changes.
    pub(crate) fn serve_through(&self, shared: Arc<mcp_server::McpShared>) {
        let _ = self.shared.set(shared);
    }

    fn config(&self) -> Config {
        self.config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The plugin directories of `config` and the command line.
    fn plugin_dirs(&self, config: &Config) -> Vec<PathBuf> {
        Sources {
            config,
            file: &self.file,
            extra_plugin_dirs: &self.extra_plugin_dirs,
            worker: self.worker.clone(),
        }
        .plugin_dirs()
    }

    /// `SIGHUP`: the configuration file again, then every plugin directory.
    pub(crate) async fn reload_everything(self: &Arc<Self>) {
        self.reload_config().await;
        self.rescan_plugins(true).await;
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        let plugins = self
            .plugins
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for worker in &plugins.report.workers {
            worker.stop();
        }
        for ts in self
            .servers
            .get_mut()
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
        {
            dispatcher_core::Toolset::stop(ts.as_ref());
        }
    }
}
