//! The tool-name globs of `[[access]]`, `[mcp.discovery] always` and a session's
//! visibility (`dispatcher_core::glob_matches`), held to globset's answers: a pattern and
//! a name without `/`, split at the first NUL byte; every character of the pattern but `*` and `?` is
//! escaped for globset (toolhost's globs have no classes or alternatives), and both must
//! agree on whether the name matches. toolhost keeps its own matcher here because it runs
//! per tool per listing without compiling anything (linear in the name, no backtracking);
//! this target is what keeps it globset's equal.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (pattern, name) = text.split_once('\0').unwrap_or((text, ""));
    // A tool's name has no `/` (and globset gives `**` beside a `/` a path's meaning).
    if pattern.len() > 64 || name.len() > 256 || pattern.contains('/') || name.contains('/') {
        return;
    }
    let escaped: String = pattern
        .chars()
        .map(|c| match c {
            '*' | '?' => c.to_string(),
            other => globset::escape(&other.to_string()),
        })
        .collect();
    let theirs = globset::GlobBuilder::new(&escaped)
        .literal_separator(false)
        // A backslash is a character of a name like any other (escape() leaves it).
        .backslash_escape(false)
        .build()
        .expect("an escaped pattern is a glob")
        .compile_matcher();
    assert_eq!(
        dispatcher_core::glob_matches(pattern, name),
        theirs.is_match(name),
        "{pattern:?} / {name:?}"
    );
});
