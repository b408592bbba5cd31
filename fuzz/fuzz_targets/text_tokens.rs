//! The text model's tokenizer (text-encoder's `wordpiece.rs`, compiled in from its
//! source) on any text: what it reads is a mounted server's tool descriptions and a
//! client's queries. Input: extra vocabulary pieces, one a line, then a NUL byte, then the
//! text (no NUL: all text, the base vocabulary alone). Any text is read without a panic; a
//! sequence is `[CLS]`, pieces of the vocabulary, `[SEP]`, never longer than asked; fewer
//! words asked for are the first of more; words are unaccented and hold no space or control
//! character; and where no word was unknown and nothing was cut, the
//! pieces spell out the words, in order.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../text-encoder/src/wordpiece.rs"]
mod wordpiece;

/// What `wordpiece.rs` names as `crate::EncoderError` (the vocabulary's error).
#[derive(Debug)]
#[allow(dead_code)]
enum EncoderError {
    Model {
        path: std::path::PathBuf,
        why: String,
    },
}

/// A vocabulary as BERT's begins (special tokens), with whole words, pieces that go on a
/// word (`##`), accented and CJK entries.
const BASE: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "make", "a", "new", "folder", "un", "##aff", "##able",
    "read", "_", "file", "##s", "##e", "e", "cafe", ",", ".", "!", "'", "中", "文", "x", "##x",
    "ab", "##c", "##b", "ß", "##ß",
];

/// How many tokens a sequence may hold, asked of each text.
const LONGEST: [usize; 4] = [2, 3, 8, 256];

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let (extra, text) = match input.split_once('\0') {
        Some((extra, text)) => (extra, text),
        None => ("", input),
    };
    let mut lines: Vec<&str> = BASE.to_vec();
    lines.extend(extra.lines().take(64));
    let vocabulary = wordpiece::Vocabulary::parse(&lines.join("\n"), "vocab.txt".as_ref())
        .expect("the base vocabulary has the special tokens");
    // An id is its line's number.
    let piece_of = |id: u32| -> &str { lines[id as usize] };

    let most = wordpiece::words(text, usize::MAX);
    for w in &most {
        assert!(!w.is_empty(), "an empty word in {most:?}");
        assert!(
            !w.chars().any(|c| c.is_whitespace() || c.is_control()),
            "a word with a space or control character: {w:?}"
        );
        assert!(
            !w.chars()
                .any(unicode_normalization::char::is_combining_mark),
            "an accent left on {w:?}"
        );
    }
    for n in [0, 1, 2, 7] {
        let few = wordpiece::words(text, n);
        assert_eq!(
            few[..],
            most[..n.min(most.len())],
            "words({n}) is not the first {n} of all"
        );
    }

    for longest in LONGEST {
        let ids = vocabulary.encode(text, longest);
        assert!(ids.len() >= 2, "no [CLS]/[SEP] around {ids:?}");
        assert!(
            ids.len() <= longest,
            "{} tokens, {longest} asked",
            ids.len()
        );
        assert_eq!(ids[0], vocabulary.cls);
        assert_eq!(ids[ids.len() - 1], vocabulary.sep);
        assert!(
            ids.iter().all(|&id| (id as usize) < lines.len()),
            "an id past the vocabulary in {ids:?}"
        );
        let inner = &ids[1..ids.len() - 1];
        let unknown = inner.iter().any(|&id| piece_of(id) == "[UNK]");
        let cut = ids.len() == longest;
        if unknown || cut || lines.len() != BASE.len() {
            // Extra lines may repeat a piece (its id is then the later line), so spelling
            // is checked on the base vocabulary alone.
            continue;
        }
        let spelled: String = inner
            .iter()
            .map(|&id| piece_of(id).trim_start_matches("##"))
            .collect();
        assert_eq!(
            spelled,
            most.concat(),
            "the pieces of {text:?} do not spell its words"
        );
    }
});
