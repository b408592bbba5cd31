//! `cargo xtask bench`: every benchmark and its peers in one run, one table.
//!
//! It runs the criterion benches (`dispatcher-core`: `dispatch`, `schedule`;
//! `toolhost-tests`: `plugins`), the MCP round-trip bench, and the peers the targets are
//! measured against, in the same run: the spec's own design in Python
//! (`xtask/peers/py_dispatch_peer.py`, in a venv under `target/peers` with `jsonschema`) and
//! MCP servers side by side (`xtask/peers/mcp_peer.py`: `toolhost serve --mcp` calling
//! `read_file`, the same server calling `word_count` from the signed text-tools example in
//! process, Node's `@modelcontextprotocol/server-everything` with Node 22 from npm, and a
//! Python echo server), and the start-up of `serve --mcp` with the example plugins against
//! the same binary bare. What it cannot install (no `python3`, no `npm`, no registry) it
//! skips and says why. Then it prints one table: figure, measured, target, pass/fail. `--write-readme`
//! replaces the performance table of `docs/performance.md` (linked from the README; between
//! `<!-- bench:begin -->` and `<!-- bench:end -->`) with it, so the page shows what was
//! measured, not typed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::peers::output;
use crate::steps::{Result, announce, cargo, fail, io, root, run};

/// What a call costs from Python: through the wheel against the same call in Rust, and
/// against the spec's Python design (issue 30: reported, no target).
fn wheel_rows(wheel: Option<(f64, f64, f64)>, rust: Option<f64>) -> Vec<Row> {
    let Some((run, run_async, design)) = wheel else {
        return vec![missing("Python wheel: read_file 4 KB through Host.run")];
    };
    let against_rust = match rust {
        Some(rust) => format!(
            "{run:.1} µs vs {rust:.1} µs in Rust: {:+.1} µs through the wheel",
            run - rust
        ),
        None => format!("{run:.1} µs"),
    };
    vec![
        Row {
            figure: "Python wheel: read_file 4 KB, one call per Host.run, vs the same call in Rust (dispatch)".into(),
            measured: against_rust,
            target: "reported".into(),
            pass: None,
        },
        Row {
            figure: "Python wheel: the same call through Host.run_async (an asyncio loop)".into(),
            measured: format!("{run_async:.1} µs"),
            target: "reported".into(),
            pass: None,
        },
        Row {
            figure: "the spec's Python design, the same call (xtask/peers/spec_dispatcher.py)".into(),
            measured: format!("{design:.1} µs: Host.run is {:.1}× faster", design / run),
            target: "reported".into(),
            pass: None,
        },
    ]
}

/// One line of the table.
pub(crate) struct Row {
    pub(crate) figure: String,
    pub(crate) measured: String,
    pub(crate) target: String,
    /// `None`: reported only.
    pub(crate) pass: Option<bool>,
}

/// Median of a criterion bench, in microseconds.
fn criterion_us(group: &str, name: &str) -> Option<f64> {
    let file = root()
        .join("target/criterion")
        .join(group)
        .join(name)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(file).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64().map(|ns| ns / 1000.0)
}

/// One load mode's figures in the plugin bench's `paired.json`: the median load, the
/// median of the `dlopen` floors paired with its samples (both in ms), and how many pairs.
fn paired_load(paired: &serde_json::Value, name: &str) -> Option<(f64, f64, u64)> {
    let p = &paired[name];
    Some((
        p["load_ms"].as_f64()?,
        p["dlopen_ms"].as_f64()?,
        p["pairs"].as_u64().filter(|n| *n > 0)?,
    ))
}

/// What the sandbox costs, from the sandbox bench's `paired.json` (each figure measured in
/// alternation with its peer without the sandbox, in the same run).
fn sandbox_rows() -> Vec<Row> {
    let paired = std::fs::read(root().join("target/criterion/sandbox/paired.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .unwrap_or_default();
    let pair = |group: &str, with: &str, without: &str| {
        Some((
            paired[group][with].as_f64()?,
            paired[group][without].as_f64()?,
        ))
    };
    let mut rows = Vec::new();
    let figure =
        "isolated no-op in a sandboxed worker vs the same worker unconfined (paired rounds)";
    rows.push(match pair("isolated_noop_us", "sandboxed", "unconfined") {
        Some((with, without)) => Row {
            figure: figure.into(),
            measured: format!(
                "{with:.2} µs vs {without:.2} µs: {:+.1}%",
                (with / without - 1.0) * 100.0
            ),
            target: "within 5%".into(),
            pass: Some(with <= without * 1.05),
        },
        None => missing(figure),
    });
    for (figure, group, with, without, names) in [
        (
            "a plugin worker's start (spawn, confine itself, open the library, report): sandboxed vs unconfined",
            "worker_start_us",
            "sandboxed",
            "unconfined",
            ("sandboxed", "unconfined"),
        ),
        (
            "shell running `true`: under workspace-write vs under host",
            "shell_true_us",
            "sandboxed",
            "host",
            ("workspace-write", "host"),
        ),
    ] {
        rows.push(match pair(group, with, without) {
            Some((a, b)) => Row {
                figure: figure.into(),
                measured: format!(
                    "{:.2} ms {} vs {:.2} ms {}: +{:.2} ms",
                    a / 1000.0,
                    names.0,
                    b / 1000.0,
                    names.1,
                    (a - b) / 1000.0
                ),
                target: "reported".into(),
                pass: None,
            },
            None => missing(figure),
        });
    }
    rows
}

/// The first number after `marker` in `text`.
fn number_after(text: &str, marker: &str) -> Option<f64> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().ok()
}

/// Python with `jsonschema` in a venv under `target/peers`.
fn python_peer_env(peers: &Path) -> std::result::Result<PathBuf, String> {
    crate::peers::python_venv(peers, "venv", &["jsonschema"], "jsonschema")
}

/// Node 22 and server-everything under `target/peers`, from npm.
fn node_peer(peers: &Path) -> std::result::Result<(PathBuf, PathBuf), String> {
    let node = crate::peers::node22(peers)?;
    let server = crate::peers::npm_install(peers, "everything", crate::SERVER_EVERYTHING)
        .map_err(|e| format!("cannot install server-everything from npm ({e})"))?
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    Ok((node, server))
}

/// `best NAME: C calls/s, U us CPU/call, idle R MiB` lines of mcp_peer.py.
fn mcp_best(text: &str) -> BTreeMap<String, (f64, f64, f64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("best "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            Some((
                name.to_string(),
                (
                    number_after(rest, "")?,
                    number_after(rest, "calls/s,")?,
                    number_after(rest, "idle")?,
                ),
            ))
        })
        .collect()
}

fn ratio_row(figure: &str, value: Option<f64>, base: Option<f64>, max: f64) -> Row {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => Row {
            target: format!("≤ {max}×"),
            pass: Some(v / b <= max),
            ..share_row(figure, value, base)
        },
        _ => missing(figure),
    }
}

/// A reported figure with its ratio to `a_inline_noop`: a floor under a ratio target.
fn share_row(figure: &str, value: Option<f64>, base: Option<f64>) -> Row {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => Row {
            figure: figure.into(),
            measured: format!("{v:.2} µs = {:.1}× a_inline_noop", v / b),
            target: "reported".into(),
            pass: None,
        },
        (v, _) => us_row(figure, v),
    }
}

pub(crate) fn missing(figure: &str) -> Row {
    Row {
        figure: figure.into(),
        measured: "not measured".into(),
        target: String::new(),
        pass: None,
    }
}

fn us_row(figure: &str, value: Option<f64>) -> Row {
    match value {
        Some(v) => Row {
            figure: figure.into(),
            measured: format!("{v:.2} µs"),
            target: "reported".into(),
            pass: None,
        },
        None => missing(figure),
    }
}

/// The configurations the MCP peers and the start-up timing run with (absolute paths,
/// so no user configuration is picked up).
struct Configs {
    /// No plugins, nothing set.
    bare: PathBuf,
    /// The text-tools example plugin, signed by a trusted key (in process).
    text_tools: PathBuf,
    /// Both example plugins, signed by a trusted key (in process).
    examples: PathBuf,
}

/// Packages and signs the example plugins under `peers` and writes the configurations.
fn plugin_configs(peers: &Path) -> Result<Configs> {
    let all = peers.join("plugins/examples");
    let trusted = crate::demo::package_examples(
        &all,
        &peers.join("plugins/unsigned"),
        &peers.join("plugins/signing.key"),
    )?;
    let text_tools = peers.join("plugins/text-tools");
    let _ = std::fs::remove_dir_all(&text_tools);
    io(
        "make plugins/text-tools",
        std::fs::create_dir_all(&text_tools),
    )?;
    for entry in io("list the packages", std::fs::read_dir(&all))? {
        let path = io("list the packages", entry)?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("text-tools-"))
        {
            io(
                "copy text-tools",
                std::fs::copy(&path, text_tools.join(path.file_name().unwrap_or_default())),
            )?;
        }
    }
    let write = |name: &str, text: String| -> Result<PathBuf> {
        let path = peers.join(name);
        io(&format!("write {name}"), std::fs::write(&path, text))?;
        Ok(path)
    };
    let with = |dir: &Path| {
        format!(
            "plugin_dirs = [{:?}]\ntrusted_keys = [\"{trusted}\"]\n",
            dir.display().to_string()
        )
    };
    Ok(Configs {
        bare: write("bare.toml", "# nothing: defaults only\n".into())?,
        text_tools: write("text-tools.toml", with(&text_tools))?,
        examples: write("examples.toml", with(&all))?,
    })
}

/// The median time, in milliseconds over 30 starts, from starting `cmd` to its first line
/// on stdout after an MCP `initialize` request (`--version`: to its exit).
fn start_ms(cmd: &[String], cwd: &Path) -> std::result::Result<f64, String> {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"xtask-bench","version":"1"}}}"#;
    let (program, args) = cmd.split_first().ok_or("no command")?;
    let answers = args.iter().any(|a| a == "--mcp");
    let mut times = Vec::new();
    for _ in 0..30 {
        let start = std::time::Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        if answers {
            let mut stdin = child.stdin.take().ok_or("no stdin")?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            writeln!(stdin, "{INITIALIZE}").map_err(|e| e.to_string())?;
            // Read on another thread, so that a server that never answers is killed after
            // a while instead of holding the bench forever.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let read = std::io::BufReader::new(stdout).read_line(&mut line);
                // Timed where it was read, not where this thread's message arrives.
                let _ = tx.send((read.map(|_| line), std::time::Instant::now()));
            });
            let failure = match rx.recv_timeout(std::time::Duration::from_secs(30)) {
                Ok((Ok(line), at)) if line.contains("\"result\"") => {
                    times.push(at.saturating_duration_since(start));
                    None
                }
                Ok((Ok(line), _)) => Some(format!("did not answer initialize: {line}")),
                Ok((Err(e), _)) => Some(format!("cannot read its answer: {e}")),
                Err(_) => Some("did not answer initialize within 30 s".to_string()),
            };
            if let Some(why) = failure {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{}: {why}", cmd.join(" ")));
            }
            drop(stdin);
        } else {
            let _ = child.wait();
            times.push(start.elapsed());
        }
        let _ = child.wait();
    }
    times.sort();
    Ok(times[times.len() / 2].as_secs_f64() * 1000.0)
}

/// The table as Markdown.
fn render(rows: &[Row], skipped: &[String]) -> String {
    let mut out = String::from("| figure | measured | target | verdict |\n|---|---|---|---|\n");
    for r in rows {
        let verdict = match r.pass {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {verdict} |\n",
            r.figure, r.measured, r.target
        ));
    }
    for s in skipped {
        out.push_str(&format!("\nSkipped: {s}\n"));
    }
    out
}

/// Runs every benchmark and its peers, prints the table, and with `write_readme` puts it
/// into the README.
pub fn bench(write_readme: bool) -> Result {
    run(
        "dispatcher benches (dispatch, schedule)",
        cargo().args([
            "bench",
            "-p",
            "dispatcher-core",
            "--bench",
            "dispatch",
            "--bench",
            "schedule",
        ]),
    )?;
    run(
        "plugin benches",
        cargo().args(["bench", "-p", "toolhost-tests", "--bench", "plugins"]),
    )?;
    run(
        "sandbox bench (each figure paired with the same work unsandboxed)",
        cargo().args(["bench", "-p", "toolhost-tests", "--bench", "sandbox"]),
    )?;
    announce("scaling bench (1, 4, 16, 64 sessions; RSS after 10k and 1M dispatches)");
    let scale = output(cargo().args(["bench", "-p", "dispatcher-core", "--bench", "scale"]))
        .unwrap_or_default();
    announce("scale-out bench (3 instances, each with its own memory, then sharing Redis)");
    let redis = crate::ensure_redis()?;
    let scale_out = output(
        cargo()
            .args(["bench", "-p", "toolhost", "--bench", "scale_out"])
            .env("TOOLHOST_TEST_REDIS", &redis),
    )
    .unwrap_or_default();
    announce("MCP round trip bench");
    let roundtrip = output(cargo().args(["bench", "-p", "toolhost", "--bench", "mcp_roundtrip"]))
        .unwrap_or_default();
    run(
        "build the toolhost that ships (profile dist: fat LTO)",
        cargo().args(["build", "--profile", "dist", "-p", "toolhost"]),
    )?;
    let peers = root().join("target/peers");
    io("make target/peers", std::fs::create_dir_all(&peers))?;
    let mut skipped = Vec::new();

    announce("peer: the spec's design in Python");
    let py_peer = match python_peer_env(&peers) {
        Ok(python) => {
            output(Command::new(python).arg(root().join("xtask/peers/py_dispatch_peer.py")))
                .map_err(|e| skipped.push(format!("the Python dispatch peer failed: {e}")))
                .ok()
                .and_then(|t| number_after(&t, "median"))
        }
        Err(e) => {
            skipped.push(format!("the Python dispatch peer: {e}"));
            None
        }
    };

    announce("peers: MCP servers side by side");
    let ws = peers.join("ws");
    io(
        "prepare the MCP workspace",
        std::fs::create_dir_all(&ws).and_then(|()| std::fs::write(ws.join("a.txt"), "abc")),
    )?;
    let configs = plugin_configs(&peers)?;
    let toolhost = root().join("target/dist/toolhost");
    let serve = |config: &Path| -> Vec<String> {
        let mut args = vec![toolhost.display().to_string()];
        args.extend(["serve", "--mcp", "--workspace"].map(String::from));
        args.push(ws.display().to_string());
        args.push("--config".into());
        args.push(config.display().to_string());
        args
    };
    let mcp = match node_peer(&peers) {
        Ok((node, server)) => {
            let mut cmd = Command::new("python3");
            cmd.arg(root().join("xtask/peers/mcp_peer.py"))
                // Five interleaved rounds, the best of each server's: near the client's
                // own limit, one round in three or four dips by a quarter when the two
                // cores are busy elsewhere (seen: 85k calls/s where reruns gave 111-119k).
                .args(["--echo-peer", "--rounds", "5", "--"])
                .args(["toolhost", "read_file", r#"{"path":"a.txt"}"#])
                .args(serve(&configs.bare))
                .args(["--", "toolhost-plugin", "word_count"])
                .arg(r#"{"text":"the quick brown fox"}"#)
                .args(serve(&configs.text_tools))
                .args(["--", "everything", "echo", r#"{"message":"hi"}"#])
                .arg(node)
                .arg(server);
            output(&mut cmd)
                .map_err(|e| skipped.push(format!("mcp_peer.py failed: {e}")))
                .map(|t| mcp_best(&t))
                .unwrap_or_default()
        }
        Err(e) => {
            skipped.push(format!("the MCP peers: {e}"));
            BTreeMap::new()
        }
    };

    announce("the Python wheel (release) and the spec's Python design: read_file 4 KB");
    let wheel = crate::python::wheel_figures()
        .map_err(|e| skipped.push(format!("the Python wheel's figures: {e}")))
        .ok();

    announce("start-up: from exec to the answer to initialize");
    let version = start_ms(&[toolhost.display().to_string(), "--version".into()], &ws);
    let bare_start = start_ms(&serve(&configs.bare), &ws);
    let plugins_start = start_ms(&serve(&configs.examples), &ws);

    let a = criterion_us("dispatch", "a_inline_noop");
    let d = |n: &str| criterion_us("dispatch", n);
    let p = |n: &str| criterion_us("plugin_dispatch", n);
    let mut rows = Vec::new();
    rows.push(match (a, py_peer) {
        (Some(a), Some(py)) => Row {
            figure: "(a) inline no-op dispatch vs the spec's Python design".into(),
            measured: format!("{a:.2} µs vs {py:.1} µs: {:.0}× faster", py / a),
            target: "≥ 100×".into(),
            pass: Some(py / a >= 100.0),
        },
        _ => us_row("(a) inline no-op dispatch", a),
    });
    let floor_figure = "the floor under (a): only the work the spec's design asks of a no-op call \
        (its header, a clock read, validation, two events to a subscriber, output, result), \
        with no pipeline around it";
    rows.push(match (d("g_required_work_floor"), py_peer) {
        (Some(floor), Some(py)) => Row {
            figure: floor_figure.into(),
            measured: format!("{floor:.2} µs: {:.0}× the Python design", py / floor),
            target: "reported".into(),
            pass: None,
        },
        (floor, _) => us_row(floor_figure, floor),
    });
    rows.push(ratio_row(
        "(b) blocking-thread no-op",
        d("b_blocking_noop"),
        a,
        15.0,
    ));
    rows.push(ratio_row("read_file 4 KB", d("d_read_file_4k"), a, 3.0));
    rows.extend(wheel_rows(wheel, d("d_read_file_4k")));
    rows.push(ratio_row("list_dir 20 entries", d("e_list_dir_20"), a, 3.0));
    rows.push(ratio_row(
        "write_file 4 KB (synced)",
        d("f_write_file_4k"),
        a,
        3.0,
    ));
    for (figure, name) in [
        (
            "the kernel's part of read_file alone: openat2 beneath the workspace, statx, read, close",
            "kernel_read_4k",
        ),
        (
            "the kernel's part of list_dir alone: openat2, getdents64 to the end, close",
            "kernel_list_20",
        ),
        (
            "the kernel's part of write_file alone: a temporary file created, written, synced, renamed over the target",
            "kernel_write_4k_synced",
        ),
        (
            "the same write unsynced (what no durability at all would leave)",
            "kernel_write_4k_unsynced",
        ),
    ] {
        rows.push(share_row(figure, d(name), a));
    }
    rows.push(us_row(
        "dispatch_batch of 4 inline no-ops",
        d("c_batch_4_inline_noop"),
    ));
    rows.push(us_row(
        "dispatch_batch of 64 inline no-ops",
        d("c_batch_64_inline_noop"),
    ));
    rows.push(us_row(
        "scheduler: 64 mixed calls streamed into a Batch",
        criterion_us("schedule", "streamed_batch_64"),
    ));
    let per_call: Vec<(usize, Option<f64>)> = [1usize, 4, 16, 64]
        .iter()
        .map(|n| (*n, criterion_us("scale", &format!("sessions_{n}_per_call"))))
        .collect();
    if let [(_, Some(one)), rest @ ..] = per_call.as_slice() {
        let figures: Vec<String> = per_call
            .iter()
            .filter_map(|(n, t)| t.map(|t| format!("{n}: {:.0}k/s", 1000.0 / t)))
            .collect();
        // Grows to the core count, then flat: the best beyond one session is at least
        // 1.5× one session, and 64 sessions keep at least 80% of that best.
        let best = rest.iter().filter_map(|(_, t)| *t).fold(f64::MAX, f64::min);
        let last = rest.last().and_then(|(_, t)| *t).unwrap_or(f64::MAX);
        rows.push(Row {
            figure: "throughput by concurrent sessions (inline + read_file)".into(),
            measured: figures.join(", "),
            target: "grows to the cores, flat beyond".into(),
            pass: Some(one / best >= 1.5 && best / last >= 0.8),
        });
    }
    if let Some(line) = scale.lines().find(|l| l.starts_with("scale/rss:")) {
        let change = line
            .rsplit(':')
            .next()
            .and_then(|c| c.trim().trim_end_matches('%').parse::<f64>().ok());
        rows.push(Row {
            figure: "RSS after 1M dispatches vs after 10k".into(),
            measured: line.trim_start_matches("scale/rss:").trim().into(),
            target: "within 5%".into(),
            pass: change.map(|c| c.abs() <= 5.0),
        });
    }
    rows.push(match (p("plugin_inline_noop"), p("builtin_inline_noop")) {
        (Some(pl), Some(b)) => Row {
            figure: "plugin inline no-op over the same built-in".into(),
            measured: format!("{pl:.2} µs (+{:.2} µs)", pl - b),
            target: "≤ +0.5 µs".into(),
            pass: Some(pl - b <= 0.5),
        },
        _ => missing("plugin inline no-op"),
    });
    rows.push(us_row(
        "the same plugin isolated in a worker process",
        p("plugin_isolated_noop"),
    ));
    rows.extend(sandbox_rows());
    // Each load against the dlopen floors paired with its own samples (see the plugin
    // bench's docs: floors measured in their own window drift on a shared VM).
    let paired = std::fs::read(root().join("target/criterion/plugin_load/paired.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    let pair = |name: &str| paired_load(paired.as_ref()?, name);
    for (figure, name, target) in [
        (
            "first start over 50 packages (every library hashed, every layout checked) vs dlopen of the 50 libraries, each sample paired with a dlopen sample taken next to it",
            "load_50_packages",
            true,
        ),
        (
            "later start over the same 50 unchanged packages (digests and layout checks remembered) vs dlopen",
            "load_50_packages_remembered",
            true,
        ),
        (
            "the same later start into a dispatcher that holds the built-ins (schema engine set up, as in toolhost) vs dlopen",
            "load_50_packages_after_builtins",
            false,
        ),
    ] {
        rows.push(match pair(name) {
            Some((l, f, n)) => Row {
                figure: figure.into(),
                measured: format!(
                    "{l:.2} ms vs {f:.2} ms: {:.2}× (medians of {n} pairs)",
                    l / f
                ),
                target: if target { "≤ 2×" } else { "reported" }.into(),
                pass: target.then_some(l / f <= 2.0),
            },
            None => missing(figure),
        });
    }
    let hashing = criterion_us("plugin_load", "sha256_50_libraries").map(|us| us / 1000.0);
    let figure = "the first start's floor: SHA-256 of the 50 libraries alone, on all cores at once, before anything is opened";
    rows.push(match (hashing, pair("load_50_packages")) {
        (Some(h), Some((_, f, _))) => Row {
            figure: figure.into(),
            measured: format!("{h:.2} ms = {:.2}× the paired dlopen median", h / f),
            target: "reported".into(),
            pass: None,
        },
        (h, _) => Row {
            figure: figure.into(),
            measured: h.map_or_else(|| "not measured".into(), |h| format!("{h:.2} ms")),
            target: "reported".into(),
            pass: None,
        },
    });
    for line in roundtrip
        .lines()
        .filter(|l| l.starts_with("mcp_roundtrip/"))
    {
        let (label, rest) = line.split_once(':').unwrap_or((line, ""));
        rows.push(Row {
            figure: format!(
                "MCP round trip, {}",
                label.trim_start_matches("mcp_roundtrip/")
            ),
            measured: rest.trim().into(),
            target: "reported".into(),
            pass: None,
        });
    }
    for (server, what) in [
        ("toolhost", "MCP read_file"),
        (
            "toolhost-plugin",
            "MCP word_count (example plugin, in process)",
        ),
    ] {
        if let (Some(t), Some(e)) = (mcp.get(server), mcp.get("everything")) {
            rows.push(Row {
                figure: format!("{what} calls/s vs Node server-everything echo"),
                measured: format!("{:.0} vs {:.0}: {:.2}×", t.0, e.0, t.0 / e.0),
                target: "≥ 3×".into(),
                pass: Some(t.0 / e.0 >= 3.0),
            });
        }
        if let (Some(t), Some(py)) = (mcp.get(server), mcp.get("python-echo")) {
            rows.push(Row {
                figure: format!("{what}: server CPU per call vs a Python echo server"),
                measured: format!("{:.0} µs vs {:.0} µs: {:.2}×", t.1, py.1, t.1 / py.1),
                target: "≤ 1.5×".into(),
                pass: Some(t.1 / py.1 <= 1.5),
            });
        }
        if let Some(t) = mcp.get(server) {
            rows.push(Row {
                figure: format!("{what}: server idle RSS"),
                measured: format!("{:.1} MiB", t.2),
                target: "≤ 15 MiB".into(),
                pass: Some(t.2 <= 15.0),
            });
        }
    }
    rows.extend(crate::scale_bench::rows(&scale_out));
    rows.push(match (plugins_start, bare_start) {
        (Ok(p), Ok(b)) => Row {
            figure: "serve --mcp with the example plugins: exec to the initialize answer, vs the same binary bare (no plugins, empty config)".into(),
            measured: format!("{p:.2} ms vs {b:.2} ms: {:.2}×", p / b),
            target: "≤ 2×".into(),
            pass: Some(p / b <= 2.0),
        },
        (p, b) => {
            if let Err(e) = p.and(b) {
                skipped.push(format!("start-up timing: {e}"));
            }
            missing("serve --mcp start-up")
        }
    });
    if let Ok(v) = version {
        rows.push(Row {
            figure: "toolhost --version: exec to exit (the process floor)".into(),
            measured: format!("{v:.2} ms"),
            target: "reported".into(),
            pass: None,
        });
    }
    let table = render(&rows, &skipped);
    println!("\n{table}");
    if write_readme {
        let page = root().join(PERFORMANCE_PAGE);
        let text = io(
            &format!("read {PERFORMANCE_PAGE}"),
            std::fs::read_to_string(&page),
        )?;
        let (begin, end) = ("<!-- bench:begin -->", "<!-- bench:end -->");
        let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
            return fail(
                &format!("update {PERFORMANCE_PAGE}"),
                format!("no {begin} … {end} markers"),
            );
        };
        let updated = format!("{}{begin}\n{table}{}", &text[..b], &text[e..]);
        let tmp = page.with_extension("md.tmp");
        io(
            &format!("write {PERFORMANCE_PAGE}"),
            std::fs::write(&tmp, updated).and_then(|()| std::fs::rename(&tmp, &page)),
        )?;
        eprintln!("{PERFORMANCE_PAGE}: performance table updated");
    }
    Ok(())
}

/// The page whose table `--write-readme` replaces.
pub const PERFORMANCE_PAGE: &str = "docs/performance.md";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_peer_best_lines_parse() {
        let text = "best toolhost: 29821 calls/s, 31 us CPU/call, idle 13.2 MiB\n\
                    best everything: 15425 calls/s, 71 us CPU/call, idle 74.2 MiB; toolhost vs everything: throughput 1.93x";
        let best = mcp_best(text);
        assert_eq!(best["toolhost"], (29821.0, 31.0, 13.2));
        assert_eq!(best["everything"], (15425.0, 71.0, 74.2));
    }

    #[test]
    fn start_up_is_timed_to_the_answer_and_a_wrong_answer_is_an_error() {
        let cwd = std::env::temp_dir();
        let server = |script: &str| -> Vec<String> {
            // `--mcp` is the shell's $0 here: it marks a server that answers `initialize`.
            vec!["sh".into(), "-c".into(), script.into(), "--mcp".into()]
        };
        let ms = start_ms(&server(r#"read l; echo '{"result":{}}'"#), &cwd);
        assert!(ms.as_ref().is_ok_and(|ms| *ms > 0.0), "{ms:?}");
        let err = start_ms(&server("read l; echo nope"), &cwd);
        assert!(
            matches!(&err, Err(e) if e.contains("did not answer initialize: nope")),
            "{err:?}"
        );
    }

    #[test]
    fn paired_load_figures_parse_and_a_mode_without_pairs_is_missing() {
        let paired = serde_json::json!({
            "load_50_packages_remembered": {"load_ms": 4.8, "dlopen_ms": 2.5, "pairs": 750},
            "load_50_packages": {"load_ms": 33.0, "dlopen_ms": 3.1, "pairs": 0},
        });
        assert_eq!(
            paired_load(&paired, "load_50_packages_remembered"),
            Some((4.8, 2.5, 750))
        );
        assert_eq!(paired_load(&paired, "load_50_packages"), None);
        assert_eq!(
            paired_load(&paired, "load_50_packages_after_builtins"),
            None
        );
    }

    #[test]
    fn the_python_peer_median_parses() {
        let line = "python peer: median 60.64 us/call over 20000 calls (reps 79.08), concurrent=1";
        assert_eq!(number_after(line, "median"), Some(60.64));
    }
}
