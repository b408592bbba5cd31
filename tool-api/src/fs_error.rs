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

/// The file is not UTF-8 text.
pub fn not_utf8(path: &str) -> String {
    format!("'{path}' is not UTF-8 text; read it as bytes")
}

/// A patch's `old` text matched `count` times instead of once.
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
