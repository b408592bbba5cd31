//! What [`crate::check_plugin!`] reads in a plugin's own sources (`src/**/*.rs`): tool
//! types that are defined but not in `export_plugin!` (a host would never see them), and
//! direct use of the filesystem, programs or the network that the plugin's declared
//! classes do not grant (isolated, the OS sandbox refuses it; in process, it bypasses the
//! workspace confinement the user relies on).
//!
//! It reads text, not Rust: code after a `#[cfg(test)]` line of a file (test modules) is
//! not read, and a line that ends with `// toolhost: allow` is skipped.

use std::path::{Path, PathBuf};

use crate::SideEffect;

/// A capability reached around the context, and what grants it.
struct Reach {
    what: &'static str,
    needles: &'static [&'static str],
    /// The class whose sandbox grants it; `None`: the context is the way for every class.
    granted_by: Option<SideEffect>,
    instead: &'static str,
}

const REACHES: [Reach; 3] = [
    Reach {
        what: "the filesystem",
        needles: &["std::fs", "File::open", "File::create", "OpenOptions::new"],
        granted_by: Some(SideEffect::Execute),
        instead: "reach workspace files through `ctx.files()` (confined to the workspace, \
                  checked against the declared class, recorded): an isolated worker's sandbox \
                  refuses direct file access unless a tool is declared `execute`",
    },
    Reach {
        what: "programs",
        needles: &["std::process::Command", "Command::new("],
        granted_by: Some(SideEffect::Execute),
        instead: "declare the tool `execute` (its worker's sandbox then lets programs run, \
                  writing only the workspace), or do the work in the tool itself",
    },
    Reach {
        what: "the network",
        needles: &[
            "std::net",
            "TcpStream::connect",
            "UdpSocket::bind",
            "TcpListener::bind",
        ],
        granted_by: Some(SideEffect::Network),
        instead: "declare the tool `network` (its worker's sandbox then allows outbound \
                  connections, the user is asked before it runs)",
    },
];

/// The problems found in the sources under `manifest_dir/src`, for a plugin exporting
/// `tool_types` (as written in `export_plugin!`) whose tools declare `classes`.
pub(crate) fn problems(
    manifest_dir: &Path,
    tool_types: &[&str],
    classes: &[SideEffect],
) -> Vec<String> {
    let src = manifest_dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let exported: Vec<&str> = tool_types.iter().map(|t| last_segment(t)).collect();
    let mut problems = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let shown = file.strip_prefix(manifest_dir).unwrap_or(&file).display();
        let mut reached = [false; REACHES.len()];
        for (n, line) in code_lines(&text) {
            if let Some(ty) = implemented_tool(line)
                && !exported.contains(&ty)
            {
                problems.push(format!(
                    "{shown}:{n}: `{ty}` is a tool but not in export_plugin!'s tools: a host \
                     would never see it; add it there (or remove it)"
                ));
            }
            for (i, reach) in REACHES.iter().enumerate() {
                let granted = reach.granted_by.is_some_and(|c| classes.contains(&c));
                if reached[i] || granted || !reach.needles.iter().any(|n| line.contains(n)) {
                    continue;
                }
                reached[i] = true;
                problems.push(format!(
                    "{shown}:{n}: reaches {} directly (`{}`), which no declared class grants: {}; \
                     end the line with `// toolhost: allow` if this is not a tool's code path",
                    reach.what,
                    line.trim(),
                    reach.instead
                ));
            }
        }
    }
    problems
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => rust_files(&path, out),
            Ok(t) if t.is_file() && path.extension().is_some_and(|e| e == "rs") => out.push(path),
            _ => {}
        }
    }
}

/// The lines of code to read, numbered from 1: comments cut, not the item after a
/// `#[cfg(test)]` line (a test module, to its closing brace), no line marked
/// `// toolhost: allow`.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    // Inside a `#[cfg(test)]` item: its brace depth once its body opened.
    let mut skipping: Option<Option<i64>> = None;
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        if let Some(depth) = skipping {
            let opens = code.matches('{').count() as i64;
            let closes = code.matches('}').count() as i64;
            skipping = match depth {
                None if opens == 0 && code.trim_end().ends_with(';') => None,
                None if opens == 0 => Some(None),
                None => (opens > closes).then_some(Some(opens - closes)),
                Some(d) => (d + opens > closes).then_some(Some(d + opens - closes)),
            };
            continue;
        }
        if line.trim() == "#[cfg(test)]" {
            skipping = Some(None);
            continue;
        }
        if !line.trim_end().ends_with("// toolhost: allow") {
            lines.push((i + 1, code));
        }
    }
    lines
}

/// `Foo` for a line `impl TypedTool for Foo {` (or `Tool`, with paths or generics).
fn implemented_tool(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("impl")?;
    let (trait_part, ty) = rest.split_once(" for ")?;
    if last_segment(without_generics(trait_part.trim())) != "Tool"
        && last_segment(without_generics(trait_part.trim())) != "TypedTool"
    {
        return None;
    }
    let ty = ty.trim();
    let end = ty
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(ty.len());
    let ty = last_segment(&ty[..end]);
    (!ty.is_empty()).then_some(ty)
}

/// `Tool` of `<T: Into<U>> Tool`: what follows the impl's generic parameters.
fn without_generics(s: &str) -> &str {
    if !s.starts_with('<') {
        return s;
    }
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return s[i + 1..].trim();
                }
            }
            _ => {}
        }
    }
    s
}

/// `Greet` of `tools::Greet` or `Greet<T>`.
fn last_segment(path: &str) -> &str {
    let path = path.split('<').next().unwrap_or(path).trim();
    path.rsplit("::").next().unwrap_or(path).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(source: &str, types: &[&str], classes: &[SideEffect]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/tools")).unwrap();
        std::fs::write(dir.path().join("src/tools/mod.rs"), source).unwrap();
        problems(dir.path(), types, classes)
    }

    #[test]
    fn tool_impls_are_recognised_in_their_spellings() {
        let cases = [
            ("impl TypedTool for Greet {", Some("Greet")),
            ("impl tool_api::Tool for Greet {", Some("Greet")),
            ("impl<T: Send> Tool for Wrapper<T> {", Some("Wrapper")),
            ("    impl TypedTool for crate::tools::Count{", Some("Count")),
            ("impl Default for Greet {", None),
            ("impl ToolFactory for Greet {", None),
            ("let x = 1;", None),
        ];
        for (line, want) in cases {
            assert_eq!(implemented_tool(line), want, "{line}");
        }
    }

    #[test]
    fn a_tool_left_out_of_export_plugin_is_named_with_its_line() {
        let p = scan(
            "struct A;\nimpl TypedTool for A {}\nstruct B;\nimpl TypedTool for B {}\n",
            &["A"],
            &[SideEffect::Read],
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("src/tools/mod.rs:4: `B` is a tool"),
            "{p:?}"
        );
    }

    #[test]
    fn direct_reach_is_flagged_once_per_file_unless_a_class_grants_it() {
        let source = "use std::fs;\nfn f() { std::fs::write(\"x\", \"y\").ok(); }\n\
                      fn g() { std::process::Command::new(\"ls\"); }\n\
                      fn h() { std::net::TcpStream::connect(\"a:1\").ok(); }\n";
        let p = scan(source, &[], &[SideEffect::Read]);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains(":1: reaches the filesystem"), "{p:?}");
        assert!(p[1].contains(":3: reaches programs"), "{p:?}");
        assert!(p[2].contains(":4: reaches the network"), "{p:?}");
        let p = scan(source, &[], &[SideEffect::Execute, SideEffect::Network]);
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn comments_tests_and_marked_lines_are_not_read() {
        let source = "// std::fs is not used here\n\
                      let p = \"x\"; // toolhost: allow std::fs::read\n\
                      fn a() { std::fs::read(\"x\").ok(); } // toolhost: allow\n\
                      #[cfg(test)]\nmod tests {\n    fn t() {\n        std::fs::read(\"x\").ok();\n    }\n}\n\
                      #[cfg(test)]\nmod more;\n";
        assert!(scan(source, &[], &[]).is_empty());
    }

    #[test]
    fn code_after_a_test_module_is_read() {
        let source =
            "#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nstruct Late;\nimpl Tool for Late {}\n";
        let p = scan(source, &[], &[]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains(":6: `Late` is a tool"), "{p:?}");
    }
}
