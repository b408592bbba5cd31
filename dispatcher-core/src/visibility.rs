//! Which registered tools a session sees: [`Visibility`].

use std::collections::HashSet;

/// Which registered tools a session sees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Visibility {
    /// Every tool (subject to capability gating).
    #[default]
    All,
    /// Only these tools.
    Only(HashSet<String>),
    /// Every tool except these.
    Except(HashSet<String>),
    /// The tools whose name matches one of `tools` (a name, or a glob: `*` any run of
    /// characters, `?` one), and every tool of the toolsets in `toolsets`.
    Matching {
        /// Names and globs.
        tools: Vec<String>,
        /// Toolset ids.
        toolsets: Vec<String>,
    },
}

impl Visibility {
    /// Whether `tool` (not of a toolset) is visible.
    pub fn allows(&self, tool: &str) -> bool {
        self.allows_tool(tool, None)
    }

    /// Whether `tool`, of `toolset` if it belongs to one, is visible.
    pub fn allows_tool(&self, tool: &str, toolset: Option<&str>) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Only(set) => set.contains(tool),
            Visibility::Except(set) => !set.contains(tool),
            Visibility::Matching { tools, toolsets } => {
                toolset.is_some_and(|t| toolsets.iter().any(|x| x == t))
                    || tools.iter().any(|pattern| glob_matches(pattern, tool))
            }
        }
    }
}

/// Whether `name` matches `pattern`: `*` stands for any run of characters, `?` for one.
///
/// Kept rather than globset's: tool names are not paths, and this runs per tool per
/// listing without compiling a pattern, in time linear in the name (no backtracking).
/// The fuzz target `tool_globs` holds it to globset's answers (its first run found a `*`
/// of the pattern taken as a literal where the name had one).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name position it is trying to cover up to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        // A `*` is a wildcard first, whatever character the name has here.
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_and_single_characters() {
        for (pattern, name, matches) in [
            ("read_file", "read_file", true),
            ("read_file", "read_files", false),
            ("gh__*", "gh__get_issue", true),
            ("gh__*", "gh_get_issue", false),
            ("*_file", "write_file", true),
            ("*", "anything", true),
            ("?s", "ls", true),
            ("?s", "ps2", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("", "", true),
            ("***_*", "_*", true),
            ("a*", "a*b", true),
        ] {
            assert_eq!(glob_matches(pattern, name), matches, "{pattern} / {name}");
        }
    }

    #[test]
    fn matching_takes_names_globs_and_whole_toolsets() {
        let v = Visibility::Matching {
            tools: vec!["read_*".into(), "list_dir".into()],
            toolsets: vec!["github".into()],
        };
        assert!(v.allows("read_file") && v.allows("list_dir"));
        assert!(!v.allows("shell"));
        assert!(v.allows_tool("gh__create_issue", Some("github")));
        assert!(!v.allows_tool("jira__create_issue", Some("jira")));
    }
}
