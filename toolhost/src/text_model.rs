//! `[mcp.discovery] model`: the sentence embedding model a tool search ranks by meaning
//! with ([`dispatcher_core::Dispatcher::set_text_encoder`]), loaded when a host is built
//! (a server, a CLI command, the Python wheel's `Host`) and again when a reload names
//! another.

use std::path::Path;

use dispatcher_core::Dispatcher;

use crate::error::UsageError;

/// Loads the model `model` names (none: searches by words only) into `dispatcher`; an
/// error names the config file, the key and what is wrong with the model's folder.
#[cfg(feature = "text-model")]
pub(crate) fn apply(
    model: Option<&Path>,
    file: &Path,
    dispatcher: &Dispatcher,
) -> Result<(), UsageError> {
    let encoder = match model {
        None => None,
        Some(dir) => {
            let started = std::time::Instant::now();
            let encoder = text_encoder::SentenceEncoder::load(dir).map_err(|e| {
                UsageError(format!(
                    "{}: [mcp.discovery] model: {e} (remove the key to search by words only)",
                    file.display()
                ))
            })?;
            tracing::info!(
                model = %dir.display(),
                took_ms = started.elapsed().as_millis() as u64,
                "tool search ranks by meaning too ([mcp.discovery] model)"
            );
            Some(std::sync::Arc::new(Learning {
                encoder: std::sync::Arc::new(encoder),
                started: std::sync::Once::new(),
            })
                as std::sync::Arc<dyn dispatcher_core::TextEncoder>)
        }
    };
    dispatcher.set_text_encoder(encoder);
    Ok(())
}

/// The model as the search sees it: at the first query, it starts learning its
/// vocabulary's words ([`learn_words`]); a host that never searches (a CLI command, a
/// wheel's `Host` used only to call tools) spends nothing on them.
#[cfg(feature = "text-model")]
struct Learning {
    encoder: std::sync::Arc<text_encoder::SentenceEncoder>,
    started: std::sync::Once,
}

#[cfg(feature = "text-model")]
impl dispatcher_core::TextEncoder for Learning {
    fn encode(&self, text: &str) -> Vec<f32> {
        self.encoder.encode(text)
    }

    fn encode_query(&self, query: &str) -> Vec<f32> {
        self.started
            .call_once(|| learn_words(std::sync::Arc::downgrade(&self.encoder)));
        self.encoder.encode_query(query)
    }
}

/// Has `encoder` encode its vocabulary's words on a thread of its own, a batch at a time,
/// so that a search's query is a lookup of its words (`SentenceEncoder::encode_query`);
/// stops when the encoder is dropped (a reload named another model).
#[cfg(feature = "text-model")]
fn learn_words(encoder: std::sync::Weak<text_encoder::SentenceEncoder>) {
    const BATCH: usize = 512;
    let started = std::time::Instant::now();
    let spawned = std::thread::Builder::new()
        .name("text-model-words".into())
        .spawn(move || {
            while let Some(encoder) = encoder.upgrade() {
                if encoder.learn_words(BATCH) == 0 {
                    tracing::info!(
                        took_ms = started.elapsed().as_millis() as u64,
                        "the text model's words are encoded: a search's query is now a lookup"
                    );
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        // Searches still work: each encodes its own new words.
        tracing::warn!(error = %e, "cannot start the thread that encodes the text model's words");
    }
}

/// What a build without the `text-model` feature says of `[mcp.discovery] model`.
#[cfg(not(feature = "text-model"))]
pub(crate) fn apply(
    model: Option<&Path>,
    file: &Path,
    _dispatcher: &Dispatcher,
) -> Result<(), UsageError> {
    match model {
        None => Ok(()),
        Some(_) => Err(UsageError(format!(
            "{}: [mcp.discovery] model is set, but this toolhost was built without its `text-model` feature; build it with `--features text-model` (on by default), or remove the key to search by words only",
            file.display()
        ))),
    }
}
