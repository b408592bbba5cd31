//! What a scan did, package by package: [`LoadReport`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tool_api::SideEffect;

use crate::{Isolation, PluginWorker, Refusal};

/// The outcome for one package.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The package's tools are registered.
    Loaded {
        /// Plugin name.
        name: String,
        /// Plugin version.
        version: String,
        /// Its tools and their classes.
        tools: Vec<(String, SideEffect)>,
        /// Where it runs (`in_process` or `process`, never `auto`).
        isolation: Isolation,
        /// The id of the trusted key that signed it, if one did.
        signed_by: Option<String>,
    },
    /// The package was refused.
    Refused(Refusal),
}

/// What happened to one package.
#[derive(Debug, Clone)]
pub struct PackageReport {
    /// The package folder, archive or file.
    pub path: PathBuf,
    /// Loaded or refused.
    pub outcome: Outcome,
}

/// What a scan did, package by package.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// One entry per package found (and per unreadable directory).
    pub packages: Vec<PackageReport>,
    /// The worker of every package loaded with isolation `process`.
    pub workers: Vec<Arc<PluginWorker>>,
}

impl LoadReport {
    /// The packages that loaded.
    pub fn loaded(&self) -> impl Iterator<Item = &PackageReport> {
        self.packages
            .iter()
            .filter(|p| matches!(p.outcome, Outcome::Loaded { .. }))
    }

    /// The packages that were refused, with their reasons.
    pub fn refused(&self) -> impl Iterator<Item = (&Path, &Refusal)> {
        self.packages.iter().filter_map(|p| match &p.outcome {
            Outcome::Refused(r) => Some((p.path.as_path(), r)),
            Outcome::Loaded { .. } => None,
        })
    }

    /// The refusal for a package path, if it was refused.
    pub fn refusal_for(&self, path: &Path) -> Option<&Refusal> {
        self.refused().find(|(p, _)| *p == path).map(|(_, r)| r)
    }

    /// One line per worker process: its pid (or why none runs), its restarts and its
    /// sandbox.
    pub fn worker_lines(&self) -> Vec<String> {
        self.workers
            .iter()
            .map(|w| {
                let s = w.status();
                let state = match (s.pid, &s.last_failure) {
                    (Some(pid), _) => format!("running as pid {pid}"),
                    (None, Some(why)) => format!("down: {why}"),
                    (None, None) => "down".into(),
                };
                format!(
                    "worker   {}: {state}; restarts: {}; {}",
                    s.plugin,
                    s.restarts,
                    s.sandbox_line()
                )
            })
            .collect()
    }

    /// One human-readable line per package.
    pub fn lines(&self) -> Vec<String> {
        self.packages
            .iter()
            .map(|p| match &p.outcome {
                Outcome::Loaded {
                    name,
                    version,
                    tools,
                    isolation,
                    signed_by,
                } => {
                    let tools: Vec<String> =
                        tools.iter().map(|(t, c)| format!("{t} ({c})")).collect();
                    let signed = signed_by
                        .as_ref()
                        .map(|k| format!(", signed by {k}"))
                        .unwrap_or_default();
                    format!(
                        "loaded   {name} {version} from {} [{isolation}{signed}]: {}",
                        p.path.display(),
                        tools.join(", ")
                    )
                }
                Outcome::Refused(r) => format!("refused  {}: {r}", p.path.display()),
            })
            .collect()
    }
}
