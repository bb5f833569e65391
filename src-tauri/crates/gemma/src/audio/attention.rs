//! The audio tower's chunked local self-attention: queries in blocks, each attending a window
//! of past keys, with relative position logits, a softcap and masks (docs/AUDIO.md).

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{
    arange, concatenate, cos, einsum, exp, logaddexp, pad, select, sin, softmax_axis, tanh,
};
use mlx_rs::{Array, Dtype};

use super::{scalar, ClippableLinear};
use crate::config::AudioConfig;
use crate::error::Result;
use crate::weights::Weights;

/// The local attention's geometry: queries in blocks of `chunk`, each seeing `context` key
/// slots (`past` before the block, the block itself, `future` after it).
#[derive(Debug, Clone, Copy)]
pub(super) struct Chunking {
    pub(super) chunk: usize,
    pub(super) past: usize,
    pub(super) future: usize,
}

impl Chunking {
    pub(super) fn context(self) -> usize {
        self.chunk + self.past + self.future
    }

    /// Per block, query and key slot: may the query see the key? True for keys at most
    /// `past - 1` behind or `future - 1` ahead (the reference's own bounds), and real frames.
    pub(super) fn condition(self, invalid: &[bool]) -> (usize, Vec<bool>) {
        let (w, c, t) = (self.chunk, self.context(), invalid.len());
        let blocks = t.div_ceil(w);
        let mut out = Vec::with_capacity(blocks * w * c);
        for u in 0..blocks {
            for q in 0..w {
                for slot in 0..c {
                    let dist = (q + self.past) as isize - slot as isize;
                    let near = if dist >= 0 {
                        (dist as usize) < self.past
                    } else {
                        ((-dist) as usize) < self.future
                    };
                    let pos = (u * w + slot) as isize - self.past as isize;
                    let real = pos >= 0 && (pos as usize) < t && !invalid[pos as usize];
                    out.push(near && real);
                }
            }
        }
        (blocks, out)
    }
}

/// Chunked local self-attention with relative position logits and a softcap (`self_attn`).
pub(super) struct AudioAttention {
    q_proj: ClippableLinear,
    k_proj: ClippableLinear,
    v_proj: ClippableLinear,
    post: ClippableLinear,
    /// `q_scale · softplus(per_dim_scale)` `[head_dim]`, in the stored dtype (quirk 1).
    query_scale: Array,
    key_scale: Array,
    /// Relative position keys `[heads, head_dim, past + future + 1]`, float32 (quirk 2).
    relative: Array,
    heads: i32,
    head_dim: i32,
    chunking: Chunking,
    softcap: Array,
    invalid_logit: Array,
}

impl AudioAttention {
    pub(super) fn load(
        weights: &Weights<'_>,
        cfg: &AudioConfig,
        chunking: Chunking,
    ) -> Result<Self> {
        let d = cfg.hidden_size;
        let heads = cfg.num_attention_heads;
        let head_dim = d / heads;
        let per_dim_scale = weights.float("per_dim_scale", &[head_dim])?;
        let relative_k = weights.float("relative_k_proj.weight", &[d, d])?;
        // Quirk 1: softplus and the product run in the stored dtype (bf16), op by op.
        let stored = per_dim_scale.dtype();
        let q_scale = (head_dim as f64).powf(-0.5) / std::f64::consts::LN_2;
        let softplus = logaddexp(&per_dim_scale, scalar(0.0, stored)?)?;
        let query_scale = scalar(q_scale as f32, stored)?.multiply(&softplus)?;
        let k_scale = (1.0 + std::f64::consts::E).ln() / std::f64::consts::LN_2;
        let relative = relative_keys(&relative_k, d, heads, chunking)?;
        Ok(Self {
            q_proj: ClippableLinear::load(&weights.at("q_proj"), d, d)?,
            k_proj: ClippableLinear::load(&weights.at("k_proj"), d, d)?,
            v_proj: ClippableLinear::load(&weights.at("v_proj"), d, d)?,
            post: ClippableLinear::load(&weights.at("post"), d, d)?,
            query_scale,
            key_scale: Array::from_f32(k_scale as f32),
            relative,
            heads: heads as i32,
            head_dim: head_dim as i32,
            chunking,
            softcap: Array::from_f32(cfg.attention_logit_cap),
            invalid_logit: Array::from_f32(cfg.attention_invalid_logits_value),
        })
    }

    pub(super) fn arrays(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        for linear in [&self.q_proj, &self.k_proj, &self.v_proj, &self.post] {
            out.extend(linear.arrays());
        }
        out.extend([&self.query_scale, &self.relative]);
        out
    }

    /// `x` `[1, T, D]` float32; `condition` `[1, 1, U, W, C]` from [`Chunking::condition`].
    pub(super) fn forward(&self, x: &Array, blocks: i32, condition: &Array) -> Result<Array> {
        let t = x.shape()[1];
        let (n, h) = (self.heads, self.head_dim);
        let Chunking {
            chunk,
            past,
            future,
        } = self.chunking;
        let (w, c) = (chunk as i32, self.chunking.context() as i32);
        let split =
            |a: Array| -> Result<Array> { Ok(a.as_dtype(Dtype::Float32)?.reshape(&[1, t, n, h])?) };
        let q = split(self.q_proj.forward(x)?)?.multiply(&self.query_scale)?;
        let k = split(self.k_proj.forward(x)?)?.multiply(&self.key_scale)?;
        let v = split(self.v_proj.forward(x)?)?;

        // Queries in blocks [1, U, W, N, H]; keys and values as each block's context [1, U, C, N, H].
        let padded = blocks * w;
        let q = pad(&q, &[(0, 0), (0, padded - t), (0, 0), (0, 0)], None, None)?
            .reshape(&[1, blocks, w, n, h])?;
        let starts: Vec<i32> = (0..blocks * c).map(|i| (i / c) * w + i % c).collect();
        let gather = Array::from_slice(&starts, &[blocks, c]);
        let context = |a: &Array| -> Result<Array> {
            let widths = [(0, 0), (past as i32, future as i32 + w - 1), (0, 0), (0, 0)];
            Ok(pad(a, &widths, None, None)?.take_axis(&gather, 1)?)
        };
        let (k, v) = (context(&k)?, context(&v)?);

        let queries = q.transpose_axes(&[0, 3, 1, 2, 4])?; // [1, N, U, W, H]
        let term_ac = queries.matmul(k.transpose_axes(&[0, 3, 1, 4, 2])?)?;
        let span = (past + future + 1) as i32;
        let term_bd = queries
            .reshape(&[1, n, blocks * w, h])?
            .matmul(&self.relative)?
            .reshape(&[1, n, blocks, w, span])?;
        // Relative shift: row q's offsets become key slots (pad, flatten, drop, reshape).
        let term_bd = pad(
            &term_bd,
            &[(0, 0), (0, 0), (0, 0), (0, 0), (0, c + 1 - span)],
            None,
            None,
        )?
        .reshape(&[1, n, blocks, w * (c + 1)])?
        .index((.., .., .., ..w * c))
        .reshape(&[1, n, blocks, w, c])?;
        let logits = term_ac.add(term_bd)?;
        let logits = tanh(logits.divide(&self.softcap)?)?.multiply(&self.softcap)?;
        let logits = select(condition, &logits, &self.invalid_logit)?;
        let probs = softmax_axis(&logits, -1, None)?;
        let out = einsum("bnuwc,bucnh->buwnh", [&probs, &v])?
            .reshape(&[1, padded, n, h])?
            .index((.., ..t))
            .reshape(&[1, t, n * h])?;
        self.post.forward(&out)
    }
}

/// Relative position keys of one layer, `[heads, head_dim, past + future + 1]` float32, for
/// offsets past, past-1, …, -future: sinusoids of the offsets cast to the weight's dtype, projected
/// in that dtype, then cast to float32 (quirk 2).
fn relative_keys(weight: &Array, d: usize, heads: usize, chunking: Chunking) -> Result<Array> {
    let timescales = d / 2;
    let increment = (10000f64).ln() / (timescales.saturating_sub(1).max(1)) as f64;
    let inv = exp(arange::<i32, f32>(0, timescales as i32, None)?
        .multiply(Array::from_f32(-increment as f32))?)?;
    let offsets: Vec<f32> = (-(chunking.future as i32)..=chunking.past as i32)
        .rev()
        .map(|p| p as f32)
        .collect();
    let span = offsets.len() as i32;
    let scaled = Array::from_slice(&offsets, &[span, 1]).multiply(inv.reshape(&[1, -1])?)?;
    let timing = concatenate(&[sin(&scaled)?, cos(&scaled)?], -1)?.as_dtype(weight.dtype())?;
    let projected = timing.matmul(weight.transpose()?)?;
    let head_dim = (d / heads) as i32;
    Ok(projected
        .reshape(&[span, heads as i32, head_dim])?
        .as_dtype(Dtype::Float32)?
        .transpose_axes(&[1, 2, 0])?)
}
