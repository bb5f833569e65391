//! The Gemma 4 vision tower (SigLIP-like, variable aspect ratio) and its projection into the
//! text embedding space: patchify → learned 2-D positions → encoder layers with clipped linears
//! and 2-D RoPE → 3×3 average pooling → weight-free RMSNorm → linear to the text width.

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{arange, clip, concatenate, cos, mean_axes, power, rsqrt, sin};
use mlx_rs::{Array, Dtype};

use crate::config::{Config, VisionConfig};
use crate::error::{Error, Result};
use crate::fused::geglu;
use crate::quant::Linear;
use crate::text::scalar;
use crate::weights::Weights;

/// A linear layer whose input and output are clamped to bounds stored in the checkpoint.
struct ClippedLinear {
    linear: Linear,
    bounds: Option<Bounds>,
}

/// A clipped linear's bounds, named as the checkpoint names them.
struct Bounds {
    input_min: Array,
    input_max: Array,
    output_min: Array,
    output_max: Array,
}

impl ClippedLinear {
    /// Loads `<path>.linear` and, when the config clips, the four scalar bounds.
    fn load(weights: &Weights<'_>, out: usize, inp: usize, clipped: bool) -> Result<Self> {
        let linear = Linear::load(&weights.at("linear"), out, inp)?;
        let bounds = if clipped {
            Some(Bounds {
                input_min: weights.float("input_min", &[])?,
                input_max: weights.float("input_max", &[])?,
                output_min: weights.float("output_min", &[])?,
                output_max: weights.float("output_max", &[])?,
            })
        } else {
            None
        };
        Ok(Self { linear, bounds })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = self.linear.arrays();
        if let Some(b) = &self.bounds {
            out.extend([&b.input_min, &b.input_max, &b.output_min, &b.output_max]);
        }
        out
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        match &self.bounds {
            None => self.linear.forward(x),
            Some(b) => {
                let x = clip(x, (&b.input_min, &b.input_max))?;
                Ok(clip(
                    self.linear.forward(&x)?,
                    (&b.output_min, &b.output_max),
                )?)
            }
        }
    }
}

/// An encoder layer's bidirectional attention with 2-D RoPE (`self_attn`).
struct VisionAttention {
    q_proj: ClippedLinear,
    k_proj: ClippedLinear,
    v_proj: ClippedLinear,
    o_proj: ClippedLinear,
    q_norm: Array,
    k_norm: Array,
    num_heads: i32,
    head_dim: i32,
    eps: f32,
}

impl VisionAttention {
    fn arrays(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        for linear in [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj] {
            out.extend(linear.arrays());
        }
        out.extend([&self.q_norm, &self.k_norm]);
        out
    }

    fn forward(&self, x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
        let len = x.shape()[1];
        let (heads, d, eps) = (self.num_heads, self.head_dim, self.eps);
        let split = |a: Array| a.reshape(&[1, len, heads, d]);
        let queries = float32_rms(&split(self.q_proj.forward(x)?)?, Some(&self.q_norm), eps)?;
        let keys = float32_rms(&split(self.k_proj.forward(x)?)?, Some(&self.k_norm), eps)?;
        let values = float32_rms(&split(self.v_proj.forward(x)?)?, None, eps)?;
        let queries = rope_2d(&queries, cos, sin, d)?.transpose_axes(&[0, 2, 1, 3])?;
        let keys = rope_2d(&keys, cos, sin, d)?.transpose_axes(&[0, 2, 1, 3])?;
        let values = values.transpose_axes(&[0, 2, 1, 3])?;
        // Bidirectional over the image's patches: nothing is masked.
        let out = fast::scaled_dot_product_attention(
            &queries,
            &keys,
            &values,
            1.0,
            None::<ScaledDotProductAttentionMask>,
            None,
        )?;
        self.o_proj.forward(
            &out.transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[1, len, heads * d])?,
        )
    }
}

/// An encoder layer's GeGLU feed-forward block (`mlp`).
struct VisionMlp {
    gate_proj: ClippedLinear,
    up_proj: ClippedLinear,
    down_proj: ClippedLinear,
}

impl VisionMlp {
    fn arrays(&self) -> Vec<&Array> {
        [&self.gate_proj, &self.up_proj, &self.down_proj]
            .into_iter()
            .flat_map(ClippedLinear::arrays)
            .collect()
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let gated = geglu(&self.gate_proj.forward(x)?, &self.up_proj.forward(x)?)?;
        self.down_proj.forward(&gated)
    }
}

/// One encoder layer (`vision_tower.encoder.layers.N`).
struct EncoderLayer {
    self_attn: VisionAttention,
    mlp: VisionMlp,
    input_layernorm: Array,
    post_attention_layernorm: Array,
    pre_feedforward_layernorm: Array,
    post_feedforward_layernorm: Array,
    eps: f32,
}

impl EncoderLayer {
    fn load(weights: &Weights<'_>, cfg: &VisionConfig) -> Result<Self> {
        let (d, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let width = cfg.num_attention_heads * cfg.head_dim;
        let clipped = cfg.use_clipped_linears;
        let linear = |name: &str, out: usize, inp: usize| {
            ClippedLinear::load(&weights.at(name), out, inp, clipped)
        };
        let q_proj = linear("self_attn.q_proj", width, d)?;
        let k_proj = linear("self_attn.k_proj", width, d)?;
        let v_proj = linear("self_attn.v_proj", width, d)?;
        let o_proj = linear("self_attn.o_proj", d, width)?;
        let mlp = VisionMlp {
            gate_proj: linear("mlp.gate_proj", inner, d)?,
            up_proj: linear("mlp.up_proj", inner, d)?,
            down_proj: linear("mlp.down_proj", d, inner)?,
        };
        let norm = |name: &str, dim: usize| weights.float(&format!("{name}.weight"), &[dim]);
        let self_attn = VisionAttention {
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            q_norm: norm("self_attn.q_norm", cfg.head_dim)?,
            k_norm: norm("self_attn.k_norm", cfg.head_dim)?,
            num_heads: cfg.num_attention_heads as i32,
            head_dim: cfg.head_dim as i32,
            eps: cfg.rms_norm_eps,
        };
        Ok(Self {
            self_attn,
            mlp,
            input_layernorm: norm("input_layernorm", d)?,
            post_attention_layernorm: norm("post_attention_layernorm", d)?,
            pre_feedforward_layernorm: norm("pre_feedforward_layernorm", d)?,
            post_feedforward_layernorm: norm("post_feedforward_layernorm", d)?,
            eps: cfg.rms_norm_eps,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = self.self_attn.arrays();
        out.extend(self.mlp.arrays());
        out.extend([
            &self.input_layernorm,
            &self.post_attention_layernorm,
            &self.pre_feedforward_layernorm,
            &self.post_feedforward_layernorm,
        ]);
        out
    }

    fn forward(&self, x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
        let eps = self.eps;
        let normed = fast::rms_norm(x, Some(&self.input_layernorm), eps)?;
        let attn = self.self_attn.forward(&normed, cos, sin)?;
        let h = x.add(fast::rms_norm(
            &attn,
            Some(&self.post_attention_layernorm),
            eps,
        )?)?;
        let normed = fast::rms_norm(&h, Some(&self.pre_feedforward_layernorm), eps)?;
        let mlp = self.mlp.forward(&normed)?;
        Ok(h.add(fast::rms_norm(
            &mlp,
            Some(&self.post_feedforward_layernorm),
            eps,
        )?)?)
    }
}

/// The vision tower plus `embed_vision`.
pub struct VisionTower {
    cfg: VisionConfig,
    dtype: Dtype,
    input_proj: Linear,
    position_table: Array,
    layers: Vec<EncoderLayer>,
    projection: Linear,
    text_eps: f32,
}

/// Pixels of one preprocessed image: `[3, height, width]` float32 in [0, 1], both sides
/// multiples of patch × pooling (48 for Gemma 4).
pub struct Pixels<'a> {
    pub data: &'a [f32],
    pub height: usize,
    pub width: usize,
}

impl VisionTower {
    /// Loads `vision_tower.*` and `embed_vision.*`; `None` when the config has no vision tower.
    /// What is missing or wrong is recorded in the store and stands in as zeros.
    pub fn load(root: &Weights<'_>, config: &Config) -> Result<Option<Self>> {
        let Some(cfg) = config.vision.clone() else {
            return Ok(None);
        };
        if cfg.standardize {
            return Err(Error::Unsupported(
                "vision standardization (Gemma 4 26B/31B towers)".into(),
            ));
        }
        let d = cfg.hidden_size;
        let patch_dim = 3 * cfg.patch_size * cfg.patch_size;
        let tower = root.at("vision_tower");
        let patch_embedder = tower.at("patch_embedder");
        let input_proj = Linear::load(&patch_embedder.at("input_proj"), d, patch_dim)?;
        let position_table = patch_embedder.float(
            "position_embedding_table",
            &[2, cfg.position_embedding_size, d],
        )?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| EncoderLayer::load(&tower.at(&format!("encoder.layers.{i}")), &cfg))
            .collect::<Result<Vec<_>>>()?;
        let projection = Linear::load(
            &root.at("embed_vision.embedding_projection"),
            config.text.hidden_size,
            d,
        )?;
        Ok(Some(Self {
            text_eps: config.text.rms_norm_eps,
            cfg,
            dtype: root.dtype(),
            input_proj,
            position_table,
            layers,
            projection,
        }))
    }

    /// Every weight array of the tower (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.input_proj.arrays();
        out.push(&self.position_table);
        for layer in &self.layers {
            out.extend(layer.arrays());
        }
        out.extend(self.projection.arrays());
        out
    }

    /// Soft tokens the tower produces for an image of `height` × `width` pixels.
    pub fn soft_tokens(&self, height: usize, width: usize) -> usize {
        let cell = self.cfg.patch_size * self.cfg.pooling_kernel_size;
        (height / cell) * (width / cell)
    }

    /// Projected features `[soft_tokens, text_hidden]` of one image (not scaled by √hidden).
    pub fn encode(&self, pixels: &Pixels<'_>) -> Result<Array> {
        let patch = self.cfg.patch_size;
        let cell = patch * self.cfg.pooling_kernel_size;
        let (h, w) = (pixels.height, pixels.width);
        if h == 0 || w == 0 || h % cell != 0 || w % cell != 0 || pixels.data.len() != 3 * h * w {
            return Err(Error::Input(format!(
                "image pixels must be [3, H, W] with H and W multiples of {cell}; got {} values for {h}×{w}",
                pixels.data.len()
            )));
        }
        let (ph, pw) = (h / patch, w / patch);
        if ph.max(pw) > self.cfg.position_embedding_size {
            return Err(Error::Input(format!(
                "image of {ph}×{pw} patches exceeds the position table"
            )));
        }
        let x = self.embed_patches(pixels, ph, pw)?;
        let (cos, sin) = self.rope_tables(ph, pw)?;
        let mut x = x;
        for layer in &self.layers {
            x = layer.forward(&x, &cos, &sin)?;
        }
        let pooled = self.pool(&x, ph, pw)?;
        let normed = fast::rms_norm(&pooled, None, self.text_eps)?;
        self.projection.forward(&normed)
    }

    /// Patchify (row-major patches; each patch ordered row, column, channel), map to [-1, 1],
    /// project, and add the learned column and row embeddings.
    fn embed_patches(&self, pixels: &Pixels<'_>, ph: usize, pw: usize) -> Result<Array> {
        let patch = self.cfg.patch_size as i32;
        let img = Array::from_slice(pixels.data, &[3, pixels.height as i32, pixels.width as i32]);
        let patches = img
            .reshape(&[3, ph as i32, patch, pw as i32, patch])?
            .transpose_axes(&[1, 3, 2, 4, 0])?
            .reshape(&[(ph * pw) as i32, 3 * patch * patch])?;
        let patches = patches
            .subtract(Array::from_f32(0.5))?
            .multiply(Array::from_f32(2.0))?
            .as_dtype(self.dtype)?;
        let x = self.input_proj.forward(&patches)?;
        let cols: Vec<i32> = (0..ph * pw).map(|i| (i % pw) as i32).collect();
        let rows: Vec<i32> = (0..ph * pw).map(|i| (i / pw) as i32).collect();
        let col_table = self.position_table.index(0);
        let row_table = self.position_table.index(1);
        let pos = col_table
            .take_axis(Array::from_slice(&cols, &[cols.len() as i32]), 0)?
            .add(row_table.take_axis(Array::from_slice(&rows, &[rows.len() as i32]), 0)?)?;
        Ok(x.add(pos)?.expand_dims(0)?)
    }

    /// cos/sin `[1, L, 1, head_dim]` of the 2-D RoPE: the first half of each head rotates with
    /// the patch column, the second with its row (base from the config, 100 for Gemma 4).
    fn rope_tables(&self, ph: usize, pw: usize) -> Result<(Array, Array)> {
        let half_dim = self.cfg.head_dim / 2; // channels per spatial axis
        let quarter = half_dim / 2;
        let base = self
            .cfg
            .rope_parameters
            .as_ref()
            .map(|r| r.rope_theta)
            .unwrap_or(100.0);
        let exponents = arange::<i32, f32>(0, quarter as i32, None)?
            .multiply(Array::from_f32(2.0 / half_dim as f32))?;
        let timescale = power(Array::from_f32(base), &exponents)?;
        let l = (ph * pw) as i32;
        let mut cos_parts = Vec::new();
        let mut sin_parts = Vec::new();
        for axis in 0..2 {
            let pos: Vec<f32> = (0..ph * pw)
                .map(|i| {
                    if axis == 0 {
                        (i % pw) as f32
                    } else {
                        (i / pw) as f32
                    }
                })
                .collect();
            let angles = Array::from_slice(&pos, &[l, 1]).divide(&timescale)?;
            let (c, s) = (cos(&angles)?, sin(&angles)?);
            cos_parts.extend([c.clone(), c]);
            sin_parts.extend([s.clone(), s]);
        }
        let shape = [1, l, 1, self.cfg.head_dim as i32];
        let cos = concatenate(&cos_parts, -1)?
            .as_dtype(self.dtype)?
            .reshape(&shape)?;
        let sin = concatenate(&sin_parts, -1)?
            .as_dtype(self.dtype)?
            .reshape(&shape)?;
        Ok((cos, sin))
    }

    /// k×k average pooling over patch positions (float32), then × √hidden.
    fn pool(&self, x: &Array, ph: usize, pw: usize) -> Result<Array> {
        let k = self.cfg.pooling_kernel_size as i32;
        let d = self.cfg.hidden_size as i32;
        let (gh, gw) = (ph as i32 / k, pw as i32 / k);
        let grid = x.as_dtype(Dtype::Float32)?.reshape(&[gh, k, gw, k, d])?;
        let pooled = mean_axes(&grid, &[1, 3], false)?
            .reshape(&[gh * gw, d])?
            .as_dtype(self.dtype)?;
        Ok(pooled.multiply(scalar((self.cfg.hidden_size as f32).sqrt(), self.dtype)?)?)
    }
}

/// 2-D RoPE by rotate-half within each spatial half of the head: `[-x2, x1]` per half.
fn rope_2d(x: &Array, cos: &Array, sin: &Array, head_dim: i32) -> Result<Array> {
    let half = head_dim / 2;
    let quarter = half / 2;
    let mut rotated = Vec::with_capacity(4);
    for start in [0, half] {
        let x1 = x.index((.., .., .., start..start + quarter));
        let x2 = x.index((.., .., .., start + quarter..start + half));
        rotated.push(x2.negative()?);
        rotated.push(x1);
    }
    Ok(x.multiply(cos)?
        .add(concatenate(&rotated, -1)?.multiply(sin)?)?)
}

/// RMSNorm computed in float32 with the weight applied in float32, cast back (as the reference
/// does for the tower's q/k/v norms).
fn float32_rms(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    let xf = x.as_dtype(Dtype::Float32)?;
    let var = mean_axes(&xf.square()?, &[-1], true)?;
    let mut normed = xf.multiply(rsqrt(var.add(Array::from_f32(eps))?)?)?;
    if let Some(w) = weight {
        normed = normed.multiply(w.as_dtype(Dtype::Float32)?)?;
    }
    Ok(normed.as_dtype(x.dtype())?)
}
