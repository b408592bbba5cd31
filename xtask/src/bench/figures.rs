//! The rows read from the criterion benches: each figure beside the floor it cannot go
//! below, measured in the same run.

use super::counts::Counts;
use super::table::{Row, missing, ratio_row, share_row, us_row};
use crate::steps::root;

/// Median of a criterion bench, in microseconds.
pub(super) fn criterion_us(group: &str, name: &str) -> Option<f64> {
    let file = root()
        .join("target/criterion")
        .join(group)
        .join(name)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(file).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64().map(|ns| ns / 1000.0)
}

fn dispatch(name: &str) -> Option<f64> {
    criterion_us("dispatch", name)
}

fn sum(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? + b?)
}

/// A `paired.json` a bench wrote beside criterion's estimates.
fn paired_json(group: &str) -> Option<serde_json::Value> {
    paired_json_named(group, "paired.json")
}

/// A JSON file a bench wrote beside criterion's estimates of `group`.
fn paired_json_named(group: &str, file: &str) -> Option<serde_json::Value> {
    let bytes = std::fs::read(root().join("target/criterion").join(group).join(file));
    serde_json::from_slice(&bytes.ok()?).ok()
}

/// Instructions per call of `row` against the sum of `floors`' (the `dispatch` bench's
/// names), counted with callgrind ([`super::counts`]); judged against `max` when given.
fn counted_row(figure: &str, counts: &Counts, row: &str, floors: &[&str], max: Option<f64>) -> Row {
    let floor: Option<f64> = floors.iter().map(|f| counts.get(*f)).sum();
    match (counts.get(row), floor) {
        (Some(n), Some(f)) if f > 0.0 => Row {
            figure: figure.into(),
            measured: format!("{n:.0} vs {f:.0}: {:.2}× floor", n / f),
            target: max.map_or("reported".into(), |m| {
                format!("≤ {m}× floor (exact run to run)")
            }),
            pass: max.map(|m| n / f <= m),
        },
        _ => missing(figure),
    }
}

/// The inline no-op against its floor (only the work the spec's design asks of a call)
/// and against the spec's design itself in Python (`design_noop`, µs). Its verdict is the
/// instruction count's (`counts`); the time is reported beside it.
pub(super) fn dispatch_rows(design_noop: Option<f64>, counts: &Counts) -> Vec<Row> {
    let a = dispatch("a_inline_noop");
    let floor = dispatch("g_required_work_floor");
    let floor_figure = "the floor of a call: only the work the spec's design asks of a no-op (its header, a clock read, validation, two events to a subscriber, output, result), with no pipeline around it";
    let mut rows = vec![
        match (floor, design_noop) {
            (Some(f), Some(py)) => Row {
                figure: floor_figure.into(),
                measured: format!(
                    "{f:.2} µs; the whole call in the spec's Python design: {py:.1} µs ({:.0}×)",
                    py / f
                ),
                target: "reported".into(),
                pass: None,
            },
            (f, _) => us_row(floor_figure, f),
        },
        Row {
            pass: None,
            target: "≤ 1.3× floor: judged by instructions (next row)".into(),
            ..ratio_row(
                "(a) inline no-op dispatch vs its floor (timed)",
                a,
                floor,
                "floor",
                1.3,
            )
        },
        counted_row(
            "(a) inline no-op dispatch vs its floor: instructions per call (callgrind)",
            counts,
            "a_inline_noop",
            &["g_required_work_floor"],
            Some(1.3),
        ),
    ];
    rows.push(match (a, design_noop) {
        (Some(a), Some(py)) => Row {
            figure: "(a) inline no-op dispatch vs the spec's design in Python, the same call (xtask/peers/spec_dispatcher.py)".into(),
            measured: format!("{a:.2} µs vs {py:.1} µs: {:.0}× faster", py / a),
            target: "≥ 100×".into(),
            pass: Some(py / a >= 100.0),
        },
        _ => missing("(a) inline no-op dispatch vs the spec's design in Python"),
    });
    rows.push(ratio_row(
        "(b) blocking-thread no-op vs (a)",
        dispatch("b_blocking_noop"),
        a,
        "(a)",
        5.0,
    ));
    rows
}

/// Each file tool against its floor: the call's floor plus the system calls it cannot do
/// without, on the same files. Beside the read and the listing, their instructions per
/// call and their floors', counted: reported, since callgrind counts user space only and
/// the floor of these two is mostly the kernel's (the verdict stays with the time).
pub(super) fn file_tool_rows(counts: &Counts) -> Vec<Row> {
    let floor = dispatch("g_required_work_floor");
    let mut rows = Vec::new();
    for (tool, bench, kernel, what, max) in [
        (
            "read_file 4 KB",
            "d_read_file_4k",
            "kernel_read_4k",
            "openat2 beneath the workspace, statx, read, close",
            Some(1.5),
        ),
        (
            "list_dir 20 entries",
            "e_list_dir_20",
            "kernel_list_20",
            "openat2, getdents64 to the end, close",
            Some(1.3),
        ),
        (
            "write_file 4 KB (synced)",
            "f_write_file_4k",
            "kernel_write_4k_synced",
            "a temporary file created, written, synced, renamed over the target",
            None,
        ),
    ] {
        let kernel_us = dispatch(kernel);
        rows.push(us_row(
            &format!("the kernel's part of {tool} alone: {what}"),
            kernel_us,
        ));
        let figure = format!("{tool} vs its floor (the call's floor + the kernel's part)");
        rows.push(match max {
            Some(max) => ratio_row(
                &figure,
                dispatch(bench),
                sum(floor, kernel_us),
                "floor",
                max,
            ),
            None => share_row(&figure, dispatch(bench), sum(floor, kernel_us), "floor"),
        });
        if max.is_some() {
            rows.push(counted_row(
                &format!("{tool} vs its floor: instructions per call (callgrind; user space only, the kernel's part is not counted)"),
                counts,
                bench,
                &["g_required_work_floor", kernel],
                None,
            ));
        }
    }
    rows.push(us_row(
        "the same write unsynced (what no durability at all would leave)",
        dispatch("kernel_write_4k_unsynced"),
    ));
    rows
}

/// The floors of a no-op call and of `read_file` 4 KB, for the MCP servers' rows.
pub(super) fn call_floors() -> super::servers::CallFloors {
    let call = dispatch("g_required_work_floor");
    super::servers::CallFloors {
        call,
        read_file: sum(call, dispatch("kernel_read_4k")),
    }
}

/// Batches, the scheduler, and throughput as sessions are added.
pub(super) fn batch_rows(scale_output: &str) -> Vec<Row> {
    let mut rows = vec![
        us_row(
            "dispatch_batch of 4 inline no-ops",
            dispatch("c_batch_4_inline_noop"),
        ),
        us_row(
            "dispatch_batch of 64 inline no-ops",
            dispatch("c_batch_64_inline_noop"),
        ),
        us_row(
            "scheduler: 64 mixed calls streamed into a Batch",
            criterion_us("schedule", "streamed_batch_64"),
        ),
    ];
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
    if let Some(line) = scale_output.lines().find(|l| l.starts_with("scale/rss:")) {
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
    rows
}

/// A plugin's call in process and isolated, each against its floor.
pub(super) fn plugin_rows() -> Vec<Row> {
    let p = |n: &str| criterion_us("plugin_dispatch", n);
    let paired = paired_json("plugin_dispatch");
    let mut rows = vec![plugin_overhead_row(paired.as_ref())];
    rows.push(us_row(
        "the floor of an isolated call: a raw request and response between two processes over a Unix socketpair (the worker's channel), 200 bytes each way",
        p("raw_socketpair_round_trip"),
    ));
    rows.push(isolated_row(
        p("plugin_isolated_noop"),
        p("raw_socketpair_round_trip"),
        paired.as_ref(),
    ));
    rows.push(match (p("wasm_lean_noop"), p("plugin_isolated_noop")) {
        (Some(w), Some(iso)) => Row {
            figure: "a WebAssembly component's no-op (no language runtime; a fresh instance per call) vs the isolated plugin's".into(),
            measured: format!("{w:.1} µs vs {iso:.1} µs ({:.2}×)", w / iso),
            target: "< 0.5×".into(),
            pass: Some(w < 0.5 * iso),
        },
        _ => missing("a WebAssembly component's no-op vs the isolated plugin's"),
    });
    rows.push(us_row(
        "the same no-op in a Python component (componentize-py: its interpreter starts in every fresh instance)",
        p("wasm_python_noop"),
    ));
    rows.push(match (p("wasm_python_noop_reused"), p("plugin_isolated_noop")) {
        (Some(w), Some(iso)) => Row {
            figure: "that Python component asking for reused instances (instances = \"reused\": its interpreter starts once per kept instance) vs the isolated plugin's no-op".into(),
            measured: format!("{w:.1} µs vs {iso:.1} µs ({:.2}×)", w / iso),
            target: "< 0.5×".into(),
            pass: Some(w < 0.5 * iso),
        },
        _ => missing("a Python component with reused instances vs the isolated plugin's no-op"),
    });
    let start = root().join("target/criterion/plugin_load/wasm_start.json");
    let start: Option<serde_json::Value> = std::fs::read(&start)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    rows.push(match start {
        Some(v) => {
            let (first, second) = (v["first_ms"].as_f64().unwrap_or(0.0), v["second_ms"].as_f64().unwrap_or(0.0));
            Row {
                figure: "start of two component packages (an 18 MB Python component and the no-op): first (compiles) and second (compiled code from the cache)".into(),
                measured: format!("{first:.0} ms, then {second:.1} ms"),
                target: "the second does not compile".into(),
                pass: Some(second * 10.0 < first),
            }
        }
        None => missing("start of one component package"),
    });
    rows
}

/// The isolated no-op against its floor, each timed in its own criterion window (the
/// verdict's), and the two timed in the same samples (reported, with the spread of the
/// samples' ratios). Both are bound by thread wake-ups. In the same samples the floor ran
/// at 8 to 11 µs against 40 to 43 alone: after the isolated calls its two processes
/// shared a CPU, where a wake-up costs no interrupt, so that pairing compares the call
/// with a floor it never had.
fn isolated_row(
    isolated: Option<f64>,
    floor: Option<f64>,
    paired: Option<&serde_json::Value>,
) -> Row {
    let figure = "the same plugin isolated in a worker process vs that floor";
    let p = paired.map(|p| &p["plugin_isolated_noop"]);
    let same_samples = p
        .and_then(|p| {
            Some((
                p["isolated_us"].as_f64()?,
                p["floor_us"].as_f64().filter(|f| *f > 0.0)?,
                p["samples"].as_u64()?,
                p["ratio_p10"].as_f64()?,
                p["ratio_p90"].as_f64()?,
            ))
        })
        .map_or(String::new(), |(iso, floor, n, low, high)| {
            format!(
                "; in the same samples: {iso:.2} µs vs {floor:.2} µs, {:.2}× (medians of {n}; samples' ratios {low:.2}–{high:.2}×, 10th to 90th percentile)",
                iso / floor
            )
        });
    match (isolated, floor) {
        (Some(iso), Some(floor)) if floor > 0.0 => Row {
            figure: figure.into(),
            measured: format!(
                "{iso:.2} µs vs {floor:.2} µs: {:.2}× floor{same_samples}",
                iso / floor
            ),
            target: "≤ 1.5× floor".into(),
            pass: Some(iso / floor <= 1.5),
        },
        _ => missing(figure),
    }
}

/// The plugin's inline no-op against the same built-in, from the plugin bench's
/// `paired.json`: the medians of per-sample means, the two measured in the same samples.
fn plugin_overhead_row(paired: Option<&serde_json::Value>) -> Row {
    let figure = "plugin inline no-op over the same built-in (the two in the same samples, each call timed alone)";
    let p = paired.map(|p| &p["plugin_inline_noop"]);
    let figures = p.and_then(|p| {
        Some((
            p["plugin_us"].as_f64()?,
            p["builtin_us"].as_f64()?,
            p["samples"].as_u64()?,
        ))
    });
    match figures {
        Some((pl, b, n)) => Row {
            figure: figure.into(),
            measured: format!(
                "{pl:.2} µs vs {b:.2} µs ({:+.2} µs; medians of {n} samples)",
                pl - b
            ),
            target: "≤ +0.5 µs".into(),
            pass: Some(pl - b <= 0.5),
        },
        None => missing(figure),
    }
}

/// One load mode's figures in the plugin bench's `paired.json`: the median load, the
/// median of the `dlopen` floors paired with its samples (both in ms), and how many pairs.
pub(super) fn paired_load(paired: &serde_json::Value, name: &str) -> Option<(f64, f64, u64)> {
    let p = &paired[name];
    Some((
        p["load_ms"].as_f64()?,
        p["dlopen_ms"].as_f64()?,
        p["pairs"].as_u64().filter(|n| *n > 0)?,
    ))
}

/// Starts over 50 packages: the first against hashing + `dlopen`, later ones against
/// `dlopen` (each load sample paired with a `dlopen` sample taken next to it).
pub(super) fn load_rows(counts: &Counts) -> Vec<Row> {
    let paired = paired_json("plugin_load");
    let pair = |name: &str| paired_load(paired.as_ref()?, name);
    let hashing_ms = criterion_us("plugin_load", "sha256_50_libraries").map(|us| us / 1000.0);
    let mut rows = vec![match hashing_ms {
        Some(h) => Row {
            figure: "the first start's floor, part one: SHA-256 of the 50 libraries alone, on all cores at once".into(),
            measured: format!("{h:.2} ms"),
            target: "reported".into(),
            pass: None,
        },
        None => missing("SHA-256 of the 50 libraries"),
    }];
    let figure = "first start over 50 packages (every library hashed, every layout checked) vs its floor: the hashing + dlopen of the 50 libraries (paired samples)";
    rows.push(match (pair("load_50_packages"), hashing_ms) {
        (Some((l, f, n)), Some(h)) => Row {
            figure: figure.into(),
            measured: format!(
                "{l:.2} ms vs {h:.2} + {f:.2} ms: {:.2}× (medians of {n} pairs)",
                l / (h + f)
            ),
            target: "reported (the verdict is the count's, below)".into(),
            pass: None,
        },
        _ => missing(figure),
    });
    rows.push(counted_row(
        "the same first start vs its floor (hashing, then dlopen), instructions counted in a fresh process each (all threads, user space only, less a process doing nothing)",
        counts,
        "load_50_packages",
        &["sha256_50_libraries", "dlopen_50_libraries"],
        Some(1.3),
    ));
    rows.push(counted_row(
        "the later start vs dlopen, instructions counted the same way",
        counts,
        "load_50_packages_remembered",
        &["dlopen_50_libraries"],
        None,
    ));
    for (figure, name, target) in [
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
    rows
}

/// The isolated no-op sandboxed against unconfined: judged by the median of the rounds'
/// ratios (each round times both sides back to back, so what the machine does to both in
/// that moment cancels), with their spread; the medians of the two sides are reported.
/// Without the rounds' ratios (an older `paired.json`), by the two medians.
fn isolated_sandbox_row(figures: &serde_json::Value) -> Row {
    let figure = "isolated no-op in a sandboxed worker vs the same worker unconfined (paired rounds; both workers on one CPU, the caller on another)";
    let (Some(with), Some(without)) = (
        figures["sandboxed"].as_f64(),
        figures["unconfined"].as_f64(),
    ) else {
        return missing(figure);
    };
    let percent = |ratio: f64| (ratio - 1.0) * 100.0;
    let ratio = &figures["ratio"];
    let (verdict, measured) = match (
        ratio["p10"].as_f64(),
        ratio["p50"].as_f64(),
        ratio["p90"].as_f64(),
    ) {
        (Some(low), Some(median), Some(high)) => (
            median,
            format!(
                "{with:.2} µs vs {without:.2} µs; per round {:+.1}% (10th to 90th percentile: {:+.1}% to {:+.1}%)",
                percent(median),
                percent(low),
                percent(high)
            ),
        ),
        _ => (
            with / without,
            format!(
                "{with:.2} µs vs {without:.2} µs: {:+.1}%",
                percent(with / without)
            ),
        ),
    };
    Row {
        figure: figure.into(),
        measured,
        target: "within 5%".into(),
        pass: Some(verdict <= 1.05),
    }
}

/// What scanning results for secrets costs, per MB, beside copying the same MB (the
/// secrets bench), and the scanner's recall and false positives on the corpus the tests
/// use (its `corpus.json`).
pub(super) fn secrets_rows() -> Vec<Row> {
    let copy = criterion_us("secrets", "copy_1mb");
    let corpus = paired_json_named("secrets", "corpus.json").unwrap_or_default();
    let mb = corpus["bytes"].as_f64().map(|b| b / f64::from(1u32 << 20));
    let mut rows = Vec::new();
    for (figure, name) in [
        (
            "secret scan of tool output with no secret in it (logs, JSON, lockfiles, minified JS: the corpus's hard negatives, ~1 MB) vs copying it",
            "scan_1mb_clean",
        ),
        (
            "secret scan of the same output with a secret every ~10 lines (each redacted) vs copying it",
            "scan_1mb_with_secrets",
        ),
    ] {
        rows.push(match (criterion_us("secrets", name), copy, mb) {
            (Some(scan), Some(copy), Some(mb)) => Row {
                figure: figure.into(),
                measured: format!(
                    "{:.2} ms per MB vs {:.3} ms per MB",
                    scan / 1000.0 / mb,
                    copy / 1000.0 / mb
                ),
                target: "under 5 ms per MB".into(),
                pass: Some(scan / 1000.0 / mb < 5.0),
            },
            _ => missing(figure),
        });
    }
    let figure = "secrets found and redacted whole in the corpus (fake secrets of every known kind in .env, YAML, JSON, shell output, stack traces)";
    rows.push(
        match (corpus["found"].as_u64(), corpus["positives"].as_u64()) {
            (Some(found), Some(all)) => Row {
                figure: figure.into(),
                measured: format!(
                    "{found} of {all} ({} kinds)",
                    corpus["kinds"].as_u64().unwrap_or(0)
                ),
                target: "all".into(),
                pass: Some(found == all),
            },
            _ => missing(figure),
        },
    );
    let figure = "hard negatives taken for a secret (UUIDs, git SHAs, SHA-256 sums, base64 images, lockfile hashes, minified JS, placeholders, a shell's environment)";
    rows.push(
        match (
            corpus["false_positives"].as_u64(),
            corpus["negatives"].as_u64(),
        ) {
            (Some(wrong), Some(all)) => Row {
                figure: figure.into(),
                measured: format!("{wrong} of {all}"),
                target: "none".into(),
                pass: Some(wrong == 0),
            },
            _ => missing(figure),
        },
    );
    rows
}

/// What the sandbox costs, from the sandbox bench's `paired.json` (each figure measured in
/// alternation with its peer without the sandbox, in the same run).
pub(super) fn sandbox_rows() -> Vec<Row> {
    let paired = paired_json("sandbox").unwrap_or_default();
    let pair = |group: &str, with: &str, without: &str| {
        Some((
            paired[group][with].as_f64()?,
            paired[group][without].as_f64()?,
        ))
    };
    let mut rows = Vec::new();
    rows.push(isolated_sandbox_row(&paired["isolated_noop_us"]));
    for (figure, group, with, without, names, most_ms) in [
        (
            "a plugin worker's start (spawn, confine itself, open the library, report): sandboxed vs unconfined",
            "worker_start_us",
            "sandboxed",
            "unconfined",
            ("sandboxed", "unconfined"),
            None,
        ),
        (
            "shell running `true`: under the default (workspace-write, no network: masks, Landlock, seccomp) vs under host",
            "shell_true_us",
            "sandboxed",
            "host",
            ("workspace-write", "host"),
            Some(1.0),
        ),
        (
            "shell running `true` granted a network: workspace-write with its own network namespace and egress proxy vs under host",
            "shell_true_networked_us",
            "sandboxed",
            "host",
            ("networked", "host"),
            None,
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
                target: most_ms.map_or_else(
                    || "reported".to_string(),
                    |ms: f64| format!("at most +{ms} ms"),
                ),
                pass: most_ms.map(|ms| (a - b) / 1000.0 <= ms),
            },
            None => missing(figure),
        });
    }
    let figure = "confining a command in a workspace with a node_modules of 100,000 files under deny_read = [\"**/.env\"] (the search for the pattern) vs its floor, a plain walk of the same tree on one thread";
    rows.push(
        match (
            pair("deny_read_search_us", "search", "plain_walk"),
            paired["deny_read_search_us"]["entries"].as_f64(),
        ) {
            (Some((search, walk)), Some(entries)) => Row {
                figure: figure.into(),
                measured: format!(
                    "{:.1} ms vs {:.1} ms for {entries:.0} entries ({:.2}x its floor)",
                    search / 1000.0,
                    walk / 1000.0,
                    search / walk
                ),
                target: "under 50 ms".into(),
                pass: Some(search / 1000.0 < 50.0),
            },
            _ => missing(figure),
        },
    );
    let floor = paired["download_floor_us"]["direct"]
        .as_f64()
        .zip(paired["download_floor_us"]["relay"].as_f64())
        .map(|(direct, relay)| direct / relay);
    let figure = "the floor of a download through any proxy: the same download through a bare byte relay (no proxy protocol, no checks, no namespace) vs straight to it";
    rows.push(match floor {
        Some(share) => Row {
            figure: figure.into(),
            measured: format!("{:.0}% of direct", share * 100.0),
            target: "reported".into(),
            pass: None,
        },
        None => missing(figure),
    });
    // The proxy's speed over the relay's, the median of the rounds that ran both.
    let against_relay = paired["download_vs_relay_us"]["speed_ratio"]["p50"].as_f64();
    let figure = "a download from a loopback server with curl: through the egress proxy (own network namespace) vs straight to it (host)";
    rows.push(
        match (
            pair("download_us", "proxied", "direct"),
            paired["download_us"]["megabytes"].as_f64(),
        ) {
            (Some((proxied, direct)), Some(mb)) => Row {
                figure: figure.into(),
                measured: format!(
                    "{mb:.0} MB: {:.0} MB/s vs {:.0} MB/s: {:.0}% of direct{}",
                    mb / (proxied / 1e6),
                    mb / (direct / 1e6),
                    direct / proxied * 100.0,
                    against_relay.map_or_else(String::new, |share| format!(
                        "; {:.0}% of its floor, a bare byte relay, in the same rounds",
                        share * 100.0
                    ))
                ),
                // What a proxy can reach is what any relay of the same bytes reaches.
                target: "at least 90% of its floor (a bare byte relay, same rounds)".into(),
                pass: against_relay.map(|share| share >= 0.9),
            },
            _ => missing(figure),
        },
    );
    rows
}

/// Policies as code (`[policies]`): what a Cedar decision adds to an inline no-op's call,
/// beside the same call decided by the tables alone, in the same run.
pub(super) fn policy_rows() -> Vec<Row> {
    let floor = criterion_us("policies", "tables_inline_noop");
    let added = |name: &str| Some(criterion_us("policies", name)? - floor?);
    let mut rows = Vec::new();
    for (figure, name, goal) in [
        (
            "a policy decision per call, 1 policy (inline no-op, same arguments as before) vs the tables alone",
            "policies_1_inline_noop",
            Some(2.0),
        ),
        (
            "a policy decision per call, 200 policies (20 in the call's scope; its verdict for these arguments kept) vs the tables alone",
            "policies_200_inline_noop",
            Some(2.0),
        ),
        (
            "the same, a new value of the argument the policies read at every call (each judged by Cedar: ~2.7 µs per policy in scope that reads it)",
            "policies_200_new_arguments_inline_noop",
            None,
        ),
        (
            "the worst case: all 200 policies in scope and reading the arguments, new at every call",
            "policies_200_all_apply_new_arguments_inline_noop",
            None,
        ),
    ] {
        rows.push(match (added(name), floor) {
            (Some(added), Some(floor)) => Row {
                figure: figure.into(),
                measured: format!("+{added:.2} µs (tables alone: {floor:.2} µs)"),
                target: goal.map_or("reported".into(), |g| format!("under +{g} µs")),
                pass: goal.map(|g| added < g),
            },
            _ => missing(figure),
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_no_ops_verdict_is_its_instruction_counts_and_the_file_tools_counts_are_reported() {
        let counts: Counts = [
            ("a_inline_noop", 4700.0),
            ("g_required_work_floor", 3623.0),
            ("d_read_file_4k", 16312.0),
            ("kernel_read_4k", 4675.0),
            ("e_list_dir_20", 28609.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let noop = counted_row(
            "a",
            &counts,
            "a_inline_noop",
            &["g_required_work_floor"],
            Some(1.3),
        );
        assert_eq!(
            (noop.measured.as_str(), noop.target.as_str(), noop.pass),
            (
                "4700 vs 3623: 1.30× floor",
                "≤ 1.3× floor (exact run to run)",
                Some(true)
            )
        );
        let read = counted_row(
            "r",
            &counts,
            "d_read_file_4k",
            &["g_required_work_floor", "kernel_read_4k"],
            None,
        );
        assert_eq!(
            (read.measured.as_str(), read.pass),
            ("16312 vs 8298: 1.97× floor", None)
        );
        // A floor not counted leaves the row unmeasured, never a ratio over part of it.
        let list = counted_row(
            "l",
            &counts,
            "e_list_dir_20",
            &["g_required_work_floor", "kernel_list_20"],
            None,
        );
        assert_eq!(list.measured, "not measured");
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
    fn the_plugin_overhead_is_the_difference_of_the_paired_medians() {
        let row = |plugin: f64| {
            plugin_overhead_row(Some(&serde_json::json!({
                "plugin_inline_noop": {"plugin_us": plugin, "builtin_us": 1.1, "samples": 120}
            })))
        };
        let within = row(1.55);
        assert_eq!(within.pass, Some(true));
        assert!(
            within
                .measured
                .contains("1.55 µs vs 1.10 µs (+0.45 µs; medians of 120 samples)"),
            "{}",
            within.measured
        );
        assert_eq!(row(1.65).pass, Some(false));
        assert_eq!(plugin_overhead_row(None).pass, None);
        let without_samples = serde_json::json!({"plugin_inline_noop": {"plugin_us": 1.5}});
        assert_eq!(plugin_overhead_row(Some(&without_samples)).pass, None);
    }

    #[test]
    fn the_isolated_call_is_judged_on_its_own_windows_and_the_pairing_is_reported() {
        let paired = serde_json::json!({
            "plugin_isolated_noop": {"isolated_us": 47.0, "floor_us": 11.0,
                "samples": 100, "ratio_p10": 0.78, "ratio_p90": 9.84}
        });
        let within = isolated_row(Some(44.0), Some(40.0), Some(&paired));
        assert_eq!(within.pass, Some(true));
        assert_eq!(
            within.measured,
            "44.00 µs vs 40.00 µs: 1.10× floor; in the same samples: 47.00 µs vs 11.00 µs, 4.27× (medians of 100; samples' ratios 0.78–9.84×, 10th to 90th percentile)"
        );
        assert_eq!(within.target, "≤ 1.5× floor");
        assert_eq!(isolated_row(Some(61.0), Some(40.0), None).pass, Some(false));
        assert_eq!(
            isolated_row(Some(61.0), Some(40.0), None).measured,
            "61.00 µs vs 40.00 µs: 1.52× floor"
        );
        assert_eq!(
            isolated_row(None, Some(40.0), Some(&paired)).measured,
            "not measured"
        );
        assert_eq!(
            isolated_row(Some(50.0), Some(0.0), None).measured,
            "not measured"
        );
    }

    #[test]
    fn a_first_starts_verdict_is_its_count_against_hashing_plus_dlopen() {
        let counts: Counts = [
            ("load_50_packages", 260e6),
            ("sha256_50_libraries", 150e6),
            ("dlopen_50_libraries", 50e6),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let rows = load_rows(&counts);
        let counted = rows
            .iter()
            .find(|r| r.figure.starts_with("the same first start vs its floor"))
            .unwrap();
        assert_eq!(
            (counted.measured.as_str(), counted.pass),
            ("260000000 vs 200000000: 1.30× floor", Some(true))
        );
        let later = rows
            .iter()
            .find(|r| r.figure.starts_with("the later start vs dlopen"))
            .unwrap();
        assert_eq!(later.measured, "not measured");
    }

    #[test]
    fn the_sandboxed_isolated_call_is_judged_by_its_rounds_ratios_with_their_spread() {
        let row = isolated_sandbox_row(&serde_json::json!({
            "sandboxed": 38.95, "unconfined": 36.0,
            "ratio": {"p10": 0.97, "p50": 1.013, "p90": 1.048},
        }));
        assert_eq!(
            row.measured,
            "38.95 µs vs 36.00 µs; per round +1.3% (10th to 90th percentile: -3.0% to +4.8%)"
        );
        // The medians differ by 8.2%; the rounds, each both sides back to back, by 1.3%.
        assert_eq!(row.pass, Some(true));
        let slower = isolated_sandbox_row(&serde_json::json!({
            "sandboxed": 40.0, "unconfined": 36.0,
            "ratio": {"p10": 1.02, "p50": 1.08, "p90": 1.2},
        }));
        assert_eq!(slower.pass, Some(false));
        // An older paired.json, without the rounds' ratios: the two medians.
        let older =
            isolated_sandbox_row(&serde_json::json!({"sandboxed": 68.93, "unconfined": 68.52}));
        assert_eq!(
            (older.measured.as_str(), older.pass),
            ("68.93 µs vs 68.52 µs: +0.6%", Some(true))
        );
        assert_eq!(
            isolated_sandbox_row(&serde_json::Value::Null).measured,
            "not measured"
        );
    }
}
