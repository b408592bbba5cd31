//! Reading a crate's sources as a newcomer follows them: the module tree (files, inline
//! modules, `#[path]`), what each module's `use` lines bring in, the paths its code names,
//! the types it defines and the types of its inherent `impl` blocks. Comments and string
//! literals are left out: a doc link is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module of a target: the file it is in and what its `use` lines bring in.
#[derive(Default, Debug)]
pub(crate) struct Module {
    /// The file (for a module declared inline, the file that holds it).
    pub(crate) file: PathBuf,
    /// Child modules: name -> module path.
    pub(crate) children: BTreeMap<String, String>,
    /// Names its `use` lines bring in: name -> the absolute path they stand for.
    pub(crate) uses: BTreeMap<String, Vec<String>>,
    /// Paths its code names, absolute, with the names they end in.
    pub(crate) refs: Vec<Vec<String>>,
    /// The types and traits it defines.
    pub(crate) defines: BTreeSet<String>,
    /// The types its inherent `impl` blocks are for, as written.
    pub(crate) impls: Vec<Vec<String>>,
}

/// One target's modules, by path (`crate`, `crate::a`, `crate::a::b`).
pub(crate) type Tree = BTreeMap<String, Module>;

/// `src` with comments and the contents of string and char literals removed (their line
/// breaks kept, so that lines count as in the file).
pub(crate) fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'\n' {
                    out.push('\n');
                }
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            out.push('"');
            while j < b.len() && !b[j..].starts_with(&close) {
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push('"');
            i = j + close.len();
        } else if c == b'"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\n' {
                    out.push('\n');
                }
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            out.push('"');
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                out.push_str("' '");
                i = j + 1;
            } else if let Some(len) = src[i + 1..].chars().next().map(char::len_utf8)
                && b.get(i + 1 + len) == Some(&b'\'')
            {
                out.push_str("' '");
                i += len + 2;
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

pub(crate) fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a `use` tree stands for, each with the name it binds (`None` for a glob).
pub(crate) fn use_tree(
    tree: &str,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let tree = tree.trim().trim_start_matches("::");
    let mut path = prefix.to_vec();
    let mut rest = tree;
    loop {
        rest = rest.trim_start();
        if let Some(inner) = rest.strip_prefix('{') {
            let inner = inner.trim_end().strip_suffix('}').unwrap_or(inner);
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        use_tree(&inner[start..i], &path, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            if !inner[start..].trim().is_empty() {
                use_tree(&inner[start..], &path, out);
            }
            return;
        }
        if rest.starts_with('*') {
            out.push((path, None));
            return;
        }
        let seg: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if seg.is_empty() {
            return;
        }
        rest = rest[seg.len()..].trim_start();
        if let Some(after) = rest.strip_prefix("::") {
            path.push(seg);
            rest = after;
            continue;
        }
        let name = match rest.strip_prefix("as") {
            Some(alias) => alias.trim().to_string(),
            None => seg.clone(),
        };
        if seg == "self" {
            let last = path.last().cloned();
            out.push((path, if name == "self" { last } else { Some(name) }));
        } else {
            path.push(seg);
            out.push((path, Some(name)));
        }
        return;
    }
}

/// Makes `path`, as written in module `at`, absolute (`crate::…`), or `None` for a path
/// into another crate.
pub(crate) fn absolute(
    path: &[String],
    at: &str,
    tree: &Tree,
    depth: usize,
) -> Option<Vec<String>> {
    if depth > 16 {
        return None;
    }
    let mut here: Vec<String> = at.split("::").map(String::from).collect();
    let mut rest = path;
    match rest.first()?.as_str() {
        "crate" => {
            here = vec!["crate".into()];
            rest = &rest[1..];
        }
        "self" => rest = &rest[1..],
        "super" => {
            while rest.first().is_some_and(|s| s == "super") {
                here.pop();
                rest = &rest[1..];
            }
        }
        first => {
            let module = tree.get(at)?;
            if let Some(child) = module.children.get(first) {
                here = child.split("::").map(String::from).collect();
                rest = &rest[1..];
            } else if let Some(used) = module.uses.get(first) {
                let mut p = used.clone();
                p.extend(rest[1..].iter().cloned());
                return absolute(&p, at, tree, depth + 1);
            } else {
                return None;
            }
        }
    }
    here.extend(rest.iter().cloned());
    Some(here)
}

/// The module that defines what absolute `path` names, following `use` lines.
pub(crate) fn defining_module(path: &[String], tree: &Tree, depth: usize) -> Option<String> {
    if depth > 16 || path.first().is_none_or(|s| s != "crate") {
        return None;
    }
    let mut module = "crate".to_string();
    for (i, seg) in path.iter().enumerate().skip(1) {
        let m = tree.get(&module)?;
        if let Some(child) = m.children.get(seg) {
            module = child.clone();
            continue;
        }
        if let Some(used) = m.uses.get(seg) {
            let mut p = used.clone();
            p.extend(path[i + 1..].iter().cloned());
            return absolute(&p, &module, tree, depth + 1)
                .and_then(|p| defining_module(&p, tree, depth + 1))
                .or(Some(module));
        }
        return Some(module);
    }
    Some(module)
}

/// Reads the module at `file` and those it declares.
pub(crate) fn read_module(tree: &mut Tree, path: &str, file: &Path, dir_of_children: &Path) {
    let text = std::fs::read_to_string(file).unwrap();
    read_code(
        tree,
        path,
        (file, &text),
        &code_only(&text),
        dir_of_children,
    );
}

/// Reads `code` (`file`'s `text` without comments and literals, or an inline module's part
/// of it) as module `path`.
pub(crate) fn read_code(
    tree: &mut Tree,
    path: &str,
    (file, text): (&Path, &str),
    code: &str,
    children_dir: &Path,
) {
    tree.entry(path.to_string()).or_default().file = file.to_path_buf();
    let mut i = 0;
    let bytes = code.as_bytes();
    while i < code.len() {
        let rest = &code[i..];
        let word_start = i == 0 || !is_ident(code[..i].chars().next_back().unwrap());
        if word_start && rest.starts_with("mod ") {
            let after = rest[4..].trim_start();
            let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
            let tail = after[name.len()..].trim_start();
            let child = format!("{path}::{name}");
            tree.get_mut(path)
                .unwrap()
                .children
                .insert(name.clone(), child.clone());
            if tail.starts_with(';') {
                let (child_file, grandchildren) = match path_attr(file, text, &name) {
                    Some(p) if p.ends_with("mod.rs") => {
                        let dir = p.parent().unwrap().to_path_buf();
                        (p, dir)
                    }
                    Some(p) => {
                        let dir = p.parent().unwrap().join(p.file_stem().unwrap());
                        (p, dir)
                    }
                    None => {
                        let flat = children_dir.join(format!("{name}.rs"));
                        if flat.exists() {
                            (flat, children_dir.join(&name))
                        } else {
                            (
                                children_dir.join(&name).join("mod.rs"),
                                children_dir.join(&name),
                            )
                        }
                    }
                };
                if child_file.exists() {
                    read_module(tree, &child, &child_file, &grandchildren);
                }
                i += 4;
                continue;
            }
            if tail.starts_with('{') {
                // An inline module: its code belongs to this file.
                let open = i + rest.find('{').unwrap();
                let close = matching_brace(bytes, open);
                read_code(
                    tree,
                    &child,
                    (file, text),
                    &code[open + 1..close],
                    &children_dir.join(&name),
                );
                i = close + 1;
                continue;
            }
        }
        if word_start {
            for keyword in ["struct ", "enum ", "union ", "trait ", "type "] {
                if let Some(after) = rest.strip_prefix(keyword) {
                    let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
                    if !name.is_empty() {
                        tree.get_mut(path).unwrap().defines.insert(name);
                    }
                }
            }
            if rest.starts_with("impl")
                && rest[4..].starts_with(|c: char| c == '<' || c.is_whitespace())
                && let Some(target) = inherent_impl(&rest[4..])
            {
                tree.get_mut(path).unwrap().impls.push(target);
            }
        }
        if word_start && rest.starts_with("use ") {
            let end = rest.find(';').unwrap_or(rest.len());
            let mut found = Vec::new();
            if !rest[4..end].trim_start().starts_with("::") {
                use_tree(&rest[4..end], &[], &mut found);
            }
            // A `pub use` is the module's front door, not an import: it is followed when
            // a path goes through it.
            let re_export =
                code[..i].trim_end().ends_with("pub") || code[..i].trim_end().ends_with(')');
            for (p, name) in found {
                let module = tree.get_mut(path).unwrap();
                if let Some(name) = name {
                    module.uses.insert(name, p.clone());
                }
                if !re_export {
                    module.refs.push(p);
                }
            }
            i += end;
            continue;
        }
        let after_colons = code[..i].ends_with("::");
        if word_start
            && !after_colons
            && rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        {
            // A path in the code: `a::b::c`.
            let mut segs = Vec::new();
            let mut j = 0;
            loop {
                let seg: String = rest[j..].chars().take_while(|c| is_ident(*c)).collect();
                if seg.is_empty() {
                    break;
                }
                j += seg.len();
                segs.push(seg);
                if rest[j..].starts_with("::") && rest[j + 2..].starts_with(is_ident) {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                tree.get_mut(path).unwrap().refs.push(segs);
            }
            i += j.max(1);
            continue;
        }
        i += rest.chars().next().unwrap().len_utf8();
    }
}

/// The type an `impl` block (the code after `impl`) is for, when it is an inherent one
/// (`impl<T> a::B<T> {`), not a trait's (`impl Tr for B {`).
pub(crate) fn inherent_impl(code: &str) -> Option<Vec<String>> {
    let mut rest = code.trim_start();
    if rest.starts_with('<') {
        rest = rest[angle_end(rest)?..].trim_start();
    }
    let mut path = Vec::new();
    loop {
        let seg: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if seg.is_empty() {
            return None;
        }
        rest = &rest[seg.len()..];
        path.push(seg);
        if rest.starts_with('<') {
            rest = &rest[angle_end(rest)?..];
        }
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    let rest = rest.trim_start();
    (rest.starts_with('{') || rest.starts_with("where")).then_some(path)
}

/// Where the `<…>` that `code` starts with ends (the index after its `>`).
pub(crate) fn angle_end(code: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in code.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if i > 0 && code[..i].ends_with('-') => {}
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            '{' | ';' => return None,
            _ => {}
        }
    }
    None
}

/// The file a `#[path = "…"] mod name;` in `file` (whose text is `text`) names.
pub(crate) fn path_attr(file: &Path, text: &str, name: &str) -> Option<PathBuf> {
    let at = text.find(&format!("mod {name};"))?;
    let attr = text[..at].rfind("#[path")?;
    if text[attr..at].contains(';') {
        return None;
    }
    let lit = text[attr..at].split('"').nth(1)?;
    Some(file.parent().unwrap().join(lit))
}

pub(crate) fn matching_brace(b: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    b.len() - 1
}
