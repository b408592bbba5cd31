//! A query's meaning without a forward pass at search time: each word is encoded alone
//! once (`[CLS] word [SEP]`) and kept, and a query is then the mean of its words' vectors.
//! Tools are still encoded whole (their text is read once); a query is read on every
//! search, where a whole forward pass costs milliseconds.
//!
//! A query's words not yet kept are encoded when it is first asked (one pass for all of
//! them); [`WordVectors::learn`] encodes the vocabulary's whole words ahead of the queries,
//! in batches, so that later queries find their words kept.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use crate::bert::Bert;
use crate::wordpiece::{self, Vocabulary};

/// How many words one forward pass of [`WordVectors::learn`] encodes.
const BATCH: usize = 128;

/// The most words one query has encoded (the rest are left to the search by words), and
/// the most tokens each is read to: a query costs at most one pass over 8 short
/// sequences, whatever a client sends.
const NEW_PER_QUERY: usize = 8;
const WORD_TOKENS: usize = 16;

/// The longest word (in bytes) whose vector is encoded and kept: BERT reads a word of more
/// than 100 characters as one unknown token, and a kept word's text is held as a key.
const LONGEST_WORD: usize = 100;

/// The most words outside the vocabulary whose vectors are kept; past it those kept are
/// dropped (the vocabulary's own are at most its size).
const OTHERS_KEPT: usize = 4096;

/// The vectors of the words encoded so far.
pub(crate) struct WordVectors {
    /// The vocabulary's whole words, by id.
    known: RwLock<HashMap<u32, Arc<[f32]>>>,
    /// Words the vocabulary does not hold whole ("uncommitted"), encoded from their pieces.
    others: Mutex<HashMap<String, Arc<[f32]>>>,
    /// [`OTHERS_KEPT`] (smaller in tests).
    others_kept: usize,
    stop: HashSet<&'static str>,
}

/// A word to encode: its vocabulary id when it is one piece, its text otherwise (two
/// words may be the same pieces, both unknown: they are compared as words).
#[derive(PartialEq)]
enum Word<'a> {
    Known(u32),
    Other(&'a str),
}

impl WordVectors {
    pub(crate) fn new() -> WordVectors {
        WordVectors {
            known: RwLock::new(HashMap::new()),
            others: Mutex::new(HashMap::new()),
            others_kept: OTHERS_KEPT,
            stop: stop_words::get(stop_words::LANGUAGE::English)
                .iter()
                .copied()
                .collect(),
        }
    }

    fn known(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u32, Arc<[f32]>>> {
        self.known
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn others(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<[f32]>>> {
        self.others
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Encodes up to `most` of `vocabulary`'s whole words (no `##` piece, no special
    /// token, letters and digits only) not yet kept, on this thread, in batches; returns
    /// how many are left to encode.
    pub(crate) fn learn(&self, vocabulary: &Vocabulary, model: &Bert, most: usize) -> usize {
        let mut left: Vec<u32> = {
            let known = self.known();
            vocabulary
                .whole_words()
                .map(|(_, id)| id)
                .filter(|id| !known.contains_key(id))
                .collect()
        };
        left.sort_unstable();
        let now = most.min(left.len());
        for batch in left[..now].chunks(BATCH) {
            let sequences: Vec<[u32; 3]> = batch
                .iter()
                .map(|&id| [vocabulary.cls, id, vocabulary.sep])
                .collect();
            let refs: Vec<&[u32]> = sequences.iter().map(|s| &s[..]).collect();
            let vectors = model.embed_many(&refs);
            let mut known = self
                .known
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (&id, v) in batch.iter().zip(vectors) {
                known.entry(id).or_insert_with(|| Arc::from(v));
            }
        }
        left.len() - now
    }

    /// The unit-length mean of the vectors of `query`'s words (stop words and marks left
    /// out); `None` when no word is left.
    pub(crate) fn query(
        &self,
        query: &str,
        vocabulary: &Vocabulary,
        model: &Bert,
        longest: usize,
    ) -> Option<Vec<f32>> {
        let words: Vec<String> = wordpiece::words(query, longest)
            .into_iter()
            .filter(|w| {
                w.chars().any(char::is_alphanumeric)
                    && !self.stop.contains(w.as_str())
                    // Longer is one unknown token to the model: nothing to keep.
                    && w.len() <= LONGEST_WORD
            })
            .collect();
        if words.is_empty() {
            return None;
        }
        let words: Vec<Word<'_>> = words
            .iter()
            .map(|w| match vocabulary.id(w) {
                Some(id) => Word::Known(id),
                None => Word::Other(w.as_str()),
            })
            .collect();
        self.encode_new(&words, vocabulary, model);
        let mut sum: Vec<f32> = Vec::new();
        let (known, others) = (self.known(), self.others());
        for w in &words {
            let v = match w {
                Word::Known(id) => known.get(id),
                Word::Other(text) => others.get(*text),
            };
            if let Some(v) = v {
                sum.resize(v.len(), 0.0);
                sum.iter_mut().zip(v.iter()).for_each(|(s, x)| *s += x);
            }
        }
        let length = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if length == 0.0 {
            return None;
        }
        sum.iter_mut().for_each(|x| *x /= length);
        Some(sum)
    }

    /// Encodes (in one pass) the first [`NEW_PER_QUERY`] of `words` not yet kept, and keeps
    /// them.
    fn encode_new(&self, words: &[Word<'_>], vocabulary: &Vocabulary, model: &Bert) {
        let mut new: Vec<(&Word<'_>, Vec<u32>)> = Vec::new();
        {
            let (known, others) = (self.known(), self.others());
            for w in words {
                if new.len() == NEW_PER_QUERY {
                    break;
                }
                let sequence = match w {
                    Word::Known(id) if !known.contains_key(id) => {
                        vec![vocabulary.cls, *id, vocabulary.sep]
                    }
                    Word::Other(text) if !others.contains_key(*text) => {
                        vocabulary.encode(text, WORD_TOKENS)
                    }
                    _ => continue,
                };
                if !new.iter().any(|(kept, _)| *kept == w) {
                    new.push((w, sequence));
                }
            }
        }
        if new.is_empty() {
            return;
        }
        let refs: Vec<&[u32]> = new.iter().map(|(_, s)| s.as_slice()).collect();
        let vectors = model.embed_many(&refs);
        for ((w, _), v) in new.iter().zip(vectors) {
            match w {
                Word::Known(id) => {
                    self.known
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(*id, Arc::from(v));
                }
                Word::Other(text) => {
                    let mut others = self.others();
                    if others.len() >= self.others_kept {
                        others.clear();
                    }
                    others.insert((*text).to_owned(), Arc::from(v));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model `cargo xtask test` installs (all-MiniLM-L6-v2); `None` where it is not.
    fn encoder() -> Option<crate::SentenceEncoder> {
        let dir = toolhost_tests::peer("TOOLHOST_TEST_TEXT_MODEL")?;
        Some(crate::SentenceEncoder::load(&dir).unwrap_or_else(|e| panic!("{e}")))
    }

    fn near(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    }

    #[test]
    fn a_query_encodes_at_most_eight_new_words_and_the_next_one_the_rest() {
        let Some(e) = encoder() else { return };
        let ten = "zebra horse elephant lion tiger monkey parrot eagle shark whale";
        for w in ten.split(' ') {
            assert!(
                e.vocabulary.id(w).is_some(),
                "{w} is one of the vocabulary's words"
            );
        }
        e.encode_query(ten);
        assert_eq!(e.words.known().len(), NEW_PER_QUERY);
        e.encode_query(ten);
        assert_eq!(e.words.known().len(), 10);
        assert!(e.words.others().is_empty());
    }

    #[test]
    fn a_word_over_100_bytes_is_not_encoded_and_a_long_one_is_read_to_16_tokens() {
        let Some(e) = encoder() else { return };
        let longest = "q".repeat(LONGEST_WORD + 1);
        assert!(
            e.words
                .query(&longest, &e.vocabulary, &e.model, e.longest)
                .is_none(),
            "no word left to encode"
        );
        assert!(e.words.others().is_empty());
        // Eighty letters the vocabulary holds only as pieces: many more than 16 tokens.
        let word = "zxqv".repeat(20);
        let whole = e.vocabulary.encode(&word, e.longest);
        assert!(whole.len() > WORD_TOKENS, "{} tokens", whole.len());
        let cut = e.model.embed(&e.vocabulary.encode(&word, WORD_TOKENS));
        assert!(near(&e.encode_query(&word), &cut));
        assert!(!near(&e.model.embed(&whole), &cut));
    }

    #[test]
    fn past_their_cap_the_words_kept_outside_the_vocabulary_are_dropped() {
        let Some(mut e) = encoder() else { return };
        e.words.others_kept = 3;
        for w in ["qzxa", "qzxb", "qzxc"] {
            e.encode_query(w);
        }
        assert_eq!(e.words.others().len(), 3);
        e.encode_query("qzxd");
        let kept: Vec<String> = e.words.others().keys().cloned().collect();
        assert_eq!(kept, ["qzxd"]);
    }
}
