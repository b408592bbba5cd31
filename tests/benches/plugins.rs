//! Plugin overhead: (1) an inline no-op tool dispatched from a loaded plugin vs the same
//! tool built in (target: the plugin path adds at most 0.5 µs median), and the same plugin
//! isolated in a worker process (`plugin_isolated_noop`: one socket round trip, no process
//! or thread started per call); (2) loading a directory of 50 plugin packages, checksums
//! included, in process, against the floor of `dlopen` plus entry-point lookup of the same
//! 50 fresh libraries (`dlopen_50_libraries`; target: loading at most 2× that).
//!
//! The 50 packages are 50 distinct libraries: copies of the `bench-noop` fixture whose tool
//! name suffix `000` is patched to `001`…`050` in the library's bytes. Every sample loads
//! them from fresh paths, so each load really opens 50 libraries (abi_stable never unloads).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dispatcher_core::{Dispatcher, SessionSpec, ToolUse};
use plugin_host::{Isolation, PluginHost, WorkerSettings};
use serde_json::json;
use tool_api::{SideEffect, ToolDefinition};
use toolhost_tests::{package_library, release_library};

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
    let library = release_library("bench-noop");
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
    group.bench_function("builtin_inline_noop", |b| {
        b.to_async(&rt).iter_batched(
            || call("builtin_noop"),
            |tu| dispatcher.dispatch(tu, &session),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("plugin_inline_noop", |b| {
        b.to_async(&rt).iter_batched(
            || call("bench_noop_suffix_000"),
            |tu| dispatcher.dispatch(tu, &session),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("plugin_isolated_noop", |b| {
        b.to_async(&rt).iter_batched(
            || call("bench_noop_suffix_000"),
            |tu| isolated.dispatch(tu, &isolated_session),
            BatchSize::SmallInput,
        )
    });
    group.finish();

    // Load 50 distinct packages from fresh paths every sample.
    let original = std::fs::read(&library).unwrap();
    let staging = tempfile::tempdir().unwrap();
    let file_name = library.file_name().unwrap().to_owned();
    let copies: Vec<_> = (1..=50)
        .map(|n| {
            let dir = staging.path().join(format!("lib{n:03}"));
            std::fs::create_dir_all(&dir).unwrap();
            let lib = dir.join(&file_name);
            patched_copy(&original, n, &lib);
            lib
        })
        .collect();
    let mut group = c.benchmark_group("plugin_load");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    // The floor: `dlopen` and the entry-point lookup of the same 50 fresh libraries
    // (abi_stable's `lib_header_from_path`), nothing else.
    group.bench_function("dlopen_50_libraries", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let libs: Vec<_> = copies
                    .iter()
                    .enumerate()
                    .map(|(n, lib)| {
                        let fresh = dir
                            .path()
                            .join(format!("{n:03}-{}", file_name.to_string_lossy()));
                        std::fs::copy(lib, &fresh).unwrap();
                        fresh
                    })
                    .collect();
                let start = Instant::now();
                for lib in &libs {
                    abi_stable::library::lib_header_from_path(lib).unwrap();
                }
                total += start.elapsed();
                std::mem::forget(dir);
            }
            total
        })
    });
    group.bench_function("load_50_packages", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                for (n, lib) in copies.iter().enumerate() {
                    package_library(lib, dir.path(), &format!("pkg{n:03}"));
                }
                // Cold: a fresh cache, so no digest is remembered.
                let cold_cache = tempfile::tempdir().unwrap();
                let d = Dispatcher::new();
                let start = Instant::now();
                let report = PluginHost::new([dir.path()])
                    .isolation(Isolation::InProcess)
                    .cache_dir(cold_cache.path())
                    .load_into(&d);
                total += start.elapsed();
                assert_eq!(report.loaded().count(), 50, "{:?}", report.lines());
                std::mem::forget(dir); // the libraries stay mapped; keep their files
            }
            total
        })
    });
    group.finish();
}

criterion_group!(plugins, benches);
criterion_main!(plugins);
