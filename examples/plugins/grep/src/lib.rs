//! # grep-tool: an example toolhost plugin that reads the workspace
//!
//! One `read` tool, `grep`: searches the files under a workspace directory for a regular
//! expression, line by line, entirely through the workspace file API (so it can never read
//! outside the workspace). It skips binary files and files over 1 MiB, stops at
//! `max_matches`, caps its output, and checks for cancellation between files.

use std::fmt::Write as _;

use serde::Deserialize;
use tool_api::schemars::{self, JsonSchema};
use tool_api::serde_json::json;
use tool_api::{
    SideEffect, ToolContext, ToolDefinition, ToolError, ToolOutput, TypedTool, export_plugin,
};

/// Files larger than this are skipped.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Output larger than this is cut.
pub const MAX_OUTPUT_BYTES: usize = 32 * 1024;
/// Directories deeper than this are not entered.
pub const MAX_DEPTH: usize = 32;

/// The input of `grep`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// The regular expression.
    #[schemars(length(min = 1))]
    pattern: String,
    /// Directory (or file) to search, relative to the workspace root. Default: the root.
    #[serde(default = "root")]
    path: String,
    /// Only search files whose name ends with this, e.g. ".rs".
    #[serde(default)]
    suffix: Option<String>,
    /// Match letters of either case.
    #[serde(default)]
    ignore_case: bool,
    /// Stop after this many matching lines.
    #[serde(default = "default_max_matches")]
    #[schemars(range(min = 1, max = 10000))]
    max_matches: u32,
}

fn root() -> String {
    ".".into()
}

fn default_max_matches() -> u32 {
    100
}

/// Searches workspace files by regex.
#[derive(Default)]
pub struct Grep;

/// One search's walk of the workspace, and what it found.
struct Search<'a> {
    ctx: &'a ToolContext,
    regex: regex::Regex,
    suffix: Option<&'a str>,
    max_matches: usize,
    matches: usize,
    files_searched: usize,
    files_skipped: usize,
    out: String,
    truncated: bool,
}

impl Search<'_> {
    fn done(&self) -> bool {
        self.matches >= self.max_matches || self.truncated
    }

    /// What the host answered about an entry `depth` levels below the path asked
    /// for. Below it, an entry the host will not let it at (a symlink that leads
    /// outside the workspace, a name that is not UTF-8) is skipped and counted
    /// (`None`): one such entry does not end the whole search.
    fn reached<T>(
        &mut self,
        answer: Result<T, ToolError>,
        depth: usize,
    ) -> Result<Option<T>, ToolError> {
        match answer {
            Ok(value) => Ok(Some(value)),
            Err(_) if depth > 0 => {
                self.files_skipped += 1;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn visit(&mut self, path: &str, depth: usize) -> Result<(), ToolError> {
        self.ctx.check_cancelled()?;
        let Some(meta) = self.reached(self.ctx.files().metadata(path), depth)? else {
            return Ok(());
        };
        if meta.is_dir {
            if depth >= MAX_DEPTH {
                return Ok(());
            }
            let Some(names) = self.reached(self.ctx.files().list(path), depth)? else {
                return Ok(());
            };
            for name in names {
                if self.done() {
                    break;
                }
                if name.starts_with('.') {
                    continue; // .git and friends
                }
                let child = if path == "." {
                    name.clone()
                } else {
                    format!("{path}/{name}")
                };
                self.visit(child.trim_end_matches('/'), depth + 1)?;
            }
            return Ok(());
        }
        if self.suffix.is_some_and(|s| !path.ends_with(s)) {
            return Ok(());
        }
        if meta.size > MAX_FILE_BYTES {
            self.files_skipped += 1;
            return Ok(());
        }
        if meta.size == 0 {
            // Nothing to match, and nothing to wait on: a named pipe reports no
            // size, and reading one waits for a writer.
            self.files_searched += 1;
            return Ok(());
        }
        let Ok(text) = self.ctx.files().read(path) else {
            self.files_skipped += 1; // binary or unreadable
            return Ok(());
        };
        self.files_searched += 1;
        for (n, line) in text.lines().enumerate() {
            if self.done() {
                break;
            }
            if self.regex.is_match(line) {
                self.matches += 1;
                let _ = writeln!(self.out, "{path}:{}: {}", n + 1, line.trim_end());
                if self.out.len() > MAX_OUTPUT_BYTES {
                    self.truncated = true;
                }
            }
        }
        Ok(())
    }
}

impl TypedTool for Grep {
    type Input = GrepInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "grep",
            "Search the text files under a workspace directory for a regular expression (Rust regex syntax). Returns path:line: text for each matching line.",
            SideEffect::Read,
        )
        .path_param("path")
    }

    fn run(&self, input: GrepInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let GrepInput {
            pattern,
            path,
            suffix,
            ignore_case,
            max_matches,
        } = input;
        let regex = regex::RegexBuilder::new(&pattern)
            .case_insensitive(ignore_case)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::invalid_input(format!("pattern is not a valid regex: {e}")))?;
        let max_matches = usize::try_from(max_matches).unwrap_or(usize::MAX);
        let mut search = Search {
            ctx,
            regex,
            suffix: suffix.as_deref(),
            max_matches,
            matches: 0,
            files_searched: 0,
            files_skipped: 0,
            out: String::new(),
            truncated: false,
        };
        search.visit(path.trim_end_matches('/'), 0)?;
        ctx.log().debug(format_args!(
            "grep '{pattern}': {} matches in {} files",
            search.matches, search.files_searched
        ));
        let mut text = std::mem::take(&mut search.out);
        if text.len() > MAX_OUTPUT_BYTES {
            let mut cut = MAX_OUTPUT_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        if search.matches == 0 {
            text = format!(
                "no matches for '{pattern}' in {} files",
                search.files_searched
            );
        } else if search.matches >= max_matches || search.truncated {
            let _ = write!(
                text,
                "[stopped after {} matches; narrow the search]",
                search.matches
            );
        }
        Ok(ToolOutput::text(text).with_metadata(json!({
            "matches": search.matches,
            "files_searched": search.files_searched,
            "files_skipped": search.files_skipped,
            "truncated": search.truncated || search.matches >= max_matches,
        })))
    }
}

export_plugin!(
    name: "grep-tool",
    version: env!("CARGO_PKG_VERSION"),
    // Uses WorkspaceFiles::metadata, added in tool-api 1.1.
    requires: "1.1.0",
    tools: [Grep],
);

#[cfg(test)]
mod tests {
    use super::*;
    use tool_api::Tool;
    use tool_api::testing::TestHost;

    #[test]
    fn exports_what_a_host_accepts() {
        let tools = tool_api::check_plugin!().unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["grep"]);
        let schema = &tools[0].input_schema;
        assert_eq!(schema["properties"]["max_matches"]["maximum"], 10000);
        assert_eq!(schema["required"], json!(["pattern"]));
    }

    fn host() -> TestHost {
        let host = TestHost::new();
        host.put_file("src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n");
        host.put_file("src/lib.rs", "// hello there\npub fn f() {}\n");
        host.put_file("README.md", "Hello, readme\n");
        host.put_file(".git/config", "hello from git\n");
        host.put_file("bin/blob", [0xff, 0xfe, 0x00]);
        host
    }

    #[test]
    fn finds_matching_lines_with_paths_and_line_numbers() {
        let out = Grep
            .execute(
                json!({"pattern": "hello", "ignore_case": true}),
                &host().context(),
            )
            .unwrap();
        let text = out.text_content();
        assert_eq!(
            text,
            "README.md:1: Hello, readme\nsrc/lib.rs:1: // hello there\nsrc/main.rs:2:     println!(\"Hello\");\n"
        );
        assert_eq!(out.metadata["files_skipped"], 1, "the binary file");
    }

    #[test]
    fn suffix_and_path_narrow_the_search() {
        let out = Grep
            .execute(
                json!({"pattern": "fn", "path": "src", "suffix": "lib.rs"}),
                &host().context(),
            )
            .unwrap();
        assert_eq!(out.text_content(), "src/lib.rs:2: pub fn f() {}\n");
    }

    #[test]
    fn stops_at_max_matches() {
        let out = Grep
            .execute(json!({"pattern": ".", "max_matches": 2}), &host().context())
            .unwrap();
        assert!(
            out.text_content()
                .ends_with("[stopped after 2 matches; narrow the search]")
        );
        assert_eq!(out.metadata["truncated"], true);
    }

    #[test]
    fn bad_regex_is_invalid_input() {
        let err = Grep
            .execute(json!({"pattern": "("}), &host().context())
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)));
    }

    #[test]
    fn honours_cancellation() {
        let host = host();
        host.cancel();
        let err = Grep
            .execute(json!({"pattern": "x"}), &host.context())
            .unwrap_err();
        assert!(matches!(err, ToolError::Cancelled(_)));
    }

    #[test]
    fn a_link_leading_outside_is_skipped_not_the_end_of_the_search() {
        let host = host();
        host.put_link_outside("src/vendor");
        let out = Grep
            .execute(
                json!({"pattern": "hello", "ignore_case": true}),
                &host.context(),
            )
            .unwrap();
        assert_eq!(
            out.text_content(),
            "README.md:1: Hello, readme\nsrc/lib.rs:1: // hello there\nsrc/main.rs:2:     println!(\"Hello\");\n"
        );
        assert_eq!(
            out.metadata["files_skipped"], 2,
            "the binary file and the link"
        );
        // Asked for by name, the link is refused, as any path outside is.
        let err = Grep
            .execute(
                json!({"pattern": "x", "path": "src/vendor"}),
                &host.context(),
            )
            .unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)), "{err}");
    }

    #[test]
    fn cannot_search_outside_the_workspace() {
        let err = Grep
            .execute(json!({"pattern": "x", "path": "../"}), &host().context())
            .unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)));
    }
}
