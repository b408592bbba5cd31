//! Cargo builds that show progress instead of silence (`--quiet`) or a wall of `Compiling`
//! lines: what is built and why, once it takes longer than half a second; then one line
//! that counts the crates compiled (rewritten in place on a terminal, every 15 s in a log);
//! then how long it took. Compiler errors and warnings still reach stderr as cargo renders
//! them. Standard library only: `cargo xtask` compiles this before anything else.

pub mod peers;
pub mod tool;

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// After this long without finishing, a build says what it builds.
const QUIET_FOR: Duration = Duration::from_millis(500);
/// How often a build not on a terminal reports its count.
const LOG_EVERY: Duration = Duration::from_secs(15);

/// One artifact cargo reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Artifact {
    /// The target's name (a crate, a binary).
    pub target: String,
    /// The target's kinds (`lib`, `cdylib`, `bin`, …).
    pub kinds: Vec<String>,
    /// The package's `Cargo.toml`.
    pub manifest_path: PathBuf,
    /// The files it made.
    pub filenames: Vec<PathBuf>,
    /// The executable it made, for a binary.
    pub executable: Option<PathBuf>,
    /// Whether it was already up to date.
    pub fresh: bool,
    /// Whether it is a test harness (a target built with `--tests` or `--all-targets`),
    /// not the program itself.
    pub test: bool,
}

/// What a build made.
#[derive(Debug, Default)]
pub struct Built {
    /// Every artifact, in cargo's order.
    pub artifacts: Vec<Artifact>,
}

impl Built {
    /// The executable of binary target `name` (the program, not its test harness).
    pub fn executable(&self, name: &str) -> Option<PathBuf> {
        self.artifacts
            .iter()
            .rev()
            .find(|a| a.target == name && a.kinds.iter().any(|k| k == "bin") && !a.test)
            .and_then(|a| a.executable.clone())
    }

    /// How many artifacts were compiled (not already up to date).
    pub fn compiled(&self) -> usize {
        self.artifacts.iter().filter(|a| !a.fresh).count()
    }
}

/// The repository root (this crate is `xtask/launcher`).
pub fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(2)
        .map_or_else(|| here.to_path_buf(), Path::to_path_buf)
}

/// The variables `cargo run` sets for the program it runs (this launcher), which the
/// builds it starts must not see: build scripts ask to be rerun when they change (ring's
/// asks of `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`), so a build started from here and the
/// same build started from a shell, or from a step that cleared them, took turns
/// recompiling ring, rustls, reqwest, rmcp, tonic and what depends on them (two and a half
/// minutes, twice in every `cargo xtask test`).
pub fn set_by_cargo_run() -> Vec<std::ffi::OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            name.to_str().is_some_and(|n| {
                n.starts_with("CARGO_PKG_")
                    || n.starts_with("CARGO_MANIFEST_")
                    || matches!(
                        n,
                        "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
                    )
            })
        })
        .collect()
}

/// The quiet `cargo build` of the fixture workspace (`tests/fixtures`: the plugins and MCP
/// servers the tests load and start) into `target/fixtures`, as the test run builds it:
/// the launcher starts it beside the workspace's build, the tool's own finds it done.
pub fn fixture_workspace_build() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for name in set_by_cargo_run() {
        command.env_remove(name);
    }
    command
        .args(["build", "--quiet", "--manifest-path"])
        .arg(root().join("tests/fixtures/Cargo.toml"))
        .arg("--target-dir")
        .arg(root().join("target/fixtures"))
        .current_dir(root());
    command
}

/// Runs `cargo build ARGS` in the repository root, showing progress as described above;
/// `what` and `why` name the build for the user.
pub fn build<A: AsRef<std::ffi::OsStr>>(
    what: &str,
    why: &str,
    args: &[A],
) -> Result<Built, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    for name in set_by_cargo_run() {
        command.env_remove(name);
    }
    let mut child = command
        .args([
            "build",
            "--quiet",
            "--message-format=json-render-diagnostics",
        ])
        .args(args)
        .current_dir(root())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", Path::new(&cargo).display()))?;
    let stdout = child.stdout.take().ok_or("cargo gave no output pipe")?;
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(artifact) = artifact(&line)
                && tx.send(artifact).is_err()
            {
                break;
            }
        }
    });
    let mut progress = Progress::new(what, why);
    let mut built = Built::default();
    loop {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(a) => {
                progress.saw(&a);
                built.artifacts.push(a);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => progress.tick(),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = reader.join();
    let status = child
        .wait()
        .map_err(|e| format!("could not wait for cargo: {e}"))?;
    progress.done(status.success());
    if status.success() {
        Ok(built)
    } else {
        Err(format!(
            "building {what} failed ({status}); cargo's messages are above"
        ))
    }
}

/// What the user sees of one build.
struct Progress<'a> {
    what: &'a str,
    why: &'a str,
    started: Instant,
    terminal: bool,
    announced: bool,
    compiled: usize,
    last: String,
    logged: Instant,
}

impl<'a> Progress<'a> {
    fn new(what: &'a str, why: &'a str) -> Self {
        let now = Instant::now();
        Progress {
            what,
            why,
            started: now,
            terminal: std::io::stderr().is_terminal(),
            announced: false,
            compiled: 0,
            last: String::new(),
            logged: now,
        }
    }

    fn announce(&mut self) {
        if !self.announced {
            self.announced = true;
            eprintln!("==> building {} ({})", self.what, self.why);
            self.logged = Instant::now();
        }
    }

    fn saw(&mut self, a: &Artifact) {
        if a.fresh {
            return;
        }
        self.compiled += 1;
        self.last.clone_from(&a.target);
        self.announce();
        self.show();
    }

    fn tick(&mut self) {
        if self.started.elapsed() >= QUIET_FOR {
            self.announce();
            self.show();
        }
    }

    fn show(&mut self) {
        let line = format!(
            "    {} compiled, {} s{}",
            crates(self.compiled),
            self.started.elapsed().as_secs(),
            if self.last.is_empty() {
                String::new()
            } else {
                format!(" (last: {})", self.last)
            }
        );
        if self.terminal {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K{line}");
            let _ = err.flush();
        } else if self.logged.elapsed() >= LOG_EVERY {
            self.logged = Instant::now();
            eprintln!("{line}");
        }
    }

    fn done(&mut self, ok: bool) {
        if !self.announced {
            return;
        }
        if self.terminal {
            eprint!("\r\x1b[K");
        }
        if ok {
            eprintln!(
                "    built {}: {} compiled in {:.0} s",
                self.what,
                crates(self.compiled),
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

/// `1 crate`, `2 crates`.
fn crates(n: usize) -> String {
    if n == 1 {
        "1 crate".into()
    } else {
        format!("{n} crates")
    }
}

/// The artifact a line of cargo's JSON output reports, if it reports one.
fn artifact(line: &str) -> Option<Artifact> {
    if string_field(line, "reason")? != "compiler-artifact" {
        return None;
    }
    let target = &line[line.find("\"target\":{")?..];
    Some(Artifact {
        target: string_field(target, "name")?,
        kinds: string_array(target, "kind"),
        manifest_path: string_field(line, "manifest_path")
            .map(PathBuf::from)
            .unwrap_or_default(),
        filenames: string_array(line, "filenames")
            .into_iter()
            .map(PathBuf::from)
            .collect(),
        executable: string_field(line, "executable").map(PathBuf::from),
        fresh: line.contains("\"fresh\":true"),
        test: line.find("\"profile\":{").is_some_and(|at| {
            line[at..]
                .split('}')
                .next()
                .is_some_and(|p| p.contains("\"test\":true"))
        }),
    })
}

/// The strings of the first array `key` in `json` (empty when absent).
fn string_array(json: &str, key: &str) -> Vec<String> {
    let Some(at) = json.find(&format!("\"{key}\":[")) else {
        return Vec::new();
    };
    let mut rest = &json[at + key.len() + 4..];
    let mut out = Vec::new();
    while let Some(body) = rest.strip_prefix('"') {
        let Some((value, len)) = read_string(body) else {
            break;
        };
        out.push(value);
        rest = &body[len..];
        match rest.strip_prefix(',') {
            Some(next) => rest = next,
            None => break,
        }
    }
    out
}

/// The first string value of `key` in `json` (cargo writes compact JSON, one message per
/// line); `None` when absent or not a string.
fn string_field(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    read_string(&json[start..]).map(|(s, _)| s)
}

/// A JSON string's value from just after its opening quote, and how many bytes it took
/// (its closing quote included).
fn read_string(json: &str) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = json.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cargo_sets_for_the_program_it_runs_is_cleared_and_the_users_settings_kept() {
        // cargo sets these for a test as for `cargo run`.
        let set: Vec<String> = set_by_cargo_run()
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .collect();
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION"] {
            assert!(set.iter().any(|n| n == name), "{name} in {set:?}");
        }
        for kept in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!set.iter().any(|n| n == kept), "{kept} in {set:?}");
        }
    }

    #[test]
    fn cargo_artifact_lines_are_read() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///r/xtask#0.1.0","manifest_path":"/r/xtask/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"xtask","src_path":"/r/x.rs"},"profile":{"opt_level":"0"},"features":[],"filenames":["/r/target/debug/xtask"],"executable":"/r/target/debug/x\"task","fresh":false}"#;
        assert_eq!(
            artifact(line),
            Some(Artifact {
                target: "xtask".into(),
                kinds: vec!["bin".into()],
                manifest_path: "/r/xtask/Cargo.toml".into(),
                filenames: vec!["/r/target/debug/xtask".into()],
                executable: Some(PathBuf::from("/r/target/debug/x\"task")),
                fresh: false,
                test: false,
            })
        );
        let library = r#"{"reason":"compiler-artifact","target":{"kind":["cdylib","rlib"],"name":"grep_tool"},"filenames":["/t/libgrep_tool.so","/t/libgrep_tool.rlib"],"executable":null,"fresh":true}"#;
        assert_eq!(
            artifact(library),
            Some(Artifact {
                target: "grep_tool".into(),
                kinds: vec!["cdylib".into(), "rlib".into()],
                filenames: vec!["/t/libgrep_tool.so".into(), "/t/libgrep_tool.rlib".into()],
                fresh: true,
                ..Artifact::default()
            })
        );
        assert_eq!(
            artifact(r#"{"reason":"build-finished","success":true}"#),
            None
        );
    }

    #[test]
    fn the_program_is_chosen_over_its_test_harness() {
        let program = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"xtask"},"profile":{"opt_level":"0","test":false},"filenames":["/t/xtask"],"executable":"/t/xtask","fresh":true}"#;
        let harness = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"xtask"},"profile":{"opt_level":"0","test":true},"filenames":["/t/deps/xtask-1"],"executable":"/t/deps/xtask-1","fresh":true}"#;
        let lib_tests = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"xtask"},"profile":{"opt_level":"0","test":true},"filenames":["/t/deps/xtask-2"],"executable":"/t/deps/xtask-2","fresh":true}"#;
        for order in [[program, harness, lib_tests], [harness, lib_tests, program]] {
            let built = Built {
                artifacts: order.iter().filter_map(|l| artifact(l)).collect(),
            };
            assert_eq!(built.executable("xtask"), Some(PathBuf::from("/t/xtask")));
        }
    }

    #[test]
    fn escapes_in_strings_are_decoded() {
        assert_eq!(
            string_field(r#"{"a":"x\\y\u00e9\n"}"#, "a").as_deref(),
            Some("x\\yé\n")
        );
        assert_eq!(string_field(r#"{"a":"unterminated"#, "a"), None);
        assert_eq!(string_field(r#"{"b":"x"}"#, "a"), None);
    }
}
