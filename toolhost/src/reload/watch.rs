//! What starts a reload: `SIGHUP`, and changes to the configuration file, a policy file
//! (`[policies] files`) or a plugin directory, noticed by the kernel (inotify, through the `notify` crate) and taken once
//! they have been quiet for [`SETTLE`] (a package being copied in is read once, whole).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use super::Reloader;

/// How long the files must be quiet before a change is acted on.
pub(crate) const SETTLE: Duration = Duration::from_millis(400);

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Changed {
    Config,
    Plugins,
}

impl Reloader {
    /// Reloads on `SIGHUP` and on changes to the configuration file and the plugin
    /// directories, until the returned task is aborted. Where the files cannot be watched
    /// (no inotify), the log says so and `SIGHUP` still works.
    pub(crate) fn watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        // Watching before this returns: a change made once the server is up is seen.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Changed>();
        let watcher = this.watcher(tx.clone());
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        if hangup.is_none() {
            tracing::warn!(target: "toolhost::reload", "cannot watch for SIGHUP; changes are still noticed in the files");
        }
        tokio::spawn(async move {
            // Kept while the task runs: dropping a watcher stops it.
            let mut _watcher = watcher;
            loop {
                let first = tokio::select! {
                    Some(()) = async { hangup.as_mut()?.recv().await } => {
                        tracing::info!(target: "toolhost::reload", "SIGHUP: reloading the configuration and the plugins");
                        this.reload_everything().await;
                        _watcher = this.watcher(tx.clone());
                        continue;
                    }
                    Some(changed) = rx.recv() => changed,
                    else => return,
                };
                let (mut config, mut plugins) =
                    (first == Changed::Config, first == Changed::Plugins);
                // Until the files are quiet.
                while let Ok(Some(more)) = tokio::time::timeout(SETTLE, rx.recv()).await {
                    config |= more == Changed::Config;
                    plugins |= more == Changed::Plugins;
                }
                if config {
                    this.reload_config().await;
                    // The plugin directories may be others now.
                    _watcher = this.watcher(tx.clone());
                }
                if plugins {
                    this.rescan_plugins(false).await;
                }
            }
        })
    }

    /// A watcher on the configuration file's directory and each plugin directory, its
    /// events sent to `tx`; `None` (logged) where the kernel cannot watch them.
    fn watcher(
        &self,
        tx: tokio::sync::mpsc::UnboundedSender<Changed>,
    ) -> Option<notify::RecommendedWatcher> {
        let file = std::fs::canonicalize(&self.file).unwrap_or_else(|_| self.file.clone());
        let file_name = file.file_name().map(|n| n.to_os_string());
        let config_dir = file.parent().map(PathBuf::from);
        let plugin_dirs: Vec<PathBuf> = self
            .plugin_dirs(&self.config())
            .iter()
            .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone()))
            .collect();
        // The policy files and directories: a change to one reloads the configuration.
        let base = file.parent().unwrap_or(std::path::Path::new("."));
        let policies: Vec<PathBuf> = self
            .config()
            .policies
            .files
            .iter()
            .map(|p| ::sandbox::resolve(p, base))
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
            .collect();
        let policy_dirs: Vec<PathBuf> = policies
            .iter()
            .map(|p| {
                if p.is_dir() {
                    p.clone()
                } else {
                    p.parent().map(PathBuf::from).unwrap_or_default()
                }
            })
            .filter(|d| Some(d) != config_dir.as_ref())
            .collect();
        let dirs = plugin_dirs.clone();
        let is_policy = move |path: &std::path::Path| {
            policies.iter().any(|p| {
                path == p
                    || (path.parent() == Some(p.as_path())
                        && path.extension().is_some_and(|x| x == "cedar"))
            })
        };
        let handler = move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if matches!(event.kind, notify::EventKind::Access(_)) {
                return;
            }
            for path in &event.paths {
                let changed = if dirs.iter().any(|d| path.starts_with(d)) {
                    Changed::Plugins
                } else if path.file_name().map(|n| n.to_os_string()) == file_name || is_policy(path)
                {
                    Changed::Config
                } else {
                    continue;
                };
                let _ = tx.send(changed);
            }
        };
        let mut watcher = match notify::recommended_watcher(handler) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(target: "toolhost::reload", "cannot watch the configuration and plugin directories ({e}); send SIGHUP to reload");
                return None;
            }
        };
        if let Some(dir) = &config_dir
            && let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive)
        {
            tracing::warn!(target: "toolhost::reload", dir = %dir.display(), "cannot watch the configuration file's directory ({e}); send SIGHUP to reload it");
        }
        for dir in &policy_dirs {
            if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                tracing::warn!(target: "toolhost::reload", dir = %dir.display(), "cannot watch this policy directory ({e}); send SIGHUP to reload the policies");
            }
        }
        for dir in &plugin_dirs {
            if let Err(e) = watcher.watch(dir, RecursiveMode::Recursive) {
                tracing::warn!(target: "toolhost::reload", dir = %dir.display(), "cannot watch this plugin directory ({e}); send SIGHUP to rescan it");
            }
        }
        Some(watcher)
    }
}
