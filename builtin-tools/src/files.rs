//! The file tools: `read_file`, `list_dir`, `write_file`, `patch_file`.

use crate::hints::Wanted;
use serde_json::{Value, json};
use tool_api::{
    Content, DefinedTool, SideEffect, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput,
};

fn str_arg<'a>(input: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    input
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid_input(format!("'{key}' must be a string")))
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

impl DefinedTool for ReadFile {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "read_file",
            "Read a text file from the workspace. Use offset/limit (1-based line numbers) to read part of a large file. A line longer than 50,000 characters is cut, with a note giving the offset and column to read on from.",
            SideEffect::Read,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace root."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to return."},
                    "column": {"type": "integer", "minimum": 1, "description": "First character of the first line to return (1-based), to read on in a line that was cut."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        )
        .path_param("path")
        .inline_when_small()
    }
}

impl Tool for ReadFile {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = str_arg(&input, "path")?;
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
fn read_text(path: &str, text: String, input: &Value) -> Result<ToolOutput, ToolError> {
    // The schema let through integers of at least 1 only; one past u64 (`1e20`,
    // `18446744073709551616`) comes as a float and means "further than any file goes".
    let arg = |key: &str| {
        input.get(key).filter(|v| v.is_number()).map(|v| {
            v.as_u64()
                .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
                .max(1)
        })
    };
    let (offset, limit, column) = (arg("offset"), arg("limit"), arg("column"));
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
            input["offset"],
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
                    input["column"],
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

impl DefinedTool for ListDir {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "list_dir",
            "List the entries of a workspace directory, sorted; directory names end with '/'.",
            SideEffect::Read,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory path, relative to the workspace root. Defaults to the root.", "default": "."}
                },
                "additionalProperties": false
            }),
        )
        .path_param("path")
        .inline_when_small()
    }
}

impl Tool for ListDir {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = input.get("path").and_then(Value::as_str).unwrap_or(".");
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

impl DefinedTool for WriteFile {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "write_file",
            "Create or overwrite a file in the workspace with the given content. Parent directories are created. The write is atomic.",
            SideEffect::Write,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace root."},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        )
        .path_param("path")
    }
}

impl Tool for WriteFile {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = str_arg(&input, "path")?;
        let content = str_arg(&input, "content")?;
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

impl DefinedTool for PatchFile {
    fn definition() -> ToolDefinition {
        ToolDefinition::new(
            "patch_file",
            "Replace one exact occurrence of `old` with `new` in a workspace file. Fails, changing nothing, if `old` occurs zero times or more than once; include enough surrounding text to make it unique.",
            SideEffect::Write,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace root."},
                    "old": {"type": "string", "minLength": 1, "description": "The exact text to replace; must occur exactly once."},
                    "new": {"type": "string", "description": "The replacement text."}
                },
                "required": ["path", "old", "new"],
                "additionalProperties": false
            }),
        )
        .path_param("path")
    }
}

impl Tool for PatchFile {
    fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = str_arg(&input, "path")?;
        let old = str_arg(&input, "old")?;
        let new = str_arg(&input, "new")?;
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
