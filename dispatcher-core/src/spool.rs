//! Large results: beyond a call's character cap, the full text goes to a spool file under
//! the session's data directory and the model gets a preview, the size and the path.
//!
//! The file is `<data dir>/tool-results/<tool_use_id>.txt` (`<tool_use_id>-2.txt`, … when
//! the id was seen before: nothing is overwritten), written to a temporary file and renamed,
//! so a reader never sees half of it. With the default data directory
//! (`.toolhost/sessions/<session>/` in the workspace) the model can page through it with
//! `read_file` (`offset` = first line, `limit` = number of lines). Nothing is lost: if the
//! file cannot be written, the result is cut instead and the note says why.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tool_api::Content;

use crate::result::ToolResultBlock;

/// Characters of a spooled result the model sees inline (default of
/// [`crate::ResultLimits::preview_chars`]).
pub const DEFAULT_PREVIEW_CHARS: usize = 2_000;

/// A file-name-safe form of an id: letters, digits, `-`, `_` and `.` kept, the rest `_`.
/// An id that had to change (or was cut at 100 characters) gets a digest of itself added,
/// so that two ids never share a name (`mcp-https://idp#alice` and `mcp-https___idp_alice`).
pub(crate) fn safe_name(id: &str) -> String {
    let name = plain_name(id);
    if name == id {
        return name;
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(id.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{name}-{hex}")
}

fn plain_name(id: &str) -> String {
    let mut name: String = id
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.chars().all(|c| c == '.') {
        name = format!("id_{}", name.len());
    }
    name
}

/// The default data directory of a session.
pub(crate) fn default_data_dir(workspace_root: &Path, session_id: &str) -> PathBuf {
    workspace_root
        .join(".toolhost")
        .join("sessions")
        .join(safe_name(session_id))
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `<dir>/<name>.txt`, or `<name>-2.txt`, `-3`, … if taken: a tool_use id seen again (a
/// host that reuses ids across runs) never overwrites an earlier spooled result.
fn free_path(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(format!("{name}.txt"));
    if !first.exists() {
        return first;
    }
    (2..10_000)
        .map(|n| dir.join(format!("{name}-{n}.txt")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

/// Writes `text` to `path` through a temporary file in the same directory.
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Keeps a spool directory inside the workspace out of version control.
    if let Some(toolhost_dir) = dir.ancestors().find(|a| a.ends_with(".toolhost")) {
        let ignore = toolhost_dir.join(".gitignore");
        if !ignore.exists() {
            let _ = std::fs::write(
                &ignore,
                "# toolhost session data (spooled tool results)\n*\n",
            );
        }
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("result"),
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Applies the cap to a result's text: under it, unchanged; over it, spooled (or cut).
pub(crate) fn cap(
    mut block: ToolResultBlock,
    max_chars: usize,
    preview_chars: usize,
    data_dir: &Path,
    workspace_root: &Path,
) -> ToolResultBlock {
    let texts = || block.content.iter().filter_map(Content::as_text);
    // A text is never longer in characters than in bytes: most results stop here.
    if texts().map(str::len).sum::<usize>() <= max_chars {
        return block;
    }
    let chars: usize = texts().map(|t| t.chars().count()).sum();
    if chars <= max_chars {
        return block;
    }
    let texts: Vec<&str> = block.content.iter().filter_map(Content::as_text).collect();
    let full = texts.join("\n");
    let lines = full.lines().count();
    let preview_len = preview_chars.min(max_chars);
    let preview: String = full.chars().take(preview_len).collect();
    let path = free_path(
        &data_dir.join("tool-results"),
        &safe_name(&block.tool_use_id),
    );
    let note = match write_atomic(&path, &full) {
        Ok(()) => {
            let shown = match path.strip_prefix(workspace_root) {
                Ok(rel) => rel.display().to_string(),
                Err(_) => path.display().to_string(),
            };
            let spooled = json!({"path": shown, "chars": chars, "lines": lines});
            match &mut block.metadata {
                Value::Object(m) => {
                    m.insert("spooled_output".into(), spooled);
                }
                Value::Null => block.metadata = json!({ "spooled_output": spooled }),
                _ => {}
            }
            format!(
                "[Output too large for one result: {} characters in {} lines (the limit is {}). The full output is saved in {shown}; read it with read_file (path, offset = first line, limit = number of lines). Above: the first {} characters.]",
                thousands(chars),
                thousands(lines),
                thousands(max_chars),
                thousands(preview.chars().count()),
            )
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), "could not spool a large result: {e}; cutting it instead");
            format!(
                "[Output cut: {} characters over the {}-character limit; the full output could not be saved to {} ({e}).]",
                thousands(chars - preview.chars().count()),
                thousands(max_chars),
                path.display()
            )
        }
    };
    let images = block
        .content
        .drain(..)
        .filter(|c| matches!(c, Content::Image { .. }));
    let mut content = vec![Content::text(preview)];
    content.extend(images);
    content.push(Content::text(note));
    block.content = content;
    block
}
