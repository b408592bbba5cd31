//! `deny_read` patterns (`**/.env`, `secrets/*.pem`) matched in a workspace.
//!
//! A pattern is matched against paths relative to the workspace, component by component:
//! `*` and `?` within one component, `**` for any number of components. The walk does not
//! follow symbolic links (a link is matched by its own name) and stops after
//! [`WALK_LIMIT`] entries, saying so.

use std::path::{Path, PathBuf};

/// The most entries one search visits.
pub const WALK_LIMIT: usize = 200_000;

/// What a search found.
pub(crate) struct Found {
    pub(crate) matches: Vec<PathBuf>,
    /// Why it stopped early, if it did.
    pub(crate) cut: Option<String>,
}

/// Every path under `root` that one of `patterns` matches.
pub(crate) fn find(root: &Path, patterns: &[String], limit: usize) -> Found {
    let compiled: Vec<Vec<&str>> = patterns
        .iter()
        .map(|p| {
            p.trim_start_matches("./")
                .split('/')
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    let mut matches = Vec::new();
    let mut visited = 0usize;
    let mut stack: Vec<(PathBuf, Vec<String>)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > limit {
                return Found {
                    matches,
                    cut: Some(format!(
                        "the deny_read patterns were matched against the first {limit} entries of the workspace only ({} has more)",
                        root.display()
                    )),
                };
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut path_rel = rel.clone();
            path_rel.push(name);
            let parts: Vec<&str> = path_rel.iter().map(String::as_str).collect();
            if compiled.iter().any(|p| matches_path(p, &parts)) {
                matches.push(entry.path());
                continue;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), path_rel));
            }
        }
    }
    Found { matches, cut: None }
}

/// Whether the components `path` match the pattern's components.
fn matches_path(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| matches_path(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((name, more)) => {
                matches_name(first.as_bytes(), name.as_bytes()) && matches_path(rest, more)
            }
            None => false,
        },
    }
}

/// `*` and `?` within one name.
fn matches_name(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| matches_name(rest, &name[skip..])),
        Some((b'?', rest)) => !name.is_empty() && matches_name(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && matches_name(rest, &name[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        let p: Vec<&str> = pattern.split('/').collect();
        let q: Vec<&str> = path.split('/').collect();
        matches_path(&p, &q)
    }

    #[test]
    fn patterns_match_names_and_depths() {
        assert!(m("**/.env", ".env"));
        assert!(m("**/.env", "a/b/.env"));
        assert!(!m("**/.env", "a/.env.example"));
        assert!(m("**/*.pem", "certs/server.pem"));
        assert!(m("secrets/*", "secrets/db"));
        assert!(!m("secrets/*", "secrets/db/inner"));
        assert!(m("?.key", "a.key"));
        assert!(!m("?.key", "ab.key"));
    }

    #[test]
    fn a_search_finds_matches_and_says_when_it_was_cut() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        std::fs::write(root.path().join("a/b/.env"), "").unwrap();
        std::fs::write(root.path().join(".env"), "").unwrap();
        let found = find(root.path(), &["**/.env".into()], WALK_LIMIT);
        assert_eq!(found.matches.len(), 2);
        assert!(found.cut.is_none());
        let cut = find(root.path(), &["**/.env".into()], 1);
        assert!(cut.cut.unwrap().contains("first 1 entries"));
    }
}
