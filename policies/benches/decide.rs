//! What a policy decision adds to a call: an inline no-op (a three-property schema) through
//! the whole pipeline with the tables alone (the floor), with one policy, and with 200
//! policies of which the call's tool meets 20 (a permit for all, nine forbids on other
//! callers, ten on this tool's arguments; the rest are about 190 other tools): with the
//! arguments of an earlier call (its verdict is kept) and with a new value of the argument
//! the policies read at every call (judged each time). A last row has all 200 apply to the
//! call and read its arguments, each call new: the worst case, reported beside.
//!
//! Target: under 2 µs added with 200 policies (`cargo xtask bench` reads the medians).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group};
use dispatcher_core::{ClassModes, ConfirmationPolicy, Dispatcher, SessionSpec, ToolUse};
use policies::{Options, Policies, Source};
use serde_json::json;
use tool_api::{SideEffect, ToolDefinition};

/// The other tools the 200 policies are about.
const OTHERS: usize = 190;

fn definition(name: &str) -> ToolDefinition {
    ToolDefinition::new(
        name,
        "Does nothing.",
        SideEffect::None,
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "integer"},
                "c": {"type": "boolean"}
            },
            "required": ["a"]
        }),
    )
    .inline()
}

fn dispatcher() -> Dispatcher {
    let d = Dispatcher::builder()
        .policy(ConfirmationPolicy {
            default: ClassModes::all_auto(),
            ..ConfirmationPolicy::default()
        })
        .build();
    d.register(tool_api::testing::noop(definition("noop")))
        .unwrap();
    for i in 0..OTHERS {
        d.register(tool_api::testing::noop(definition(&format!("tool_{i}"))))
            .unwrap();
    }
    d
}

/// 200 policies, 20 of which the no-op's calls meet.
fn two_hundred() -> String {
    let mut text = String::from("permit(principal, action, resource);\n");
    for i in 0..9 {
        writeln!(
            text,
            "forbid(principal == Caller::\"user_{i}\", action, resource);"
        )
        .unwrap();
    }
    for i in 0..10 {
        writeln!(
            text,
            "forbid(principal, action == Action::\"noop\", resource) when {{ context.arguments.a == \"v{i}\" }};"
        )
        .unwrap();
    }
    for i in 0..180 {
        writeln!(
            text,
            "forbid(principal, action == Action::\"tool_{i}\", resource) when {{ context.arguments.a like \"*drop*\" && context.arguments has b && context.arguments.b > {i} }};"
        )
        .unwrap();
    }
    text
}

/// 200 policies that all apply to the call and read its arguments.
fn all_apply() -> String {
    let mut text = String::from("permit(principal, action, resource);\n");
    for i in 0..199 {
        writeln!(
            text,
            "forbid(principal, action == Action::\"noop\", resource) when {{ context.arguments.a == \"v{i}\" || (context.arguments has b && context.arguments.b == {}) }};",
            1000 + i
        )
        .unwrap();
    }
    text
}

fn load(d: &Dispatcher, dir: &std::path::Path, name: &str, text: &str) -> Arc<Policies> {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let tools = d.all_definitions();
    let policies = Policies::load(&[Source::file(&file)], Options::default(), &tools, &[]).unwrap();
    Arc::new(policies)
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let d = dispatcher();
    let dir = tempfile::tempdir().unwrap();
    let session = d
        .open_session(SessionSpec::new("bench", dir.path()))
        .unwrap();
    let one = load(
        &d,
        dir.path(),
        "one.cedar",
        "permit(principal, action, resource);",
    );
    let many = load(&d, dir.path(), "two_hundred.cedar", &two_hundred());
    let all = load(&d, dir.path(), "all.cedar", &all_apply());
    // (row, policies, a new value of the argument they read at every call).
    let rows = [
        ("tables_inline_noop", None, false),
        ("policies_1_inline_noop", Some(one), false),
        ("policies_200_inline_noop", Some(many.clone()), false),
        ("policies_200_new_arguments_inline_noop", Some(many), true),
        (
            "policies_200_all_apply_new_arguments_inline_noop",
            Some(all),
            true,
        ),
    ];
    let counter = std::sync::atomic::AtomicU64::new(0);
    let mut group = c.benchmark_group("policies");
    for (name, rules, fresh) in rows {
        d.set_rules(rules.map(|r| r as Arc<dyn dispatcher_core::CallRules>));
        // Checked once, as a server's first call of the tool is.
        let first = rt.block_on(d.dispatch(call("x"), &session));
        assert!(!first.is_error(), "{name}: {}", first.text());
        let input = || {
            if fresh {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                call(&format!("x{n}"))
            } else {
                call("x")
            }
        };
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                input,
                |tu| d.dispatch(tu, &session),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn call(a: &str) -> ToolUse {
    ToolUse::new("toolu_bench", "noop", json!({"a": a, "b": 1, "c": true}))
}

criterion_group!(group, benches);

fn main() {
    group();
    Criterion::default().configure_from_args().final_summary();
}
