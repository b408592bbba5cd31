//! What scanning a tool's output for secrets costs, per MB, beside its floor (copying the
//! same MB, which any redaction that passes text on does), and the scanner's recall and
//! false positives on the corpus the tests use: `target/criterion/secrets/corpus.json`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use secrets::Scanner;

#[path = "../tests/samples/mod.rs"]
mod samples;

/// About 1 MB of what tools return: logs, JSON listings, a lockfile, source, shell
/// output (the corpus's negatives, which are built to look like secrets, among them).
fn output(with_secrets: bool) -> String {
    let negatives = samples::negatives();
    let positives = samples::positives();
    let mut text = String::with_capacity(1 << 20);
    let mut i = 0usize;
    while text.len() < 1 << 20 {
        text.push_str(&format!(
            "2026-11-29T21:{:02}:{:02}Z INFO request {} served in {} ms: GET /api/v1/items?page={}\n",
            i % 60,
            (i * 7) % 60,
            i,
            i % 97,
            i % 13
        ));
        text.push_str(&negatives[i % negatives.len()].1);
        text.push('\n');
        if with_secrets && i.is_multiple_of(10) {
            text.push_str(&positives[i / 10 % positives.len()].text);
            text.push('\n');
        }
        i += 1;
    }
    text
}

fn bench(c: &mut Criterion) {
    let scanner = Scanner::builtin();
    let clean = output(false);
    let mixed = output(true);
    let mut g = c.benchmark_group("secrets");
    g.throughput(Throughput::Bytes(clean.len() as u64));
    g.bench_function("copy_1mb", |b| {
        b.iter(|| std::hint::black_box(clean.clone()))
    });
    g.bench_function("scan_1mb_clean", |b| {
        b.iter(|| std::hint::black_box(scanner.redact(&clean)))
    });
    g.bench_function("scan_1mb_with_secrets", |b| {
        b.iter(|| std::hint::black_box(scanner.redact(&mixed)))
    });
    g.finish();
    corpus(&scanner, &mixed, &clean);
}

/// Recall and false positives on the corpus, written beside criterion's estimates.
fn corpus(scanner: &Scanner, mixed: &str, clean: &str) {
    let positives = samples::positives();
    let found = positives
        .iter()
        .filter(|p| {
            scanner.redact(&p.text).is_some_and(|(out, f)| {
                !out.contains(&p.secret) && f.iter().any(|f| &*f.kind == p.kind)
            })
        })
        .count();
    let negatives = samples::negatives();
    let wrong = negatives
        .iter()
        .filter(|(_, t)| !scanner.find(t).is_empty())
        .count();
    let figures = serde_json::json!({
        "positives": positives.len(),
        "found": found,
        "negatives": negatives.len(),
        "false_positives": wrong,
        "kinds": scanner.kinds().count(),
        "bytes": clean.len(),
        "secrets_in_mixed": scanner.find(mixed).len(),
    });
    // target/release/deps/scan-… -> target/criterion/secrets
    let exe = std::env::current_exe().unwrap();
    let dir = exe.ancestors().nth(3).unwrap().join("criterion/secrets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("corpus.json"),
        serde_json::to_vec_pretty(&figures).unwrap(),
    )
    .unwrap();
    println!("secrets/corpus: {figures}");
}

criterion_group!(benches, bench);
criterion_main!(benches);
