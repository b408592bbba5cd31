//! Overhead of the streaming scheduler: a [`Batch`] fed 64 mixed no-op calls (every fourth
//! one concurrency-unsafe, so the batch runs in 16 safe groups split by 16 unsafe calls),
//! against dispatching the same 64 calls directly, one after another.
//!
//! `direct_64` is the floor (the pipeline alone); `streamed_batch_64 - direct_64` is what
//! the scheduler costs (classification, ordering, bookkeeping, results in call order).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dispatcher_core::policy::ClassModes;
use dispatcher_core::{ConfirmationPolicy, Dispatcher, DispatcherConfig, SessionSpec, ToolUse};
use serde_json::json;
use tool_api::{SideEffect, ToolDefinition, ToolFactory};

fn noop(name: &str, class: SideEffect) -> Arc<dyn ToolFactory> {
    tool_api::testing::noop(
        ToolDefinition::new(
            name,
            "Does nothing.",
            class,
            json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        )
        .inline(),
    )
}

fn calls() -> Vec<ToolUse> {
    (0..64)
        .map(|i| {
            let name = if i % 4 == 3 {
                "noop_write"
            } else {
                "noop_read"
            };
            ToolUse::new(format!("toolu_{i}"), name, json!({"a": "x"}))
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dispatcher = Dispatcher::builder()
        .config(DispatcherConfig {
            max_concurrency: 64,
            ..DispatcherConfig::default()
        })
        .policy(ConfirmationPolicy {
            default: ClassModes::all_auto(),
            ..ConfirmationPolicy::default()
        })
        .build();
    dispatcher
        .register(noop("noop_read", SideEffect::Read))
        .unwrap();
    dispatcher
        .register(noop("noop_write", SideEffect::Write))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = dispatcher
        .open_session(SessionSpec::new("bench", dir.path()))
        .unwrap();
    let _subscriber = session.subscribe();

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
