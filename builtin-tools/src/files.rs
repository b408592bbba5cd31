//! The file tools: `read_file`, `list_dir`, `write_file`, `patch_file`.

use crate::hints::Wanted;
use serde::Deserialize;
use serde_json::json;
use tool_api::schemars::{self, JsonSchema};
use tool_api::{
    Content, SideEffect, ToolContext, ToolDefinition, ToolError, ToolOutput, TypedTool,
};

/// A 1-based line or column number. The schema lets through integers of at least 1 only;
/// one past `u64` (`1e20`, `18446744073709551616`) arrives as a float and means "further
/// than any file goes".
#[derive(Debug, Clone)]
pub struct Position {
    value: usize,
    /// As the caller wrote it, for messages.
    written: serde_json::Number,
}

impl Position {
    fn get(&self) -> usize {
        self.value
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.written)
    }
}

impl<'de> Deserialize<'de> for Position {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let number = serde_json::Number::deserialize(d)?;
        let value = match number.as_u64() {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None if number.as_f64().is_some_and(|f| f >= 1.0) => usize::MAX,
            None => {
                return Err(serde::de::Error::custom(format!(
                    "{number} is not a line or column number (1 or more)"
                )));
            }
        };
        Ok(Position {
            value: value.max(1),
            written: number,
        })
    }
}

impl JsonSchema for Position {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Position".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer", "minimum": 1})
    }
}

/// How many lines `text` has, as `str::lines` counts them (a last line without a newline
/// counts; a final newline starts none), with a vectorized search for the newlines.
fn line_count(text: &str) -> usize {
    memchr::memchr_iter(b'\n', text.as_bytes()).count()
        + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Largest file `read_file` returns whole; beyond it, ask for a range of lines.
pub const READ_LIMIT_BYTES: usize = 256 * 1024;

/// Longest line `read_file` returns whole, in characters. A longer one is cut there, with a
/// note giving the `offset` and `column` to read on from: a line has no lines to page by,
/// and past the dispatcher's result cap (100,000 characters by default) the model would see
/// only a preview of it.
pub const LINE_LIMIT_CHARS: usize = 50_000;

/// `read_file` (read): reads a UTF-8 file from the workspace.
#[derive(Default)]
pub struct ReadFile;

/// A workspace file to read: whole, or a range of its lines.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileInput {
    /// File path, relative to the workspace root.
    pub path: String,
    /// First line to return (1-based).
    #[serde(default)]
    #[schemars(with = "Position")]
    pub offset: Option<Position>,
    /// How many lines to return.
    #[serde(default)]
    #[schemars(with = "Position")]
    pub limit: Option<Position>,
    /// First character of the first line to return (1-based), to read on in a line that was cut.
    #[serde(default)]
    #[schemars(with = "Position")]
    pub column: Option<Position>,
}

impl TypedTool for ReadFile {
    type Input = ReadFileInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "read_file",
            "Read a text file from the workspace. Use offset/limit (1-based line numbers) to read part of a large file. A line longer than 50,000 characters is cut, with a note giving the offset and column to read on from.",
            SideEffect::Read,
        )
        .path_param("path")
        .inline_when_small()
    }

    fn run(&self, input: ReadFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = input.path.as_str();
        let bytes = ctx.files().read_bytes(path).map_err(|e| {
            if tool_api::fs_error::is_too_large(e.message()) {
                // Its advice (a range of lines) is what read_file cannot do for this file.
                let size = e.message().split(';').next().unwrap_or_default();
                ToolError::failed(format!(
                    "{size} (read_file reads all of a file, even for a range of lines); read the lines you need with a command, if you have a tool that runs one (`tail -n 100 {path}`, `sed -n '1000,1100p' {path}`)"
                ))
            } else {
                crate::hints::explain(ctx, path, Wanted::File, e)
            }
        })?;
        let (text, replaced) = decode(path, bytes)?;
        let mut output = read_text(path, text, &input)?;
        if replaced > 0 {
            output.metadata["invalid_utf8_bytes"] = json!(replaced);
            output.content.push(Content::text(format!(
                "[{replaced} bytes of '{path}' are not UTF-8 (another encoding, e.g. Latin-1?) and are shown as \u{FFFD}; a patch_file `old` cannot match the lines that hold them]"
            )));
        }
        Ok(output)
    }
}

/// A file's text, and how many of its bytes are not UTF-8 and are shown as U+FFFD: text
/// in another encoding (a Latin-1 source file, a log with a stray byte) is read that way.
/// A file with a NUL in its first 8,000 bytes (as git decides), or with over a quarter of
/// its bytes not UTF-8, is binary and refused.
fn decode(path: &str, bytes: Vec<u8>) -> Result<(String, usize), ToolError> {
    if memchr::memchr(0, &bytes[..bytes.len().min(8000)]).is_some() {
        return Err(ToolError::failed(format!(
            "'{path}' holds NUL bytes (a binary file, or UTF-16 text?); read_file returns text only"
        )));
    }
    let bytes = match String::from_utf8(bytes) {
        Ok(text) => return Ok((text, 0)),
        Err(e) => e.into_bytes(),
    };
    let invalid: usize = bytes.utf8_chunks().map(|c| c.invalid().len()).sum();
    if invalid * 4 > bytes.len() {
        return Err(ToolError::failed(format!(
            "'{path}' is not UTF-8 text (a binary file?); read_file returns text only"
        )));
    }
    Ok((String::from_utf8_lossy(&bytes).into_owned(), invalid))
}

/// `read_file`'s answer for `text`, the whole file or the range `input` asks for.
fn read_text(path: &str, text: String, input: &ReadFileInput) -> Result<ToolOutput, ToolError> {
    let (offset, limit, column) = (
        input.offset.as_ref().map(Position::get),
        input.limit.as_ref().map(Position::get),
        input.column.as_ref().map(Position::get),
    );
    let total_lines = line_count(&text);
    let bytes = text.len();
    let ranged = offset.is_some() || limit.is_some() || column.is_some();
    if !ranged && bytes > READ_LIMIT_BYTES {
        return Err(ToolError::failed(format!(
            "'{path}' is {bytes} bytes in {}, over the {READ_LIMIT_BYTES}-byte limit of one read; read it in parts with offset and limit (a line over {LINE_LIMIT_CHARS} characters comes cut, with the column to read on from)",
            lines(total_lines),
        )));
    }
    // A whole file with no line over the limit is the body as it is (line endings and
    // all), not a copy of it.
    if !ranged && !has_long_line(&text) {
        return Ok(ToolOutput::text(text).with_metadata(json!({
            "path": path,
            "bytes": bytes,
            "total_lines": total_lines,
            "first_line": 1,
            "lines_returned": total_lines,
        })));
    }
    let first = offset.unwrap_or(1);
    if first > total_lines.max(1) {
        return Err(ToolError::invalid_input(format!(
            "offset {} is past the end of '{path}', which has {}",
            input
                .offset
                .as_ref()
                .map_or(String::new(), Position::to_string),
            lines(total_lines)
        )));
    }
    let mut body = String::new();
    let (mut returned, mut cut) = (0, 0);
    let count = limit.unwrap_or(usize::MAX);
    for (i, line) in text.lines().skip(first - 1).take(count).enumerate() {
        let number = first + i;
        let from = if i == 0 { column.unwrap_or(1) } else { 1 };
        let rest = match line.char_indices().nth(from - 1) {
            Some((at, _)) => &line[at..],
            None if from == 1 => "",
            None => {
                return Err(ToolError::invalid_input(format!(
                    "column {} is past the end of line {number} of '{path}', which has {} characters",
                    input
                        .column
                        .as_ref()
                        .map_or(String::new(), Position::to_string),
                    line.chars().count()
                )));
            }
        };
        if i > 0 {
            body.push('\n');
        }
        // Bytes bound characters from above: most lines stop at the length.
        let cut_at = (rest.len() > LINE_LIMIT_CHARS)
            .then(|| rest.char_indices().nth(LINE_LIMIT_CHARS))
            .flatten();
        match cut_at {
            Some((end, _)) => {
                let total = from - 1 + rest.chars().count();
                let (last, next) = (from + LINE_LIMIT_CHARS - 1, from + LINE_LIMIT_CHARS);
                body.push_str(&rest[..end]);
                body.push_str(&format!(
                    " [line {number} cut: characters {from}-{last} of {total} shown; read on with offset={number}, limit=1, column={next}]"
                ));
                cut += 1;
            }
            _ => body.push_str(rest),
        }
        returned += 1;
    }
    let mut metadata = json!({
        "path": path,
        "bytes": bytes,
        "total_lines": total_lines,
        "first_line": first,
        "lines_returned": returned,
    });
    if let Some(column) = column {
        metadata["first_column"] = json!(column);
    }
    if cut > 0 {
        metadata["lines_cut"] = json!(cut);
    }
    Ok(ToolOutput::text(body).with_metadata(metadata))
}

/// Whether a line of `text` is longer than [`LINE_LIMIT_CHARS`] characters.
fn has_long_line(text: &str) -> bool {
    if text.len() <= LINE_LIMIT_CHARS {
        return false;
    }
    let mut start = 0;
    let mut ends = memchr::memchr_iter(b'\n', text.as_bytes()).chain([text.len()]);
    ends.any(|end| {
        let line = &text[start..end];
        start = end + 1;
        line.len() > LINE_LIMIT_CHARS && line.chars().count() > LINE_LIMIT_CHARS
    })
}

/// "1 line", "2000 lines".
fn lines(n: usize) -> String {
    if n == 1 {
        "1 line".into()
    } else {
        format!("{n} lines")
    }
}

/// `list_dir` (read): lists a workspace directory.
#[derive(Default)]
pub struct ListDir;

/// A workspace directory to list.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirInput {
    /// Directory path, relative to the workspace root. Defaults to the root.
    #[serde(default = "workspace_root")]
    pub path: String,
}

fn workspace_root() -> String {
    ".".into()
}

impl TypedTool for ListDir {
    type Input = ListDirInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "list_dir",
            "List the entries of a workspace directory, sorted; directory names end with '/'.",
            SideEffect::Read,
        )
        .path_param("path")
        .inline_when_small()
    }

    fn run(&self, input: ListDirInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = input.path.as_str();
        let names = ctx
            .files()
            .list(path)
            .map_err(|e| crate::hints::explain(ctx, path, Wanted::Directory, e))?;
        let text = if names.is_empty() {
            format!("'{path}' is empty")
        } else {
            names.join("\n")
        };
        Ok(ToolOutput::text(text).with_metadata(json!({"path": path, "entries": names.len()})))
    }
}

/// `write_file` (write): creates or replaces a file, atomically.
#[derive(Default)]
pub struct WriteFile;

/// A workspace file and its complete new content.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// File path, relative to the workspace root.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

impl TypedTool for WriteFile {
    type Input = WriteFileInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "write_file",
            "Create or overwrite a file in the workspace with the given content. Parent directories are created. The write is atomic.",
            SideEffect::Write,
        )
        .path_param("path")
    }

    fn run(&self, input: WriteFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (path, content) = (input.path.as_str(), input.content.as_str());
        let existed = ctx.files().exists(path)?;
        ctx.files().write(path, content)?;
        let verb = if existed { "Overwrote" } else { "Created" };
        Ok(
            ToolOutput::text(format!("{verb} {path} ({} bytes)", content.len()))
                .with_metadata(json!({"path": path, "bytes": content.len(), "created": !existed}))
                .with_files_modified(vec![path.to_string()]),
        )
    }
}

/// `patch_file` (write): replaces exactly one occurrence of a string.
#[derive(Default)]
pub struct PatchFile;

/// One exact replacement in a workspace file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchFileInput {
    /// File path, relative to the workspace root.
    pub path: String,
    /// The exact text to replace; must occur exactly once.
    #[schemars(length(min = 1))]
    pub old: String,
    /// The replacement text.
    pub new: String,
}

impl TypedTool for PatchFile {
    type Input = PatchFileInput;

    fn definition() -> ToolDefinition {
        ToolDefinition::typed(
            "patch_file",
            "Replace one exact occurrence of `old` with `new` in a workspace file. Fails, changing nothing, if `old` occurs zero times or more than once; include enough surrounding text to make it unique.",
            SideEffect::Write,
        )
        .path_param("path")
    }

    fn run(&self, input: PatchFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (path, old, new) = (input.path.as_str(), input.old.as_str(), input.new.as_str());
        if old == new {
            return Err(ToolError::invalid_input(
                "`old` and `new` are the same: there is nothing to change",
            ));
        }
        ctx.files()
            .patch(path, old, new)
            .map_err(|e| crate::hints::explain(ctx, path, Wanted::File, e))?;
        Ok(ToolOutput::text(format!("Patched {path}"))
            .with_metadata(json!({"path": path}))
            .with_files_modified(vec![path.to_string()]))
    }
}

#[cfg(test)]
mod tests {
    use super::line_count;

    #[test]
    fn line_count_counts_lines_as_str_lines_does() {
        for text in [
            "",
            "\n",
            "\n\n",
            "one",
            "one\n",
            "one\ntwo",
            "one\ntwo\n",
            "one\r\ntwo\r\n",
            "\r\n",
            "a\n\nb",
            "tail without newline\n\nlast",
        ] {
            assert_eq!(line_count(text), text.lines().count(), "{text:?}");
        }
        let long = "x".repeat(100) + "\n";
        let long = long.repeat(1000) + "end";
        assert_eq!(line_count(&long), long.lines().count());
    }
}
