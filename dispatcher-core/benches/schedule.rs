//! Overhead of the streaming scheduler: a [`Batch`] fed 64 mixed no-op calls (every fourth
//! one concurrency-unsafe, so the batch runs in 16 safe groups split by 16 unsafe calls),
//! against dispatching the same 64 calls directly, one after another.
//!
//! `direct_64` is the floor (the pipeline alone); `streamed_batch_64 - direct_64` is what
//! the scheduler costs (classification, ordering, bookkeeping, results in call order).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dispatcher_core::ClassModes;
use dispatcher_core::{ConfirmationPolicy, ToolUse};
use tool_api::SideEffect;

mod common;

fn calls() -> Vec<ToolUse> {
    (0..64)
        .map(|i| {
            let name = if i % 4 == 3 {
                "noop_write"
            } else {
                "noop_read"
            };
            common::call(format!("toolu_{i}"), name)
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let rt = common::runtime();
    let dispatcher = common::dispatcher(
        ConfirmationPolicy {
            default: ClassModes::all_auto(),
            ..ConfirmationPolicy::default()
        },
        [
            common::noop("noop_read", SideEffect::Read, true),
            common::noop("noop_write", SideEffect::Write, true),
        ],
    );
    let dir = common::workspace();
    let (session, _subscriber) = common::session(&dispatcher, dir.path());

    let mut group = c.benchmark_group("schedule");
    group.bench_function("direct_64", |b| {
        b.to_async(&rt).iter_batched(
            calls,
            |calls| async {
                let mut out = Vec::with_capacity(calls.len());
                for call in calls {
                    out.push(dispatcher.dispatch(call, &session).await);
                }
                out
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("streamed_batch_64", |b| {
        b.to_async(&rt).iter_batched(
            calls,
            |calls| async {
                let batch = dispatcher.batch(&session);
                for call in calls {
                    batch.push(call);
                }
                batch.finish().await
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(schedule, benches);
criterion_main!(schedule);
