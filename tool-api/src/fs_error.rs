//! The messages of the workspace file API's errors ([`crate::WorkspaceFiles`]), worded once
//! for every host: toolhost's workspace and [`crate::testing::TestHost`] say the same thing
//! about the same mistake, so a tool's tests see what the model will.

/// The path (or a symlink on it) leads outside the workspace.
pub fn escapes(path: &str) -> String {
    format!("Path '{path}' escapes workspace boundary")
}

/// Nothing exists at the path.
pub fn not_found(path: &str) -> String {
    format!("'{path}' not found in the workspace")
}

/// The file is over the `limit` of bytes one whole-file read returns.
pub fn too_large(path: &str, size: u64, limit: u64) -> String {
    format!(
        "'{path}' is {size} bytes, over the {limit}-byte limit of one whole-file read; \
         read a part of it another way (e.g. a range of lines)"
    )
}

/// Whether a path names a directory by its form: it ends with `/`, `/.` or `/..`. A write
/// to it is refused ([`names_a_directory`]) rather than creating a file of the last name.
pub fn is_directory_form(path: &str) -> bool {
    path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..")
}

/// A write's path names a directory by its form ([`is_directory_form`]).
pub fn names_a_directory(path: &str) -> String {
    format!(
        "'{path}' ends with '/', '/.' or '/..', so it names a directory; give the path of a file"
    )
}

/// Whether `message` is a [`too_large`] refusal, so that a tool can say what it can do
/// instead.
pub fn is_too_large(message: &str) -> bool {
    message.contains("-byte limit of one whole-file read; ")
}

/// The file is not UTF-8 text.
pub fn not_utf8(path: &str) -> String {
    format!("'{path}' is not UTF-8 text; read it as bytes")
}

/// A patch's `old` text matched `count` times instead of once. Without the file's text it
/// cannot say where; hosts use [`patch_mismatch`].
pub fn patch_matches(path: &str, count: usize) -> String {
    format!(
        "patch of '{path}' needs exactly one match of `old`, found {count}{}",
        if count == 0 {
            ": check the text, including whitespace"
        } else {
            ": include more surrounding text so it matches once"
        }
    )
}

/// Files over this size get no near-match search in [`patch_mismatch`] (it holds an index
/// entry per word).
const NEAR_MATCH_MAX_BYTES: usize = 16 * 1024 * 1024;

/// How many match lines [`patch_mismatch`] names.
const LINES_NAMED: usize = 10;

/// How many times a patch's `old` text occurs in `text`, as every host counts it: an
/// empty `old` matches nothing (it would otherwise match between every two characters).
pub fn patch_match_count(text: &str, old: &str) -> usize {
    if old.is_empty() {
        0
    } else {
        text.matches(old).count()
    }
}

/// A patch's `old` text did not match `text` exactly once, and where: the lines of the
/// first matches when there are several; when there is none, the line of a match that
/// differs only in whitespace (indentation, line breaks, trailing spaces) or in letter
/// case too, the usual slips of a text copied from memory.
///
/// ```
/// let text = "fn main() {\n    run();\n}\n";
/// assert_eq!(
///     tool_api::fs_error::patch_mismatch("src/main.rs", text, "fn main() {\nrun();"),
///     "patch of 'src/main.rs' needs exactly one match of `old`, found 0; the text at line 1 \
///      matches it but for whitespace (indentation, line breaks, trailing spaces): copy that \
///      text exactly as read_file shows it"
/// );
/// ```
pub fn patch_mismatch(path: &str, text: &str, old: &str) -> String {
    let count = patch_match_count(text, old);
    if count >= 2 {
        let mut lines = Vec::new();
        let (mut line, mut seen) = (1, 0);
        for (at, _) in text.match_indices(old).take(LINES_NAMED) {
            line += text[seen..at].bytes().filter(|&b| b == b'\n').count();
            seen = at;
            lines.push(line.to_string());
        }
        let first = if count > LINES_NAMED {
            "the first "
        } else {
            ""
        };
        let last = lines.pop().unwrap_or_default();
        return format!(
            "patch of '{path}' needs exactly one match of `old`, found {count}, {first}at lines {} and {last}: include more surrounding text so it matches once",
            lines.join(", ")
        );
    }
    if count == 0
        && let Some((line, case_too)) = near_match(text, old)
    {
        let but = if case_too {
            "letter case (and perhaps whitespace)"
        } else {
            "whitespace (indentation, line breaks, trailing spaces)"
        };
        return format!(
            "patch of '{path}' needs exactly one match of `old`, found 0; the text at line {line} matches it but for {but}: copy that text exactly as read_file shows it"
        );
    }
    patch_matches(path, count)
}

/// The line where `old` matches `text` once runs of whitespace are made one space, and
/// whether that took ignoring ASCII letter case too.
fn near_match(text: &str, old: &str) -> Option<(usize, bool)> {
    if text.len() > NEAR_MATCH_MAX_BYTES {
        return None;
    }
    let wanted = old.split_whitespace().collect::<Vec<_>>().join(" ");
    if wanted.is_empty() {
        return None;
    }
    // The text's words joined by one space, and where each word starts: (offset, line).
    let mut joined = String::with_capacity(text.len());
    let mut starts: Vec<(usize, usize)> = Vec::new();
    for (n, line) in text.split('\n').enumerate() {
        for word in line.split_whitespace() {
            if !joined.is_empty() {
                joined.push(' ');
            }
            starts.push((joined.len(), n + 1));
            joined.push_str(word);
        }
    }
    let line_at = |at: usize| {
        let i = starts.partition_point(|&(start, _)| start <= at);
        starts.get(i.wrapping_sub(1)).map_or(1, |&(_, line)| line)
    };
    if let Some(at) = joined.find(&wanted) {
        return Some((line_at(at), false));
    }
    let at = joined
        .to_ascii_lowercase()
        .find(&wanted.to_ascii_lowercase())?;
    Some((line_at(at), true))
}
