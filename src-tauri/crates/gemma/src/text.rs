//! The Gemma 4 text decoder: embeddings with per-layer inputs, the layer loop, the tied head.

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{
    arange, broadcast_to, concatenate, cumsum, maximum, ones_like, select, softmax_axis,
};
use mlx_rs::{Array, Dtype};

use crate::cache::KvCache;
use crate::config::{AttentionKind, Config, TextConfig};
use crate::error::{Error, Result};
use crate::fused::{add_scaled, geglu, softcap};
use crate::layers::{KvSource, LayerSpec, Rope};
use crate::quant::{load_linear, Embedding, Linear, SideBySide};
use crate::tuning::{DecodeAttention, Tuning};
use crate::weights::WeightStore;

const PREFIX: &str = "language_model.model";

/// A scalar in the activation dtype (as Python's weak float scalars behave in mlx-vlm).
pub(crate) fn scalar(value: f32, dtype: Dtype) -> Result<Array> {
    Ok(Array::from_f32(value).as_dtype(dtype)?)
}

struct Attention {
    /// `q_proj`, or `q_proj | k_proj | v_proj` side by side in layers that own their K/V.
    qkv: SideBySide,
    /// `k_norm` of layers that own their K/V.
    k_norm: Option<Array>,
    /// `[heads + 2·kv_heads, head_dim]`: q_norm, k_norm and ones (v has no scale) per head, for
    /// normalizing the fused q|k|v output with one RMSNorm and one multiply.
    head_scales: Option<Array>,
    o_proj: Linear,
    q_norm: Array,
    rope_freqs: Option<Array>,
}

struct Mlp {
    /// `gate_proj | up_proj`.
    gate_up: SideBySide,
    down: Linear,
}

/// The decoder's scalar factors, made once in the compute dtype (a scalar made per call would
/// add a cast primitive to every step).
struct Scales {
    embed: Array,
    per_layer_token: Array,
    per_layer_projection: Array,
    per_layer_combine: Array,
    softcap: Option<Array>,
}

impl Scales {
    fn new(t: &TextConfig, dtype: Dtype) -> Result<Self> {
        Ok(Self {
            embed: scalar((t.hidden_size as f32).sqrt(), dtype)?,
            per_layer_token: scalar((t.hidden_size_per_layer_input as f32).sqrt(), dtype)?,
            per_layer_projection: scalar((t.hidden_size as f32).powf(-0.5), dtype)?,
            per_layer_combine: scalar(0.5f32.sqrt(), dtype)?,
            softcap: t
                .final_logit_softcapping
                .map(|c| scalar(c, dtype))
                .transpose()?,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![
            &self.embed,
            &self.per_layer_token,
            &self.per_layer_projection,
            &self.per_layer_combine,
        ];
        out.extend(self.softcap.as_ref());
        out
    }
}

struct PerLayerInput {
    gate: Linear,
    projection: Linear,
    post_norm: Array,
}

struct Layer {
    spec: LayerSpec,
    attn: Attention,
    mlp: Mlp,
    input_norm: Array,
    post_attention_norm: Array,
    pre_feedforward_norm: Array,
    post_feedforward_norm: Array,
    per_layer: Option<PerLayerInput>,
    layer_scalar: Array,
}

/// Media features to place on placeholder tokens: every position whose id is `token_id`
/// receives the next row of `features` (`[n, hidden]`), in order.
pub struct MediaFeatures<'a> {
    pub token_id: u32,
    pub features: &'a Array,
}

/// The decoder and its tied head.
pub struct TextModel {
    cfg: TextConfig,
    dtype: Dtype,
    eps: f32,
    scales: Scales,
    embed: Embedding,
    per_layer_embed: Option<Embedding>,
    per_layer_projection: Option<(Linear, Array)>,
    layers: Vec<Layer>,
    norm: Array,
    first_shared: usize,
    pad_token_id: u32,
    placeholder_ids: Vec<u32>,
}

impl TextModel {
    /// Builds the decoder from the store; `None` when tensors were missing or wrong (the store
    /// reports them all in one error).
    pub fn load(
        store: &mut WeightStore,
        config: &Config,
        table: &[LayerSpec],
        dtype: Dtype,
    ) -> Result<Option<Self>> {
        let t = &config.text;
        let q = &config.quantization;
        let hidden = t.hidden_size;
        let n = t.num_hidden_layers;
        let ple = t.hidden_size_per_layer_input;
        let embed = Embedding::load(
            store,
            q,
            &format!("{PREFIX}.embed_tokens"),
            t.vocab_size,
            hidden,
            dtype,
        )?;
        let (per_layer_embed, per_layer_projection) = if ple > 0 {
            let vocab = t.vocab_size_per_layer_input.unwrap_or(t.vocab_size);
            let e = Embedding::load(
                store,
                q,
                &format!("{PREFIX}.embed_tokens_per_layer"),
                vocab,
                n * ple,
                dtype,
            )?;
            let p = load_linear(
                store,
                q,
                &format!("{PREFIX}.per_layer_model_projection"),
                n * ple,
                hidden,
                dtype,
            )?;
            let norm = store.take_float(
                &format!("{PREFIX}.per_layer_projection_norm.weight"),
                &[ple],
                dtype,
            )?;
            (e, p.zip(norm))
        } else {
            (None, None)
        };
        let mut layers = Vec::with_capacity(n);
        let mut complete = true;
        for spec in table {
            match Self::load_layer(store, config, spec, dtype)? {
                Some(layer) => layers.push(layer),
                None => complete = false,
            }
        }
        let norm = store.take_float(&format!("{PREFIX}.norm.weight"), &[hidden], dtype)?;
        let (Some(embed), Some(norm)) = (embed, norm) else {
            return Ok(None);
        };
        if !complete || (ple > 0 && (per_layer_embed.is_none() || per_layer_projection.is_none())) {
            return Ok(None);
        }
        let placeholder_ids = [
            config.image_token_id,
            config.audio_token_id,
            config.video_token_id,
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok(Some(Self {
            cfg: t.clone(),
            dtype,
            eps: t.rms_norm_eps,
            scales: Scales::new(t, dtype)?,
            embed,
            per_layer_embed,
            per_layer_projection,
            layers,
            norm,
            first_shared: n - t.num_kv_shared_layers,
            pad_token_id: config.pad_token_id,
            placeholder_ids,
        }))
    }

    fn load_layer(
        store: &mut WeightStore,
        config: &Config,
        spec: &LayerSpec,
        dtype: Dtype,
    ) -> Result<Option<Layer>> {
        let t = &config.text;
        let q = &config.quantization;
        let hidden = t.hidden_size;
        let d = spec.head_dim;
        let p = format!("{PREFIX}.layers.{}", spec.index);
        let (heads, kv_heads) = (t.num_attention_heads, t.num_key_value_heads);
        let q_proj = load_linear(
            store,
            q,
            &format!("{p}.self_attn.q_proj"),
            heads * d,
            hidden,
            dtype,
        )?;
        let o_proj = load_linear(
            store,
            q,
            &format!("{p}.self_attn.o_proj"),
            hidden,
            heads * d,
            dtype,
        )?;
        let q_norm = store.take_float(&format!("{p}.self_attn.q_norm.weight"), &[d], dtype)?;
        let kv = if spec.owns_kv() {
            let k = load_linear(
                store,
                q,
                &format!("{p}.self_attn.k_proj"),
                kv_heads * d,
                hidden,
                dtype,
            )?;
            let v = load_linear(
                store,
                q,
                &format!("{p}.self_attn.v_proj"),
                kv_heads * d,
                hidden,
                dtype,
            )?;
            let kn = store.take_float(&format!("{p}.self_attn.k_norm.weight"), &[d], dtype)?;
            match (k, v, kn) {
                (Some(k), Some(v), Some(kn)) => Some(Some((k, v, kn))),
                _ => None,
            }
        } else {
            Some(None)
        };
        let w = spec.mlp_width;
        let gate = load_linear(store, q, &format!("{p}.mlp.gate_proj"), w, hidden, dtype)?;
        let up = load_linear(store, q, &format!("{p}.mlp.up_proj"), w, hidden, dtype)?;
        let down = load_linear(store, q, &format!("{p}.mlp.down_proj"), hidden, w, dtype)?;
        let norms: Vec<Option<Array>> = [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ]
        .iter()
        .map(|name| store.take_float(&format!("{p}.{name}.weight"), &[hidden], dtype))
        .collect::<Result<_>>()?;
        let ple = t.hidden_size_per_layer_input;
        let per_layer = if ple > 0 {
            let gate = load_linear(
                store,
                q,
                &format!("{p}.per_layer_input_gate"),
                ple,
                hidden,
                dtype,
            )?;
            let proj = load_linear(
                store,
                q,
                &format!("{p}.per_layer_projection"),
                hidden,
                ple,
                dtype,
            )?;
            let norm = store.take_float(
                &format!("{p}.post_per_layer_input_norm.weight"),
                &[hidden],
                dtype,
            )?;
            match (gate, proj, norm) {
                (Some(gate), Some(projection), Some(post_norm)) => Some(Some(PerLayerInput {
                    gate,
                    projection,
                    post_norm,
                })),
                _ => None,
            }
        } else {
            Some(None)
        };
        let layer_scalar = store.take_float(&format!("{p}.layer_scalar"), &[1], dtype)?;
        let rope_freqs = match &spec.rope {
            Rope::Default { .. } => None,
            Rope::Proportional { periods, .. } => {
                Some(Array::from_slice(periods, &[periods.len() as i32]))
            }
        };
        let [Some(n0), Some(n1), Some(n2), Some(n3)]: [Option<Array>; 4] = norms
            .try_into()
            .map_err(|_| Error::Input("norm count".into()))?
        else {
            return Ok(None);
        };
        let (
            Some(q_proj),
            Some(o_proj),
            Some(q_norm),
            Some(kv),
            Some(gate),
            Some(up),
            Some(down),
            Some(per_layer),
            Some(layer_scalar),
        ) = (
            q_proj,
            o_proj,
            q_norm,
            kv,
            gate,
            up,
            down,
            per_layer,
            layer_scalar,
        )
        else {
            return Ok(None);
        };
        let (qkv, k_norm) = match kv {
            Some((k, v, k_norm)) => (SideBySide::new(vec![q_proj, k, v])?, Some(k_norm)),
            None => (SideBySide::new(vec![q_proj])?, None),
        };
        let head_scales = match (&k_norm, &qkv) {
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
        Ok(Some(Layer {
            spec: spec.clone(),
            attn: Attention {
                qkv,
                k_norm,
                head_scales,
                o_proj,
                q_norm,
                rope_freqs,
            },
            mlp: Mlp {
                gate_up: SideBySide::new(vec![gate, up])?,
                down,
            },
            input_norm: n0,
            post_attention_norm: n1,
            pre_feedforward_norm: n2,
            post_feedforward_norm: n3,
            per_layer,
            layer_scalar,
        }))
    }

    /// Every weight array of the decoder (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.embed.arrays();
        if let Some(e) = &self.per_layer_embed {
            out.extend(e.arrays());
        }
        if let Some((p, n)) = &self.per_layer_projection {
            out.extend(p.arrays());
            out.push(n);
        }
        for l in &self.layers {
            let a = &l.attn;
            out.extend(a.qkv.arrays());
            out.extend(a.o_proj.arrays());
            out.push(&a.q_norm);
            out.extend(a.k_norm.iter());
            out.extend(a.head_scales.iter());
            out.extend(a.rope_freqs.iter());
            out.extend(l.mlp.gate_up.arrays());
            out.extend(l.mlp.down.arrays());
            out.extend([
                &l.input_norm,
                &l.post_attention_norm,
                &l.pre_feedforward_norm,
                &l.post_feedforward_norm,
                &l.layer_scalar,
            ]);
            if let Some(p) = &l.per_layer {
                out.extend(p.gate.arrays());
                out.extend(p.projection.arrays());
                out.push(&p.post_norm);
            }
        }
        out.push(&self.norm);
        out.extend(self.scales.arrays());
        out
    }

    /// The activation dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Fresh caches, one per owning layer (sliding ring or growing full cache).
    pub fn new_caches(&self) -> Vec<KvCache> {
        self.layers
            .iter()
            .filter(|l| l.spec.owns_kv())
            .map(|l| match l.spec.kind {
                AttentionKind::Full => KvCache::full(l.spec.kv_quant),
                AttentionKind::Sliding => {
                    KvCache::sliding(self.cfg.sliding_window, l.spec.kv_quant)
                }
            })
            .collect()
    }

    /// Token embeddings (`ids`: `[T]` integer array) scaled by √hidden, with media features
    /// scattered onto their placeholders (unscaled). The caller checks placeholder counts.
    pub fn embed(&self, ids: &Array, media: &[MediaFeatures<'_>]) -> Result<Array> {
        let mut h = self.embed.lookup(ids)?.multiply(&self.scales.embed)?;
        for m in media {
            let mask = ids.eq(Array::from_int(m.token_id as i32))?;
            let index = maximum(
                cumsum(mask.as_dtype(Dtype::Int32)?, 0, None, None)?
                    .subtract(Array::from_int(1))?,
                Array::from_int(0),
            )?;
            let rows = m.features.as_dtype(self.dtype)?.take_axis(&index, 0)?;
            h = select(mask.expand_dims(-1)?, rows, h)?;
        }
        Ok(h)
    }

    /// True when `ids` hold a media placeholder (whose per-layer input is the pad token's).
    pub fn has_placeholders(&self, ids: &[u32]) -> bool {
        ids.iter().any(|id| self.placeholder_ids.contains(id))
    }

    /// Teacher-forced forward over `ids` (continuing the caches). Returns logits of the last
    /// `keep` positions (`[keep, vocab]`), or of every position when `keep` is `None`.
    /// `placeholders`: `ids` may hold media placeholders (see [`Self::has_placeholders`]).
    pub fn forward(
        &self,
        ids: &Array,
        media: &[MediaFeatures<'_>],
        caches: &mut [KvCache],
        keep: Option<usize>,
        placeholders: bool,
        tuning: &Tuning,
    ) -> Result<Array> {
        let t = ids.size();
        if t == 0 {
            return Err(Error::Input("no tokens to process".into()));
        }
        let h = self.embed(ids, media)?;
        let per_layer = self.per_layer_inputs(ids, &h, placeholders, tuning)?;
        let mut h = h.reshape(&[1, t as i32, self.cfg.hidden_size as i32])?;
        let offset = caches.first().map(|c| c.offset()).unwrap_or(0);
        let window = self.cfg.sliding_window;
        let sliding_keys = caches
            .iter()
            .zip(self.layers.iter().filter(|l| l.spec.owns_kv()))
            .find(|(_, l)| l.spec.kind == AttentionKind::Sliding)
            .map(|(c, _)| c.keys_after(t));
        let full_mask = causal_mask(offset, t, offset + t, None)?;
        let sliding_mask = match sliding_keys {
            Some(keys) => causal_mask(offset, t, keys, Some(window))?,
            None => None,
        };

        // Layers from the first KV-shared one on write no cache: when only the last `keep`
        // rows' logits are needed, they run on those rows alone.
        let keep = keep.filter(|&k| k > 0 && k < t);
        let mut rows = t; // rows of h currently computed
        let mut produced: Vec<Option<(Array, Array)>> = vec![None; self.layers.len()];
        let mut cache_slot = 0;
        for (i, layer) in self.layers.iter().enumerate() {
            if let (Some(k), true) = (keep, i == self.first_shared) {
                h = h.index((.., (t - k) as i32.., ..));
                rows = k;
            }
            let skip = t - rows;
            let mask = match layer.spec.kind {
                AttentionKind::Full => &full_mask,
                AttentionKind::Sliding => &sliding_mask,
            };
            let mask = mask.as_ref().map(|m| {
                if skip > 0 {
                    m.index((skip as i32.., ..))
                } else {
                    m.clone()
                }
            });
            let pli = per_layer
                .as_ref()
                .map(|p| p.index((.., skip as i32.., i as i32, ..)));
            let kv_in = match layer.spec.kv {
                KvSource::Own { .. } => {
                    let slot = cache_slot;
                    cache_slot += 1;
                    KvInput::Own(
                        caches
                            .get_mut(slot)
                            .ok_or_else(|| Error::Input("too few caches for this model".into()))?,
                    )
                }
                KvSource::Shared { producer } => KvInput::Shared(
                    produced[producer]
                        .clone()
                        .ok_or_else(|| Error::Input(format!("layer {producer} produced no K/V")))?,
                ),
            };
            let (out, kv) = self.layer_forward(
                layer,
                &h,
                mask.as_ref(),
                kv_in,
                offset + skip,
                pli.as_ref(),
                tuning,
            )?;
            h = out;
            produced[i] = kv;
        }
        if let Some(k) = keep {
            if rows == t {
                h = h.index((.., (t - k) as i32.., ..));
            }
        }
        let h = fast::rms_norm(&h, Some(&self.norm), self.eps)?;
        let mut logits = self.embed.as_linear(&h, tuning)?;
        if let Some(cap) = &self.scales.softcap {
            logits = softcap(&logits, cap)?;
        }
        let rows = logits.shape()[1];
        Ok(logits.reshape(&[rows, -1])?)
    }

    /// Per-layer inputs `[1, T, layers, ple]`: token part + context part, as in §5.1.
    fn per_layer_inputs(
        &self,
        ids: &Array,
        h: &Array,
        placeholders: bool,
        tuning: &Tuning,
    ) -> Result<Option<Array>> {
        let (Some(table), Some((projection, norm))) =
            (&self.per_layer_embed, &self.per_layer_projection)
        else {
            return Ok(None);
        };
        let t = ids.size() as i32;
        let n = self.cfg.num_hidden_layers as i32;
        let ple = self.cfg.hidden_size_per_layer_input as i32;
        let mut ple_ids = ids.clone();
        if placeholders {
            for &placeholder in &self.placeholder_ids {
                let is_media = ids.eq(Array::from_int(placeholder as i32))?;
                ple_ids = select(
                    &is_media,
                    Array::from_int(self.pad_token_id as i32).as_dtype(ids.dtype())?,
                    &ple_ids,
                )?;
            }
        }
        let tokens = table
            .lookup(&ple_ids)?
            .multiply(&self.scales.per_layer_token)?
            .reshape(&[1, t, n, ple])?;
        let context = projection
            .forward(h, tuning)?
            .multiply(&self.scales.per_layer_projection)?;
        let context = fast::rms_norm(context.reshape(&[1, t, n, ple])?, Some(norm), self.eps)?;
        Ok(Some(
            context
                .add(tokens)?
                .multiply(&self.scales.per_layer_combine)?,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn layer_forward(
        &self,
        layer: &Layer,
        x: &Array,
        mask: Option<&Array>,
        kv: KvInput<'_>,
        offset: usize,
        per_layer_input: Option<&Array>,
        tuning: &Tuning,
    ) -> Result<(Array, Option<(Array, Array)>)> {
        let eps = self.eps;
        let normed = fast::rms_norm(x, Some(&layer.input_norm), eps)?;
        let (attn, kv_out) = self.attention(layer, &normed, mask, kv, offset, tuning)?;
        let h = x.add(fast::rms_norm(
            &attn,
            Some(&layer.post_attention_norm),
            eps,
        )?)?;
        let u = fast::rms_norm(&h, Some(&layer.pre_feedforward_norm), eps)?;
        let gate_up = layer.mlp.gate_up.forward(&u, tuning)?;
        let [gate, up] = gate_up.as_slice() else {
            return Err(Error::Input(
                "the MLP needs a gate and an up projection".into(),
            ));
        };
        let m = layer.mlp.down.forward(&geglu(gate, up)?, tuning)?;
        let h = h.add(fast::rms_norm(&m, Some(&layer.post_feedforward_norm), eps)?)?;
        if let (Some(p), Some(input)) = (&layer.per_layer, per_layer_input) {
            let g = geglu(&p.gate.forward(&h, tuning)?, input)?;
            let r = fast::rms_norm(&p.projection.forward(&g, tuning)?, Some(&p.post_norm), eps)?;
            return Ok((add_scaled(&h, &r, &layer.layer_scalar)?, kv_out));
        }
        Ok((h.multiply(&layer.layer_scalar)?, kv_out))
    }

    fn attention(
        &self,
        layer: &Layer,
        x: &Array,
        mask: Option<&Array>,
        mut kv: KvInput<'_>,
        offset: usize,
        tuning: &Tuning,
    ) -> Result<(Array, Option<(Array, Array)>)> {
        let shape = x.shape();
        let (b, t) = (shape[0], shape[1]);
        let d = layer.spec.head_dim as i32;
        let heads = self.cfg.num_attention_heads as i32;
        let kv_heads = self.cfg.num_key_value_heads as i32;
        let a = &layer.attn;
        if let (KvInput::Own(cache), Some(scales)) = (&mut kv, &a.head_scales) {
            if let Some(joined) = a.qkv.forward_joined(x, tuning)? {
                // One RMSNorm over every head, the q/k scales as one multiply, one RoPE for q
                // and k together: 3 primitives where separate heads take 5.
                let all = fast::rms_norm(joined.reshape(&[b, t, -1, d])?, None, self.eps)?
                    .multiply(scales)?
                    .transpose_axes(&[0, 2, 1, 3])?;
                // RoPE runs over the whole tensor (v's rotated rows are dropped): on a slice of
                // the transposed tensor, MLX-CUDA 0.32.2's RoPE kernel writes out of bounds.
                let roped = self.rope(layer, &all, offset)?;
                let q_k = roped.split_at_indices(&[heads, heads + kv_heads], 1)?;
                let v = all.split_at_indices(&[heads + kv_heads], 1)?;
                let (keys, values) = cache.update_and_fetch(q_k[1].clone(), v[1].clone())?;
                return self.attend(a, &q_k[0], keys, values, mask, b, t, heads * d, tuning);
            }
        }
        let projected = a.qkv.forward(x, tuning)?;
        let q = projected[0].reshape(&[b, t, heads, d])?;
        let q = fast::rms_norm(&q, Some(&a.q_norm), self.eps)?.transpose_axes(&[0, 2, 1, 3])?;
        let q = self.rope(layer, &q, offset)?;
        let (keys, values) = match kv {
            KvInput::Shared(kv) => kv,
            KvInput::Own(cache) => {
                let (Some(k_norm), [_, k, v]) = (&a.k_norm, projected.as_slice()) else {
                    return Err(Error::Input(format!(
                        "layer {} has no K/V projections",
                        layer.spec.index
                    )));
                };
                let k = k.reshape(&[b, t, kv_heads, d])?;
                let v = v.reshape(&[b, t, kv_heads, d])?;
                let k =
                    fast::rms_norm(&k, Some(k_norm), self.eps)?.transpose_axes(&[0, 2, 1, 3])?;
                let k = self.rope(layer, &k, offset)?;
                let v = fast::rms_norm(&v, None, self.eps)?.transpose_axes(&[0, 2, 1, 3])?;
                cache.update_and_fetch(k, v)?
            }
        };
        self.attend(a, &q, keys, values, mask, b, t, heads * d, tuning)
    }

    /// Attention of `q` over `keys`/`values`, then the output projection.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        a: &Attention,
        q: &Array,
        keys: Array,
        values: Array,
        mask: Option<&Array>,
        b: i32,
        t: i32,
        width: i32,
        tuning: &Tuning,
    ) -> Result<(Array, Option<(Array, Array)>)> {
        let head_dim = q.shape()[3];
        let out = if t == 1 && mask.is_none() && !tuning.fused_single_query(head_dim) {
            // One query per head, every key visible (the caches hand a single query exactly
            // what it may see).
            single_query_attention(q, &keys, &values, tuning.decode_attention)?
                .reshape(&[b, t, width])?
        } else {
            let mask = mask.map(ScaledDotProductAttentionMask::Array);
            fast::scaled_dot_product_attention(q, &keys, &values, 1.0, mask, None)?
                .transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[b, t, width])?
        };
        Ok((a.o_proj.forward(&out, tuning)?, Some((keys, values))))
    }

    fn rope(&self, layer: &Layer, x: &Array, offset: usize) -> Result<Array> {
        Ok(match &layer.spec.rope {
            Rope::Default { dims, base } => {
                fast::rope(x, *dims, false, *base, 1.0, offset as i32, None)?
            }
            Rope::Proportional { dims, .. } => fast::rope(
                x,
                *dims,
                false,
                None,
                1.0,
                offset as i32,
                layer.attn.rope_freqs.as_ref(),
            )?,
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
    Ok(softmax_axis(&scores, -1, true)?.matmul(values)?)
}

enum KvInput<'a> {
    Own(&'a mut KvCache),
    Shared((Array, Array)),
}

/// Boolean mask `[queries, keys]` for `queries` new positions starting at `offset`, attending
/// `keys` buffered positions that end at the last query; `None` when nothing is masked.
fn causal_mask(
    offset: usize,
    queries: usize,
    keys: usize,
    window: Option<usize>,
) -> Result<Option<Array>> {
    let first_key = offset + queries - keys;
    let everything_visible = queries == 1 && window.is_none_or(|w| keys <= w);
    if everything_visible {
        return Ok(None);
    }
    let q = arange::<i32, i32>(offset as i32, (offset + queries) as i32, None)?
        .reshape(&[queries as i32, 1])?;
    let k = arange::<i32, i32>(first_key as i32, (offset + queries) as i32, None)?
        .reshape(&[1, keys as i32])?;
    let mut mask = q.ge(&k)?;
    if let Some(w) = window {
        mask = mask.logical_and(&q.subtract(&k)?.lt(Array::from_int(w as i32))?)?;
    }
    Ok(Some(mask))
}
