//! The shape of the code: no workspace crate depends on one that depends on it (dev
//! dependencies included), and inside every target of every crate, at every depth, no
//! file imports from one that imports from it back.
//!
//! A file's imports are the paths its code names (`use` trees, and `crate::`, `super::`,
//! `self::` or child-module paths in the code), each followed through the `use` and
//! `pub use` lines of the modules on its way to the file that defines the item. A
//! `pub use` is a module's front door, not an import of its own; what a module's ancestors
//! define is its to use (the parent declared it for that), so only the other imports can
//! close a circle. Comments and string literals are left out: a doc link is not an import.
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A module of a target: the file it is in and what its `use` lines bring in.
#[derive(Default, Debug)]
struct Module {
    /// The file (for a module declared inline, the file that holds it).
    file: PathBuf,
    /// Child modules: name -> module path.
    children: BTreeMap<String, String>,
    /// Names its `use` lines bring in: name -> the absolute path they stand for.
    uses: BTreeMap<String, Vec<String>>,
    /// Paths its code names, absolute, with the names they end in.
    refs: Vec<Vec<String>>,
    /// The types and traits it defines.
    defines: BTreeSet<String>,
    /// The types its inherent `impl` blocks are for, as written.
    impls: Vec<Vec<String>>,
}

/// One target's modules, by path (`crate`, `crate::a`, `crate::a::b`).
type Tree = BTreeMap<String, Module>;

/// `src` with comments and the contents of string and char literals removed (their line
/// breaks kept, so that lines count as in the file).
fn code_only(src: &str) -> String {
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

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a `use` tree stands for, each with the name it binds (`None` for a glob).
fn use_tree(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>)>) {
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
fn absolute(path: &[String], at: &str, tree: &Tree, depth: usize) -> Option<Vec<String>> {
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
fn defining_module(path: &[String], tree: &Tree, depth: usize) -> Option<String> {
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
fn read_module(tree: &mut Tree, path: &str, file: &Path, dir_of_children: &Path) {
    let code = code_only(&std::fs::read_to_string(file).unwrap());
    read_code(tree, path, file, &code, dir_of_children);
}

fn read_code(tree: &mut Tree, path: &str, file: &Path, code: &str, children_dir: &Path) {
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
                let (child_file, grandchildren) = match path_attr(file, &name) {
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
                    file,
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
fn inherent_impl(code: &str) -> Option<Vec<String>> {
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
fn angle_end(code: &str) -> Option<usize> {
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

/// The inherent `impl` blocks of the target at `root` that stand outside their type's
/// module and the folder under it: `file: impl Type (defined in file)`.
fn stray_impls(root: &Path) -> Vec<String> {
    let mut tree = Tree::new();
    read_module(&mut tree, "crate", root, root.parent().unwrap());
    let repo = toolhost_tests::repo_root();
    let short = |p: &Path| p.strip_prefix(&repo).unwrap_or(p).display().to_string();
    let mut stray = Vec::new();
    for (at, module) in &tree {
        for target in &module.impls {
            let home = if target.len() == 1 && module.defines.contains(&target[0]) {
                Some(at.clone())
            } else {
                absolute(target, at, &tree, 0).and_then(|abs| defining_module(&abs, &tree, 0))
            };
            let Some(home) = home else { continue };
            let name = target.last().unwrap();
            if !tree[&home].defines.contains(name) {
                // Not a type this crate defines (a foreign one cannot have inherent impls
                // here; a name not found is left to the compiler).
                continue;
            }
            let under = *at == home || at.starts_with(&format!("{home}::"));
            if !under && tree[&home].file != module.file {
                stray.push(format!(
                    "{}: impl {name} (defined in {})",
                    short(&module.file),
                    short(&tree[&home].file)
                ));
            }
        }
    }
    stray
}

/// The file a `#[path = "…"] mod name;` in `file` names.
fn path_attr(file: &Path, name: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).unwrap();
    let at = text.find(&format!("mod {name};"))?;
    let attr = text[..at].rfind("#[path")?;
    if text[attr..at].contains(';') {
        return None;
    }
    let lit = text[attr..at].split('"').nth(1)?;
    Some(file.parent().unwrap().join(lit))
}

fn matching_brace(b: &[u8], open: usize) -> usize {
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

/// Which file imports from which, with the names it takes.
type FileGraph = BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>;

fn file_graph(root: &Path) -> FileGraph {
    let mut tree = Tree::new();
    read_module(&mut tree, "crate", root, root.parent().unwrap());
    let mut graph = FileGraph::new();
    for (at, module) in &tree {
        let from = graph.entry(module.file.clone()).or_default();
        for r in &module.refs {
            let Some(abs) = absolute(r, at, &tree, 0) else {
                continue;
            };
            let Some(def) = defining_module(&abs, &tree, 0) else {
                continue;
            };
            let to = &tree[&def].file;
            // What a module's ancestors define is its to use (`super::`, `crate::`): the
            // parent declared it for that. Only other imports can close a circle.
            let ancestor = at.starts_with(&format!("{def}::")) || def == "crate";
            if *to != module.file && !ancestor {
                from.entry(to.clone())
                    .or_default()
                    .insert(abs.last().unwrap().clone());
            }
        }
    }
    graph
}

/// A cycle in the graph, if there is one.
fn find_cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        path: &mut Vec<N>,
        done: &mut BTreeSet<N>,
    ) -> Option<Vec<N>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The workspace's packages, from `cargo metadata`.
fn packages() -> Vec<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(toolhost_tests::repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"].as_array().unwrap().clone()
}

/// Every import circle of the target at `root`: each group of files that import from one
/// another, written as the imports inside it, with the names they take.
fn circles_in(root: &Path) -> Vec<String> {
    let graph = file_graph(root);
    let repo = toolhost_tests::repo_root();
    let short = |p: &Path| p.strip_prefix(&repo).unwrap_or(p).display().to_string();
    let mut circles = Vec::new();
    let mut placed: BTreeSet<&PathBuf> = BTreeSet::new();
    for file in graph.keys() {
        if placed.contains(file) {
            continue;
        }
        // The files this one reaches that reach it back: its circle.
        let from_here = reachable(&graph, file);
        let group: BTreeSet<&PathBuf> = from_here
            .into_iter()
            .filter(|other| *other != file && reachable(&graph, other).contains(file))
            .chain(std::iter::once(file))
            .collect();
        if group.len() < 2 {
            continue;
        }
        let mut steps = Vec::new();
        for a in &group {
            for (b, names) in &graph[*a] {
                if group.contains(b) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    steps.push(format!(
                        "{} imports {} from {}",
                        short(a),
                        names.join(", "),
                        short(b)
                    ));
                }
            }
        }
        placed.extend(group);
        circles.push(steps.join("; "));
    }
    circles
}

/// The files `from` imports from, directly or through others.
fn reachable<'g>(graph: &'g FileGraph, from: &PathBuf) -> BTreeSet<&'g PathBuf> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&PathBuf> = graph.get(from).into_iter().flat_map(|m| m.keys()).collect();
    while let Some(f) = todo.pop() {
        if seen.insert(f) {
            todo.extend(graph.get(f).into_iter().flat_map(|m| m.keys()));
        }
    }
    seen
}

#[test]
fn no_file_imports_from_one_that_imports_from_it() {
    let mut circles = Vec::new();
    let mut roots = 0;
    for package in packages() {
        for target in package["targets"].as_array().unwrap() {
            let root = PathBuf::from(target["src_path"].as_str().unwrap());
            roots += 1;
            for circle in circles_in(&root) {
                let name = package["name"].as_str().unwrap();
                if !circles.iter().any(|c: &String| c.ends_with(&circle)) {
                    circles.push(format!("{name}: {circle}"));
                }
            }
        }
    }
    assert!(roots > 40, "read only {roots} targets");
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The longest a function of a library or a program may be, in lines.
const MAX_FUNCTION_LINES: usize = 150;

/// The functions in `file` longer than [`MAX_FUNCTION_LINES`]: name, first line, lines.
fn long_functions(file: &Path) -> Vec<(String, usize, usize)> {
    let code = code_only(&std::fs::read_to_string(file).unwrap());
    let bytes = code.as_bytes();
    let mut long = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && is_ident(code[..at].chars().next_back().unwrap()) {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| is_ident(*c))
            .collect();
        if name.is_empty() {
            continue;
        }
        let rest = &code[at..];
        let (Some(open), semi) = (rest.find('{'), rest.find(';')) else {
            continue;
        };
        if semi.is_some_and(|semi| semi < open) {
            continue;
        }
        let close = matching_brace(bytes, at + open);
        let first = code[..at].matches('\n').count() + 1;
        let lines = code[at..close].matches('\n').count() + 1;
        if lines > MAX_FUNCTION_LINES {
            long.push((name, first, lines));
        }
    }
    long
}

#[test]
fn no_function_of_a_library_or_program_is_over_150_lines() {
    let repo = toolhost_tests::repo_root();
    let mut long = Vec::new();
    for package in packages() {
        for target in package["targets"].as_array().unwrap() {
            let kinds: Vec<&str> = target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            if !kinds
                .iter()
                .any(|k| ["lib", "cdylib", "bin", "proc-macro"].contains(k))
            {
                continue;
            }
            let mut tree = Tree::new();
            let root = PathBuf::from(target["src_path"].as_str().unwrap());
            read_module(&mut tree, "crate", &root, root.parent().unwrap());
            let files: BTreeSet<PathBuf> = tree.values().map(|m| m.file.clone()).collect();
            for file in files {
                for (name, line, lines) in long_functions(&file) {
                    let file = file
                        .strip_prefix(&repo)
                        .unwrap_or(&file)
                        .display()
                        .to_string();
                    long.push(format!("{file}:{line}: fn {name} is {lines} lines"));
                }
            }
        }
    }
    long.sort();
    long.dedup();
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them along their steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn each_public_item_of_dispatcher_core_has_one_path() {
    let lib = toolhost_tests::repo_root().join("dispatcher-core/src/lib.rs");
    let code = code_only(&std::fs::read_to_string(lib).unwrap());
    let public: Vec<&str> = code
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .collect();
    let both: Vec<&&str> = public
        .iter()
        .filter(|m| code.contains(&format!("pub use {m}::")))
        .collect();
    assert!(
        both.is_empty(),
        "dispatcher-core re-exports items of public modules at its root, so they have two paths: {both:?}; \
         make the module private or drop the re-export"
    );
}

#[test]
fn a_types_inherent_impls_stand_in_its_module_or_the_folder_under_it() {
    let mut stray = Vec::new();
    for package in packages() {
        for target in package["targets"].as_array().unwrap() {
            stray.extend(stray_impls(&PathBuf::from(
                target["src_path"].as_str().unwrap(),
            )));
        }
    }
    stray.sort();
    stray.dedup();
    assert!(
        stray.is_empty(),
        "inherent impls away from their type's home (move them into its module, or into a file under its folder):\n{}",
        stray.join("\n")
    );
}

#[test]
fn the_check_finds_an_impl_away_from_its_type() {
    let dir = tempfile::tempdir().unwrap();
    for (path, code) in [
        ("lib.rs", "mod up;\nmod events;\nmod down;\n"),
        (
            "up/mod.rs",
            "mod parts;\npub struct Upstream;\nimpl Upstream {}\n",
        ),
        ("up/parts.rs", "impl super::Upstream { fn a(&self) {} }\n"),
        (
            "events.rs",
            "use crate::up::Upstream;\nimpl Upstream { fn b(&self) {} }\nimpl std::fmt::Debug for Upstream {}\n",
        ),
        ("down.rs", "impl<T> Vec<T> {}\n"),
    ] {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, code).unwrap();
    }
    let stray = stray_impls(&dir.path().join("lib.rs"));
    assert_eq!(stray.len(), 1, "{stray:?}");
    assert!(
        stray[0].contains("events.rs: impl Upstream (defined in ")
            && stray[0].ends_with("up/mod.rs)"),
        "{stray:?}"
    );
}

#[test]
fn no_crate_depends_on_one_that_depends_on_it() {
    let packages = packages();
    let names: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let graph: BTreeMap<&str, BTreeSet<&str>> = packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().unwrap(), deps)
        })
        .collect();
    if let Some(cycle) = find_cycle(&graph) {
        panic!("crates depend on each other: {}", cycle.join(" -> "));
    }
}

/// Writes `files` (path, code) under a fresh directory and returns the circle the check
/// finds in the crate whose root is the first.
fn circle_of(files: &[(&str, &str)]) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    for (path, code) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, code).unwrap();
    }
    circles_in(&dir.path().join(files[0].0))
        .first()
        .map(|c| c.replace(&format!("{}/", dir.path().display()), ""))
}

#[test]
fn the_check_finds_a_circle_through_a_re_export_and_names_both_files() {
    let circle = circle_of(&[
        ("lib.rs", "mod a;\nmod b;\npub use b::Thing;\n"),
        ("a.rs", "use crate::Thing;\npub struct Other;\n"),
        (
            "b.rs",
            "pub struct Thing;\nfn f() -> crate::a::Other { todo!() }\n",
        ),
    ])
    .expect("a circle");
    assert!(circle.contains("a.rs imports Thing from b.rs"), "{circle}");
    assert!(circle.contains("b.rs imports Other from a.rs"), "{circle}");
}

#[test]
fn the_check_finds_a_circle_between_a_folder_module_and_a_sibling() {
    let circle = circle_of(&[
        ("lib.rs", "mod up;\nmod client;\n"),
        (
            "up/mod.rs",
            "use crate::client::Live;\npub struct Upstream;\n",
        ),
        ("client.rs", "use crate::up::Upstream;\npub struct Live;\n"),
    ])
    .expect("a circle");
    assert!(
        circle.contains("up/mod.rs imports Live from client.rs"),
        "{circle}"
    );
    assert!(
        circle.contains("client.rs imports Upstream from up/mod.rs"),
        "{circle}"
    );
}

#[test]
fn a_child_using_what_its_parent_defines_is_no_circle() {
    assert_eq!(
        circle_of(&[
            ("lib.rs", "mod up;\n"),
            (
                "up/mod.rs",
                "mod client;\nuse client::Live;\npub struct Upstream;\n"
            ),
            ("up/client.rs", "use super::Upstream;\npub struct Live;\n"),
        ]),
        None
    );
}

#[test]
fn declarations_re_exports_comments_and_strings_are_not_circles() {
    assert_eq!(
        circle_of(&[
            ("lib.rs", "mod a;\nmod b;\npub use a::A;\npub use b::B;\n"),
            (
                "a.rs",
                "// crate::b::B\npub struct A;\nconst S: &str = \"crate::b::B\";\n"
            ),
            (
                "b.rs",
                "use crate::A;\npub struct B(A);\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"
            ),
        ]),
        None
    );
}

#[test]
fn the_architecture_page_names_every_crate_and_only_paths_that_exist() {
    let repo = toolhost_tests::repo_root();
    let page = std::fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    let named: Vec<&str> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.contains('/') && !s.contains(' ') && !s.starts_with('/'))
        .collect();
    let missing: Vec<&&str> = named.iter().filter(|p| !repo.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that are not in the tree: {missing:?}"
    );
    let unlisted: Vec<String> = packages()
        .iter()
        .map(|p| {
            let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
            let dir = manifest
                .parent()
                .unwrap()
                .strip_prefix(&repo)
                .unwrap()
                .to_path_buf();
            format!("{}/", dir.display())
        })
        .filter(|dir| !named.contains(&dir.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "docs/architecture.md's crate map leaves out {unlisted:?}: add a row for each"
    );
}
