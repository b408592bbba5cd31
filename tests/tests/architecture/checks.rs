//! The checks over what [`crate::sources`] reads: import circles between files, impls
//! away from their type, long functions, and the workspace's packages.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::sources::{
    Tree, absolute, code_only, defining_module, is_ident, matching_brace, read_module,
};

/// The inherent `impl` blocks of the target at `root` that stand outside their type's
/// module and the folder under it: `file: impl Type (defined in file)`.
pub(crate) fn stray_impls(root: &Path) -> Vec<String> {
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

/// Which file imports from which, with the names it takes.
pub(crate) type FileGraph = BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>;

pub(crate) fn file_graph(root: &Path) -> FileGraph {
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
pub(crate) fn find_cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
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
pub(crate) fn packages() -> Vec<Value> {
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
pub(crate) fn circles_in(root: &Path) -> Vec<String> {
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
pub(crate) fn reachable<'g>(graph: &'g FileGraph, from: &PathBuf) -> BTreeSet<&'g PathBuf> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&PathBuf> = graph.get(from).into_iter().flat_map(|m| m.keys()).collect();
    while let Some(f) = todo.pop() {
        if seen.insert(f) {
            todo.extend(graph.get(f).into_iter().flat_map(|m| m.keys()));
        }
    }
    seen
}

/// The longest a function of a library or a program may be, in lines.
pub(crate) const MAX_FUNCTION_LINES: usize = 150;

/// The functions in `file` longer than [`MAX_FUNCTION_LINES`]: name, first line, lines.
pub(crate) fn long_functions(file: &Path) -> Vec<(String, usize, usize)> {
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
