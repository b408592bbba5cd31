//! The shape of the code: no workspace crate depends on one that depends on it (dev
//! dependencies included); inside every target of every crate, at every depth, no file
//! imports from one that imports from it back, and a type's inherent impls stand in its
//! module; no function of a library or program is over 150 lines; dispatcher-core gives
//! each item one public path; `docs/architecture.md` names only what is there.
//!
//! A file's imports are the paths its code names (`use` trees, and `crate::`, `super::`,
//! `self::` or child-module paths in the code), each followed through the `use` and
//! `pub use` lines of the modules on its way to the file that defines the item. A
//! `pub use` is a module's front door, not an import of its own; what a module's ancestors
//! define is its to use (the parent declared it for that), so only the other imports can
//! close a circle. Comments and string literals are left out: a doc link is not an import.
#![cfg(test)]

mod checks;
mod sources;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

use checks::{MAX_FUNCTION_LINES, circles_in, find_cycle, long_functions, packages, stray_impls};
use sources::{Tree, code_only, read_module};

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
