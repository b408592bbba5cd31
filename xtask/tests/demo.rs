//! `cargo xtask demo`, the README's first command, as a new user runs it.
#![cfg(test)]

use std::path::Path;
use std::process::Command;

use toolhost_tests::repo_root;

#[test]
#[ignore = "run alone, last, by `cargo xtask test`: the demo's build replaces target/debug/toolhost, which other tests run, with the demo's (no default features)"]
fn the_demo_tours_toolhost_and_every_command_it_shows_pastes_back_into_a_shell() {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("demo")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    assert!(
        said.starts_with("cargo xtask demo: builds toolhost and the three example plugins"),
        "it says what it does first: {said}"
    );
    assert!(
        !said.contains("   Compiling "),
        "cargo's build lines stay out of the tour: {said}"
    );
    let tour = &said[said.find("==> [1/").expect("a numbered tour")..];
    assert!(
        tour.contains("cargo xtask plugin package examples/wasm/py-text-stats"),
        "the tour ends with how to try a WebAssembly component: {tour}"
    );
    // The shell's refusals are explained as what they were: the hidden key read, the write
    // outside.
    assert!(
        tour.contains("id_ed25519 denied:") && tour.contains("is on the deny list"),
        "{tour}"
    );
    assert!(
        tour.contains("escaped.txt denied: outside what the command may write"),
        "{tour}"
    );
    assert!(!tour.contains("write to /bin/sh"), "{tour}");
    let installed = repo_root().join("target/demo/bin/toolhost");
    let version = Command::new(&installed).arg("--version").output().unwrap();
    assert!(version.status.success(), "{}", installed.display());
    let next = said.rsplit("Try it yourself").next().unwrap();
    assert_eq!(
        next.lines().filter(|l| l.starts_with("  ")).count(),
        4,
        "it ends with three commands to try, and the one that packages a component: {said}"
    );

    // Each shown command, typed into a shell in the demo workspace, ends as it did.
    let demo = repo_root().join("target/demo");
    let bin_dir = repo_root().join("target/debug");
    let lines: Vec<&str> = said.lines().collect();
    let mut checked = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        let code = lines[i..]
            .iter()
            .find_map(|l| l.strip_prefix("(exit code "))
            .and_then(|c| c.trim_end_matches(')').parse::<i32>().ok())
            .unwrap();
        let status = Command::new("sh")
            .args(["-c", command])
            .current_dir(demo.join("workspace"))
            .env("PATH", path_with(&bin_dir))
            .env("XDG_CONFIG_HOME", demo.join("workspace/.config"))
            .env("XDG_CACHE_HOME", demo.join("cache"))
            .output()
            .unwrap();
        assert_eq!(
            status.status.code(),
            Some(code),
            "{command}\n{}",
            String::from_utf8_lossy(&status.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 10, "{said}");
}

fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// The packages the demo's one build compiles (`cargo tree` over the packages and features
/// of `xtask_launcher::tool::DEMO_BUILD`, build dependencies included; cargo's count of
/// units is higher by the build scripts): 319 when this was set, once the demo stopped
/// building the WebAssembly runtime (424 with it, and a fresh clone's demo took nine
/// minutes on two cores, nearly all of it this build). A dependency added to what the demo
/// builds is then a decision, not an accident: 324 since the dispatcher ranks tools for a
/// search (`bm25`, `fxhash`, `byteorder`, `rust-stemmers`, `stop-words`; small, no build
/// scripts); 326 since `deny_read`'s patterns are globset's (`globset`, `bstr`); 327 since
/// the OAuth caches are `quick_cache`'s; 328 since results are scanned for secrets
/// (`toolhost-secrets` itself: its `aho-corasick` and `regex` were already built).
const DEMO_PACKAGES_BUDGET: usize = 328;

#[test]
fn the_demo_compiles_no_more_packages_than_its_budget() {
    let packages: Vec<&str> = xtask_launcher::tool::DEMO_BUILD
        .windows(2)
        .filter(|w| w[0] == "--package")
        .map(|w| w[1])
        .collect();
    assert!(packages.contains(&"toolhost"), "{packages:?}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut tree = Command::new(cargo);
    tree.current_dir(repo_root()).args([
        "tree",
        "--locked",
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    for package in &packages {
        tree.args(["--package", package]);
    }
    if xtask_launcher::tool::DEMO_BUILD.contains(&"--no-default-features") {
        tree.arg("--no-default-features");
    }
    let out = tree.output().unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "serde v1.0.228", without " (*)", " (proc-macro)" or a path source.
    let unique: std::collections::BTreeSet<String> = listed
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert!(
        unique.len() <= DEMO_PACKAGES_BUDGET,
        "the demo's build now compiles {} packages, over its budget of {DEMO_PACKAGES_BUDGET}: \
         `cargo tree -e normal,build {}` shows what a change brought in; raise the budget \
         (xtask/tests/demo.rs) only if the demo needs it",
        unique.len(),
        packages
            .iter()
            .map(|p| format!("-p {p}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}
