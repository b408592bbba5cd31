//! The official MCP conformance suite, run by software nobody here wrote, against a fixture
//! server of our own that offers what its server scenarios call (`fixture-mcp-conformance-
//! server`): directly, and through `toolhost serve --http` mounting that server with
//! `prefix = ""`, over HTTP (both eras) and over stdio. What passes directly must pass
//! through toolhost, check by check; `conformance/baseline.yml` lists what fails through
//! toolhost, and only what fails directly too may be there.
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use toolhost_tests::peer;

mod common;
use common::{serve_http, workspace};

const REVISIONS: [&str; 2] = ["2025-11-25", "2026-07-28"];

/// The conformance fixture serving HTTP, killed on drop.
struct Fixture {
    child: Child,
    url: String,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fixture_program() -> PathBuf {
    toolhost_tests::fixtures().mcp_conformance_server()
}

fn fixture_over_http() -> Fixture {
    let mut child = Command::new(fixture_program())
        .arg("http")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    assert!(url.starts_with("http://"), "the fixture said {url:?}");
    Fixture {
        child,
        url: url.trim().to_string(),
    }
}

/// The suite: node and its entry point, when `cargo xtask test` installed them.
struct Suite {
    node: PathBuf,
    entry: PathBuf,
}

impl Suite {
    fn installed() -> Option<Suite> {
        Some(Suite {
            node: peer("TOOLHOST_TEST_NODE")?,
            entry: peer("TOOLHOST_TEST_CONFORMANCE")?,
        })
    }

    /// Runs the server scenarios of `revision` against `url`; with a `baseline`, whether
    /// the run failed only where it says (else whether everything passed), and the
    /// checks, by scenario and check id.
    fn run(&self, url: &str, revision: &str, out: &Path, baseline: Option<&Path>) -> Run {
        let mut cmd = Command::new(&self.node);
        cmd.arg(&self.entry)
            .args(["server", "--url", url, "--requirements", revision])
            .arg("--output-dir")
            .arg(out);
        if let Some(baseline) = baseline {
            cmd.arg("--expected-failures").arg(baseline);
        }
        let done = cmd.output().unwrap();
        let report = String::from_utf8_lossy(&done.stdout).into_owned();
        Run {
            ok: done.status.success(),
            summary: report
                .split("=== SUMMARY ===")
                .nth(1)
                .unwrap_or(&report)
                .to_string(),
            checks: checks(out),
        }
    }
}

/// One run of the suite.
struct Run {
    ok: bool,
    summary: String,
    /// Each check's statuses (a check id may be reported more than once), and the error
    /// messages of its failures, by (scenario, check id).
    checks: BTreeMap<(String, String), (BTreeSet<String>, Vec<String>)>,
}

impl Run {
    fn passed(&self) -> BTreeSet<&(String, String)> {
        self.checks
            .iter()
            .filter(|(_, (statuses, _))| statuses.contains("SUCCESS"))
            .map(|(key, _)| key)
            .collect()
    }
}

/// The scenario of an output directory: its name without the run's timestamp
/// (`server-tools-call-image-2026-11-25T15-05-43-397Z` → `server-tools-call-image`).
fn scenario_of(dir: &str) -> String {
    let bytes = dir.as_bytes();
    (0..bytes.len())
        .find(|&i| {
            bytes[i] == b'-'
                && bytes.len() > i + 11
                && bytes[i + 1..i + 5].iter().all(u8::is_ascii_digit)
                && bytes[i + 5] == b'-'
                && bytes[i + 11] == b'T'
        })
        .map_or(dir, |i| &dir[..i])
        .to_string()
}

fn checks(out: &Path) -> BTreeMap<(String, String), (BTreeSet<String>, Vec<String>)> {
    let mut all: BTreeMap<(String, String), (BTreeSet<String>, Vec<String>)> = BTreeMap::new();
    for entry in std::fs::read_dir(out).into_iter().flatten().flatten() {
        let scenario = scenario_of(&entry.file_name().to_string_lossy());
        let Ok(text) = std::fs::read_to_string(entry.path().join("checks.json")) else {
            continue;
        };
        let Ok(Value::Array(list)) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        for check in list {
            let id = check["id"].as_str().unwrap_or_default().to_string();
            let status = check["status"].as_str().unwrap_or_default().to_string();
            let slot = all.entry((scenario.clone(), id)).or_default();
            if status == "FAILURE"
                && let Some(message) = check["errorMessage"].as_str()
            {
                slot.1.push(message.to_string());
            }
            slot.0.insert(status);
        }
    }
    all
}

/// A workspace whose toolhost.toml mounts the fixture with `prefix = ""` by `how` (`url =
/// …` or `command = …`).
fn mounting(how: &str) -> tempfile::TempDir {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"conformance\"\nprefix = \"\"\ninput_schemas = \"as-given\"\n{how}\n"
        ),
    )
    .unwrap();
    ws
}

fn baseline() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/baseline.yml")
}

/// The checks that passed directly and not through toolhost, with what toolhost's run said.
/// `INFO` through toolhost is not a loss: the suite says so of a choice the specification
/// leaves to the server (toolhost answers a 2026-07-28 POST with JSON, not an SSE stream).
fn lost(direct: &Run, through: &Run) -> Vec<String> {
    direct
        .passed()
        .into_iter()
        .filter(|key| {
            !through.checks.get(*key).is_some_and(|(statuses, _)| {
                statuses.contains("SUCCESS") || statuses.contains("INFO")
            })
        })
        .map(|key| {
            let said = through.checks.get(key).map(|(s, m)| (s.clone(), m.clone()));
            format!("{} / {}: {said:?}", key.0, key.1)
        })
        .collect()
}

#[test]
fn the_scenario_of_an_output_directory_drops_the_timestamp() {
    assert_eq!(
        scenario_of("server-tools-call-image-2026-11-25T15-05-43-397Z"),
        "server-tools-call-image"
    );
    assert_eq!(
        scenario_of("server-server-sse-polling-2026-11-25T15-09-03-785Z"),
        "server-server-sse-polling"
    );
    assert_eq!(scenario_of("no-timestamp"), "no-timestamp");
}

#[test]
fn what_passes_against_the_fixture_passes_through_toolhost_over_http_in_both_eras() {
    let Some(suite) = Suite::installed() else {
        return;
    };
    let fixture = fixture_over_http();
    let ws = mounting(&format!("url = \"{}\"", fixture.url));
    let toolhost = serve_http(ws.path(), &[]);
    let url = format!("http://{}/mcp", toolhost.addr);
    for revision in REVISIONS {
        let direct = suite.run(
            &fixture.url,
            revision,
            &ws.path().join(format!("direct-{revision}")),
            None,
        );
        let through = suite.run(
            &url,
            revision,
            &ws.path().join(format!("through-{revision}")),
            Some(&baseline()),
        );
        let lost = lost(&direct, &through);
        assert!(
            lost.is_empty(),
            "{revision}: checks that pass against the fixture but not through toolhost:\n{}\n\
             toolhost's log:\n{}",
            lost.join("\n"),
            toolhost.log.lock().unwrap().join("\n")
        );
        assert!(
            through.ok,
            "{revision}: through toolhost, failures the baseline does not list, or a stale baseline:\n{}",
            through.summary
        );
    }
}

#[test]
fn what_passes_against_the_fixture_passes_through_toolhost_mounting_it_over_stdio() {
    let Some(suite) = Suite::installed() else {
        return;
    };
    let fixture = fixture_over_http();
    let program = fixture_program();
    let ws = mounting(&format!(
        "command = \"{}\"\nargs = [\"stdio\"]\nreadable_roots = [\"{}\"]",
        program.display(),
        program.parent().unwrap().display()
    ));
    let toolhost = serve_http(ws.path(), &[]);
    let url = format!("http://{}/mcp", toolhost.addr);
    let revision = "2025-11-25";
    let direct = suite.run(&fixture.url, revision, &ws.path().join("direct"), None);
    let through = suite.run(&url, revision, &ws.path().join("through"), None);
    let lost = lost(&direct, &through);
    assert!(
        lost.is_empty(),
        "checks that pass against the fixture but not through toolhost over stdio:\n{}",
        lost.join("\n")
    );
}
