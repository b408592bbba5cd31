//! Finding a session's tools by what they do ([`crate::Dispatcher::search_tools`]): the
//! tools the session may see, ranked for a query in words (BM25, the `bm25` crate's scorer)
//! over each tool's name (split into its words, counted twice), its description and its
//! parameters' names and descriptions. The ranking is the session's own: a tool its
//! visibility hides is never among the results, and its index is rebuilt whenever a tool
//! arrives, leaves or changes anywhere (the dispatcher's change counter), so a search sees
//! the tools of that moment.

use std::collections::HashSet;
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
    /// Its BM25 score for the query; a query that is exactly the tool's name ranks it first.
    pub score: f32,
}

/// A session's search index, kept until the tools change.
#[derive(Default)]
pub(crate) struct Cached(Mutex<Option<Arc<Index>>>);

impl Cached {
    /// The index for `generation`, built from `listing` when the one kept is older.
    pub(crate) fn index(
        &self,
        generation: u64,
        listing: impl FnOnce() -> Vec<ToolListing>,
    ) -> Arc<Index> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &*kept {
            Some(index) if index.generation == generation => index.clone(),
            _ => {
                let index = Arc::new(Index::build(generation, listing()));
                *kept = Some(index.clone());
                index
            }
        }
    }
}

/// The tools of one moment, ready to rank.
pub(crate) struct Index {
    generation: u64,
    tools: Vec<ToolListing>,
    embedder: Embedder<u32, Words>,
    scorer: Scorer<usize, u32>,
}

impl Index {
    fn build(generation: u64, tools: Vec<ToolListing>) -> Index {
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
        Index {
            generation,
            tools,
            embedder,
            scorer,
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
        // Best first; equal scores in name order, so a search answers the same every time.
        ranked.sort_by(|a, b| {
            b.1.total_cmp(&a.1).then_with(|| {
                self.tools[a.0]
                    .definition
                    .name
                    .cmp(&self.tools[b.0].definition.name)
            })
        });
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
        let index = Index::build(0, tools());
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
        let index = Index::build(0, tools());
        let found = index.search("shell", 10);
        assert_eq!(names(&found)[0], "shell");
        assert!(found[0].score.is_infinite());
        assert!(index.search("file time issue command", 2).len() <= 2);
        assert!(index.search("", 5).is_empty());
        assert!(index.search("the of and", 5).is_empty());
    }

    #[test]
    fn the_index_is_rebuilt_only_when_the_tools_changed() {
        let cached = Cached::default();
        let first = cached.index(1, tools);
        let again = cached.index(1, || panic!("rebuilt without a change"));
        assert!(Arc::ptr_eq(&first, &again));
        let after = cached.index(2, || tools()[..1].to_vec());
        assert_eq!(after.tools.len(), 1);
    }
}
