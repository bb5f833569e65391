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
use crate::quant::{load_linear, Linear};
use crate::text::scalar;
use crate::tuning::Tuning;
use crate::weights::WeightStore;

/// A linear layer whose input and output are clamped to bounds stored in the checkpoint.
struct ClippedLinear {
    linear: Linear,
    bounds: Option<[Array; 4]>, // input_min, input_max, output_min, output_max
}

impl ClippedLinear {
    fn forward(&self, x: &Array, tuning: &Tuning) -> Result<Array> {
        match &self.bounds {
            None => self.linear.forward(x, tuning),
            Some([in_min, in_max, out_min, out_max]) => {
                let x = clip(x, (in_min, in_max))?;
                Ok(clip(self.linear.forward(&x, tuning)?, (out_min, out_max))?)
            }
        }
    }
}

struct EncoderLayer {
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    o: ClippedLinear,
    q_norm: Array,
    k_norm: Array,
    gate: ClippedLinear,
    up: ClippedLinear,
    down: ClippedLinear,
    norms: [Array; 4], // input, post_attention, pre_feedforward, post_feedforward
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
    tuning: Tuning,
}

/// Pixels of one preprocessed image: `[3, height, width]` float32 in [0, 1], both sides
/// multiples of patch × pooling (48 for Gemma 4).
pub struct Pixels<'a> {
    pub data: &'a [f32],
    pub height: usize,
    pub width: usize,
}

impl VisionTower {
    /// Loads `vision_tower.*` and `embed_vision.*`; `None` when tensors were missing or wrong.
    pub fn load(
        store: &mut WeightStore,
        config: &Config,
        dtype: Dtype,
        tuning: Tuning,
    ) -> Result<Option<Self>> {
        let Some(cfg) = config.vision.clone() else {
            return Ok(None);
        };
        if cfg.standardize {
            return Err(Error::Unsupported(
                "vision standardization (Gemma 4 26B/31B towers)".into(),
            ));
        }
        let q = &config.quantization;
        let d = cfg.hidden_size;
        let patch_dim = 3 * cfg.patch_size * cfg.patch_size;
        let input_proj = load_linear(
            store,
            q,
            "vision_tower.patch_embedder.input_proj",
            d,
            patch_dim,
            dtype,
        )?;
        let position_table = store.take_float(
            "vision_tower.patch_embedder.position_embedding_table",
            &[2, cfg.position_embedding_size, d],
            dtype,
        )?;
        let mut layers = Vec::new();
        let mut complete = true;
        for i in 0..cfg.num_hidden_layers {
            match load_layer(store, config, &cfg, i, dtype)? {
                Some(l) => layers.push(l),
                None => complete = false,
            }
        }
        let projection = load_linear(
            store,
            q,
            "embed_vision.embedding_projection",
            config.text.hidden_size,
            d,
            dtype,
        )?;
        let (Some(input_proj), Some(position_table), Some(projection)) =
            (input_proj, position_table, projection)
        else {
            return Ok(None);
        };
        if !complete {
            return Ok(None);
        }
        Ok(Some(Self {
            text_eps: config.text.rms_norm_eps,
            cfg,
            dtype,
            input_proj,
            position_table,
            layers,
            projection,
            tuning,
        }))
    }

    /// Every weight array of the tower (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.input_proj.arrays();
        out.push(&self.position_table);
        for l in &self.layers {
            for c in [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down] {
                out.extend(c.linear.arrays());
                out.extend(c.bounds.iter().flatten());
            }
            out.extend([&l.q_norm, &l.k_norm]);
            out.extend(&l.norms);
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
        let (p, k) = (self.cfg.patch_size, self.cfg.pooling_kernel_size);
        let (h, w) = (pixels.height, pixels.width);
        if h == 0
            || w == 0
            || h % (p * k) != 0
            || w % (p * k) != 0
            || pixels.data.len() != 3 * h * w
        {
            return Err(Error::Input(format!(
                "image pixels must be [3, H, W] with H and W multiples of {}; got {} values for {h}×{w}",
                p * k,
                pixels.data.len()
            )));
        }
        let (ph, pw) = (h / p, w / p);
        if ph.max(pw) > self.cfg.position_embedding_size {
            return Err(Error::Input(format!(
                "image of {ph}×{pw} patches exceeds the position table"
            )));
        }
        let x = self.embed_patches(pixels, ph, pw)?;
        let (cos, sin) = self.rope_tables(ph, pw)?;
        let mut x = x;
        for layer in &self.layers {
            x = self.layer_forward(layer, &x, &cos, &sin)?;
        }
        let pooled = self.pool(&x, ph, pw)?;
        let normed = fast::rms_norm(&pooled, None, self.text_eps)?;
        self.projection.forward(&normed, &self.tuning)
    }

    /// Patchify (row-major patches; each patch ordered row, column, channel), map to [-1, 1],
    /// project, and add the learned column and row embeddings.
    fn embed_patches(&self, pixels: &Pixels<'_>, ph: usize, pw: usize) -> Result<Array> {
        let p = self.cfg.patch_size as i32;
        let img = Array::from_slice(pixels.data, &[3, pixels.height as i32, pixels.width as i32]);
        let patches = img
            .reshape(&[3, ph as i32, p, pw as i32, p])?
            .transpose_axes(&[1, 3, 2, 4, 0])?
            .reshape(&[(ph * pw) as i32, 3 * p * p])?;
        let patches = patches
            .subtract(Array::from_f32(0.5))?
            .multiply(Array::from_f32(2.0))?
            .as_dtype(self.dtype)?;
        let x = self.input_proj.forward(&patches, &self.tuning)?;
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

    /// Rotate-half within each spatial half of the head: `[-x2, x1]` per half.
    fn rope(&self, x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
        let half = (self.cfg.head_dim / 2) as i32;
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

    fn layer_forward(
        &self,
        l: &EncoderLayer,
        x: &Array,
        cos: &Array,
        sin: &Array,
    ) -> Result<Array> {
        let (eps, t) = (self.cfg.rms_norm_eps, &self.tuning);
        let normed = fast::rms_norm(x, Some(&l.norms[0]), eps)?;
        let attn = self.attention(l, &normed, cos, sin)?;
        let h = x.add(fast::rms_norm(&attn, Some(&l.norms[1]), eps)?)?;
        let u = fast::rms_norm(&h, Some(&l.norms[2]), eps)?;
        let m = l
            .down
            .forward(&geglu(&l.gate.forward(&u, t)?, &l.up.forward(&u, t)?)?, t)?;
        Ok(h.add(fast::rms_norm(&m, Some(&l.norms[3]), eps)?)?)
    }

    fn attention(&self, l: &EncoderLayer, x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
        let len = x.shape()[1];
        let heads = self.cfg.num_attention_heads as i32;
        let d = self.cfg.head_dim as i32;
        let eps = self.cfg.rms_norm_eps;
        let split = |a: Array| a.reshape(&[1, len, heads, d]);
        let q = float32_rms(&split(l.q.forward(x, &self.tuning)?)?, Some(&l.q_norm), eps)?;
        let k = float32_rms(&split(l.k.forward(x, &self.tuning)?)?, Some(&l.k_norm), eps)?;
        let v = float32_rms(&split(l.v.forward(x, &self.tuning)?)?, None, eps)?;
        let q = self.rope(&q, cos, sin)?.transpose_axes(&[0, 2, 1, 3])?;
        let k = self.rope(&k, cos, sin)?.transpose_axes(&[0, 2, 1, 3])?;
        let v = v.transpose_axes(&[0, 2, 1, 3])?;
        // Bidirectional over the image's patches: nothing is masked.
        let out = fast::scaled_dot_product_attention(
            &q,
            &k,
            &v,
            1.0,
            None::<ScaledDotProductAttentionMask>,
            None,
        )?;
        l.o.forward(
            &out.transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[1, len, heads * d])?,
            &self.tuning,
        )
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

fn load_layer(
    store: &mut WeightStore,
    config: &Config,
    cfg: &VisionConfig,
    i: usize,
    dtype: Dtype,
) -> Result<Option<EncoderLayer>> {
    let p = format!("vision_tower.encoder.layers.{i}");
    let (d, inner) = (cfg.hidden_size, cfg.intermediate_size);
    let hd = cfg.num_attention_heads * cfg.head_dim;
    let mut lin = |name: &str, out: usize, inp: usize| -> Result<Option<ClippedLinear>> {
        let path = format!("{p}.{name}");
        let linear = load_linear(
            store,
            &config.quantization,
            &format!("{path}.linear"),
            out,
            inp,
            dtype,
        )?;
        let bounds = if cfg.use_clipped_linears {
            let names = ["input_min", "input_max", "output_min", "output_max"];
            let got: Vec<Option<Array>> = names
                .iter()
                .map(|b| store.take_float(&format!("{path}.{b}"), &[], dtype))
                .collect::<Result<_>>()?;
            match <[Option<Array>; 4]>::try_from(got) {
                Ok([Some(a), Some(b), Some(c), Some(d)]) => Some(Some([a, b, c, d])),
                _ => None,
            }
        } else {
            Some(None)
        };
        Ok(linear
            .zip(bounds)
            .map(|(linear, bounds)| ClippedLinear { linear, bounds }))
    };
    let q = lin("self_attn.q_proj", hd, d)?;
    let k = lin("self_attn.k_proj", hd, d)?;
    let v = lin("self_attn.v_proj", hd, d)?;
    let o = lin("self_attn.o_proj", d, hd)?;
    let gate = lin("mlp.gate_proj", inner, d)?;
    let up = lin("mlp.up_proj", inner, d)?;
    let down = lin("mlp.down_proj", d, inner)?;
    let mut norm =
        |name: &str, dim: usize| store.take_float(&format!("{p}.{name}.weight"), &[dim], dtype);
    let q_norm = norm("self_attn.q_norm", cfg.head_dim)?;
    let k_norm = norm("self_attn.k_norm", cfg.head_dim)?;
    let n0 = norm("input_layernorm", d)?;
    let n1 = norm("post_attention_layernorm", d)?;
    let n2 = norm("pre_feedforward_layernorm", d)?;
    let n3 = norm("post_feedforward_layernorm", d)?;
    let (Some(q), Some(k), Some(v), Some(o), Some(gate), Some(up), Some(down)) =
        (q, k, v, o, gate, up, down)
    else {
        return Ok(None);
    };
    let (Some(q_norm), Some(k_norm), Some(n0), Some(n1), Some(n2), Some(n3)) =
        (q_norm, k_norm, n0, n1, n2, n3)
    else {
        return Ok(None);
    };
    Ok(Some(EncoderLayer {
        q,
        k,
        v,
        o,
        q_norm,
        k_norm,
        gate,
        up,
        down,
        norms: [n0, n1, n2, n3],
    }))
}
