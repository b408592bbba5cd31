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
