//! Finding a session's tools by what they do ([`crate::Dispatcher::search_tools`]): the
//! tools the session may see, ranked for a query in words (BM25, the `bm25` crate's scorer)
//! over each tool's name (split into its words, counted twice), its description and its
//! parameters' names and descriptions; and, where the host set a [`TextEncoder`]
//! ([`crate::Dispatcher::set_text_encoder`]), by meaning too: each tool's name and
//! description and the query as vectors, the two rankings merged by their ranks (reciprocal
//! rank fusion), so that "make a new folder" finds `create_directory`. The ranking is the
//! session's own: a tool its visibility hides is never among the results, and its index is
//! rebuilt whenever a tool arrives, leaves or changes anywhere (the dispatcher's change
//! counter) or the encoder is replaced, so a search sees the tools of that moment.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use bm25::{Embedder, EmbedderBuilder, Scorer, Tokenizer};
use serde_json::Value;

use crate::registry::ToolListing;

/// A tool a search found: its listing (its full definition among it) and how well it
/// matched (higher is better; only comparable within one search).
#[derive(Debug, Clone)]
pub struct FoundTool {
    /// The tool, as the session lists it.
    pub listing: ToolListing,
    /// How well it matched: its BM25 score, or with a [`TextEncoder`] its fused rank score;
    /// a query that is exactly the tool's name ranks it first (infinity).
    pub score: f32,
}

/// Turns a text into a vector of meaning: texts near in meaning give vectors whose dot
/// product is near 1 (unit length, as sentence embedding models give them). Every vector
/// one encoder gives has the same length. An encoding may take milliseconds: a search
/// with one encodes its query, and each tool's text once (kept until the tool changes).
pub trait TextEncoder: Send + Sync {
    /// `text`'s unit-length vector.
    fn encode(&self, text: &str) -> Vec<f32>;

    /// A query's vector (by default [`TextEncoder::encode`]'s). A search encodes its query
    /// every time, where a tool's text is encoded once: an encoder may answer faster here
    /// with a cruder vector (the search merges it with its ranking by words).
    fn encode_query(&self, query: &str) -> Vec<f32> {
        self.encode(query)
    }
}

/// The most tool texts whose vectors a dispatcher keeps between index builds; past it,
/// they are all encoded again at the next build.
const VECTORS_KEPT: usize = 20_000;

/// A host's encoder and the vectors of the tool texts it encoded, shared by the sessions
/// (a tool's text is the same whoever can see it; what each session may find is its own
/// index's).
pub(crate) struct Meanings {
    encoder: Arc<dyn TextEncoder>,
    kept: Mutex<HashMap<String, Arc<[f32]>>>,
}

impl Meanings {
    pub(crate) fn new(encoder: Arc<dyn TextEncoder>) -> Meanings {
        Meanings {
            encoder,
            kept: Mutex::default(),
        }
    }

    /// The vectors of `texts`, those not kept encoded on every core at once.
    fn vectors(&self, texts: &[String]) -> Vec<Arc<[f32]>> {
        let missing: Vec<&String> = {
            let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let mut seen = HashSet::new();
            texts
                .iter()
                .filter(|t| !kept.contains_key(*t) && seen.insert(*t))
                .collect()
        };
        if !missing.is_empty() {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let per = missing.len().div_ceil(cores.min(missing.len()));
            let encoded: Vec<(String, Arc<[f32]>)> = std::thread::scope(|scope| {
                let workers: Vec<_> = missing
                    .chunks(per)
                    .map(|chunk| {
                        scope.spawn(move || {
                            chunk
                                .iter()
                                .map(|t| ((*t).clone(), Arc::from(self.encoder.encode(t))))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            });
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.len() + encoded.len() > VECTORS_KEPT {
                kept.clear();
            }
            kept.extend(encoded);
        }
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        texts
            .iter()
            .map(|t| match kept.get(t) {
                Some(v) => v.clone(),
                None => Arc::from(self.encoder.encode(t)),
            })
            .collect()
    }
}

/// A session's search index, kept until the tools or the encoder change.
#[derive(Default)]
pub(crate) struct Cached(Mutex<Option<Arc<Index>>>);

impl Cached {
    /// The index for `generation` and `meanings`, built from `listing` when the one kept
    /// is older or was built with another encoder.
    pub(crate) fn index(
        &self,
        generation: u64,
        meanings: Option<Arc<Meanings>>,
        listing: impl FnOnce() -> Vec<ToolListing>,
    ) -> Arc<Index> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &*kept {
            Some(index)
                if index.generation == generation
                    && same(index.meanings.as_ref().map(|m| &m.0), meanings.as_ref()) =>
            {
                index.clone()
            }
            _ => {
                let index = Arc::new(Index::build(generation, listing(), meanings));
                *kept = Some(index.clone());
                index
            }
        }
    }
}

fn same(a: Option<&Arc<Meanings>>, b: Option<&Arc<Meanings>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Reciprocal rank fusion's constant: a tool at rank r of a ranking scores
/// `weight / (FUSION_K + r)`. Small, so that the first few places of each ranking count
/// most.
const FUSION_K: f32 = 5.0;

/// The words' ranking counts as much as the meaning's. With queries encoded whole, the
/// meaning's ranking alone found 107 of the discovery bench's 110 in the first five (`cargo
/// xtask bench`), and the words were best weighted 0.4 (108); with queries as the mean of
/// their words' vectors (text-encoder's `encode_query`, microseconds where the whole pass
/// takes milliseconds) the meaning alone finds 97, and equal weights 106 (0.6: 105, 1.5:
/// 104; constants from 2 to 60 at equal weights: 105 to 106); words alone 100.
const WORDS_WEIGHT: f32 = 1.0;

/// Each tool's vector of meaning, in the order of its index's tools.
type Vectors = Vec<Arc<[f32]>>;

/// The tools of one moment, ready to rank.
pub(crate) struct Index {
    generation: u64,
    tools: Vec<ToolListing>,
    embedder: Embedder<u32, Words>,
    scorer: Scorer<usize, u32>,
    /// With an encoder: it, and each tool's vector (in the order of `tools`).
    meanings: Option<(Arc<Meanings>, Vectors)>,
}

impl Index {
    fn build(generation: u64, tools: Vec<ToolListing>, meanings: Option<Arc<Meanings>>) -> Index {
        let texts: Vec<String> = tools.iter().map(text_of).collect();
        let corpus: Vec<&str> = texts.iter().map(String::as_str).collect();
        // BM25's usual k1 (1.2) and b (0.75): with the discovery bench's queries over real
        // servers' tools, a separate field for names (at weights 0.25 to 3) and other
        // length normalizations (b from 0.3 to 1) ranked no better (`cargo xtask bench`).
        let embedder = EmbedderBuilder::<u32, Words>::with_tokenizer_and_fit_to_corpus(
            Words::english(),
            &corpus,
        )
        .build();
        let mut scorer = Scorer::<usize, u32>::new();
        for (i, text) in texts.iter().enumerate() {
            scorer.upsert(&i, embedder.embed(text));
        }
        let meanings = meanings.map(|m| {
            let sentences: Vec<String> = tools.iter().map(sentence_of).collect();
            let vectors = m.vectors(&sentences);
            (m, vectors)
        });
        Index {
            generation,
            tools,
            embedder,
            scorer,
            meanings,
        }
    }

    /// The best `limit` tools for `query`, best first.
    pub(crate) fn search(&self, query: &str, limit: usize) -> Vec<FoundTool> {
        let query = query.trim();
        let named = self.tools.iter().position(|t| t.definition.name == query);
        let mut found: Vec<FoundTool> = Vec::with_capacity(limit.min(self.tools.len()));
        if let Some(i) = named {
            found.push(FoundTool {
                listing: self.tools[i].clone(),
                score: f32::INFINITY,
            });
        }
        let mut ranked: Vec<(usize, f32)> = self
            .scorer
            .matches(&self.embedder.embed(query))
            .into_iter()
            .filter(|m| m.score > 0.0 && Some(m.id) != named)
            .map(|m| (m.id, m.score))
            .collect();
        let room = limit.saturating_sub(found.len());
        match &self.meanings {
            Some((meanings, vectors)) if !query.is_empty() => {
                // Every rank counts in the fusion.
                self.sort(&mut ranked);
                let query = meanings.encoder.encode_query(query);
                ranked = self.fused(&ranked, &query, vectors, named, room);
            }
            _ => self.best(&mut ranked, room),
        }
        for (i, score) in ranked {
            if found.len() >= limit {
                break;
            }
            found.push(FoundTool {
                listing: self.tools[i].clone(),
                score,
            });
        }
        found.truncate(limit);
        found
    }

    /// Best first; equal scores in name order, so a search answers the same every time.
    fn sort(&self, ranked: &mut [(usize, f32)]) {
        // Unstable is enough: names are unique, so no two entries compare equal.
        ranked.sort_unstable_by(|a, b| self.order(a, b));
    }

    /// The first `n` of `ranked`, best first (the rest left in no order, and cut).
    fn best(&self, ranked: &mut Vec<(usize, f32)>, n: usize) {
        if n < ranked.len() {
            if n > 0 {
                ranked.select_nth_unstable_by(n - 1, |a, b| self.order(a, b));
            }
            ranked.truncate(n);
        }
        self.sort(ranked);
    }

    fn order(&self, a: &(usize, f32), b: &(usize, f32)) -> std::cmp::Ordering {
        b.1.total_cmp(&a.1).then_with(|| {
            self.tools[a.0]
                .definition
                .name
                .cmp(&self.tools[b.0].definition.name)
        })
    }

    /// The words' ranking (`by_words`, best first) and the ranking by meaning (each tool's
    /// vector against the query's) merged: each tool scores `weight / (K + rank)` in each
    /// ranking it is in. The best `n`, best first.
    fn fused(
        &self,
        by_words: &[(usize, f32)],
        query: &[f32],
        vectors: &[Arc<[f32]>],
        named: Option<usize>,
        n: usize,
    ) -> Vec<(usize, f32)> {
        let mut by_meaning: Vec<(usize, f32)> = vectors
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != named)
            .map(|(i, v)| (i, dot(v, query)))
            // A tool whose meaning has nothing in common with the query's is not ranked.
            .filter(|(_, similarity)| *similarity > 0.0)
            .collect();
        self.sort(&mut by_meaning);
        let mut score = vec![0.0f32; self.tools.len()];
        for (weight, ranking) in [(WORDS_WEIGHT, by_words), (1.0, &by_meaning[..])] {
            for (rank, (i, _)) in ranking.iter().enumerate() {
                score[*i] += weight / (FUSION_K + rank as f32 + 1.0);
            }
        }
        let mut fused: Vec<(usize, f32)> = score
            .into_iter()
            .enumerate()
            .filter(|(i, s)| *s > 0.0 && Some(*i) != named)
            .collect();
        self.best(&mut fused, n);
        fused
    }
}

/// The dot product of `a` and `b`, in eight running sums (which the compiler keeps in one
/// vector register: one running sum is a chain of dependent additions, four times slower
/// over a thousand tools' 384 numbers each).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// What a tool means, as an encoder reads it: its name's words and its description
/// ("create directory: Create a new directory…").
fn sentence_of(tool: &ToolListing) -> String {
    let d = &tool.definition;
    let mut sentence = String::with_capacity(d.name.len() + d.description.len() + 4);
    let mut last_lower = false;
    for c in d.name.chars() {
        if !c.is_alphanumeric() {
            if !sentence.ends_with(' ') && !sentence.is_empty() {
                sentence.push(' ');
            }
            last_lower = false;
            continue;
        }
        if c.is_uppercase() && last_lower {
            sentence.push(' ');
        }
        last_lower = c.is_lowercase() || c.is_ascii_digit();
        sentence.extend(c.to_lowercase());
    }
    let trimmed = sentence.trim_end().len();
    sentence.truncate(trimmed);
    sentence.push_str(": ");
    sentence.push_str(&d.description);
    sentence
}

/// What a tool is searched by: its name (twice: a name says in two or three words what the
/// tool is for), its description, and its parameters' names and descriptions.
fn text_of(tool: &ToolListing) -> String {
    let d = &tool.definition;
    let mut text = String::with_capacity(d.name.len() * 2 + d.description.len() + 64);
    for _ in 0..2 {
        text.push_str(&d.name);
        text.push(' ');
    }
    text.push_str(&d.description);
    if let Some(Value::Object(properties)) = d.input_schema.get("properties") {
        for (name, schema) in properties {
            text.push(' ');
            text.push_str(name);
            if let Some(Value::String(description)) = schema.get("description") {
                text.push(' ');
                text.push_str(description);
            }
        }
    }
    text
}

/// Words as a search counts them: split at anything that is no letter or digit and where
/// a lower-case letter meets an upper-case one (`read_file`, `listDir`, `web-search`),
/// lower-cased, English stop words left out, the rest stemmed (Snowball), so that "reading
/// files" finds `read_file`.
pub(crate) struct Words {
    stemmer: rust_stemmers::Stemmer,
    stop: HashSet<&'static str>,
}

impl Words {
    pub(crate) fn english() -> Words {
        Words {
            stemmer: rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English),
            stop: stop_words::get(stop_words::LANGUAGE::English)
                .iter()
                .copied()
                .collect(),
        }
    }

    fn push(&self, word: &mut String, into: &mut Vec<String>) {
        if word.is_empty() {
            return;
        }
        let lower = word.to_lowercase();
        word.clear();
        if self.stop.contains(lower.as_str()) {
            return;
        }
        into.push(self.stemmer.stem(&lower).into_owned());
    }
}

impl Tokenizer for Words {
    fn tokenize(&self, text: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut last_lower = false;
        for c in text.chars() {
            if !c.is_alphanumeric() {
                self.push(&mut word, &mut words);
                last_lower = false;
                continue;
            }
            if c.is_uppercase() && last_lower {
                self.push(&mut word, &mut words);
            }
            last_lower = c.is_lowercase() || c.is_ascii_digit();
            word.push(c);
        }
        self.push(&mut word, &mut words);
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, schema: Value) -> ToolListing {
        let definition =
            tool_api::ToolDefinition::new(name, description, tool_api::SideEffect::None, schema);
        ToolListing {
            definition,
            source: "test".into(),
            toolset: None,
            original_name: None,
            placement: tool_api::Placement::default(),
        }
    }

    fn names(found: &[FoundTool]) -> Vec<&str> {
        found
            .iter()
            .map(|f| f.listing.definition.name.as_str())
            .collect()
    }

    fn tools() -> Vec<ToolListing> {
        vec![
            tool(
                "read_file",
                "Reads a text file in the workspace and returns its contents.",
                serde_json::json!({"type": "object", "properties": {"path": {"type": "string", "description": "Path relative to the workspace"}}}),
            ),
            tool(
                "gh__createIssue",
                "Opens a new issue in a GitHub repository.",
                serde_json::json!({"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"}}}),
            ),
            tool(
                "time__get_current_time",
                "Get the current time in a specific timezone.",
                serde_json::json!({"type": "object", "properties": {"timezone": {"type": "string", "description": "IANA timezone name"}}}),
            ),
            tool(
                "shell",
                "Runs a command in a shell.",
                serde_json::json!({"type": "object"}),
            ),
        ]
    }

    #[test]
    fn words_split_names_drop_stop_words_and_stem() {
        let words = Words::english();
        assert_eq!(words.tokenize("read_file"), ["read", "file"]);
        assert_eq!(words.tokenize("gh__createIssue"), ["gh", "creat", "issu"]);
        assert_eq!(words.tokenize("Reading the files"), ["read", "file"]);
        assert_eq!(words.tokenize("utf8Decode x2"), ["utf8", "decod", "x2"]);
    }

    #[test]
    fn a_request_in_words_finds_the_tool_that_does_it() {
        let index = Index::build(0, tools(), None);
        let table = [
            ("what time is it in Tokyo", "time__get_current_time"),
            ("open a bug report on github", "gh__createIssue"),
            ("show me what a file contains", "read_file"),
            ("run a command", "shell"),
        ];
        for (query, expected) in table {
            let found = index.search(query, 1);
            assert_eq!(names(&found), [expected], "{query}");
        }
    }

    #[test]
    fn a_tools_own_name_ranks_it_first_and_the_limit_holds() {
        let index = Index::build(0, tools(), None);
        let found = index.search("shell", 10);
        assert_eq!(names(&found)[0], "shell");
        assert!(found[0].score.is_infinite());
        assert!(index.search("file time issue command", 2).len() <= 2);
        assert!(index.search("", 5).is_empty());
        assert!(index.search("the of and", 5).is_empty());
    }

    /// An encoder of concepts: each word stands for one (folder and directory for the
    /// same), a text is the unit vector of its concepts. It counts what it encodes.
    #[derive(Default)]
    struct Concepts(std::sync::atomic::AtomicUsize);

    impl TextEncoder for Concepts {
        fn encode(&self, text: &str) -> Vec<f32> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let concepts: [&[&str]; 4] = [
                &["folder", "directory", "directories"],
                &["file", "contains", "contents", "text"],
                &["time", "clock", "tokyo"],
                &["bug", "issue", "report"],
            ];
            let mut v: Vec<f32> = concepts
                .iter()
                .map(|words| {
                    text.split(|c: char| !c.is_alphanumeric())
                        .filter(|w| words.contains(&w.to_lowercase().as_str()))
                        .count() as f32
                })
                .collect();
            let length = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            v.iter_mut().for_each(|x| *x /= length);
            v
        }
    }

    fn with_folders() -> Vec<ToolListing> {
        let mut tools = tools();
        tools.push(tool(
            "fs__create_directory",
            "Creates a directory and its parents.",
            serde_json::json!({"type": "object"}),
        ));
        tools
    }

    #[test]
    fn with_an_encoder_a_request_finds_the_tool_that_shares_no_word_with_it() {
        let query = "make a new folder";
        let words_only = Index::build(0, with_folders(), None);
        assert!(!names(&words_only.search(query, 5)).contains(&"fs__create_directory"));
        let meanings = Arc::new(Meanings::new(Arc::new(Concepts::default())));
        let index = Index::build(0, with_folders(), Some(meanings));
        assert_eq!(names(&index.search(query, 1)), ["fs__create_directory"]);
        // Words still count: what they found stays found, and a tool's name ranks it first.
        assert_eq!(
            names(&index.search("what time is it in Tokyo", 1)),
            ["time__get_current_time"]
        );
        assert_eq!(names(&index.search("shell", 1)), ["shell"]);
        assert!(index.search("shell", 1)[0].score.is_infinite());
    }

    /// Encodes tools as [`Concepts`] does and queries as having no concept in common with
    /// any tool, counting the queries it encodes.
    #[derive(Default)]
    struct BlindQueries(Concepts, std::sync::atomic::AtomicUsize);

    impl TextEncoder for BlindQueries {
        fn encode(&self, text: &str) -> Vec<f32> {
            self.0.encode(text)
        }

        fn encode_query(&self, _query: &str) -> Vec<f32> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            vec![0.0; 4]
        }
    }

    #[test]
    fn a_dot_product_sums_every_pair_the_tail_too() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..19)
            .map(|i| if i % 2 == 0 { 1.0 } else { -0.5 })
            .collect();
        let expected: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot(&a, &b), expected);
        assert_eq!(dot(&[], &[]), 0.0);
    }

    #[test]
    fn a_query_is_encoded_as_the_encoder_encodes_queries() {
        let encoder = Arc::new(BlindQueries::default());
        let index = Index::build(
            0,
            with_folders(),
            Some(Arc::new(Meanings::new(encoder.clone()))),
        );
        // The query's vector meets no tool's: only the words rank, and they share none
        // with the directory tool.
        assert!(!names(&index.search("make a new folder", 5)).contains(&"fs__create_directory"));
        assert_eq!(encoder.1.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(
            names(&index.search("create directory", 1)),
            ["fs__create_directory"]
        );
    }

    #[test]
    fn a_tools_text_is_encoded_once_and_a_new_encoder_rebuilds_the_index() {
        let encoder = Arc::new(Concepts::default());
        let meanings = Arc::new(Meanings::new(encoder.clone()));
        let encoded = || encoder.0.load(std::sync::atomic::Ordering::Relaxed);
        let cached = Cached::default();
        cached.index(1, Some(meanings.clone()), with_folders);
        assert_eq!(encoded(), 5);
        // The tools changed (one more): only the new one is encoded.
        let mut more = with_folders();
        more.push(tool("fs__move", "Moves a file.", serde_json::json!({})));
        cached.index(2, Some(meanings.clone()), || more.clone());
        assert_eq!(encoded(), 6);
        let kept = cached.index(2, Some(meanings.clone()), || panic!("rebuilt"));
        assert!(kept.meanings.is_some());
        // Another encoder (or none) is another index.
        let other = Arc::new(Meanings::new(Arc::new(Concepts::default())));
        assert!(!Arc::ptr_eq(
            &kept,
            &cached.index(2, Some(other), || more.clone())
        ));
        assert!(cached.index(2, None, || more.clone()).meanings.is_none());
    }

    #[test]
    fn a_tools_sentence_is_its_names_words_and_its_description() {
        let t = tool("fs__createDirectory", "Creates one.", serde_json::json!({}));
        assert_eq!(sentence_of(&t), "fs create directory: Creates one.");
    }

    #[test]
    fn the_index_is_rebuilt_only_when_the_tools_changed() {
        let cached = Cached::default();
        let first = cached.index(1, None, tools);
        let again = cached.index(1, None, || panic!("rebuilt without a change"));
        assert!(Arc::ptr_eq(&first, &again));
        let after = cached.index(2, None, || tools()[..1].to_vec());
        assert_eq!(after.tools.len(), 1);
    }
}
