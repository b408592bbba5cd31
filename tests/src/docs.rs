//! The code blocks of the README and `docs/*.md`, found by the text before them, so that
//! a test runs a block as written wherever the page that shows it moves it.

use std::path::PathBuf;

/// The pages a block may be on: the README first, then `docs/*.md` by name.
fn pages() -> Vec<(PathBuf, String)> {
    let root = crate::repo_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    docs.retain(|p| p.extension().is_some_and(|x| x == "md"));
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .filter_map(|f| Some((f.clone(), std::fs::read_to_string(&f).ok()?)))
        .collect()
}

/// Every ```` ```lang ```` block after the first line that holds `marker`, up to the next
/// `## ` heading, on the first page that has `marker`.
///
/// # Panics
/// When no page has `marker`: the test names what it looked for.
pub fn blocks(marker: &str, lang: &str) -> Vec<String> {
    let (file, text) = pages()
        .into_iter()
        .find(|(_, text)| text.contains(marker))
        .unwrap_or_else(|| panic!("no page of the README or docs/ has {marker:?}"));
    let after = &text[text.find(marker).unwrap_or(0) + marker.len()..];
    let section = &after[..after.find("\n## ").unwrap_or(after.len())];
    let fence = format!("```{lang}\n");
    let found: Vec<String> = section
        .split(&fence)
        .skip(1)
        .filter_map(|b| b.find("```").map(|end| b[..end].to_string()))
        .collect();
    assert!(
        !found.is_empty(),
        "no ```{lang} block after {marker:?} in {}",
        file.display()
    );
    found
}

/// The first ```` ```lang ```` block after `marker` (see [`blocks`]).
pub fn block(marker: &str, lang: &str) -> String {
    blocks(marker, lang).swap_remove(0)
}
