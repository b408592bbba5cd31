//! Plugin directories rescanned under a running server: the packages are loaded again
//! exactly as at start (verification, signatures, isolation), into a dispatcher of their
//! own first; then the tools are swapped into the server's dispatcher in one step.
//!
//! A plugin's calls in flight finish on the version they started on (they hold its tools);
//! an isolated worker or a WebAssembly instance of a version no longer loaded is freed
//! when its last call ends. An in-process library cannot be unloaded safely (abi_stable
//! keeps what it loaded): it stops receiving calls and stays mapped until toolhost exits.
//! Every package is loaded again on a change, so the workers of unchanged plugins are
//! restarted too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use dispatcher_core::{Dispatcher, ToolFactory};
use plugin_host::{Isolation, LoadReport, Outcome, PackageReport};

use super::Reloader;

/// What is loaded now, and the state of the directories it was loaded from.
pub(super) struct Loaded {
    pub(super) fingerprint: Fingerprint,
    pub(super) report: LoadReport,
}

/// Every file under the plugin directories (two levels: packages are files or folders):
/// its size and modification time.
pub(super) type Fingerprint = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

pub(super) fn fingerprint(dirs: &[PathBuf]) -> Fingerprint {
    fn walk(dir: &Path, depth: usize, into: &mut Fingerprint) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                if depth > 0 {
                    walk(&path, depth - 1, into);
                }
            } else {
                into.insert(path, (meta.len(), meta.modified().ok()));
            }
        }
    }
    let mut print = Fingerprint::new();
    for dir in dirs {
        walk(dir, 2, &mut print);
    }
    print
}

/// A loaded plugin, as a report shows it.
struct Plugin<'a> {
    path: &'a Path,
    name: &'a str,
    version: &'a str,
    tools: Vec<String>,
    isolation: Isolation,
}

fn loaded(report: &LoadReport) -> Vec<Plugin<'_>> {
    report
        .packages
        .iter()
        .filter_map(|p| match &p.outcome {
            Outcome::Loaded {
                name,
                version,
                tools,
                isolation,
                ..
            } => Some(Plugin {
                path: &p.path,
                name,
                version,
                tools: tools.iter().map(|(t, _)| t.clone()).collect(),
                isolation: *isolation,
            }),
            Outcome::Refused(_) => None,
        })
        .collect()
}

impl Reloader {
    /// Rescans the plugin directories; with `force`, also when no file changed (`SIGHUP`,
    /// or settings the packages load with changed).
    pub(crate) async fn rescan_plugins(self: &Arc<Self>, force: bool) {
        let _one = self.busy.lock().await;
        let this = self.clone();
        let swapped = tokio::task::spawn_blocking(move || this.rescan_now(force)).await;
        if let Err(e) = swapped {
            tracing::error!(target: "toolhost::reload", "the plugin rescan failed: {e}");
        }
    }

    fn rescan_now(&self, force: bool) {
        let config = self.config();
        let dirs = self.plugin_dirs(&config);
        let print = fingerprint(&dirs);
        {
            let loaded = self.plugins.lock().unwrap_or_else(PoisonError::into_inner);
            if !force && loaded.fingerprint == print {
                return;
            }
        }
        tracing::info!(target: "toolhost::reload", dirs = ?dirs, "plugin directories changed: loading their packages again");
        // The built-in tools are there too, so that a plugin taking one of their names is
        // refused as at start.
        let staging = Dispatcher::new();
        for factory in builtin_tools::factories() {
            let _ = staging.register(factory);
        }
        let report = match crate::host::worker_command(self.worker.as_ref()) {
            Ok((program, args)) if !dirs.is_empty() => {
                crate::host::plugin_host(&config, dirs, program, args, &self.workspace)
                    .load_into(&staging)
            }
            Ok(_) => LoadReport::default(),
            Err(e) => {
                tracing::error!(target: "toolhost::reload", "plugins not reloaded: {}", e.0);
                return;
            }
        };
        let mut loaded = self.plugins.lock().unwrap_or_else(PoisonError::into_inner);
        match self.swap(&loaded.report, report, &staging) {
            Ok(report) => {
                if let Some(metrics) = &self.metrics {
                    metrics.watch_workers(&report.workers);
                }
                *loaded = Loaded {
                    fingerprint: print,
                    report,
                };
            }
            Err(e) => {
                tracing::error!(target: "toolhost::reload", "plugins not swapped in: {e}; the versions loaded before keep serving");
            }
        }
    }

    /// Swaps the tools of `new` (loaded into `staging`) for those of `old`; a plugin that
    /// was loaded and whose package is there but refused now keeps its old version. The
    /// report of what is loaded after the swap.
    fn swap(
        &self,
        old: &LoadReport,
        new: LoadReport,
        staging: &Dispatcher,
    ) -> Result<LoadReport, String> {
        let before = loaded(old);
        let after = loaded(&new);
        let now: BTreeSet<&str> = after.iter().map(|p| p.name).collect();
        let still_there = |path: &Path| new.packages.iter().any(|p| p.path == path);
        let kept: Vec<&Plugin<'_>> = before
            .iter()
            .filter(|p| !now.contains(p.name) && still_there(p.path))
            .collect();
        let remove: Vec<String> = before
            .iter()
            .filter(|p| !kept.iter().any(|k| k.name == p.name))
            .flat_map(|p| p.tools.iter().cloned())
            .collect();
        let mut add: Vec<Arc<dyn ToolFactory>> = Vec::new();
        for plugin in &after {
            for tool in &plugin.tools {
                let factory = staging.factory(tool).ok_or_else(|| {
                    format!("plugin {}: its tool {tool} was not registered", plugin.name)
                })?;
                add.push(factory);
            }
        }
        self.dispatcher
            .replace_tools(&remove, add)
            .map_err(|e| e.to_string())?;
        log_changes(&before, &after, &kept, &new);
        let mut report = new;
        for plugin in &kept {
            if let Some(entry) = old.packages.iter().find(|p| p.path == plugin.path) {
                report.packages.retain(|p| p.path != plugin.path);
                report.packages.push(PackageReport {
                    path: entry.path.clone(),
                    outcome: entry.outcome.clone(),
                });
            }
            report.workers.extend(
                old.workers
                    .iter()
                    .filter(|w| w.status().plugin == plugin.name)
                    .cloned(),
            );
        }
        Ok(report)
    }
}

/// One line per plugin that changed: upgraded, added, removed, or kept after its new
/// version was refused.
fn log_changes(
    before: &[Plugin<'_>],
    after: &[Plugin<'_>],
    kept: &[&Plugin<'_>],
    new: &LoadReport,
) {
    for plugin in after {
        match before.iter().find(|b| b.name == plugin.name) {
            Some(old) if old.version != plugin.version || old.path != plugin.path => {
                tracing::info!(target: "toolhost::reload", plugin = plugin.name,
                    "plugin upgraded: {} {} → {} ({}); calls in flight finish on {}{}",
                    plugin.name, old.version, plugin.version, plugin.path.display(), old.version, mapped(old));
            }
            Some(_) => {}
            None => tracing::info!(target: "toolhost::reload", plugin = plugin.name,
                "plugin added: {} {} ({}), tools {}", plugin.name, plugin.version, plugin.path.display(), plugin.tools.join(", ")),
        }
    }
    for old in before {
        if after.iter().any(|a| a.name == old.name) {
            continue;
        }
        if kept.iter().any(|k| k.name == old.name) {
            let why = new
                .refusal_for(old.path)
                .map_or_else(|| "refused".to_string(), |r| r.to_string());
            tracing::warn!(target: "toolhost::reload", plugin = old.name,
                "plugin {}: its package {} was refused ({why}); {} {} keeps serving", old.name, old.path.display(), old.name, old.version);
        } else {
            tracing::info!(target: "toolhost::reload", plugin = old.name,
                "plugin removed: {} {} ({}){}", old.name, old.version, old.path.display(), mapped(old));
        }
    }
}

/// What the log adds for a version no longer called: an in-process library stays mapped.
fn mapped(old: &Plugin<'_>) -> &'static str {
    if old.isolation == Isolation::InProcess {
        "; its in-process library cannot be unloaded safely and stays mapped until toolhost exits"
    } else {
        ""
    }
}
