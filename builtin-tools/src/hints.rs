//! What the file tools add when a path is not what they need, so that a model that guessed
//! gets its next step, not a bare refusal: for a path that is not there, the names nearby
//! it may have meant (`src/main.ts` for `src/main.tsx`, `readme.md` for `README.md`) or
//! the directory on its way that does not exist; for a directory given to `read_file`,
//! `list_dir`; for a file given to `list_dir`, `read_file`.

use tool_api::{ToolContext, ToolError};

/// How many names a hint offers at most.
const OFFERED: usize = 3;

/// What a tool wanted at a path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// A file to read or change.
    File,
    /// A directory to list.
    Directory,
}

/// `error` from an operation on `path` that wanted `wanted` there, with what to do next.
/// Only a failure is explained (not a refusal, a cancellation or an internal error), and
/// looking around is best effort: anything it cannot see leaves the error as it was.
pub(crate) fn explain(
    ctx: &ToolContext,
    path: &str,
    wanted: Wanted,
    error: ToolError,
) -> ToolError {
    if !matches!(error, ToolError::Failed(_)) {
        return error;
    }
    let other_kind = match ctx.files().exists(path) {
        Ok(false) => None,
        Ok(true) => match ctx.files().metadata(path) {
            Ok(m) if m.is_dir && wanted == Wanted::File => Some("; list it with list_dir"),
            Ok(m) if !m.is_dir && wanted == Wanted::Directory => Some("; read it with read_file"),
            _ => return error,
        },
        Err(_) => return error,
    };
    if let Some(hint) = other_kind {
        return with_hint(error, hint);
    }
    let trimmed = path.trim_end_matches('/');
    // `src/` and `main.ts` of `src/main.ts`; the directory to look in is the prefix.
    let (prefix, name) = trimmed
        .rfind('/')
        .map_or(("", trimmed), |at| trimmed.split_at(at + 1));
    let parent = match prefix {
        "" => ".",
        "/" => "/",
        dir => dir.trim_end_matches('/'),
    };
    let hint = match ctx.files().list(parent) {
        Ok(names) => {
            let near = nearest(name, &names);
            if near.is_empty() {
                return error;
            }
            let shown: Vec<String> = near.iter().map(|n| format!("'{prefix}{n}'")).collect();
            format!("; did you mean {}?", or_list(&shown))
        }
        Err(_) => match missing_directory(ctx, trimmed) {
            Some(dir) => format!("; there is no directory '{dir}'"),
            None => return error,
        },
    };
    with_hint(error, &hint)
}

/// The failure `error` with `hint` after its message.
fn with_hint(error: ToolError, hint: &str) -> ToolError {
    ToolError::Failed(format!("{}{hint}", error.message()))
}

/// The first directory on the way to `path` that does not exist.
fn missing_directory(ctx: &ToolContext, path: &str) -> Option<String> {
    let mut at = String::new();
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !at.is_empty() || path.starts_with('/') {
            at.push('/');
        }
        at.push_str(part);
        if part.is_empty() || *part == "." {
            continue;
        }
        if matches!(ctx.files().exists(&at), Ok(false)) {
            return Some(at);
        }
    }
    None
}

/// The names in `names` (a listing: directories end with `/`) close to `name`: the same
/// but for letter case, the same stem with another extension, or a small edit away.
fn nearest<'a>(name: &str, names: &'a [String]) -> Vec<&'a str> {
    let wanted = name.to_lowercase();
    let stem = |n: &str| n.rsplit_once('.').map_or(n, |(s, _)| s).to_string();
    let wanted_stem = stem(&wanted);
    let mut scored: Vec<(usize, &str)> = names
        .iter()
        .map(|n| n.trim_end_matches('/'))
        .filter_map(|n| {
            let lower = n.to_lowercase();
            let distance = edit_distance(&wanted, &lower);
            let close = distance <= 2 && distance * 3 <= wanted.chars().count();
            let same_stem = !wanted_stem.is_empty() && stem(&lower) == wanted_stem;
            (lower == wanted || close || same_stem).then_some((distance, n))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(OFFERED).map(|(_, n)| n).collect()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// "'a'", "'a' or 'b'", "'a', 'b' or 'c'".
fn or_list(items: &[String]) -> String {
    match items.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::{edit_distance, nearest};

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("main.ts", "main.tsx"), 1);
        assert_eq!(edit_distance("nope", "note"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn nearest_offers_case_stem_and_small_edits_closest_first() {
        let names: Vec<String> = ["README.md", "main.tsx", "main.css", "lib/", "zzz"]
            .map(String::from)
            .to_vec();
        assert_eq!(nearest("readme.md", &names), ["README.md"]);
        assert_eq!(nearest("main.ts", &names), ["main.tsx", "main.css"]);
        assert_eq!(
            nearest("lbi", &names),
            Vec::<&str>::new(),
            "too short to guess"
        );
        assert_eq!(nearest("libs", &names), ["lib"]);
        assert!(nearest("other.rs", &names).is_empty());
    }
}
