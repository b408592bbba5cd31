//! `fuzz_target!`, as each target declares itself: libFuzzer's entry point when cargo-fuzz
//! builds it (`--cfg fuzzing`, instrumented, on nightly), and otherwise (the workspace's own
//! build, on stable) a `main` that runs the same body once on each file named on its command
//! line, which is how `fuzz/tests/seeds.rs` replays the seed corpora.
//!
//! Each target is `#![cfg(not(test))]`: `cargo test --bins` (and cargo-nextest's) builds
//! every binary with the test harness, which would run again the unit tests of the sources
//! a target compiles in; as a test binary a target is empty.

use std::path::PathBuf;

/// Declares the target: `fuzz_target!(|data: &[u8]| { … })` or `fuzz_target!(|text: &str| { … })`
/// (an input that is not UTF-8 is skipped, as libFuzzer's own macro does).
macro_rules! fuzz_target {
    (|$data:ident: &[u8]| $body:block) => {
        #[cfg(fuzzing)]
        libfuzzer_sys::fuzz_target!(|$data: &[u8]| $body);

        #[cfg(not(fuzzing))]
        fn main() {
            $crate::target::replay(|$data: &[u8]| $body);
        }
    };
    (|$text:ident: &str| $body:block) => {
        #[cfg(fuzzing)]
        libfuzzer_sys::fuzz_target!(|$text: &str| $body);

        #[cfg(not(fuzzing))]
        fn main() {
            $crate::target::replay(|data: &[u8]| {
                if let Ok($text) = std::str::from_utf8(data) {
                    $body
                }
            });
        }
    };
}

/// Runs `check` once on the contents of every file named in the arguments (options, such
/// as the `--list` of a test runner, are not inputs), saying which before each.
#[cfg_attr(fuzzing, allow(dead_code))]
pub fn replay(check: impl Fn(&[u8])) {
    let files = std::env::args_os()
        .skip(1)
        .map(PathBuf::from)
        .filter(|arg| !arg.to_string_lossy().starts_with('-'));
    for file in files {
        let data = std::fs::read(&file)
            .unwrap_or_else(|e| panic!("cannot read the input {}: {e}", file.display()));
        eprintln!("replaying {}", file.display());
        check(&data);
    }
}
