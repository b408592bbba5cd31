//! The scanner against the corpus (`samples`): every positive found as its kind and
//! redacted whole, live too; no negative taken for a secret.
#![allow(missing_docs)]

mod samples;

use samples::{negatives, positives};
use secrets::{Deltas, Scanner};

#[test]
fn the_corpus_has_the_size_the_issue_asks() {
    assert!(positives().len() >= 100, "{}", positives().len());
    assert!(negatives().len() >= 100, "{}", negatives().len());
}

#[test]
fn every_positive_is_found_as_its_kind_and_redacted_whole() {
    let scanner = Scanner::builtin();
    let mut missed = Vec::new();
    for p in positives() {
        match scanner.redact(&p.text) {
            Some((out, found)) => {
                let named = found.iter().any(|f| &*f.kind == p.kind);
                if !named || out.contains(&p.secret) {
                    missed.push(format!(
                        "{}: found {:?} in:\n{}\nredacted:\n{out}",
                        p.kind,
                        found.iter().map(|f| &*f.kind).collect::<Vec<_>>(),
                        p.text
                    ));
                }
            }
            None => missed.push(format!("{}: nothing found in:\n{}", p.kind, p.text)),
        }
    }
    assert!(
        missed.is_empty(),
        "{} missed:\n{}",
        missed.len(),
        missed.join("\n---\n")
    );
}

#[test]
fn no_negative_is_taken_for_a_secret() {
    let scanner = Scanner::builtin();
    let wrong: Vec<String> = negatives()
        .iter()
        .filter_map(|(what, text)| {
            let found = scanner.find(text);
            (!found.is_empty()).then(|| {
                format!(
                    "{what}: {:?} in:\n{text}",
                    found
                        .iter()
                        .map(|f| (&*f.kind, &text[f.start..f.end]))
                        .collect::<Vec<_>>()
                )
            })
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} false positives:\n{}",
        wrong.len(),
        wrong.join("\n---\n")
    );
}

#[test]
fn a_secret_split_across_live_chunks_is_still_found() {
    let scanner = Scanner::builtin();
    for p in positives() {
        // Cut in the middle of the secret itself, and at every 7th byte.
        let middle = p
            .text
            .find(&p.secret)
            .map_or(p.text.len() / 2, |at| at + p.secret.len() / 2);
        for cuts in [
            vec![middle],
            (1..p.text.len()).step_by(7).collect::<Vec<_>>(),
        ] {
            let mut deltas = Deltas::default();
            let mut shown = String::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([p.text.len()]) {
                if !p.text.is_char_boundary(cut) || cut <= from {
                    continue;
                }
                shown.push_str(&deltas.push(&scanner, &p.text[from..cut]).0);
                from = cut;
            }
            shown.push_str(&deltas.finish(&scanner).0);
            assert!(
                !shown.contains(&p.secret),
                "{} leaked live:\n{shown}",
                p.kind
            );
            assert!(shown.contains("[REDACTED "), "{}: {shown}", p.kind);
        }
    }
}
