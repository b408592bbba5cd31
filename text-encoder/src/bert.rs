//! A BERT encoder's weights and its forward pass on the CPU, in `f32`: token, position and
//! type embeddings, then each layer's self-attention and feed-forward block, each followed
//! by its residual and layer norm; the token states are then averaged (mean pooling) and
//! scaled to unit length, as sentence-transformers' models end.

use std::path::Path;

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2};
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

/// A dense layer: `out × in` weights, row by row, and `out` biases.
struct Linear {
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
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
        Ok(Linear {
            weight: self.get(&format!("{name}.weight"), &[outputs, inputs])?,
            bias: self.get(&format!("{name}.bias"), &[outputs])?,
            inputs,
            outputs,
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
        if shape.num_attention_heads == 0 || h % shape.num_attention_heads != 0 {
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
        let (n, h) = (ids.len(), self.hidden);
        let mut x = vec![0.0f32; n * h];
        for (i, &id) in ids.iter().enumerate() {
            let row = &mut x[i * h..(i + 1) * h];
            let word = &self.words[id as usize * h..(id as usize + 1) * h];
            let position = &self.position[i * h..(i + 1) * h];
            for (j, v) in row.iter_mut().enumerate() {
                *v = word[j] + position[j] + self.token_type[j];
            }
        }
        self.normalize(&mut x, &self.embedding_norm);
        for layer in &self.layers {
            self.layer(layer, &mut x, n);
        }
        let mut mean = vec![0.0f32; h];
        for row in x.chunks_exact(h) {
            for (m, v) in mean.iter_mut().zip(row) {
                *m += v;
            }
        }
        let length = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
        if length > 0.0 {
            mean.iter_mut().for_each(|v| *v /= length);
        }
        mean
    }

    /// One encoder layer over the `n` token states in `x`, in place.
    fn layer(&self, layer: &Layer, x: &mut [f32], n: usize) {
        let h = self.hidden;
        let q = apply(&layer.query, x, n);
        let k = apply(&layer.key, x, n);
        let v = apply(&layer.value, x, n);
        let mut context = vec![0.0f32; n * h];
        attend(&q, &k, &v, &mut context, n, h, self.heads);
        let mut out = apply(&layer.attended, &context, n);
        add_into(&mut out, x);
        self.normalize(&mut out, &layer.attention_norm);
        let mut wide = apply(&layer.widen, &out, n);
        wide.iter_mut().for_each(|v| *v = gelu_of(*v));
        let mut narrow = apply(&layer.narrow, &wide, n);
        add_into(&mut narrow, &out);
        self.normalize(&mut narrow, &layer.output_norm);
        x.copy_from_slice(&narrow);
    }

    /// Layer norm of each of the rows of `x`, in place.
    fn normalize(&self, x: &mut [f32], norm: &Norm) {
        let h = self.hidden;
        for row in x.chunks_exact_mut(h) {
            let mean = row.iter().sum::<f32>() / h as f32;
            let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
            let scale = 1.0 / (variance + self.epsilon).sqrt();
            for (j, v) in row.iter_mut().enumerate() {
                *v = (*v - mean) * scale * norm.gain[j] + norm.bias[j];
            }
        }
    }
}

/// `x` (`n` rows) through `linear`: `x · Wᵀ + b`.
fn apply(linear: &Linear, x: &[f32], n: usize) -> Vec<f32> {
    let (k, m) = (linear.inputs, linear.outputs);
    let mut out = Vec::with_capacity(n * m);
    for _ in 0..n {
        out.extend_from_slice(&linear.bias);
    }
    let shaped = |rows, columns, values| {
        ArrayView2::from_shape((rows, columns), values).expect("a layer's shape, checked at load")
    };
    let mut product =
        ArrayViewMut2::from_shape((n, m), &mut out[..]).expect("n rows of the layer's outputs");
    general_mat_mul(
        1.0,
        &shaped(n, k, x),
        &shaped(m, k, &linear.weight).t(),
        1.0,
        &mut product,
    );
    out
}

/// Scaled dot-product attention of each head over the `n` tokens, written to `context`.
fn attend(q: &[f32], k: &[f32], v: &[f32], context: &mut [f32], n: usize, h: usize, heads: usize) {
    let d = h / heads;
    let scale = 1.0 / (d as f32).sqrt();
    let mut weights = vec![0.0f32; n];
    for head in 0..heads {
        let at = head * d;
        for i in 0..n {
            let qi = &q[i * h + at..i * h + at + d];
            let mut top = f32::NEG_INFINITY;
            for (j, w) in weights.iter_mut().enumerate() {
                let kj = &k[j * h + at..j * h + at + d];
                *w = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                top = top.max(*w);
            }
            let mut total = 0.0;
            for w in &mut weights {
                *w = (*w - top).exp();
                total += *w;
            }
            let out = &mut context[i * h + at..i * h + at + d];
            for (j, w) in weights.iter().enumerate() {
                let vj = &v[j * h + at..j * h + at + d];
                for (o, x) in out.iter_mut().zip(vj) {
                    *o += w / total * x;
                }
            }
        }
    }
}

fn add_into(into: &mut [f32], x: &[f32]) {
    into.iter_mut().zip(x).for_each(|(a, b)| *a += b);
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
            weight: vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
            bias: vec![0.5, 0.0, -1.0],
            inputs: 2,
            outputs: 3,
        };
        assert_eq!(
            apply(&linear, &[1.0, 2.0, 0.0, 1.0], 2),
            [1.5, 2.0, 2.0, 0.5, 1.0, 0.0]
        );
    }

    #[test]
    fn attention_to_one_token_is_that_tokens_value() {
        let (q, k, v) = ([1.0, 2.0], [3.0, 4.0], [5.0, 6.0]);
        let mut context = [0.0; 2];
        attend(&q, &k, &v, &mut context, 1, 2, 2);
        assert_eq!(context, [5.0, 6.0]);
    }
}
