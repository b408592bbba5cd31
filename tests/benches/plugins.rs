//! Plugin overhead: (1) an inline no-op tool dispatched from a loaded plugin vs the same
//! tool built in, the two measured in the same samples (target: the plugin path adds at
//! most 0.5 µs median; `paired.json`, below), and the same plugin
//! isolated in a worker process (`plugin_isolated_noop`: one socket round trip, no process
//! or thread started per call), beside its floor: a raw 200-byte request and answer between
//! this process and `cat` over a Unix socketpair, the worker's kind of channel, with nothing
//! else around them (`raw_socketpair_round_trip`); (2) a host's start over a directory of 50 plugin packages,
//! in process, against the floor of `dlopen` plus entry-point lookup of the same 50
//! libraries (`dlopen_50_libraries`; target: loading at most 2× that): the first start,
//! when every library is hashed and every layout checked (`load_50_packages`), and a later
//! start over the same unchanged packages, whose digests and layout checks the first one
//! remembered (`load_50_packages_remembered`). Both start from an empty dispatcher, so their
//! window includes the schema engine's first compile in the process.
//! `load_50_packages_after_builtins` is the later start in a dispatcher that already holds
//! the built-in tools, as in `toolhost`, which registers them before it loads plugins.
//!
//! Each load sample is paired with a `dlopen` floor sample taken next to it (before it on
//! even samples, after it on odd ones), and the targets compare the medians of those pairs
//! (`paired.json` beside criterion's own estimates, read by `cargo xtask bench`). Measured
//! in separate windows seconds apart, the floor drifts on a shared VM (2.2 to 3.0 ms
//! between runs of the same code, and higher right after a first start's hashing), and
//! the ratio with it: 1.84×, 2.02× and 2.30× in three runs of the same later start.
//!
//! `sha256_50_libraries` hashes the 50 libraries alone, on all cores at once: the part of a
//! first start that no cache can help with, as a floor under its ratio to `dlopen`.
//!
//! The 50 packages are 50 distinct libraries: copies of the `bench-noop` fixture whose tool
//! name suffix `000` is patched to `001`…`050` in the library's bytes. Every load sample
//! runs in a fresh process (this bench binary, started again as a child), so each really
//! opens 50 libraries into a process that holds none yet: the dynamic loader's work grows
//! with the number of libraries already loaded, and a library once loaded is never unloaded.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
use plugin_host::{Isolation, PluginHost, WorkerSettings};
use serde_json::json;
use tool_api::{SideEffect, ToolDefinition};
use toolhost_tests::{bench_library, package_library, release_library};

fn builtin_noop() -> ToolDefinition {
    ToolDefinition::new(
        "builtin_noop",
        "Does nothing.",
        SideEffect::None,
        json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
            "required": ["a"]
        }),
    )
    .inline()
}

fn call(name: &str) -> ToolUse {
    ToolUse::new("toolu_bench", name, json!({"a": "x", "b": 1, "c": true}))
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Benches `bench`: one dispatch of `make()` in `session` per iteration, timed alone (the
/// call is made before the clock starts), its result freed after the clock stops and
/// before the next call, as a host frees each result once it has sent it. Criterion's
/// batches kept a batch of results and freed them together, and that free moved glibc's
/// heap across its consolidation threshold: the next calls paid for it, the plugin's
/// (which allocates more) most, by as much as a microsecond depending on the heap's state.
fn bench_dispatch(
    group: &mut Group<'_>,
    rt: &tokio::runtime::Runtime,
    bench: &str,
    make: impl Fn() -> ToolUse,
    dispatcher: &Dispatcher,
    session: &dispatcher_core::Session,
) {
    group.bench_function(bench, |b| {
        b.to_async(rt).iter_custom(|iters| {
            let make = &make;
            async move {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    timed += timed_dispatch(dispatcher, session, make()).await;
                }
                timed
            }
        })
    });
}

/// One dispatch of `call`, timed alone (the call is made before the clock starts), its
/// result freed after the clock stops, as a host frees each result once it has sent it.
async fn timed_dispatch(
    dispatcher: &Dispatcher,
    session: &dispatcher_core::Session,
    call: ToolUse,
) -> Duration {
    let started = Instant::now();
    let result = dispatcher.dispatch(call, session).await;
    let spent = started.elapsed();
    drop(std::hint::black_box(result));
    spent
}

/// Benches `name` paired with a base in the same samples: each criterion sample makes as
/// many calls of `measured` as of `base` (each returns the time of one call), one kind
/// after the other (which goes first alternates between samples), and adds the mean of
/// either kind to `means` as (base, measured). Criterion's own estimate for the row is
/// `measured`'s time.
fn bench_paired<M, FM, B, FB>(
    group: &mut Group<'_>,
    rt: &tokio::runtime::Runtime,
    name: &str,
    means: &Mutex<Vec<(f64, f64)>>,
    measured: M,
    base: B,
) where
    M: Fn() -> FM,
    FM: std::future::Future<Output = Duration>,
    B: Fn() -> FB,
    FB: std::future::Future<Output = Duration>,
{
    let (measured, base) = (&measured, &base);
    let samples = &AtomicUsize::new(0);
    group.bench_function(name, |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let (mut base_time, mut measured_time) = (Duration::ZERO, Duration::ZERO);
            let measured_first = samples.fetch_add(1, Ordering::Relaxed) % 2 == 1;
            for side in [measured_first, !measured_first] {
                for _ in 0..iters {
                    if side {
                        measured_time += measured().await;
                    } else {
                        base_time += base().await;
                    }
                }
            }
            let per_call = |d: Duration| d.as_secs_f64() * 1e6 / iters.max(1) as f64;
            means
                .lock()
                .unwrap()
                .push((per_call(base_time), per_call(measured_time)));
            measured_time
        })
    });
}

/// The plugin's tool: the bench-noop fixture, its name placeholder unpatched.
const PLUGIN_NOOP: &str = "bench_noop_suffix_000";

/// Benches `plugin_inline_noop`, the plugin's inline no-op, paired with the same tool built
/// in ([`bench_paired`]): each criterion sample makes as many calls of the one as of the
/// other, one kind after the other (which goes first alternates between samples), each
/// call timed alone and its result freed as in [`bench_dispatch`], and adds the mean of
/// either kind to `means`. The target compares the medians of those, so both kinds pay alike for
/// whatever the machine does during a sample. Benched as two rows seconds apart, the
/// difference for the same code was +0.63 µs in one run and +0.49 µs in the next. The two
/// kinds do not alternate call by call: each would then run after the other's code and
/// data had displaced its own, and both calls were slower (1.43 and 2.30 µs, +0.87).
/// With the plugin's call on both sides (an A/A check of the pairing), the two medians
/// differed by +0.004 and -0.012 µs in two runs. Criterion's own estimate for the row is
/// the plugin calls' time.
fn bench_plugin_against_builtin(
    group: &mut Group<'_>,
    rt: &tokio::runtime::Runtime,
    dispatcher: &Dispatcher,
    session: &dispatcher_core::Session,
    means: &Mutex<Vec<(f64, f64)>>,
) {
    bench_paired(
        group,
        rt,
        "plugin_inline_noop",
        means,
        || timed_dispatch(dispatcher, session, call(PLUGIN_NOOP)),
        || timed_dispatch(dispatcher, session, call("builtin_noop")),
    );
}

/// The floor of an isolated call: a raw 200-byte request and answer between this process
/// and `cat` over a Unix socketpair, the worker's kind of channel, nothing around them.
struct SocketpairFloor {
    ours: std::os::unix::net::UnixStream,
    echo: std::process::Child,
}

impl SocketpairFloor {
    fn start() -> SocketpairFloor {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let echo_out = theirs.try_clone().unwrap();
        let echo = std::process::Command::new("cat")
            .stdin(std::os::fd::OwnedFd::from(theirs))
            .stdout(std::os::fd::OwnedFd::from(echo_out))
            .spawn()
            .expect("cat, the floor's echoing process");
        SocketpairFloor { ours, echo }
    }

    fn round_trip(&mut self) {
        use std::io::{Read, Write};
        let request = [b'x'; 200];
        let mut answer = [0u8; 200];
        self.ours.write_all(&request).unwrap();
        self.ours.read_exact(&mut answer).unwrap();
    }
}

impl Drop for SocketpairFloor {
    fn drop(&mut self) {
        let _ = self.ours.shutdown(std::net::Shutdown::Both);
        let _ = self.echo.wait();
    }
}

/// Benches `plugin_isolated_noop`, the plugin's no-op in its worker process, paired with
/// its floor as [`bench_plugin_against_builtin`] pairs the in-process call: each sample
/// makes as many isolated calls as raw round trips, one kind after the other (which goes
/// first alternates), and adds both means to `means`. Both are bound by thread wake-ups,
/// which cost what the machine's scheduler makes them cost that second: timed apart, the
/// ratio moved from 1.39× to 2.07× between evenings. Reported beside the verdict, which
/// is the two rows timed alone: in these samples the floor ran at 8 to 11 µs against 40
/// to 43 alone (after the isolated calls, `cat` and this thread shared a CPU, where a
/// wake-up costs no interrupt), a floor the call never has.
fn bench_isolated_against_floor(
    group: &mut Group<'_>,
    rt: &tokio::runtime::Runtime,
    dispatcher: &Dispatcher,
    session: &dispatcher_core::Session,
    floor: &Mutex<SocketpairFloor>,
    means: &Mutex<Vec<(f64, f64)>>,
) {
    bench_paired(
        group,
        rt,
        "plugin_isolated_noop",
        means,
        || timed_dispatch(dispatcher, session, call(PLUGIN_NOOP)),
        || async {
            let mut floor = floor.lock().unwrap();
            let started = Instant::now();
            floor.round_trip();
            started.elapsed()
        },
    );
}

/// Prints, and writes to `paired.json`, the medians of the per-sample means
/// [`bench_isolated_against_floor`] kept, and the spread of the samples' ratios.
fn report_isolated_against_floor(means: Vec<(f64, f64)>) {
    if means.is_empty() {
        return;
    }
    let samples = means.len();
    let mut ratios: Vec<f64> = means.iter().map(|(raw, iso)| iso / raw).collect();
    ratios.sort_by(f64::total_cmp);
    let (raw, isolated): (Vec<f64>, Vec<f64>) = means.into_iter().unzip();
    let (raw, isolated) = (median(raw), median(isolated));
    let (low, high) = (ratios[samples / 10], ratios[samples - 1 - samples / 10]);
    println!(
        "plugin_dispatch/plugin_isolated_noop paired with raw_socketpair_round_trip: {isolated:.2} µs vs {raw:.2} µs ({:.2}×; samples' ratios {low:.2}–{high:.2}×, 10th to 90th percentile) over {samples} samples",
        isolated / raw
    );
    let mut paired = serde_json::Map::new();
    paired.insert(
        "plugin_isolated_noop".into(),
        json!({"isolated_us": isolated, "floor_us": raw, "samples": samples, "ratio_p10": low, "ratio_p90": high}),
    );
    write_paired("plugin_dispatch", paired);
}

/// Prints, and writes to `target/criterion/plugin_dispatch/paired.json`, the medians of
/// the per-sample means [`bench_plugin_against_builtin`] kept (nothing when the row was
/// filtered out of the run).
fn report_plugin_against_builtin(means: Vec<(f64, f64)>) {
    if means.is_empty() {
        return;
    }
    let samples = means.len();
    let (builtin, plugin): (Vec<f64>, Vec<f64>) = means.into_iter().unzip();
    let (builtin, plugin) = (median(builtin), median(plugin));
    println!(
        "plugin_dispatch/plugin_inline_noop paired with builtin_inline_noop: {plugin:.3} µs vs {builtin:.3} µs ({:+.3} µs) over {samples} samples",
        plugin - builtin
    );
    let mut paired = serde_json::Map::new();
    paired.insert(
        "plugin_inline_noop".into(),
        json!({"plugin_us": plugin, "builtin_us": builtin, "samples": samples}),
    );
    write_paired("plugin_dispatch", paired);
}

/// The median of `values` (the upper one of an even count; 0 when there are none).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Merges `paired` into `target/criterion/<group>/paired.json` (a run filtered to some rows
/// keeps the others' last figures), where `cargo xtask bench` reads it.
fn write_paired(group: &str, paired: serde_json::Map<String, serde_json::Value>) {
    // target/release/deps/plugins-… -> target/criterion/<group>
    let exe = std::env::current_exe().unwrap();
    let Some(target) = exe.ancestors().nth(3) else {
        return;
    };
    let dir = target.join("criterion").join(group);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("paired.json");
    let mut all: serde_json::Map<String, serde_json::Value> = std::fs::read(&file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    all.extend(paired);
    std::fs::write(&file, serde_json::to_vec_pretty(&all).unwrap()).unwrap();
}

/// Copies the bench-noop library with its name placeholder patched to `n`.
fn patched_copy(original: &[u8], n: usize, dest: &Path) {
    let needle = b"bench_noop_suffix_000";
    let at = original
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("placeholder in the library");
    let mut bytes = original.to_vec();
    bytes[at + needle.len() - 3..at + needle.len()].copy_from_slice(format!("{n:03}").as_bytes());
    std::fs::write(dest, bytes).unwrap();
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let library = bench_library("bench-noop");
    let plugins = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    package_library(&library, plugins.path(), "bench-noop");

    let dispatcher = Dispatcher::new();
    dispatcher
        .register(tool_api::testing::noop(builtin_noop()))
        .unwrap();
    let report = PluginHost::new([plugins.path()])
        .isolation(Isolation::InProcess)
        .cache_dir(cache.path())
        .load_into(&dispatcher);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let isolated = Dispatcher::new();
    let isolated_report = PluginHost::new([plugins.path()])
        .isolation(Isolation::Process)
        .worker(WorkerSettings::new(
            env!("CARGO_BIN_EXE_plugin-worker"),
            Vec::<String>::new(),
        ))
        .cache_dir(cache.path())
        .load_into(&isolated);
    assert_eq!(
        isolated_report.loaded().count(),
        1,
        "{:?}",
        isolated_report.lines()
    );
    let workspace = tempfile::tempdir().unwrap();
    let session = dispatcher
        .open_session(SessionSpec::new("bench", workspace.path()))
        .unwrap();
    let _subscriber = session.subscribe();
    let isolated_session = isolated
        .open_session(SessionSpec::new("bench", workspace.path()))
        .unwrap();

    let mut group = c.benchmark_group("plugin_dispatch");
    let means = Mutex::new(Vec::new());
    bench_plugin_against_builtin(&mut group, &rt, &dispatcher, &session, &means);
    {
        let floor = Mutex::new(SocketpairFloor::start());
        group.bench_function("raw_socketpair_round_trip", |b| {
            b.iter(|| floor.lock().unwrap().round_trip())
        });
        let isolated_means = Mutex::new(Vec::new());
        let (d, s) = (&isolated, &isolated_session);
        bench_isolated_against_floor(&mut group, &rt, d, s, &floor, &isolated_means);
        report_isolated_against_floor(isolated_means.into_inner().unwrap());
    }
    if let Some(components) = std::env::var_os("TOOLHOST_TEST_COMPONENTS") {
        wasm_noop(
            &mut group,
            &rt,
            std::path::Path::new(&components),
            workspace.path(),
        );
    } else {
        eprintln!(
            "plugin_dispatch/wasm_python_noop skipped: TOOLHOST_TEST_COMPONENTS is not set (cargo xtask bench sets it)"
        );
    }
    group.finish();
    report_plugin_against_builtin(means.into_inner().unwrap());

    // 50 distinct packages, made once; every sample loads them in a fresh process.
    let fifty = tempfile::tempdir().unwrap();
    let (packages, remembered, libraries) = make_packages(&library, fifty.path());

    let mut group = c.benchmark_group("plugin_load");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(6));
    // What a first start cannot do without: every library's SHA-256, here on all cores at
    // once (the host's own hashing function), before anything is opened.
    group.bench_function("sha256_50_libraries", |b| b.iter(|| sha256_all(&libraries)));
    let pairs: Mutex<Vec<(LoadMode, Duration, Duration)>> = Mutex::new(Vec::new());
    for mode in LoadMode::ALL {
        group.bench_function(mode.bench_name(), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|i| {
                        let run = |m| load_in_child(m, &packages, &remembered);
                        if mode == LoadMode::Dlopen {
                            return run(mode);
                        }
                        // Its own floor, taken next to it (before it on even samples, after
                        // it on odd ones), so that the ratio compares one moment of this
                        // noisy machine, not two windows seconds apart.
                        let (spent, floor) = if i % 2 == 0 {
                            let floor = run(LoadMode::Dlopen);
                            (run(mode), floor)
                        } else {
                            (run(mode), run(LoadMode::Dlopen))
                        };
                        pairs.lock().unwrap().push((mode, spent, floor));
                        spent
                    })
                    .sum()
            })
        });
    }
    group.finish();
    report_pairs(&pairs.into_inner().unwrap());
}

/// Makes the 50 packages under `root`: `root/packages` (copies of `library` with their
/// tool names patched apart), `root/remembered` (the cache of an earlier start over them:
/// digests and layout checks) and the libraries themselves, which are returned.
fn make_packages(
    library: &Path,
    root: &Path,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    Vec<std::path::PathBuf>,
) {
    let original = std::fs::read(library).unwrap();
    let (staging, packages) = (root.join("staging"), root.join("packages"));
    std::fs::create_dir_all(&packages).unwrap();
    let file_name = library.file_name().unwrap().to_owned();
    let libraries: Vec<std::path::PathBuf> = (1..=50)
        .map(|n| {
            let dir = staging.join(format!("lib{n:03}"));
            std::fs::create_dir_all(&dir).unwrap();
            let lib = dir.join(&file_name);
            patched_copy(&original, n, &lib);
            package_library(&lib, &packages, &format!("pkg{n:03}"));
            lib
        })
        .collect();
    // An earlier start's digests and layout checks, for the usual start (nothing changed
    // since).
    let remembered = root.join("remembered");
    let earlier = PluginHost::new([&packages])
        .isolation(Isolation::InProcess)
        .cache_dir(&remembered)
        .load_into(&Dispatcher::new());
    assert_eq!(earlier.loaded().count(), 50, "{:?}", earlier.lines());
    rustix::fs::sync();
    (packages, remembered, libraries)
}

/// What a first start cannot do without: every library's SHA-256 (the host's own hashing
/// function), on all cores at once.
fn sha256_all(libraries: &[std::path::PathBuf]) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|s| {
        for share in libraries.chunks(libraries.len().div_ceil(cores)) {
            s.spawn(move || {
                for lib in share {
                    plugin_host::digest::sha256_file(lib).unwrap();
                }
            });
        }
    })
}

/// `dlopen` and the entry point's lookup of each library.
fn dlopen_all(libraries: &[std::path::PathBuf]) {
    for lib in libraries {
        abi_stable::library::lib_header_from_path(lib).unwrap();
    }
}

/// A host's start over `packages` into `dispatcher`, with `cache`.
fn load_all(packages: &Path, cache: &Path, dispatcher: &Dispatcher) -> plugin_host::LoadReport {
    PluginHost::new([packages])
        .isolation(Isolation::InProcess)
        .cache_dir(cache)
        .load_into(dispatcher)
}

/// WebAssembly components' no-ops, in the same group as the native rows, each call in a
/// fresh instance as for every component: the leanest component (`wat-noop`, a core module
/// written in the text format, no language runtime: what the host's path costs) and a
/// Python one (the fault fixture's `wasm_noop`: componentize-py's interpreter in every
/// instance), and that Python package asking for reused instances; and the two packages' first start (compiling them) and second start
/// (compiled code from the cache), into `target/criterion/plugin_load/wasm_start.json`.
fn wasm_noop(
    group: &mut Group<'_>,
    rt: &tokio::runtime::Runtime,
    components: &Path,
    workspace: &Path,
) {
    let plugins = tempfile::tempdir().unwrap();
    for name in ["faults", "wat-noop"] {
        toolhost_tests::copy_dir(
            &components.join("packages").join(name),
            &plugins.path().join(name),
        );
    }
    let start = |compiled: &Path| {
        let d = Dispatcher::new();
        let cache = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let report = PluginHost::new([plugins.path()])
            .cache_dir(cache.path())
            .wasm_cache_dir(compiled)
            .load_into(&d);
        let took = started.elapsed();
        assert_eq!(report.loaded().count(), 2, "{:?}", report.lines());
        (d, took)
    };
    // Benchmarking, the first start compiles into an empty cache. In test mode the compiled
    // code comes from the tests' shared cache (`cargo xtask test` fills it): compiling the
    // Python component unoptimized took half a minute of every test run, for a figure
    // nobody reads.
    let benching = std::env::args().any(|a| a == "--bench");
    let fresh = tempfile::tempdir().unwrap();
    let compiled = if benching {
        fresh.path().to_path_buf()
    } else {
        components.join("cache")
    };
    let (dispatcher, first) = start(&compiled);
    let second: Vec<Duration> = (0..5).map(|_| start(&compiled).1).collect();
    let mut sorted = second.clone();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let figures = json!({"first_ms": ms(first), "second_ms": ms(sorted[sorted.len() / 2])});
    eprintln!("wasm component start (18 MB Python component and the WAT no-op): {figures}");
    // target/release/deps/plugins-… -> target/criterion/plugin_load
    let exe = std::env::current_exe().unwrap();
    if let Some(target) = exe.ancestors().nth(3).filter(|_| benching) {
        let out = target.join("criterion/plugin_load");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("wasm_start.json"), figures.to_string()).unwrap();
    }
    let session = dispatcher
        .open_session(SessionSpec::new("bench-wasm", workspace))
        .unwrap();
    let noop = |tool: &'static str| move || ToolUse::new("toolu_bench", tool, json!({}));
    let (d, s) = (&dispatcher, &session);
    bench_dispatch(group, rt, "wasm_lean_noop", noop("wat_noop"), d, s);
    bench_dispatch(group, rt, "wasm_python_noop", noop("wasm_noop"), d, s);
    // The same Python package asking for reused instances (`instances = "reused"`): the
    // interpreter starts once per kept instance, not per call.
    let reused = tempfile::tempdir().unwrap();
    let package = reused.path().join("faults");
    toolhost_tests::copy_dir(&components.join("packages/faults"), &package);
    let manifest = package.join(plugin_host::MANIFEST_FILE);
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replacen(
            "kind = \"component\"",
            "kind = \"component\"\ninstances = \"reused\"",
            1,
        ),
    )
    .unwrap();
    let d = Dispatcher::new();
    let cache = tempfile::tempdir().unwrap();
    let report = PluginHost::new([reused.path()])
        .cache_dir(cache.path())
        .wasm_cache_dir(&compiled)
        .load_into(&d);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let session = d
        .open_session(SessionSpec::new("bench-wasm-reused", workspace))
        .unwrap();
    bench_dispatch(
        group,
        rt,
        "wasm_python_noop_reused",
        noop("wasm_noop"),
        &d,
        &session,
    );
}

/// Prints, and writes to `target/criterion/plugin_load/paired.json` for `cargo xtask
/// bench`, each load mode's median against the median of the `dlopen` floors paired with
/// its samples.
fn report_pairs(pairs: &[(LoadMode, Duration, Duration)]) {
    let median_ms = |v: Vec<Duration>| median(v.iter().map(|d| d.as_secs_f64() * 1000.0).collect());
    let mut paired = serde_json::Map::new();
    for mode in LoadMode::ALL.into_iter().filter(|m| *m != LoadMode::Dlopen) {
        let (spent, floor): (Vec<Duration>, Vec<Duration>) = pairs
            .iter()
            .filter(|(m, ..)| *m == mode)
            .map(|(_, spent, floor)| (*spent, *floor))
            .unzip();
        let n = spent.len();
        if n == 0 {
            continue; // filtered out of this run
        }
        let (load_ms, dlopen_ms) = (median_ms(spent), median_ms(floor));
        println!(
            "plugin_load/{} paired with dlopen_50_libraries: {load_ms:.3} ms vs {dlopen_ms:.3} ms ({:.2}x) over {n} pairs",
            mode.bench_name(),
            load_ms / dlopen_ms
        );
        paired.insert(
            mode.bench_name().into(),
            json!({"load_ms": load_ms, "dlopen_ms": dlopen_ms, "pairs": n}),
        );
    }
    write_paired("plugin_load", paired);
}

/// What one cold start measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoadMode {
    /// The floor: `dlopen` and the entry-point lookup (abi_stable's `lib_header_from_path`)
    /// of the 50 libraries, nothing else.
    Dlopen,
    /// `PluginHost::load_into` with nothing remembered: every library is hashed.
    Cold,
    /// `PluginHost::load_into` with the digests and layout checks an earlier start
    /// remembered.
    Remembered,
    /// The same, into a dispatcher that already holds the built-in tools.
    AfterBuiltins,
}

impl LoadMode {
    const ALL: [LoadMode; 4] = [
        LoadMode::Dlopen,
        LoadMode::Cold,
        LoadMode::Remembered,
        LoadMode::AfterBuiltins,
    ];

    fn bench_name(self) -> &'static str {
        match self {
            LoadMode::Dlopen => "dlopen_50_libraries",
            LoadMode::Cold => "load_50_packages",
            LoadMode::Remembered => "load_50_packages_remembered",
            LoadMode::AfterBuiltins => "load_50_packages_after_builtins",
        }
    }

    fn from_name(name: &str) -> Option<LoadMode> {
        LoadMode::ALL.into_iter().find(|m| m.bench_name() == name)
    }
}

/// The variable that makes this bench binary a child that loads once and prints how long
/// it took: `MODE PACKAGES REMEMBERED-CACHE`, one per line. MODE is a [`LoadMode`]'s bench
/// name, or [`SHA256_CHILD`].
const CHILD: &str = "TOOLHOST_BENCH_LOAD_CHILD";

/// The child mode that hashes the 50 libraries (for counting: criterion times the hashing
/// in this process).
const SHA256_CHILD: &str = "sha256_50_libraries";

/// The child mode that starts and ends doing nothing: what a count of a child's
/// instructions subtracts (callgrind collects every thread's, and the hashing and loading
/// run on threads of their own, so no one function holds all of the work).
const NOTHING_CHILD: &str = "nothing";

/// One load in a fresh process, where no library is loaded yet: a library loaded once
/// stays loaded (abi_stable never unloads), and the loader's work grows with the number of
/// libraries a process holds, so loads in one process would each be slower than the last.
fn load_in_child(mode: LoadMode, packages: &Path, remembered: &Path) -> Duration {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(
            CHILD,
            format!(
                "{}\n{}\n{}",
                mode.bench_name(),
                packages.display(),
                remembered.display()
            ),
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "load child failed: {}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    Duration::from_nanos(text.trim().parse().unwrap())
}

/// The child's side of [`load_in_child`]: prints the nanoseconds its load took.
fn child(spec: &str) {
    let mut parts = spec.split('\n');
    let (Some(mode), Some(packages), Some(remembered)) = (parts.next(), parts.next(), parts.next())
    else {
        panic!("bad {CHILD}: {spec:?}");
    };
    let packages = Path::new(packages);
    let libraries = || {
        let mut dirs: Vec<_> = std::fs::read_dir(packages)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        dirs.iter()
            .map(|dir| {
                std::fs::read_dir(dir)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .find(|p| p.extension().is_some_and(|x| x == "so"))
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    if mode == NOTHING_CHILD {
        println!("0");
        return;
    }
    if mode == SHA256_CHILD {
        let libs = libraries();
        let start = Instant::now();
        sha256_all(&libs);
        println!("{}", start.elapsed().as_nanos());
        return;
    }
    let mode = LoadMode::from_name(mode).unwrap();
    let elapsed = match mode {
        LoadMode::Dlopen => {
            let libs = libraries();
            let start = Instant::now();
            dlopen_all(&libs);
            start.elapsed()
        }
        LoadMode::Cold | LoadMode::Remembered | LoadMode::AfterBuiltins => {
            // Cold: an empty cache, so nothing is remembered.
            let empty = tempfile::tempdir().unwrap();
            let cache = if mode == LoadMode::Cold {
                empty.path()
            } else {
                Path::new(remembered)
            };
            let d = Dispatcher::new();
            if mode == LoadMode::AfterBuiltins {
                for f in builtin_tools::factories() {
                    d.register(f).unwrap();
                }
            }
            let start = Instant::now();
            let report = load_all(packages, cache, &d);
            let elapsed = start.elapsed();
            assert_eq!(report.loaded().count(), 50, "{:?}", report.lines());
            elapsed
        }
    };
    println!("{}", elapsed.as_nanos());
}

criterion_group!(plugins, benches);

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    // `--make-packages DIR`: the 50 packages, for `cargo xtask bench` to count a start over
    // them under callgrind (each a child as above, less one doing nothing).
    let args: Vec<String> = std::env::args().collect();
    if let Some(dir) = args
        .iter()
        .position(|a| a == "--make-packages")
        .and_then(|i| args.get(i + 1))
    {
        make_packages(&release_library("bench-noop"), Path::new(dir));
        return;
    }
    plugins();
    Criterion::default().configure_from_args().final_summary();
}
