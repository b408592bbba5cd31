//! Scaling with the work: 1, 4, 16 and 64 sessions dispatching at once, each sending inline
//! no-op and `read_file` calls (half and half), on the 2-worker runtime the benches use.
//! Reported per call (so throughput is its inverse): it should fall from 1 to 2 sessions
//! (the cores) and stay flat beyond. Also, once per run, the process's resident memory
//! after 10,000 and after 1,000,000 dispatches (printed; target: within 5%).
//!
//! Locks every call still takes: the registry's read lock (shared, never contended by
//! writers on the hot path) and the session's event channel when someone subscribed to it.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dispatcher_core::{Dispatcher, Session, SessionSpec, ToolUse};
use serde_json::json;
use tool_api::SideEffect;

const CALLS_PER_SESSION: usize = 64;

mod common;

fn call(i: usize) -> ToolUse {
    if i.is_multiple_of(2) {
        common::call(format!("tu{i}"), "noop")
    } else {
        ToolUse::new(format!("tu{i}"), "read_file", json!({"path": "small.txt"}))
    }
}

async fn work(dispatcher: Dispatcher, session: Session) {
    for i in 0..CALLS_PER_SESSION {
        let r = dispatcher.dispatch(call(i), &session).await;
        assert!(!r.is_error(), "{r:?}");
    }
}

/// Resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn benches(c: &mut Criterion) {
    let rt = common::runtime();
    let dispatcher = common::dispatcher(
        dispatcher_core::ConfirmationPolicy::default(),
        [common::noop("noop", SideEffect::None, true)],
    );
    let dir = common::workspace();
    let mut group = c.benchmark_group("scale");
    for sessions in [1usize, 4, 16, 64] {
        let opened: Vec<Session> = (0..sessions)
            .map(|n| {
                dispatcher
                    .open_session(SessionSpec::new(format!("s{n}"), dir.path()))
                    .unwrap()
            })
            .collect();
        group.bench_function(format!("sessions_{sessions}_per_call"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    rt.block_on(async {
                        let tasks: Vec<_> = opened
                            .iter()
                            .map(|s| tokio::spawn(work(dispatcher.clone(), s.clone())))
                            .collect();
                        for t in tasks {
                            t.await.unwrap();
                        }
                    });
                    // Per call: the inverse of throughput.
                    total += start.elapsed() / (sessions * CALLS_PER_SESSION) as u32;
                }
                total
            })
        });
    }
    group.finish();

    // Memory: RSS after 10k dispatches, then after 1M.
    let session = dispatcher
        .open_session(SessionSpec::new("soak", dir.path()))
        .unwrap();
    let soak = |n: usize| {
        rt.block_on(async {
            for i in 0..n {
                let _ = dispatcher.dispatch(call(i), &session).await;
            }
        })
    };
    soak(10_000);
    let after_10k = rss_kib();
    let total = if std::env::args().any(|a| a == "--bench") {
        1_000_000
    } else {
        20_000
    };
    soak(total - 10_000);
    let after = rss_kib();
    println!(
        "scale/rss: {after_10k} KiB after 10,000 dispatches, {after} KiB after {total}: {:+.1}%",
        (after as f64 - after_10k as f64) * 100.0 / after_10k as f64
    );
}

criterion_group!(scale, benches);
criterion_main!(scale);
