//! The encoder against a real model: all-MiniLM-L6-v2 from PyPI, which `cargo xtask test`
//! installs and names in `TOOLHOST_TEST_TEXT_MODEL`.
#![cfg(test)]

use text_encoder::{EncoderError, SentenceEncoder};

fn model() -> Option<SentenceEncoder> {
    let dir = toolhost_tests::peer("TOOLHOST_TEST_TEXT_MODEL")?;
    Some(SentenceEncoder::load(&dir).unwrap_or_else(|e| panic!("{e}")))
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn a_text_becomes_the_vector_the_model_gives_it() {
    let Some(encoder) = model() else { return };
    let v = encoder.encode("make a new folder");
    assert_eq!((v.len(), encoder.dimensions()), (384, 384));
    // The first values of the same model run by a forward pass written apart from this one
    // (NumPy, from the same safetensors): the tokenizer, every layer and the pooling agree.
    let expected = [-0.014_659, -0.102_211, -0.038_325, 0.022_826];
    for (got, want) in v.iter().zip(expected) {
        assert!(
            (got - want).abs() < 2e-4,
            "{:?} against {expected:?}",
            &v[..4]
        );
    }
    assert!((dot(&v, &v) - 1.0).abs() < 1e-4, "unit length");
}

#[test]
fn texts_near_in_meaning_are_near_though_they_share_no_word() {
    let Some(encoder) = model() else { return };
    let ask = encoder.encode("make a new folder");
    let near =
        encoder.encode("create directory: Create a new directory or ensure a directory exists.");
    let far = encoder.encode("read file: Read the contents of a file");
    assert!(
        (dot(&ask, &near) - 0.6505).abs() < 1e-3,
        "{}",
        dot(&ask, &near)
    );
    assert!(dot(&ask, &far) < 0.2, "{}", dot(&ask, &far));
}

#[test]
fn a_query_is_the_mean_of_its_words_each_encoded_alone() {
    let Some(encoder) = model() else { return };
    let near =
        encoder.encode("create directory: Create a new directory or ensure a directory exists.");
    let far = encoder.encode("read file: Read the contents of a file");
    let ask = encoder.encode_query("make a new folder");
    assert!((dot(&ask, &ask) - 1.0).abs() < 1e-4, "unit length");
    assert!(
        dot(&ask, &near) > dot(&ask, &far) + 0.1,
        "{} / {}",
        dot(&ask, &near),
        dot(&ask, &far)
    );
    // Stop words carry nothing ("a"), and each word's vector is the model's for it alone.
    let (make, new, folder) = (
        encoder.encode("make"),
        encoder.encode("new"),
        encoder.encode("folder"),
    );
    let mean: Vec<f32> = (0..ask.len())
        .map(|i| make[i] + new[i] + folder[i])
        .collect();
    let length = dot(&mean, &mean).sqrt();
    for (got, want) in ask.iter().zip(&mean) {
        assert!((got - want / length).abs() < 1e-5);
    }
    // A word the vocabulary does not hold whole is encoded from its pieces; a query of stop
    // words only is encoded whole.
    let other = encoder.encode_query("uncommitted");
    assert!((dot(&other, &encoder.encode("uncommitted")) - 1.0).abs() < 1e-4);
    assert_eq!(
        encoder.encode_query("what is this"),
        encoder.encode("what is this")
    );
    // A client's megabyte of query: its one long word is nothing the model reads, and its
    // thousands of new words cost one pass over eight of them.
    let huge = encoder.encode_query(&"zq".repeat(500_000));
    assert!((dot(&huge, &huge) - 1.0).abs() < 1e-4);
    let many: String = (0..5_000).map(|i| format!("word{i} ")).collect();
    let v = encoder.encode_query(&many);
    assert!((dot(&v, &v) - 1.0).abs() < 1e-4);
}

#[test]
fn a_words_vector_is_the_same_encoded_in_a_batch_or_alone() {
    let Some(together) = model() else { return };
    let Some(alone) = model() else { return };
    // Three new words: one pass over the three of them.
    let batched = together.encode_query("zebra giraffe elephant");
    for w in ["zebra", "giraffe", "elephant"] {
        alone.encode_query(w);
    }
    let kept = alone.encode_query("zebra giraffe elephant");
    for (a, b) in batched.iter().zip(&kept) {
        assert!((a - b).abs() < 1e-5, "{a} / {b}");
    }
}

#[test]
fn the_vocabularys_words_are_learned_a_batch_at_a_time() {
    let Some(encoder) = model() else { return };
    let left = encoder.learn_words(0);
    assert!(left > 20_000, "{left} whole words");
    encoder.encode_query("zebra");
    assert_eq!(encoder.learn_words(0), left - 1, "a query's word is kept");
    assert_eq!(encoder.learn_words(200), left - 201);
}

#[test]
fn a_text_longer_than_the_model_reads_is_cut_not_refused() {
    let Some(encoder) = model() else { return };
    let v = encoder.encode(&"the tools of a very long description ".repeat(200));
    assert!((dot(&v, &v) - 1.0).abs() < 1e-4);
    assert_eq!(encoder.encode(""), encoder.encode("   "));
}

#[test]
fn a_folder_that_is_no_model_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // (the file named, the files written, what the error says)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        ("config.json", &[], "cannot read"),
        ("config.json", &[("config.json", "{")], "EOF"),
        (
            "vocab.txt",
            &[
                (
                    "config.json",
                    r#"{"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 16, "max_position_embeddings": 8}"#,
                ),
                ("vocab.txt", "[PAD]\n[UNK]\n"),
            ],
            "[CLS]",
        ),
        (
            "model.safetensors",
            &[
                (
                    "config.json",
                    r#"{"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 16, "max_position_embeddings": 8}"#,
                ),
                ("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n"),
                ("model.safetensors", "not weights"),
            ],
            "not a safetensors file",
        ),
    ];
    for (file, files, says) in cases {
        let _ = std::fs::remove_dir_all(dir.path());
        std::fs::create_dir_all(dir.path()).unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let e: EncoderError = SentenceEncoder::load(dir.path()).unwrap_err();
        let message = e.to_string();
        assert!(
            message.contains(&dir.path().join(file).display().to_string())
                && message.contains(says),
            "{file}: {message}"
        );
    }
}
