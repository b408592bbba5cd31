//! Which xtask tool a command needs: the component tooling (wasmtime, the WIT encoders)
//! only for what builds, loads or tests WebAssembly components; for the demo, `toolhost`
//! and the example plugins it tours, and for the tests the whole workspace, built in the
//! same cargo run as the tool, so that the crates they share are compiled once.

use std::ffi::OsString;
use std::path::Path;

/// What to build for one `cargo xtask …` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// What the progress line names.
    pub what: &'static str,
    /// Why it is built, for the progress line.
    pub why: &'static str,
    /// The arguments after `cargo build`.
    pub args: Vec<&'static str>,
    /// Whether what the test run needs besides the tool starts beside its build: the
    /// registries' installs ([`crate::peers::install_ahead`], which wait on the network
    /// and the disk) and the fixture workspace's build ([`crate::fixture_workspace_build`],
    /// which fills the cores where the workspace's build waits on one crate).
    pub tests_ahead: bool,
}

/// The build of the demo: the xtask tool, `toolhost` and the example plugins, in one cargo
/// run (so that the crates they share compile once, with one set of features). `xtask
/// demo` builds with the same arguments, which then finds everything up to date. Without
/// default features: the tour runs no WebAssembly component, Redis store or OTLP exporter,
/// and wasmtime with cranelift alone was half of a fresh clone's demo build.
pub const DEMO_BUILD: [&str; 16] = [
    "--package",
    "xtask",
    "--package",
    "toolhost",
    "--package",
    "text-tools",
    "--package",
    "grep-tool",
    "--package",
    "snoop",
    "--bin",
    "xtask",
    "--bin",
    "toolhost",
    "--lib",
    "--no-default-features",
];

/// The files a component's source folder is recognized by: a Python `app.py`, a JavaScript
/// `app.js`, a core module `module.wat` (xtask's `components` builds each).
pub const COMPONENT_SOURCES: [&str; 3] = ["app.py", "app.js", "module.wat"];

/// The tool `args` (the command line after `cargo xtask`) needs.
pub fn for_command(args: &[OsString]) -> Tool {
    let words: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    let light = Tool {
        what: "the xtask tool",
        why: "it scaffolds, builds, packages and signs plugins; a fresh clone compiles it once",
        args: vec![
            "--package",
            "xtask",
            "--bin",
            "xtask",
            "--no-default-features",
        ],
        tests_ahead: false,
    };
    let components = Tool {
        what: "the xtask tool with the WebAssembly component tooling",
        why: "this command builds, loads or tests WebAssembly components",
        args: vec!["--package", "xtask", "--bin", "xtask"],
        tests_ahead: false,
    };
    match words.first().copied() {
        Some("demo") => Tool {
            what: "the xtask tool, toolhost and the example plugins (debug)",
            why: "the demo packages the examples and tours toolhost over them; built together, each crate compiles once",
            args: DEMO_BUILD.to_vec(),
            tests_ahead: false,
        },
        // The same build the test command starts with, so that the tool and the tests
        // share one compile of every crate.
        Some("test" | "ci") => Tool {
            what: "the workspace and its tests",
            why: "every test runs from this one build, the xtask tool among it",
            args: vec!["--workspace", "--all-targets"],
            tests_ahead: true,
        },
        Some("bench" | "wasm-fixtures") => components,
        // It profiles a server with the example plugin the benches load, packaged as they
        // package it.
        Some("idle-code") => Tool {
            what: "the xtask tool with the benches' plugin packaging",
            why: "this command profiles a server bare and with the example plugin the benches load",
            args: vec!["--package", "xtask", "--bin", "xtask"],
            tests_ahead: false,
        },
        Some("plugin") if words[1..].iter().any(|w| names_a_component(Path::new(w))) => components,
        _ => light,
    }
}

/// Whether `path` names a WebAssembly component, or the source or package of one: a
/// `.wasm` file, a source folder (`app.py`, `app.js`, `module.wat`), a package archive for
/// `wasm32-wasip2`, or a package folder whose `plugin.toml` says `kind = "component"`.
pub fn names_a_component(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".wasm") || name.contains("wasm32-wasip2") {
        return true;
    }
    if path.is_dir() {
        let source = COMPONENT_SOURCES.iter().any(|f| path.join(f).is_file());
        let package = std::fs::read_to_string(path.join("plugin.toml")).is_ok_and(|m| {
            m.lines()
                .any(|l| l.replace(' ', "") == "kind=\"component\"")
        });
        return source || package;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(line: &str) -> Tool {
        let args: Vec<OsString> = line.split_whitespace().map(OsString::from).collect();
        for_command(&args)
    }

    #[test]
    fn each_command_builds_only_what_it_needs() {
        let table = [
            ("plugin new my-tools", false, false),
            ("plugin new my-tools --wasm", false, false),
            ("plugin keygen k", false, false),
            ("plugin package examples/plugins/grep", false, false),
            (
                "plugin verify dist/x-0.1.0-x86_64-unknown-linux-gnu.tar.gz",
                false,
                false,
            ),
            (
                "plugin verify dist/x-0.1.0-wasm32-wasip2.tar.gz",
                true,
                false,
            ),
            ("plugin package app.wasm", true, false),
            ("test", true, false),
            ("ci", true, false),
            ("wasm-fixtures", true, false),
            ("idle-code", true, false),
            // Without wasmtime: the tour runs no component.
            ("demo", false, true),
        ];
        for (line, components, toolhost) in table {
            let t = tool(line);
            assert_eq!(
                !t.args.contains(&"--no-default-features"),
                components,
                "{line}"
            );
            assert_eq!(t.args.contains(&"toolhost"), toolhost, "{line}");
            // Only the test run prepares its installs and fixtures beside the build.
            let tests = line == "test" || line == "ci";
            assert_eq!(t.tests_ahead, tests, "{line}");
        }
    }

    #[test]
    fn a_component_source_or_package_folder_is_recognized() {
        let dir = std::env::temp_dir().join(format!("launcher-test-{}", std::process::id()));
        let source = dir.join("src");
        let package = dir.join("pkg");
        let native = dir.join("native");
        for d in [&source, &package, &native] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(source.join("app.py"), "").unwrap();
        std::fs::write(
            package.join("plugin.toml"),
            "name = \"x\"\nkind = \"component\"\n",
        )
        .unwrap();
        std::fs::write(
            native.join("plugin.toml"),
            "name = \"x\"\nkind = \"native\"\n",
        )
        .unwrap();
        assert!(names_a_component(&source));
        assert!(names_a_component(&package));
        assert!(!names_a_component(&native));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
