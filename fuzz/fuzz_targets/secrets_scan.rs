//! The secret scanner on any text a tool may return (`secrets::Scanner`), whole and as
//! live chunks (`secrets::Deltas`, cut where the input's NUL bytes fall): it never
//! panics; each finding lies on char boundaries, in order, without overlap; and the
//! chunks, shown one after another, show no secret more often than the whole text
//! redacted does (a secret split across chunks is still found).
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

use std::sync::OnceLock;

use secrets::{Deltas, Scanner};

fn scanner() -> &'static Scanner {
    static SCANNER: OnceLock<Scanner> = OnceLock::new();
    SCANNER.get_or_init(Scanner::builtin)
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let scanner = scanner();
    let text: String = input.replace('\0', "");
    let found = scanner.find(&text);
    let mut last = 0;
    for f in &found {
        assert!(
            f.start >= last && f.start < f.end && f.end <= text.len(),
            "{found:?}"
        );
        assert!(text.is_char_boundary(f.start) && text.is_char_boundary(f.end));
        last = f.end;
    }
    let secrets: Vec<&str> = found.iter().map(|f| &text[f.start..f.end]).collect();
    let redacted = scanner
        .redact(&text)
        .map_or_else(|| text.clone(), |(r, _)| r);
    let mut deltas = Deltas::default();
    let mut shown = String::new();
    for chunk in input.split('\0') {
        shown.push_str(&deltas.push(scanner, chunk).0);
    }
    shown.push_str(&deltas.finish(scanner).0);
    // The same text may also hold a found secret where it is not one (a word beside no
    // secret's name): live output shows each no more often than the whole text redacted.
    for s in &secrets {
        if s.len() >= 16 {
            assert!(
                shown.matches(s).count() <= redacted.matches(s).count(),
                "{s:?} shown live in {shown:?}, redacted whole as {redacted:?}"
            );
        }
    }
});
