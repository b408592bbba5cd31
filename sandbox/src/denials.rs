//! Why a confined program failed, in words that name the setting that allows it.
//!
//! When a confined program fails, what the sandbox denied it is told from two sources:
//!
//! - the egress proxy's refusals, exact (host, port and rule: [`crate::egress::Refusal`]);
//! - the program's own error output: an error naming a path and `Permission denied`,
//!   `Operation not permitted`, `Read-only file system` (or their `EACCES`, `EPERM`,
//!   `EROFS` codes), set against what the confinement hides and lets it write. A path the
//!   deny list hides was a read; a path outside what it may write, a write.
//!
//! The kernel's own record of each denial (Landlock's audit records, Linux 6.15 and
//! later) reaches only the audit daemon or the kernel log, which a host running as a user
//! cannot read; the program's output is what every host can read, and each explanation
//! says which source it came from.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::settings::{Settings, expand, home};
use crate::{CommandGrant, CommandMode};

/// Where an explanation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The program's error output.
    Output,
    /// The egress proxy.
    Proxy,
}

/// One thing the sandbox denied a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The line that says what was denied and what allows it.
    pub text: String,
    /// Where it was seen.
    pub source: Source,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        match self.source {
            Source::Output => f.write_str(" (seen in the program's error output)"),
            Source::Proxy => f.write_str(" (the egress proxy)"),
        }
    }
}

/// Tells a command's denials from its output, knowing what it was granted.
#[derive(Debug, Clone)]
pub struct Explainer {
    hidden: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    caches: Vec<PathBuf>,
    workspace: PathBuf,
    mode: CommandMode,
    /// The table the keys are in (`[sandbox]`, or a server's entry).
    table: String,
}

/// Everything the sandbox denied a command that failed, one line each: its egress proxy's
/// refusals (exact), then what its error `output` shows (`explainer`: the command's grant,
/// when it ran in an OS sandbox).
pub fn of_failure(
    egress: Option<&crate::egress::Egress>,
    explainer: Option<&Explainer>,
    output: &str,
) -> Vec<String> {
    let mut out: Vec<String> = egress
        .map(crate::egress::Egress::refusals)
        .unwrap_or_default()
        .iter()
        .map(|r| format!("{r} (the egress proxy)"))
        .collect();
    if let Some(explainer) = explainer {
        out.extend(explainer.explain(output).iter().map(ToString::to_string));
    }
    out
}

/// Words of an error that a denial causes.
const MARKERS: &[&str] = &[
    "permission denied",
    "operation not permitted",
    "read-only file system",
    "eacces",
    "eperm",
    "erofs",
];

/// The most denials one explanation lists.
const MAX: usize = 5;

impl Explainer {
    /// For a command granted `grant` in `workspace` under `settings`, whose private
    /// temporary directory is `tmp`; `table` names where the keys go.
    pub fn new(
        settings: &Settings,
        grant: CommandGrant,
        workspace: &Path,
        tmp: &Path,
        table: &str,
    ) -> Explainer {
        let home = home();
        Explainer {
            hidden: settings.hidden(workspace).paths,
            writable: settings.writable(grant, workspace, tmp),
            caches: settings
                .writable_caches
                .iter()
                .cloned()
                .chain(crate::settings::DEFAULT_CACHES.iter().map(PathBuf::from))
                .filter_map(|p| expand(&p, home.as_deref()))
                .collect(),
            workspace: workspace.to_path_buf(),
            mode: grant.mode,
            table: table.to_string(),
        }
    }

    /// What the output shows was denied (at most five, each path once).
    pub fn explain(&self, output: &str) -> Vec<Denial> {
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut out = Vec::new();
        for line in output.lines() {
            let lower = line.to_ascii_lowercase();
            if !MARKERS.iter().any(|m| lower.contains(m)) {
                continue;
            }
            for path in paths_in(line, &self.workspace) {
                if out.len() == MAX {
                    return out;
                }
                let Some(text) = self.explain_path(&path) else {
                    continue;
                };
                let key = self
                    .hidden
                    .iter()
                    .find(|h| path.starts_with(h))
                    .cloned()
                    .unwrap_or_else(|| path.clone());
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key);
                out.push(Denial {
                    text,
                    source: Source::Output,
                });
            }
        }
        out
    }

    fn explain_path(&self, path: &Path) -> Option<String> {
        let table = &self.table;
        if let Some(hidden) = self.hidden.iter().find(|h| path.starts_with(h)) {
            return Some(format!(
                "read of {} denied: {} is on the deny list; `allow_read = [\"{}\"]` in {table} re-opens it",
                path.display(),
                hidden.display(),
                hidden.display()
            ));
        }
        if self.writable.iter().any(|w| path.starts_with(w)) || path.starts_with("/proc") {
            return None;
        }
        if path.starts_with(&self.workspace) && self.mode == CommandMode::ReadOnly {
            return Some(format!(
                "write to {} denied: the command runs read-only; a workspace-write grant (`mode = \"workspace-write\"` in {table}) writes the workspace",
                path.display()
            ));
        }
        if let Some(cache) = self.caches.iter().find(|c| path.starts_with(c)) {
            return Some(format!(
                "write to {} denied: it is in the cache {}; list it in `writable_caches` in {table} (it was missing when the command started, or is not listed)",
                path.display(),
                cache.display()
            ));
        }
        Some(format!(
            "write to {} denied: outside what the command may write (the workspace, its temporary directory, writable_roots and writable_caches); add its directory to `writable_roots` in {table}",
            path.display()
        ))
    }
}

/// The paths a line names: quoted absolute ones (`'…'`, `"…"`, `` `…` ``), else the words
/// that look like paths (absolute, or relative with a `/`, taken from `cwd`, where the
/// command ran). A leading `PROGRAM:` (`/bin/sh: 1: cannot create …`) is the program that
/// complains, not what it was refused, unless it is all the line names.
fn paths_in(line: &str, cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for quote in ['\'', '"', '`'] {
        let mut parts = line.split(quote);
        parts.next();
        while let Some(inside) = parts.next() {
            if inside.starts_with('/') && !inside.contains(' ') {
                out.push(PathBuf::from(inside));
            }
            parts.next();
        }
    }
    if !out.is_empty() {
        return out;
    }
    let mut words: Vec<(bool, PathBuf)> = Vec::new();
    for (i, raw) in line.split_whitespace().enumerate() {
        let program = i == 0 && raw.ends_with(':');
        let word = raw.trim_matches(|c: char| {
            matches!(
                c,
                ':' | ',' | ';' | '(' | ')' | '[' | ']' | '\'' | '"' | '`'
            )
        });
        if word.starts_with('/') && word.len() > 1 {
            words.push((program, PathBuf::from(word)));
        } else if word.contains('/') && !word.contains("://") && !program {
            words.push((false, crate::settings::lexically_normal(&cwd.join(word))));
        }
    }
    let named = words.iter().any(|(program, _)| !program);
    words
        .into_iter()
        .filter(|(program, _)| !(named && *program))
        .map(|(_, path)| path)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explainer(mode: CommandMode) -> (tempfile::TempDir, Explainer) {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join(".ssh")).unwrap();
        std::fs::create_dir_all(h.join("w")).unwrap();
        let settings = Settings {
            deny_read: vec![h.join(".ssh")],
            writable_caches: vec![h.join(".npm")],
            ..Settings::default()
        };
        let e = Explainer::new(
            &settings,
            CommandGrant {
                mode,
                network: false,
            },
            &h.join("w"),
            Path::new("/tmp/t"),
            "[sandbox]",
        );
        (home, e)
    }

    #[test]
    fn a_hidden_path_is_a_read_denial_naming_allow_read() {
        let (home, e) = explainer(CommandMode::WorkspaceWrite);
        let key = home.path().join(".ssh/id_ed25519");
        let out = format!("cat: {}: Permission denied\n", key.display());
        let d = e.explain(&out);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].text.contains("allow_read"), "{}", d[0]);
        assert!(d[0].to_string().contains("error output"), "{}", d[0]);
    }

    #[test]
    fn a_write_outside_is_named_with_writable_roots_or_caches() {
        let (home, e) = explainer(CommandMode::WorkspaceWrite);
        let out = format!(
            "bash: {}/.bashrc: Permission denied\nnpm ERR! EACCES: permission denied, mkdir '{}/.npm/_cacache'\n",
            home.path().display(),
            home.path().display()
        );
        let d = e.explain(&out);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].text.contains("writable_roots"), "{}", d[0]);
        assert!(d[1].text.contains("writable_caches"), "{}", d[1]);
    }

    #[test]
    fn read_only_names_the_mode_and_allowed_writes_are_not_denials() {
        let (home, e) = explainer(CommandMode::ReadOnly);
        let out = format!(
            "touch: cannot touch '{}/w/f': Read-only file system",
            home.path().display()
        );
        assert!(e.explain(&out)[0].text.contains("workspace-write"));
        let (home, e) = explainer(CommandMode::WorkspaceWrite);
        let out = format!(
            "touch: cannot touch '{}/w/f': Permission denied",
            home.path().display()
        );
        assert!(e.explain(&out).is_empty());
        assert!(e.explain("all good: /usr/bin/true").is_empty());
    }

    #[test]
    fn the_shell_that_complains_is_not_what_was_refused() {
        let (home, e) = explainer(CommandMode::WorkspaceWrite);
        let d = e.explain("/bin/sh: 1: cannot create ../escaped.txt: Permission denied");
        assert_eq!(d.len(), 1, "{d:?}");
        let escaped = home.path().join("escaped.txt");
        assert!(
            d[0].text
                .starts_with(&format!("write to {} denied", escaped.display())),
            "{}",
            d[0]
        );
        assert!(!d[0].text.contains("/bin/sh"), "{}", d[0]);
    }

    #[test]
    fn a_deny_list_entry_written_with_dot_dot_matches_what_a_program_reports() {
        let home = tempfile::tempdir().unwrap();
        let ws = home.path().join("w");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        let mut settings = Settings {
            deny_read: vec![PathBuf::from("../.ssh")],
            ..Settings::default()
        };
        settings.resolve_paths(&ws);
        assert_eq!(settings.deny_read, [home.path().join(".ssh")]);
    }
}
