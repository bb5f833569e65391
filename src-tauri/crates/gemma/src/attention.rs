//! Self-attention of one decoder layer (`self_attn` in the checkpoint): q/k/v projections with
//! per-head RMSNorm and RoPE, K/V cached or shared (through the pass's [`StepKv`], whatever
//! the cache's kind), and the single-query decode path.

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{broadcast_to, concatenate, ones_like, select, softmax_axis};
use mlx_rs::Array;

use crate::config::TextConfig;
use crate::error::{Error, Result};
use crate::kv::{Mask, Offsets, StepKv};
use crate::layers::{LayerSpec, Rope};
use crate::lora::{LayerAdapter, Target};
use crate::quant::{Linear, SideBySide};
use crate::tuning::DecodeAttention;
use crate::weights::Weights;

/// A decoder layer's attention.
pub(crate) struct Attention {
    /// `q_proj`, or `q_proj | k_proj | v_proj` side by side in layers that own their K/V.
    qkv_proj: SideBySide,
    o_proj: Linear,
    q_norm: Array,
    /// `k_norm` of layers that own their K/V.
    k_norm: Option<Array>,
    /// `[heads + 2·kv_heads, head_dim]`: q_norm, k_norm and ones (v has no scale) per head, for
    /// normalizing the fused q|k|v output with one RMSNorm and one multiply.
    head_scales: Option<Array>,
    /// The proportional RoPE's frequencies (`None` for the default RoPE).
    rope_freqs: Option<Array>,
    /// The layer's geometry: its kind, where its K/V come from, its RoPE.
    spec: LayerSpec,
    num_heads: i32,
    num_kv_heads: i32,
    head_dim: i32,
    eps: f32,
    /// Whether MLX runs one query's attention for this head size as a fused kernel.
    fused_single_query: bool,
    /// How a decode step composes attention where it does not.
    decode_attention: DecodeAttention,
}

impl Attention {
    /// Loads `self_attn` of the layer `spec` describes; K/V projections only where it owns them.
    pub fn load(weights: &Weights<'_>, config: &TextConfig, spec: &LayerSpec) -> Result<Self> {
        let hidden = config.hidden_size;
        let d = spec.head_dim;
        let (heads, kv_heads) = (config.num_attention_heads, config.num_key_value_heads);
        let q_proj = Linear::load(&weights.at("q_proj"), heads * d, hidden)?;
        let o_proj = Linear::load(&weights.at("o_proj"), hidden, heads * d)?;
        let q_norm = weights.float("q_norm.weight", &[d])?;
        let (qkv_proj, k_norm) = if spec.owns_kv() {
            let k_proj = Linear::load(&weights.at("k_proj"), kv_heads * d, hidden)?;
            let v_proj = Linear::load(&weights.at("v_proj"), kv_heads * d, hidden)?;
            let k_norm = weights.float("k_norm.weight", &[d])?;
            (SideBySide::new(vec![q_proj, k_proj, v_proj])?, Some(k_norm))
        } else {
            (SideBySide::new(vec![q_proj])?, None)
        };
        let head_scales = match (&k_norm, &qkv_proj) {
            (Some(k_norm), SideBySide::Fused { .. }) => {
                let (h, kvh, di) = (heads as i32, kv_heads as i32, d as i32);
                Some(concatenate(
                    &[
                        broadcast_to(&q_norm, &[h, di])?,
                        broadcast_to(k_norm, &[kvh, di])?,
                        ones_like(&broadcast_to(k_norm, &[kvh, di])?)?,
                    ],
                    0,
                )?)
            }
            _ => None,
        };
        let rope_freqs = match &spec.rope {
            Rope::Default { .. } => None,
            Rope::Proportional { periods, .. } => {
                Some(Array::from_slice(periods, &[periods.len() as i32]))
            }
        };
        Ok(Self {
            qkv_proj,
            o_proj,
            q_norm,
            k_norm,
            head_scales,
            rope_freqs,
            spec: spec.clone(),
            num_heads: heads as i32,
            num_kv_heads: kv_heads as i32,
            head_dim: d as i32,
            eps: config.rms_norm_eps,
            fused_single_query: weights.tuning().fused_single_query(d as i32),
            decode_attention: weights.tuning().decode_attention,
        })
    }

    /// The weight arrays (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.qkv_proj.arrays();
        out.extend(self.o_proj.arrays());
        out.push(&self.q_norm);
        out.extend(self.k_norm.iter());
        out.extend(self.head_scales.iter());
        out.extend(self.rope_freqs.iter());
        out
    }

    /// Attention over `x` (`[rows, T, hidden]`): the projections, the per-head norms and RoPE
    /// run once for every row; `kv` writes every row's new keys and values into its cache (or
    /// hands back what the producer layer attended) and gives the rows' positions and masks;
    /// each group of rows that attends together (see [`crate::kv::Attended`]) attends once.
    /// Each row's output is exactly what it would be alone. `adapter`: the layer's updates of
    /// its projections, if an adapter is on.
    pub fn forward(
        &self,
        x: &Array,
        kv: &mut StepKv<'_, '_>,
        adapter: Option<&LayerAdapter>,
    ) -> Result<Array> {
        let qkv = adapter.and_then(|a| a.qkv.as_ref());
        let (joined, projected) = self.project(x, self.spec.owns_kv(), qkv)?;
        let (queries, new_kv) = self.heads(joined.as_ref(), &projected, &kv.offsets())?;
        let attended = kv.update_and_fetch(&self.spec, new_kv)?;
        let mask = kv.mask(self.spec.kind);
        let n = attended.len();
        if n != 1 && n as i32 != queries.shape()[0] {
            return Err(Error::Input(format!(
                "{} rows of input for {n} sequences",
                queries.shape()[0]
            )));
        }
        let mut outs = Vec::with_capacity(n);
        for (i, (keys, values)) in attended.iter().enumerate() {
            let queries = match n {
                1 => queries.clone(),
                _ => queries.index(i as i32..i as i32 + 1),
            };
            outs.push(self.attend(&queries, keys, values, &mask)?);
        }
        let out = match outs.len() {
            1 => outs.swap_remove(0),
            _ => concatenate(&outs, 0)?,
        };
        self.o_proj
            .forward_with(&out, adapter.and_then(|a| a.o.as_ref()))
    }

    /// The dense weight of projection `target` (for DoRA's norms); `None` for one the layer
    /// does not run.
    pub fn base_weight(&self, target: Target) -> Result<Option<Array>> {
        match target {
            Target::QProj => self.qkv_proj.part_weight(0),
            Target::KProj if self.spec.owns_kv() => self.qkv_proj.part_weight(1),
            Target::VProj if self.spec.owns_kv() => self.qkv_proj.part_weight(2),
            Target::OProj => Ok(Some(self.o_proj.dense_weight()?)),
            _ => Ok(None),
        }
    }

    /// The q|k|v projection of `x`: fused (`joined`) where the layer owns its K/V (`owns`) and
    /// has the fused head scales, else the separate projections.
    fn project(
        &self,
        x: &Array,
        owns: bool,
        delta: Option<&crate::lora::Delta>,
    ) -> Result<(Option<Array>, Vec<Array>)> {
        let joined = match &self.head_scales {
            Some(_) if owns => self.qkv_proj.forward_joined_with(x, delta)?,
            _ => None,
        };
        let projected = match joined {
            Some(_) => Vec::new(),
            None => self.qkv_proj.forward_with(x, delta)?,
        };
        Ok((joined, projected))
    }

    /// The heads of every row (`[rows, heads, T, d]`) and, in layers that own their K/V, the
    /// new keys and values, before any cache. From the fused q|k|v projection (`joined`,
    /// `[rows, T, (heads + 2·kv) · d]`): one RMSNorm over every head, the q/k scales as one
    /// multiply, one RoPE for q and k together -- 3 primitives where separate heads take 5.
    /// Otherwise from the separate projections (`[q]`, or `[q, k, v]`).
    fn heads(
        &self,
        joined: Option<&Array>,
        projected: &[Array],
        at: &Offsets,
    ) -> Result<(Array, Option<(Array, Array)>)> {
        let (d, heads, kv_heads) = (self.head_dim, self.num_heads, self.num_kv_heads);
        if let (Some(joined), Some(scales)) = (joined, &self.head_scales) {
            let shape = joined.shape();
            let (b, len) = (shape[0], shape[1]);
            let all = fast::rms_norm(joined.reshape(&[b, len, -1, d])?, None, self.eps)?
                .multiply(scales)?
                .transpose_axes(&[0, 2, 1, 3])?;
            // RoPE runs over the whole tensor (v's rotated rows are dropped): on a slice of the
            // transposed tensor, MLX-CUDA 0.32.2's RoPE kernel writes out of bounds.
            let roped = self.rope(&all, at)?;
            let q_k = roped.split_at_indices(&[heads, heads + kv_heads], 1)?;
            let v = all.split_at_indices(&[heads + kv_heads], 1)?;
            return Ok((q_k[0].clone(), Some((q_k[1].clone(), v[1].clone()))));
        }
        let q = projected.first().ok_or_else(|| {
            Error::Input(format!("layer {} has no q projection", self.spec.index))
        })?;
        let shape = q.shape();
        let (b, len) = (shape[0], shape[1]);
        let queries = q.reshape(&[b, len, heads, d])?;
        let queries = fast::rms_norm(&queries, Some(&self.q_norm), self.eps)?
            .transpose_axes(&[0, 2, 1, 3])?;
        let queries = self.rope(&queries, at)?;
        let new_kv = match (&self.k_norm, projected) {
            (Some(k_norm), [_, k, v]) => {
                let k = k.reshape(&[b, len, kv_heads, d])?;
                let v = v.reshape(&[b, len, kv_heads, d])?;
                let k =
                    fast::rms_norm(&k, Some(k_norm), self.eps)?.transpose_axes(&[0, 2, 1, 3])?;
                let v = fast::rms_norm(&v, None, self.eps)?.transpose_axes(&[0, 2, 1, 3])?;
                Some((self.rope(&k, at)?, v))
            }
            _ => None,
        };
        Ok((queries, new_kv))
    }

    /// Attention of `queries` (`[b, heads, T, d]`) over `keys`/`values` under `mask`:
    /// `[b, T, heads · d]` (before the output projection).
    fn attend(&self, queries: &Array, keys: &Array, values: &Array, mask: &Mask) -> Result<Array> {
        let shape = queries.shape();
        let (b, len) = (shape[0], shape[2]);
        let width = self.num_heads * self.head_dim;
        let composed = !self.fused_single_query;
        let mask = match mask {
            // Decode rows over a batch's buffers: one query per row, each row masked to its
            // own positions.
            Mask::Rows(mask) => {
                let out = if composed {
                    attention_of_one_query(
                        queries,
                        keys,
                        values,
                        Some(mask),
                        self.decode_attention,
                    )?
                } else {
                    let mask = ScaledDotProductAttentionMask::Array(mask);
                    fast::scaled_dot_product_attention(queries, keys, values, 1.0, mask, None)?
                };
                return Ok(out.reshape(&[b, 1, width])?);
            }
            Mask::Causal(mask) => mask.as_ref(),
        };
        Ok(if len == 1 && mask.is_none() && composed {
            // One query per head, every key visible (the caches hand a single query exactly
            // what it may see).
            attention_of_one_query(queries, keys, values, None, self.decode_attention)?
                .reshape(&[b, len, width])?
        } else if let (Some(mask), true) = (mask, composed && len <= FEW_QUERIES as i32) {
            // A speculative verify's rows, a short follow-up.
            attention_of_few_queries(queries, keys, values, mask)?
                .transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[b, len, width])?
        } else {
            let mask = mask.map(ScaledDotProductAttentionMask::Array);
            fast::scaled_dot_product_attention(queries, keys, values, 1.0, mask, None)?
                .transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[b, len, width])?
        })
    }

    /// RoPE of `x` (`[rows, heads, T, d]`) from the position(s) `at`.
    fn rope(&self, x: &Array, at: &Offsets) -> Result<Array> {
        let (dims, base, freqs) = match &self.spec.rope {
            Rope::Default { dims, base } => (*dims, Some(*base), None),
            Rope::Proportional { dims, .. } => (*dims, None, self.rope_freqs.as_ref()),
        };
        Ok(match at {
            Offsets::One(offset) => fast::rope(x, dims, false, base, 1.0, *offset as i32, freqs)?,
            Offsets::Rows(offsets) => {
                fast::rope_dynamic(x, dims, false, base, 1.0, offsets, freqs)?
            }
        })
    }
}

/// Attention of one query per head (`q` `[b, heads, 1, d]`) over every position of `keys` and
/// `values` (`[b, kv_heads, L, d]`), scale 1, no mask: `[b, kv_heads, heads / kv_heads, d]`,
/// heads in order.
pub fn single_query_attention(
    q: &Array,
    keys: &Array,
    values: &Array,
    path: DecodeAttention,
) -> Result<Array> {
    attention_of_one_query(q, keys, values, None, path)
}

/// Queries per sequence up to which attention with a mask, where MLX has no fused kernel for the
/// head size, is composed by [`attention_of_few_queries`] rather than by MLX's generic
/// composition: a speculative verify's rows (at most 64), a short prompt.
pub const FEW_QUERIES: usize = 64;

/// Attention of a few queries per head (`q` `[b, heads, T, d]`) over `keys` and `values`
/// (`[b, kv_heads, L, d]`), scale 1, `mask` (boolean `[T, L]`) hiding keys per query:
/// `[b, heads, T, d]`. The `heads / kv_heads` query heads of a K/V head and their T queries
/// are the rows of one matrix for both products (as [`DecodeAttention::GroupedRows`] does for
/// one query): 5 primitives fewer per layer than MLX's generic composition, which broadcasts
/// the K/V heads over the group (bench/results.md, "speculative verify on MLX-CUDA").
pub fn attention_of_few_queries(
    q: &Array,
    keys: &Array,
    values: &Array,
    mask: &Array,
) -> Result<Array> {
    let shape = q.shape();
    let (b, heads, t, d) = (shape[0], shape[1], shape[2], shape[3]);
    let (kv_heads, len) = (keys.shape()[1], keys.shape()[2]);
    let group = heads / kv_heads;
    let scores = q
        .reshape(&[b, kv_heads, group * t, d])?
        .matmul(keys.swap_axes(-1, -2)?)?
        .reshape(&[b, kv_heads, group, t, len])?;
    let hidden = crate::fused::constant(f32::NEG_INFINITY, &scores)?;
    let weights = softmax_axis(&select(mask, &scores, &hidden)?, -1, true)?.reshape(&[
        b,
        kv_heads,
        group * t,
        len,
    ])?;
    Ok(weights.matmul(values)?.reshape(&[b, heads, t, d])?)
}

/// [`single_query_attention`] where `mask` (boolean, `[b, 1, 1, L]`) hides keys per row.
fn attention_of_one_query(
    q: &Array,
    keys: &Array,
    values: &Array,
    mask: Option<&Array>,
    path: DecodeAttention,
) -> Result<Array> {
    let shape = q.shape();
    let (b, d) = (shape[0], shape[3]);
    let kv_heads = keys.shape()[1];
    let scores = match path {
        DecodeAttention::GroupedRows => q
            .reshape(&[b, kv_heads, -1, d])?
            .matmul(keys.swap_axes(-1, -2)?)?,
        DecodeAttention::HeadScores => {
            let group = shape[1] / kv_heads;
            q.reshape(&[b, kv_heads, group, 1, d])?
                .matmul(keys.swap_axes(-1, -2)?.expand_dims(2)?)?
                .reshape(&[b, kv_heads, group, -1])?
        }
    };
    let scores = match mask {
        Some(mask) => {
            let hidden = crate::fused::constant(f32::NEG_INFINITY, &scores)?;
            select(mask, &scores, &hidden)?
        }
        None => scores,
    };
    Ok(softmax_axis(&scores, -1, true)?.matmul(values)?)
}
