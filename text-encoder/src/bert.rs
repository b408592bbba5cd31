//! A BERT encoder's weights and its forward pass on the CPU, in `f32`: token, position and
//! type embeddings, then each layer's self-attention and feed-forward block, each followed
//! by its residual and layer norm; the token states are then averaged (mean pooling) and
//! scaled to unit length, as sentence-transformers' models end.

use std::ops::Range;
use std::path::Path;

use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, ArrayView2, Axis, s};
use safetensors::SafeTensors;
use serde::Deserialize;

use crate::EncoderError;

/// The parts of `config.json` the forward pass needs.
#[derive(Deserialize)]
pub(crate) struct Shape {
    #[serde(default = "bert")]
    model_type: String,
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "gelu")]
    hidden_act: String,
    #[serde(default = "epsilon")]
    layer_norm_eps: f32,
}

fn bert() -> String {
    "bert".into()
}
fn gelu() -> String {
    "gelu".into()
}
fn epsilon() -> f32 {
    1e-12
}

/// A dense layer: `out × in` weights and `out` biases.
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

struct Norm {
    gain: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attended: Linear,
    attention_norm: Norm,
    widen: Linear,
    narrow: Linear,
    output_norm: Norm,
}

/// A loaded BERT encoder.
pub(crate) struct Bert {
    pub(crate) hidden: usize,
    heads: usize,
    epsilon: f32,
    pub(crate) positions: usize,
    words: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
}

/// The tensors of a safetensors file, found by their names with or without the `bert.`
/// prefix that a model saved from a task head carries.
struct Tensors<'a> {
    file: SafeTensors<'a>,
    path: &'a Path,
}

impl Tensors<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EncoderError> {
        let bad = |why: String| EncoderError::Model {
            path: self.path.to_owned(),
            why,
        };
        let view = self
            .file
            .tensor(name)
            .or_else(|_| self.file.tensor(&format!("bert.{name}")))
            .map_err(|_| bad(format!("it has no tensor {name}: not a BERT encoder")))?;
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(bad(format!(
                "{name} is {:?}; only f32 weights are read",
                view.dtype()
            )));
        }
        if view.shape() != shape {
            return Err(bad(format!(
                "{name} has the shape {:?}, config.json says {shape:?}",
                view.shape()
            )));
        }
        Ok(view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn linear(&self, name: &str, inputs: usize, outputs: usize) -> Result<Linear, EncoderError> {
        let weight = self.get(&format!("{name}.weight"), &[outputs, inputs])?;
        let weight =
            Array2::from_shape_vec((outputs, inputs), weight).map_err(|e| EncoderError::Model {
                path: self.path.to_owned(),
                why: format!("{name}.weight: {e}"),
            })?;
        Ok(Linear {
            weight,
            bias: Array1::from(self.get(&format!("{name}.bias"), &[outputs])?),
        })
    }

    fn norm(&self, name: &str, size: usize) -> Result<Norm, EncoderError> {
        Ok(Norm {
            gain: self.get(&format!("{name}.weight"), &[size])?,
            bias: self.get(&format!("{name}.bias"), &[size])?,
        })
    }
}

impl Bert {
    /// The encoder `shape` describes, its weights read from `bytes` (a safetensors file at
    /// `path`).
    pub(crate) fn load(
        shape: &Shape,
        bytes: &[u8],
        path: &Path,
        vocabulary: usize,
    ) -> Result<Bert, EncoderError> {
        let bad = |why: String| EncoderError::Model {
            path: path.to_owned(),
            why,
        };
        if shape.model_type != "bert" || shape.hidden_act != "gelu" {
            return Err(bad(format!(
                "config.json describes a {} model with {} activations; only BERT with gelu is read",
                shape.model_type, shape.hidden_act
            )));
        }
        let h = shape.hidden_size;
        if shape.num_attention_heads == 0 || !h.is_multiple_of(shape.num_attention_heads) {
            return Err(bad(format!(
                "config.json's hidden_size {h} is not a multiple of its {} attention heads",
                shape.num_attention_heads
            )));
        }
        let file = SafeTensors::deserialize(bytes)
            .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let t = Tensors { file, path };
        let mut layers = Vec::with_capacity(shape.num_hidden_layers);
        for l in 0..shape.num_hidden_layers {
            let at = |part: &str| format!("encoder.layer.{l}.{part}");
            layers.push(Layer {
                query: t.linear(&at("attention.self.query"), h, h)?,
                key: t.linear(&at("attention.self.key"), h, h)?,
                value: t.linear(&at("attention.self.value"), h, h)?,
                attended: t.linear(&at("attention.output.dense"), h, h)?,
                attention_norm: t.norm(&at("attention.output.LayerNorm"), h)?,
                widen: t.linear(&at("intermediate.dense"), h, shape.intermediate_size)?,
                narrow: t.linear(&at("output.dense"), shape.intermediate_size, h)?,
                output_norm: t.norm(&at("output.LayerNorm"), h)?,
            });
        }
        let type_rows = t
            .file
            .tensor("embeddings.token_type_embeddings.weight")
            .or_else(|_| {
                t.file
                    .tensor("bert.embeddings.token_type_embeddings.weight")
            })
            .map(|v| v.shape().first().copied().unwrap_or(0))
            .unwrap_or(0);
        Ok(Bert {
            hidden: h,
            heads: shape.num_attention_heads,
            epsilon: shape.layer_norm_eps,
            positions: shape.max_position_embeddings,
            words: t.get("embeddings.word_embeddings.weight", &[vocabulary, h])?,
            position: t.get(
                "embeddings.position_embeddings.weight",
                &[shape.max_position_embeddings, h],
            )?,
            token_type: t.get(
                "embeddings.token_type_embeddings.weight",
                &[type_rows.max(1), h],
            )?,
            embedding_norm: t.norm("embeddings.LayerNorm", h)?,
            layers,
        })
    }

    /// The unit-length mean of the last layer's states for `ids` (at most
    /// [`Bert::positions`] of them, each below the vocabulary's size).
    pub(crate) fn embed(&self, ids: &[u32]) -> Vec<f32> {
        self.embed_many(&[ids]).pop().unwrap_or_default()
    }

    /// [`Bert::embed`] of each of `sequences`, in one pass: their token states are stacked
    /// (so each layer's weights are read once for all of them), and each attends to its own
    /// tokens only.
    pub(crate) fn embed_many(&self, sequences: &[&[u32]]) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let mut spans = Vec::with_capacity(sequences.len());
        let mut start = 0;
        for ids in sequences {
            spans.push(start..start + ids.len());
            start += ids.len();
        }
        let mut x = Array2::<f32>::zeros((start, h));
        for (ids, span) in sequences.iter().zip(&spans) {
            for (i, &id) in ids.iter().enumerate() {
                let word = &self.words[id as usize * h..(id as usize + 1) * h];
                let position = &self.position[i * h..(i + 1) * h];
                let mut row = x.row_mut(span.start + i);
                for (j, v) in row.iter_mut().enumerate() {
                    *v = word[j] + position[j] + self.token_type[j];
                }
            }
        }
        self.normalize(&mut x, &self.embedding_norm);
        for layer in &self.layers {
            x = self.layer(layer, &x, &spans);
        }
        spans
            .iter()
            .map(|span| {
                let mut mean = x
                    .slice(s![span.clone(), ..])
                    .mean_axis(Axis(0))
                    .unwrap_or_else(|| Array1::zeros(h));
                let length = mean.dot(&mean).sqrt();
                if length > 0.0 {
                    mean /= length;
                }
                mean.to_vec()
            })
            .collect()
    }

    /// One encoder layer over the token states `x`, whose rows `spans` are each one
    /// sequence's.
    fn layer(&self, layer: &Layer, x: &Array2<f32>, spans: &[Range<usize>]) -> Array2<f32> {
        let (q, k, v) = (
            apply(&layer.query, x),
            apply(&layer.key, x),
            apply(&layer.value, x),
        );
        let mut context = Array2::<f32>::zeros(q.raw_dim());
        for span in spans {
            let rows = s![span.clone(), ..];
            context.slice_mut(rows).assign(&attend(
                &q.slice(rows),
                &k.slice(rows),
                &v.slice(rows),
                self.heads,
            ));
        }
        let mut attended = apply(&layer.attended, &context);
        attended += x;
        self.normalize(&mut attended, &layer.attention_norm);
        let mut wide = apply(&layer.widen, &attended);
        wide.mapv_inplace(gelu_of);
        let mut out = apply(&layer.narrow, &wide);
        out += &attended;
        self.normalize(&mut out, &layer.output_norm);
        out
    }

    /// Layer norm of each of the rows of `x`, in place.
    fn normalize(&self, x: &mut Array2<f32>, norm: &Norm) {
        let h = self.hidden as f32;
        for mut row in x.rows_mut() {
            let mean = row.sum() / h;
            let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h;
            let scale = 1.0 / (variance + self.epsilon).sqrt();
            for (j, v) in row.iter_mut().enumerate() {
                *v = (*v - mean) * scale * norm.gain[j] + norm.bias[j];
            }
        }
    }
}

/// `x` (a row a token) through `linear`: `x · Wᵀ + b`.
fn apply(linear: &Linear, x: &Array2<f32>) -> Array2<f32> {
    let mut out = Array2::from_shape_fn((x.nrows(), linear.bias.len()), |(_, o)| linear.bias[o]);
    general_mat_mul(1.0, x, &linear.weight.t(), 1.0, &mut out);
    out
}

/// Scaled dot-product attention of each head over the tokens: each token's context, the
/// heads side by side.
fn attend(
    q: &ArrayView2<'_, f32>,
    k: &ArrayView2<'_, f32>,
    v: &ArrayView2<'_, f32>,
    heads: usize,
) -> Array2<f32> {
    let d = q.ncols() / heads;
    let scale = 1.0 / (d as f32).sqrt();
    let mut context = Array2::<f32>::zeros(q.raw_dim());
    for head in 0..heads {
        let columns = s![.., head * d..(head + 1) * d];
        let mut weights = q.slice(columns).dot(&k.slice(columns).t());
        for mut row in weights.rows_mut() {
            let top = row.fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            row.mapv_inplace(|w| ((w - top) * scale).exp());
            let total = row.sum();
            row /= total;
        }
        context
            .slice_mut(columns)
            .assign(&weights.dot(&v.slice(columns)));
    }
    context
}

/// BERT's gelu, with erf (not the tanh approximation).
fn gelu_of(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// erf to within 1.2e-7 (Numerical Recipes' erfc by Chebyshev fitting), in f64.
fn erf(x: f32) -> f32 {
    let z = f64::from(x).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let r = 1.0 - erfc;
    (if x >= 0.0 { r } else { -r }) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_its_known_values() {
        let table = [
            (0.0, 0.0),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
        ];
        for (x, expected) in table {
            assert!((erf(x) - expected).abs() < 1e-6, "erf({x}) = {}", erf(x));
        }
    }

    #[test]
    fn a_dense_layer_multiplies_by_the_transposed_weights_and_adds_the_bias() {
        // Two inputs, three outputs; rows [1, 2] and [0, 1].
        let linear = Linear {
            weight: ndarray::arr2(&[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
            bias: ndarray::arr1(&[0.5, 0.0, -1.0]),
        };
        let x = ndarray::arr2(&[[1.0, 2.0], [0.0, 1.0]]);
        assert_eq!(
            apply(&linear, &x),
            ndarray::arr2(&[[1.5, 2.0, 2.0], [0.5, 1.0, 0.0]])
        );
    }

    #[test]
    fn attention_to_one_token_is_that_tokens_value() {
        let (q, k, v) = (
            ndarray::arr2(&[[1.0, 2.0]]),
            ndarray::arr2(&[[3.0, 4.0]]),
            ndarray::arr2(&[[5.0, 6.0]]),
        );
        assert_eq!(
            attend(&q.view(), &k.view(), &v.view(), 2),
            ndarray::arr2(&[[5.0, 6.0]])
        );
    }
}
