//! Per-call overhead of `Dispatcher::dispatch`.
//!
//! (a) an inline no-op `none` tool with a 3-property schema, one event subscriber attached;
//! (b) the same tool on the blocking path; (c) `dispatch_batch` of 4 and 64 such calls;
//! (d) `read_file` of a 4 KB file, (e) `list_dir` of 20 entries, both inline within the file
//! budget, and (f) `write_file` of 4 KB (off-thread: a write syncs to disk). Target for
//! (a): at most 1 µs median.
//!
//! The `kernel_*` rows are the system calls (d), (e) and (f) cannot do without, alone and
//! on the same files: `openat2` beneath the workspace, `statx`, `read`, `close` for a read;
//! `openat2`, `getdents64` to the end, `close` for a listing; a temporary file created,
//! written, synced (or not) and renamed over the target for a write. They show what part
//! of each call is the kernel's on this machine, and so how low its ratio to (a) can go.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dispatcher_core::DecidedBy;
use dispatcher_core::EVENT_BUFFER;
use dispatcher_core::SideEffectRecord;
use dispatcher_core::schema::InputValidator;
use dispatcher_core::{CallHeader, EventKind, ToolEvent, ToolResultBlock, ToolUse};
use serde_json::json;
use tool_api::{SideEffect, ToolOutput};

mod common;

use common::{call, noop, noop_definition};

fn benches(c: &mut Criterion) {
    let rt = common::runtime();
    // Writes are auto-approved, so write_file measures the write, not a prompt.
    let policy: dispatcher_core::ConfirmationPolicy =
        toml::from_str(r#"default = { write = "auto" }"#).unwrap();
    let dispatcher = common::dispatcher(
        policy,
        [
            noop("noop", SideEffect::None, true),
            noop("noop_blocking", SideEffect::None, false),
        ],
    );
    let dir = common::workspace();
    let (session, _subscriber) = common::session(&dispatcher, dir.path());

    let mut group = c.benchmark_group("dispatch");
    group.bench_function("a_inline_noop", |b| {
        b.to_async(&rt).iter_batched(
            || call("toolu_bench", "noop"),
            |tu| dispatcher.dispatch(tu, &session),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("b_blocking_noop", |b| {
        b.to_async(&rt).iter_batched(
            || call("toolu_bench", "noop_blocking"),
            |tu| dispatcher.dispatch(tu, &session),
            BatchSize::SmallInput,
        )
    });
    for n in [4usize, 64] {
        group.bench_function(format!("c_batch_{n}_inline_noop"), |b| {
            b.to_async(&rt).iter_batched(
                || {
                    (0..n)
                        .map(|_| call("toolu_bench", "noop"))
                        .collect::<Vec<_>>()
                },
                |calls| dispatcher.dispatch_batch(calls, &session),
                BatchSize::SmallInput,
            )
        });
    }
    group.bench_function("d_read_file_4k", |b| {
        b.to_async(&rt).iter_batched(
            || ToolUse::new("toolu_bench", "read_file", json!({"path": "4k.txt"})),
            |tu| async { drop(dispatcher.dispatch(tu, &session).await) },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("e_list_dir_20", |b| {
        b.to_async(&rt).iter_batched(
            || ToolUse::new("toolu_bench", "list_dir", json!({"path": "twenty"})),
            |tu| async { drop(dispatcher.dispatch(tu, &session).await) },
            BatchSize::SmallInput,
        )
    });
    let floor_validator = InputValidator::compile(
        "noop",
        &noop_definition("noop", SideEffect::None, true).input_schema,
    )
    .unwrap();
    let (floor_events, _floor_subscriber) =
        tokio::sync::broadcast::channel::<Arc<ToolEvent>>(EVENT_BUFFER);
    let (session_id, turn_id, tool_name): (Arc<str>, Arc<str>, Arc<str>) =
        (Arc::from("bench"), Arc::from("turn"), Arc::from("noop"));
    group.bench_function("g_required_work_floor", |b| {
        b.to_async(&rt).iter_batched(
            || call("toolu_bench", "noop"),
            |ToolUse { id, input, .. }| {
                let header = Arc::new(CallHeader {
                    session_id: session_id.clone(),
                    principal: session_id.clone(),
                    turn_id: turn_id.clone(),
                    tool_use_id: Arc::from(id),
                    tool_name: tool_name.clone(),
                    side_effects: Some(SideEffect::None),
                });
                let timestamp_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                assert!(floor_validator.is_valid(&input));
                let event = |kind| {
                    let _ = floor_events.send(Arc::new(ToolEvent {
                        kind,
                        call: header.clone(),
                        timestamp_ms,
                    }));
                };
                event(EventKind::Called {
                    queued_ms: 0.0,
                    authorized_by: DecidedBy::Policy {
                        rule: "tool_confirmation.default.none".into(),
                    },
                });
                let out = ToolOutput::text("ok");
                drop(input);
                event(EventKind::Completed {
                    duration_ms: 0.0,
                    record: SideEffectRecord::default(),
                });
                let block =
                    ToolResultBlock::success(&header.tool_use_id, out.content, out.metadata);
                async move { block }
            },
            BatchSize::SmallInput,
        )
    });
    let content = "y".repeat(4096);
    group.bench_function("f_write_file_4k", |b| {
        b.to_async(&rt).iter_batched(
            || {
                ToolUse::new(
                    "toolu_bench",
                    "write_file",
                    json!({"path": "out.txt", "content": content}),
                )
            },
            |tu| dispatcher.dispatch(tu, &session),
            BatchSize::SmallInput,
        )
    });
    kernel_floors(&mut group, dir.path());
    group.finish();
}

/// The system calls alone (see the crate docs), on the files the tools use.
fn kernel_floors(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    root: &std::path::Path,
) {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let dir = rustix::fs::open(
        root,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    let beneath = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    group.bench_function("kernel_read_4k", |b| {
        b.iter(|| {
            let fd = rustix::fs::openat2(
                &dir,
                "4k.txt",
                OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
                beneath,
            )
            .unwrap();
            let st = rustix::fs::statx(
                &fd,
                "",
                rustix::fs::AtFlags::EMPTY_PATH,
                rustix::fs::StatxFlags::ALL,
            )
            .unwrap();
            let mut buf = vec![0u8; usize::try_from(st.stx_size).unwrap()];
            let n = rustix::io::read(&fd, &mut buf[..]).unwrap();
            buf.truncate(n);
            buf
        })
    });
    group.bench_function("kernel_list_20", |b| {
        b.iter(|| {
            let fd = rustix::fs::openat2(
                &dir,
                "twenty",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                beneath,
            )
            .unwrap();
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
            let mut entries = rustix::fs::RawDir::new(&fd, &mut buf);
            let mut n = 0usize;
            while let Some(entry) = entries.next() {
                entry.unwrap();
                n += 1;
            }
            n
        })
    });
    let content = vec![b'y'; 4096];
    for (name, sync) in [
        ("kernel_write_4k_synced", true),
        ("kernel_write_4k_unsynced", false),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let fd = rustix::fs::openat(
                    &dir,
                    ".out.txt.tmp",
                    OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o644),
                )
                .unwrap();
                rustix::io::write(&fd, &content).unwrap();
                if sync {
                    rustix::fs::fsync(&fd).unwrap();
                }
                drop(fd);
                rustix::fs::renameat(&dir, ".out.txt.tmp", &dir, "kernel-out.txt").unwrap();
            })
        });
    }
}

criterion_group!(dispatch, benches);
criterion_main!(dispatch);
