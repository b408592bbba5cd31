//! The shape of the code: inside a crate, no module imports one that imports it back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Which modules of a crate's `src/` each module refers to (`crate::name`, or an item of
/// the crate root such as `crate::Dispatcher`, which counts as `lib`). Comments are left
/// out: a doc link is not an import.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, String)> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let code: String = std::fs::read_to_string(&p)
                .unwrap()
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            (name, code)
        })
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|(n, _)| n.clone()).collect();
    let mut graph = BTreeMap::new();
    for (name, code) in &files {
        let mut refs = BTreeSet::new();
        for (i, _) in code.match_indices("crate::") {
            let ident: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let target = if ident.starts_with(|c: char| c.is_uppercase()) {
                "lib".to_string()
            } else {
                ident
            };
            if modules.contains(&target) && target != *name {
                refs.insert(target);
            }
        }
        graph.insert(name.clone(), refs);
    }
    graph
}

/// A cycle in the graph, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

fn assert_acyclic(krate: &str) {
    let src = toolhost_tests::repo_root().join(krate).join("src");
    let graph = module_graph(&src);
    assert!(graph.len() > 3, "read no modules from {}", src.display());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("{krate}: modules import each other: {}", cycle.join(" -> "));
    }
}

#[test]
fn dispatcher_core_modules_form_no_import_cycle() {
    assert_acyclic("dispatcher-core");
}

#[test]
fn tool_api_modules_form_no_import_cycle() {
    assert_acyclic("tool-api");
}

#[test]
fn plugin_host_modules_form_no_import_cycle() {
    assert_acyclic("plugin-host");
}

#[test]
fn sandbox_modules_form_no_import_cycle() {
    assert_acyclic("sandbox");
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &[][..]),
    ]
    .into_iter()
    .map(|(n, r)| (n.to_string(), r.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
}
