//! Text to token ids as an uncased BERT model was trained on them: the text cleaned,
//! lower-cased, its accents taken off, split at white space and punctuation, and each word
//! split into the longest pieces its vocabulary holds (WordPiece, `##` before a piece that
//! goes on a word).

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization as _;
use unicode_normalization::char::is_combining_mark;

use crate::EncoderError;

/// A word longer than this (in characters) is one unknown token, as BERT's tokenizer has it.
const LONGEST_WORD: usize = 100;

/// A model's vocabulary (`vocab.txt`: one piece a line, its id the line's number) and the
/// ids of the tokens a sequence needs.
pub(crate) struct Vocabulary {
    ids: HashMap<String, u32>,
    pub(crate) cls: u32,
    pub(crate) sep: u32,
    unknown: u32,
}

impl Vocabulary {
    /// The vocabulary in `text` (`vocab.txt`), read from `path` (for errors).
    pub(crate) fn parse(text: &str, path: &std::path::Path) -> Result<Vocabulary, EncoderError> {
        let ids: HashMap<String, u32> = text
            .lines()
            .enumerate()
            .map(|(i, piece)| (piece.to_owned(), i as u32))
            .collect();
        let id = |token: &str| {
            ids.get(token).copied().ok_or_else(|| EncoderError::Model {
                path: path.to_owned(),
                why: format!("the vocabulary has no {token} token: not a BERT vocabulary"),
            })
        };
        Ok(Vocabulary {
            cls: id("[CLS]")?,
            sep: id("[SEP]")?,
            unknown: id("[UNK]")?,
            ids,
        })
    }

    /// The pieces that are whole words (no `##`, no special token, letters and digits
    /// only), with their ids.
    pub(crate) fn whole_words(&self) -> impl Iterator<Item = (&str, u32)> {
        self.ids
            .iter()
            .filter(|(piece, _)| !piece.is_empty() && piece.chars().all(char::is_alphanumeric))
            .map(|(piece, &id)| (piece.as_str(), id))
    }

    /// `piece`'s id.
    pub(crate) fn id(&self, piece: &str) -> Option<u32> {
        self.ids.get(piece).copied()
    }

    /// How many pieces the vocabulary holds.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// `text` as token ids between `[CLS]` and `[SEP]`, at most `longest` in all (a longer
    /// text is cut, as the model was trained).
    pub(crate) fn encode(&self, text: &str, longest: usize) -> Vec<u32> {
        let mut ids = vec![self.cls];
        let room = longest.saturating_sub(1);
        // Each word is a piece at least: more words than there is room for are not read
        // (a hostile server's megabyte of description costs no more than a sentence).
        for word in words(text, room) {
            self.pieces(&word, &mut ids);
            if ids.len() >= room {
                ids.truncate(room);
                break;
            }
        }
        ids.push(self.sep);
        ids
    }

    /// The longest pieces of the vocabulary that make up `word`, first to last; a word
    /// that no pieces make up is one unknown token.
    fn pieces(&self, word: &str, into: &mut Vec<u32>) {
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        if chars.len() > LONGEST_WORD {
            into.push(self.unknown);
            return;
        }
        let had = into.len();
        let mut piece = String::with_capacity(word.len() + 2);
        let mut start = 0;
        while start < chars.len() {
            let mut end = chars.len();
            let found = loop {
                if end == start {
                    break None;
                }
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                let to = chars.get(end).map_or(word.len(), |c| c.0);
                piece.push_str(&word[chars[start].0..to]);
                if let Some(&id) = self.ids.get(piece.as_str()) {
                    break Some(id);
                }
                end -= 1;
            };
            match found {
                Some(id) => into.push(id),
                None => {
                    into.truncate(had);
                    into.push(self.unknown);
                    return;
                }
            }
            start = end;
        }
    }
}

/// The first `most` words of `text` as an uncased BERT model reads them: control
/// characters dropped, lower-cased, accents taken off, split at white space, each
/// punctuation mark and each CJK ideograph a word of its own.
pub(crate) fn words(text: &str, most: usize) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let end = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    for c in text.chars() {
        if words.len() >= most {
            words.truncate(most);
            return words;
        }
        if c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
            continue;
        }
        if c.is_whitespace() {
            end(&mut word, &mut words);
            continue;
        }
        if is_cjk(c) {
            end(&mut word, &mut words);
            words.push(c.to_string());
            continue;
        }
        for lower in c.to_lowercase() {
            for d in std::iter::once(lower).nfd() {
                if is_combining_mark(d) {
                    continue;
                }
                if is_punctuation(d) {
                    end(&mut word, &mut words);
                    words.push(d.to_string());
                } else {
                    word.push(d);
                }
            }
        }
    }
    end(&mut word, &mut words);
    words.truncate(most);
    words
}

/// Punctuation as BERT's tokenizer splits at it: every ASCII mark that is no letter, digit
/// or space (`$`, `+`, `^` and `` ` `` among them), and the punctuation blocks beyond ASCII
/// (Latin-1's marks, General Punctuation, CJK's and the full-width forms').
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c as u32,
            0xA1 | 0xA7 | 0xAB | 0xB6 | 0xB7 | 0xBB | 0xBF
            | 0x2010..=0x2027 | 0x2030..=0x205E
            | 0x3001..=0x3003 | 0x3008..=0x3011 | 0x3014..=0x301F
            | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF40 | 0xFF5B..=0xFF65)
}

/// The CJK ideographs, each a word of its own for BERT.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary() -> Vocabulary {
        let pieces = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "make", "a", "new", "folder", "un", "##aff",
            "##able", "cafe", ",", "!", "read", "_", "file", "中",
        ];
        Vocabulary::parse(&pieces.join("\n"), std::path::Path::new("vocab.txt")).unwrap()
    }

    #[test]
    fn words_are_lower_cased_unaccented_and_split_at_punctuation() {
        let table: [(&str, &[&str]); 5] = [
            ("Make a NEW folder", &["make", "a", "new", "folder"]),
            (
                "Café, s'il vous plaît!",
                &["cafe", ",", "s", "'", "il", "vous", "plait", "!"],
            ),
            ("read_file\tx\u{0}y", &["read", "_", "file", "xy"]),
            ("中文 text", &["中", "文", "text"]),
            ("  \n ", &[]),
        ];
        for (text, expected) in table {
            assert_eq!(words(text, 100), expected, "{text:?}");
        }
    }

    #[test]
    fn words_split_into_the_longest_pieces_and_unknown_words_are_one_token() {
        let v = vocabulary();
        let table: [(&str, &[u32]); 4] = [
            ("make a new folder", &[2, 4, 5, 6, 7, 3]),
            ("unaffable", &[2, 8, 9, 10, 3]),
            ("unxable read_file", &[2, 1, 14, 15, 16, 3]),
            ("Café!", &[2, 11, 13, 3]),
        ];
        for (text, expected) in table {
            assert_eq!(v.encode(text, 512), expected, "{text:?}");
        }
    }

    #[test]
    fn only_as_many_words_as_there_is_room_for_are_read() {
        assert_eq!(words("a b c d", 2), ["a", "b"]);
        assert_eq!(words("a, b", 2), ["a", ","]);
        assert_eq!(vocabulary().encode(&"word ".repeat(100_000), 8).len(), 8);
    }

    #[test]
    fn a_long_text_is_cut_to_the_longest_sequence_with_its_end_token() {
        let v = vocabulary();
        let ids = v.encode(&"make ".repeat(100), 8);
        assert_eq!(ids.len(), 8);
        assert_eq!((ids[0], ids[7]), (v.cls, v.sep));
        assert_eq!(v.encode(&"x".repeat(LONGEST_WORD + 1), 8), [2, 1, 3]);
    }

    #[test]
    fn a_vocabulary_without_bert_tokens_is_refused_by_name() {
        let e = Vocabulary::parse("a\nb\n", std::path::Path::new("/m/vocab.txt")).err();
        let message = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("/m/vocab.txt"), "{message}");
        assert!(message.contains("[CLS]"), "{message}");
    }
}
