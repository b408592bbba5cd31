//! The crates an author or embedder depends on, as a registry would take them: `cargo
//! package` succeeds for each, and each package carries what users of a registry expect
//! (its README and both license texts) and nothing they do not (tests, benches, fixtures).
//! `cargo xtask test` runs [`check_packages`] so that it stays true (docs/packages.md).

use crate::steps::{Result, announce, cargo, fail, run};

/// The packages of `cargo package`, in the order they depend on each other. `tool-api`
/// keeps its name (the ABI check compares package names); the others carry `toolhost-`.
pub const PUBLISHED: [&str; 6] = [
    "tool-api",
    "toolhost-sandbox",
    "toolhost-secrets",
    "toolhost-dispatcher-core",
    "toolhost-builtin-tools",
    "toolhost-policies",
];

/// The one package whose packaged sources are also compiled alone (`cargo package`'s
/// verification): the crate every plugin depends on. Verifying the others compiles their
/// dependencies again with another set of features (two minutes on a fresh clone); their
/// packaging, versions and file lists are still checked.
pub const VERIFIED: &str = "tool-api";

/// Files every package must carry.
const REQUIRED_FILES: [&str; 4] = ["Cargo.toml", "README.md", "LICENSE-MIT", "LICENSE-APACHE"];

/// The largest a package may be, uncompressed (what `cargo package --list` names, summed):
/// crates.io takes up to 10 MiB compressed; a library's sources are a few hundred KiB, so
/// anything near this is a fixture or a build product that `include` let in.
const MAX_PACKAGE_BYTES: u64 = 2 * 1024 * 1024;

/// `cargo package` for [`PUBLISHED`], then each package's file list checked.
pub fn check_packages() -> Result {
    const STEP: &str = "package the crates authors and embedders depend on (cargo package)";
    let mut package = cargo();
    package.args(["package", "--allow-dirty", "--quiet"]);
    for name in PUBLISHED {
        package.args(["-p", name]);
    }
    // One run packages them together (a later one finds the earlier ones in cargo's
    // temporary registry); verification is asked for one package alone below.
    package.arg("--no-verify");
    run(STEP, &mut package)?;
    run(
        "compile tool-api's package alone (cargo package's verification)",
        cargo().args(["package", "--allow-dirty", "--quiet", "-p", VERIFIED]),
    )?;
    announce("check each package's files");
    let mut problems = Vec::new();
    for name in PUBLISHED {
        let listed = list(STEP, name)?;
        let bytes = size(name, &listed);
        problems.extend(problems_of(name, &listed, bytes));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        fail(STEP, problems.join("\n"))
    }
}

/// What is wrong with the package `name` whose files are `listed` (as `cargo package
/// --list` names them) and add up to `bytes`: each problem says what to change.
fn problems_of(name: &str, listed: &[String], bytes: u64) -> Vec<String> {
    let mut problems = Vec::new();
    for required in REQUIRED_FILES {
        if !listed.iter().any(|f| f == required) {
            problems.push(format!(
                "{name}: the package has no {required} (add it to `include` in its Cargo.toml)"
            ));
        }
    }
    let stray: Vec<&String> = listed
        .iter()
        .filter(|f| f.starts_with("tests/") || f.starts_with("benches/") || f.starts_with("fuzz/"))
        .collect();
    if !stray.is_empty() {
        problems.push(format!(
            "{name}: the package carries {stray:?}, which no user builds (narrow `include`)"
        ));
    }
    if bytes > MAX_PACKAGE_BYTES {
        problems.push(format!(
            "{name}: the package's files add up to {bytes} bytes (at most {MAX_PACKAGE_BYTES}): `cargo package --list -p {name}` shows what `include` let in"
        ));
    }
    problems
}

/// The files `cargo package` puts into `name`'s package.
fn list(step: &str, name: &str) -> Result<Vec<String>> {
    let out = cargo()
        .args(["package", "--allow-dirty", "--list", "--quiet", "-p", name])
        .output()
        .or_else(|e| fail(step, format!("could not start cargo: {e}")))?;
    if !out.status.success() {
        return fail(
            step,
            format!(
                "cargo package --list -p {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The bytes of the package's files as they are in the workspace (the generated
/// `Cargo.toml`, `Cargo.lock` and VCS note are counted as their sources or not at all).
fn size(name: &str, listed: &[String]) -> u64 {
    let Some(dir) = crate_dir(name) else {
        return 0;
    };
    listed
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// The folder of a published package (the folders keep the names without the prefix).
fn crate_dir(name: &str) -> Option<std::path::PathBuf> {
    let folder = name.strip_prefix("toolhost-").unwrap_or(name);
    let dir = crate::steps::root().join(folder);
    dir.join("Cargo.toml").is_file().then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_published_package_is_a_folder_of_the_workspace_with_its_name_in_its_manifest() {
        for name in PUBLISHED {
            let dir = crate_dir(name).unwrap_or_else(|| panic!("no folder for {name}"));
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            assert!(
                manifest.contains(&format!("name = \"{name}\"")),
                "{} does not name the package {name}",
                dir.display()
            );
        }
    }

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_package_with_its_readme_licenses_and_sources_only_has_no_problem() {
        let listed = files(&[
            "Cargo.toml",
            "README.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
            "src/lib.rs",
        ]);
        assert!(problems_of("tool-api", &listed, 200_000).is_empty());
    }

    #[test]
    fn each_problem_of_a_package_is_named_with_what_to_change() {
        let table: [(&[&str], u64, &str); 4] = [
            (
                &["Cargo.toml", "README.md", "LICENSE-MIT"],
                1,
                "has no LICENSE-APACHE (add it to `include`",
            ),
            (
                &["Cargo.toml", "LICENSE-MIT", "LICENSE-APACHE"],
                1,
                "has no README.md",
            ),
            (
                &[
                    "Cargo.toml",
                    "README.md",
                    "LICENSE-MIT",
                    "LICENSE-APACHE",
                    "tests/big.rs",
                ],
                1,
                "carries [\"tests/big.rs\"], which no user builds",
            ),
            (
                &["Cargo.toml", "README.md", "LICENSE-MIT", "LICENSE-APACHE"],
                MAX_PACKAGE_BYTES + 1,
                "`cargo package --list -p x` shows what `include` let in",
            ),
        ];
        for (listed, bytes, says) in table {
            let problems = problems_of("x", &files(listed), bytes);
            assert_eq!(problems.len(), 1, "{listed:?}: {problems:?}");
            assert!(
                problems[0].starts_with("x: ") && problems[0].contains(says),
                "{problems:?}"
            );
        }
    }

    #[test]
    fn the_verified_package_is_one_of_the_published() {
        assert!(PUBLISHED.contains(&VERIFIED));
    }
}
