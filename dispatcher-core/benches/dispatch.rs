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
//!
//! `dispatch --count NAME N` runs one of them N times instead (`--count-rows` lists which
//! can be), on one thread, for
//! `valgrind --tool=callgrind --toggle-collect='*counted*'` to count its instructions
//! (see [`count`]): a figure that repeats exactly, where the time moves with the evening.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group};
use dispatcher_core::ConfirmationPolicy;
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
    let dispatcher = bench_dispatcher();
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
    let floor = Floor::new();
    group.bench_function("g_required_work_floor", |b| {
        b.to_async(&rt).iter_batched(
            || call("toolu_bench", "noop"),
            |tu| floor.call(tu),
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

/// The dispatcher every row calls: the built-ins and the two no-ops, writes
/// auto-approved (so write_file measures the write, not a prompt).
fn bench_dispatcher() -> dispatcher_core::Dispatcher {
    let policy: ConfirmationPolicy = toml::from_str(r#"default = { write = "auto" }"#).unwrap();
    common::dispatcher(
        policy,
        [
            noop("noop", SideEffect::None, true),
            noop("noop_blocking", SideEffect::None, false),
        ],
    )
}

/// Only the work the spec's design asks of a no-op call, with this crate's types and no
/// pipeline around it: its header, a clock read, validation, two events to a subscriber,
/// the output and the result.
struct Floor {
    validator: InputValidator,
    events: tokio::sync::broadcast::Sender<Arc<ToolEvent>>,
    _subscriber: tokio::sync::broadcast::Receiver<Arc<ToolEvent>>,
    session_id: Arc<str>,
    turn_id: Arc<str>,
    tool_name: Arc<str>,
}

impl Floor {
    fn new() -> Floor {
        let validator = InputValidator::compile(
            "noop",
            &noop_definition("noop", SideEffect::None, true).input_schema,
        )
        .unwrap();
        let (events, _subscriber) = tokio::sync::broadcast::channel(EVENT_BUFFER);
        Floor {
            validator,
            events,
            _subscriber,
            session_id: Arc::from("bench"),
            turn_id: Arc::from("turn"),
            tool_name: Arc::from("noop"),
        }
    }

    fn call(&self, ToolUse { id, input, .. }: ToolUse) -> impl Future<Output = ToolResultBlock> {
        let header = Arc::new(CallHeader {
            session_id: self.session_id.clone(),
            principal: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            tool_use_id: Arc::from(id),
            tool_name: self.tool_name.clone(),
            side_effects: Some(SideEffect::None),
            extensions: Default::default(),
        });
        let timestamp_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        assert!(self.validator.is_valid(&input));
        let event = |kind| {
            let _ = self.events.send(Arc::new(ToolEvent {
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
        let block = ToolResultBlock::success(&header.tool_use_id, out.content, out.metadata);
        async move { block }
    }
}

/// The workspace's root, opened as the workspace opens it.
fn open_root(root: &std::path::Path) -> rustix::fd::OwnedFd {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        root,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// `name` in `dir` opened beneath it with `openat2`; where the kernel interface lacks it
/// (valgrind), with `openat` and `O_NOFOLLOW`, as the workspace then opens a plain name.
fn open_beneath(
    dir: &rustix::fd::OwnedFd,
    name: &str,
    flags: rustix::fs::OFlags,
) -> rustix::fd::OwnedFd {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = flags | OFlags::CLOEXEC;
    let beneath = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, name, flags, Mode::empty(), beneath) {
        Err(rustix::io::Errno::NOSYS) => {
            rustix::fs::openat(dir, name, flags | OFlags::NOFOLLOW, Mode::empty())
        }
        other => other,
    }
    .unwrap()
}

/// The system calls of a 4 KB read: open beneath the root, `statx`, `read`, `close`.
fn kernel_read_4k(dir: &rustix::fd::OwnedFd) -> Vec<u8> {
    use rustix::fs::OFlags;
    let fd = open_beneath(
        dir,
        "4k.txt",
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
    );
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
}

/// The system calls of a listing of 20 entries: open, `getdents64` to the end, `close`.
fn kernel_list_20(dir: &rustix::fd::OwnedFd) -> usize {
    use rustix::fs::OFlags;
    let fd = open_beneath(dir, "twenty", OFlags::RDONLY | OFlags::DIRECTORY);
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = rustix::fs::RawDir::new(&fd, &mut buf);
    let mut n = 0usize;
    while let Some(entry) = entries.next() {
        entry.unwrap();
        n += 1;
    }
    n
}

/// The system calls alone (see the crate docs), on the files the tools use.
fn kernel_floors(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    root: &std::path::Path,
) {
    use rustix::fs::{Mode, OFlags};
    let dir = open_root(root);
    group.bench_function("kernel_read_4k", |b| b.iter(|| kernel_read_4k(&dir)));
    group.bench_function("kernel_list_20", |b| b.iter(|| kernel_list_20(&dir)));
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

/// The rows `--count NAME N` counts: the CPU-bound calls and their floors.
const COUNTED: [&str; 6] = [
    "a_inline_noop",
    "g_required_work_floor",
    "d_read_file_4k",
    "kernel_read_4k",
    "e_list_dir_20",
    "kernel_list_20",
];

/// Runs `name` `n` times on a current-thread runtime (no thread hands work to another, so
/// the count repeats exactly), each call inside [`counted`] (or [`counted_now`] for the
/// system calls, which criterion times without a runtime): what callgrind collects with
/// `--toggle-collect='*counted*'` is the calls alone, as criterion times them, all in one
/// `block_on`, their input built and their result dropped outside.
fn count(name: &str, n: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dispatcher = bench_dispatcher();
    let ws = common::workspace();
    let (session, _subscriber) = common::session(&dispatcher, ws.path());
    let floor = Floor::new();
    let dir = open_root(ws.path());
    let tool_use = |tool: &str, input| ToolUse::new("toolu_bench", tool, input);
    let succeeded = |block: ToolResultBlock| assert!(!block.is_error(), "{block:?}");
    rt.block_on(async {
        for _ in 0..n {
            match name {
                "a_inline_noop" => {
                    let tu = call("toolu_bench", "noop");
                    succeeded(counted(|| dispatcher.dispatch(tu, &session)).await);
                }
                "g_required_work_floor" => {
                    let tu = call("toolu_bench", "noop");
                    succeeded(counted(|| floor.call(tu)).await);
                }
                "d_read_file_4k" => {
                    let tu = tool_use("read_file", json!({"path": "4k.txt"}));
                    succeeded(counted(|| dispatcher.dispatch(tu, &session)).await);
                }
                "e_list_dir_20" => {
                    let tu = tool_use("list_dir", json!({"path": "twenty"}));
                    succeeded(counted(|| dispatcher.dispatch(tu, &session)).await);
                }
                "kernel_read_4k" => drop(counted_now(|| kernel_read_4k(&dir))),
                "kernel_list_20" => drop(counted_now(|| kernel_list_20(&dir))),
                other => panic!("--count {other}: not one of {COUNTED:?}"),
            }
        }
    });
}

/// One call, made and awaited to its end, collected by callgrind: made in [`counted_now`]
/// (a call does work before its future's first poll) and polled in [`counted_poll`], the
/// functions `--toggle-collect='*counted*'` names.
async fn counted<F: Future>(call: impl FnOnce() -> F) -> F::Output {
    let mut call = std::pin::pin!(counted_now(call));
    std::future::poll_fn(|cx| counted_poll(call.as_mut(), cx)).await
}

/// Runs `call`: collected by callgrind.
#[inline(never)]
fn counted_now<T>(call: impl FnOnce() -> T) -> T {
    call()
}

/// Polls `call` once: collected by callgrind.
#[inline(never)]
fn counted_poll<F: Future>(
    call: std::pin::Pin<&mut F>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<F::Output> {
    call.poll(cx)
}

criterion_group!(dispatch, benches);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--count-rows") {
        // What can be counted, for whoever counts (xtask's bench), one per line.
        println!("{}", COUNTED.join("\n"));
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--count") {
        let (Some(name), Some(n)) = (args.get(at + 1), args.get(at + 2)) else {
            panic!("usage: dispatch --count NAME N (NAME one of {COUNTED:?})");
        };
        count(name, n.parse().expect("N, a number of calls"));
        return;
    }
    dispatch();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
