//! The Gemma 4 text decoder: embeddings with per-layer inputs, the layer loop, the tied head.
//! The blocks of a layer are in `decoder.rs` and `attention.rs`; the model's architecture is
//! described in `docs/MODEL.md`.

use mlx_rs::fast;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{arange, cumsum, maximum, select};
use mlx_rs::{Array, Dtype};

use crate::batch::{row_positions, RowsKv};
use crate::cache::KvCache;
use crate::config::{AttentionKind, Config, TextConfig};
use crate::decoder::DecoderLayer;
use crate::error::{Error, Result};
use crate::fused::softcap;
use crate::kv::StepKv;
use crate::layers::LayerSpec;
use crate::lora::{Adapter, Target};
use crate::ple::PleTable;
use crate::quant::{Embedding, Linear};
use crate::taps::{TapPoint, Taps};
use crate::weights::Weights;

/// A scalar in the activation dtype (as Python's weak float scalars behave in mlx-vlm).
pub(crate) fn scalar(value: f32, dtype: Dtype) -> Result<Array> {
    Ok(Array::from_f32(value).as_dtype(dtype)?)
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
    fn new(config: &TextConfig, dtype: Dtype) -> Result<Self> {
        Ok(Self {
            embed: scalar((config.hidden_size as f32).sqrt(), dtype)?,
            per_layer_token: scalar((config.hidden_size_per_layer_input as f32).sqrt(), dtype)?,
            per_layer_projection: scalar((config.hidden_size as f32).powf(-0.5), dtype)?,
            per_layer_combine: scalar(0.5f32.sqrt(), dtype)?,
            softcap: config
                .final_logit_softcapping
                .map(|cap| scalar(cap, dtype))
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

/// The model-level tensors of the per-layer inputs (E2B/E4B): a token table and a projection
/// of the embeddings, both split per layer.
struct PerLayerEmbeddings {
    /// Read from the checkpoint file per forward unless kept resident (`ple.rs`).
    embed_tokens_per_layer: PleTable,
    per_layer_model_projection: Linear,
    per_layer_projection_norm: Array,
}

/// Media features to place on placeholder tokens: every position whose id is `token_id`
/// receives the next row of `features` (`[n, hidden]`), in order.
pub struct MediaFeatures<'a> {
    pub token_id: u32,
    pub features: &'a Array,
}

/// The decoder and its tied head.
pub struct TextModel {
    config: TextConfig,
    dtype: Dtype,
    scales: Scales,
    embed_tokens: Embedding,
    per_layer: Option<PerLayerEmbeddings>,
    layers: Vec<DecoderLayer>,
    norm: Array,
    first_shared: usize,
    pad_token_id: u32,
    placeholder_ids: Vec<u32>,
    /// The adapter every forward applies, if one is on (`lora.rs`).
    adapter: Option<Adapter>,
}

impl TextModel {
    /// Builds the decoder from `language_model.model.*`; what is missing or wrong is recorded in
    /// the store (which reports it all in one error) and stands in as zeros.
    /// `ple_from_file`: the per-layer token table stays in its file (`ple.rs`).
    pub fn load(
        root: &Weights<'_>,
        config: &Config,
        table: &[LayerSpec],
        ple_from_file: bool,
    ) -> Result<Self> {
        let text = &config.text;
        let weights = root.at("language_model.model");
        let hidden = text.hidden_size;
        let num_layers = text.num_hidden_layers;
        let per_layer_width = text.hidden_size_per_layer_input;
        let embed_tokens = Embedding::load(&weights.at("embed_tokens"), text.vocab_size, hidden)?;
        let per_layer = if per_layer_width > 0 {
            let vocab = text.vocab_size_per_layer_input.unwrap_or(text.vocab_size);
            let width = num_layers * per_layer_width;
            Some(PerLayerEmbeddings {
                embed_tokens_per_layer: PleTable::load(
                    &weights.at("embed_tokens_per_layer"),
                    vocab,
                    width,
                    ple_from_file,
                )?,
                per_layer_model_projection: Linear::load(
                    &weights.at("per_layer_model_projection"),
                    width,
                    hidden,
                )?,
                per_layer_projection_norm: weights
                    .float("per_layer_projection_norm.weight", &[per_layer_width])?,
            })
        } else {
            None
        };
        let layers = table
            .iter()
            .map(|spec| {
                DecoderLayer::load(&weights.at(&format!("layers.{}", spec.index)), text, spec)
            })
            .collect::<Result<Vec<_>>>()?;
        let norm = weights.float("norm.weight", &[hidden])?;
        let placeholder_ids = [
            config.image_token_id,
            config.audio_token_id,
            config.video_token_id,
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok(Self {
            adapter: None,
            config: text.clone(),
            dtype: root.dtype(),
            scales: Scales::new(text, root.dtype())?,
            embed_tokens,
            per_layer,
            layers,
            norm,
            first_shared: num_layers - text.num_kv_shared_layers,
            pad_token_id: config.pad_token_id,
            placeholder_ids,
        })
    }

    /// Every weight array of the decoder (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.embed_tokens.arrays();
        if let Some(p) = &self.per_layer {
            out.extend(p.embed_tokens_per_layer.arrays());
            out.extend(p.per_layer_model_projection.arrays());
            out.push(&p.per_layer_projection_norm);
        }
        for layer in &self.layers {
            out.extend(layer.arrays());
        }
        out.push(&self.norm);
        out.extend(self.scales.arrays());
        out
    }

    /// The per-layer token table, when the model has per-layer inputs.
    pub fn ple_table(&self) -> Option<&PleTable> {
        self.per_layer.as_ref().map(|p| &p.embed_tokens_per_layer)
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
                    KvCache::sliding(self.config.sliding_window, l.spec.kv_quant)
                }
            })
            .collect()
    }

    /// Token embeddings (`ids`: `[T]` integer array) scaled by √hidden, with media features
    /// scattered onto their placeholders (unscaled). The caller checks placeholder counts.
    pub fn embed(&self, ids: &Array, media: &[MediaFeatures<'_>]) -> Result<Array> {
        let mut h = self
            .embed_tokens
            .lookup(ids)?
            .multiply(&self.scales.embed)?;
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
    ) -> Result<Array> {
        let h = self.forward_normed(ids, media, caches, keep, placeholders)?;
        self.head(&h)
    }

    /// [`Self::forward`] up to the final norm: the hidden state the head reads, `[rows, hidden]`
    /// (what the speculative drafter starts from).
    pub fn forward_normed(
        &self,
        ids: &Array,
        media: &[MediaFeatures<'_>],
        caches: &mut [KvCache],
        keep: Option<usize>,
        placeholders: bool,
    ) -> Result<Array> {
        self.forward_normed_tapped(ids, media, caches, keep, placeholders, None)
    }

    /// [`Self::forward_normed`] keeping the hidden states `taps` asks for (every position:
    /// `keep` must then be `None`).
    pub fn forward_normed_tapped(
        &self,
        ids: &Array,
        media: &[MediaFeatures<'_>],
        caches: &mut [KvCache],
        keep: Option<usize>,
        placeholders: bool,
        mut taps: Option<&mut Taps>,
    ) -> Result<Array> {
        if let Some(t) = taps.as_deref() {
            t.check(self.layers.len())?;
        }
        let len = ids.size();
        if len == 0 {
            return Err(Error::Input("no tokens to process".into()));
        }
        let h = self.embed(ids, media)?;
        let per_layer_inputs = self.per_layer_inputs(ids, &h, placeholders)?;
        let h = h.reshape(&[1, len as i32, self.config.hidden_size as i32])?;
        let offset = caches.first().map(|c| c.offset()).unwrap_or(0);
        let window = self.config.sliding_window;
        let sliding_keys = caches
            .iter()
            .zip(self.layers.iter().filter(|l| l.spec.owns_kv()))
            .find(|(_, l)| l.spec.kind == AttentionKind::Sliding)
            .map(|(c, _)| c.keys_after(len));
        let full_mask = causal_mask(offset, len, offset + len, None)?;
        let sliding_mask = match sliding_keys {
            Some(keys) => causal_mask(offset, len, keys, Some(window))?,
            None => None,
        };

        let mut kv = StepKv::one(caches, offset, full_mask, sliding_mask, self.layers.len());
        let keep = if taps.is_some() { None } else { keep };
        let h = self.layers(h, per_layer_inputs, &mut kv, keep, taps.as_deref_mut())?;
        let h = fast::rms_norm(&h, Some(&self.norm), self.config.rms_norm_eps)?;
        if let Some(t) = taps {
            t.offer(TapPoint::FinalNorm, &h);
        }
        let rows = h.shape()[1];
        Ok(h.reshape(&[rows, -1])?)
    }

    /// One decode step of several sequences at once: `ids` (`[n]`) holds each sequence's next
    /// token and `caches[i]` sequence `i`'s caches (each at its own position). The projections,
    /// the MLPs and the head run once for all rows, each row a vector of its own. Attention
    /// runs over `batched`, the rows' shared buffers, when given (one write and one masked
    /// attention per layer for every row; the rows' caches become views of the buffers, see
    /// `batch.rs`), else per row over its own caches. Either way each row's logits are its
    /// single-sequence logits. Returns `[n, vocab]`.
    pub(crate) fn forward_rows(
        &self,
        ids: &Array,
        caches: &mut [&mut [KvCache]],
        batched: Option<&mut RowsKv>,
    ) -> Result<Array> {
        let n = caches.len();
        if n == 0 || ids.size() != n {
            return Err(Error::Input(format!(
                "{} tokens for {n} sequences",
                ids.size()
            )));
        }
        // Each row's position for RoPE, uploaded once for every layer of this step.
        let positions = row_positions(caches);
        let layers = self.layers.len();
        let h = match batched {
            Some(batch) => {
                let step = batch.begin(&positions)?;
                let (h, per_layer_inputs) = self.decode_inputs(ids)?;
                let mut kv = StepKv::batch(batch, step, &positions, layers);
                let h = self.layers(h, per_layer_inputs, &mut kv, None, None)?;
                batch.finish(caches)?;
                h
            }
            None => {
                let (h, per_layer_inputs) = self.decode_inputs(ids)?;
                let mut kv = StepKv::rows(caches, &positions, layers);
                self.layers(h, per_layer_inputs, &mut kv, None, None)?
            }
        };
        let h = fast::rms_norm(&h, Some(&self.norm), self.config.rms_norm_eps)?;
        let logits = self.head(&h)?;
        Ok(logits.reshape(&[n as i32, -1])?)
    }

    /// The layer stack over `h` (`[rows, T, hidden]`), the per-layer inputs
    /// (`[rows, T, layers, width]`) taken layer by layer, the keys and values through `kv`.
    /// Layers from the first KV-shared one on write no cache: when only the last `keep`
    /// positions are needed, they run on those positions alone, which are all it returns.
    /// `taps`: layer outputs to keep.
    fn layers(
        &self,
        mut h: Array,
        per_layer_inputs: Option<Array>,
        kv: &mut StepKv<'_, '_>,
        keep: Option<usize>,
        mut taps: Option<&mut Taps>,
    ) -> Result<Array> {
        let len = h.shape()[1] as usize;
        let keep = keep.filter(|&k| k > 0 && k < len);
        let mut skip = 0;
        for (i, layer) in self.layers.iter().enumerate() {
            if let (Some(k), true) = (keep, i == self.first_shared) {
                h = h.index((.., (len - k) as i32.., ..));
                skip = len - k;
                kv.skip(skip);
            }
            let per_layer_input = per_layer_inputs
                .as_ref()
                .map(|inputs| inputs.index((.., skip as i32.., i as i32, ..)));
            let adapter = self.adapter.as_ref().and_then(|a| a.layer(i));
            h = layer.forward(&h, kv, per_layer_input.as_ref(), adapter)?;
            if let Some(t) = taps.as_deref_mut() {
                t.offer(TapPoint::Layer(i), &h);
            }
        }
        if let (Some(k), 0) = (keep, skip) {
            h = h.index((.., (len - k) as i32.., ..));
        }
        Ok(h)
    }

    /// A decode step's input: each row's token embedding `[n, 1, hidden]` and per-layer
    /// inputs `[n, 1, layers, width]` (one position per row: each row is multiplied as alone).
    fn decode_inputs(&self, ids: &Array) -> Result<(Array, Option<Array>)> {
        let n = ids.size() as i32;
        let hidden = self.config.hidden_size as i32;
        let h = self.embed(ids, &[])?.reshape(&[n, 1, hidden])?;
        let per_layer_inputs = self
            .per_layer_inputs(ids, &h, false)?
            .map(|p| {
                let shape = p.shape();
                p.reshape(&[n, 1, shape[2], shape[3]])
            })
            .transpose()?;
        Ok((h, per_layer_inputs))
    }

    /// Puts `adapter` on (or takes it off with `None`) from the next forward; returns the one
    /// it replaces. The base weights are untouched.
    pub fn set_adapter(&mut self, adapter: Option<Adapter>) -> Option<Adapter> {
        std::mem::replace(&mut self.adapter, adapter)
    }

    /// The adapter on, if any.
    pub fn adapter(&self) -> Option<&Adapter> {
        self.adapter.as_ref()
    }

    /// The dense weight `[out, in]` of layer `layer`'s projection `target`, if it runs one.
    pub fn base_weight(&self, layer: usize, target: Target) -> Result<Option<Array>> {
        match self.layers.get(layer) {
            Some(l) => l.base_weight(target),
            None => Ok(None),
        }
    }

    /// Logits `[rows, vocab]` of final-normed hidden states `[rows, hidden]`: the tied head and
    /// the soft cap.
    pub fn head(&self, h: &Array) -> Result<Array> {
        let mut logits = self.embed_tokens.as_linear(h)?;
        if let Some(cap) = &self.scales.softcap {
            logits = softcap(&logits, cap)?;
        }
        Ok(logits)
    }

    /// Per-layer inputs `[1, T, layers, per_layer_width]`: a token part (from the per-layer
    /// table) plus a context part (projected from the embeddings), see `docs/MODEL.md`.
    fn per_layer_inputs(
        &self,
        ids: &Array,
        h: &Array,
        placeholders: bool,
    ) -> Result<Option<Array>> {
        let Some(per_layer) = &self.per_layer else {
            return Ok(None);
        };
        let len = ids.size() as i32;
        let num_layers = self.config.num_hidden_layers as i32;
        let width = self.config.hidden_size_per_layer_input as i32;
        let mut token_ids = ids.clone();
        if placeholders {
            for &placeholder in &self.placeholder_ids {
                let is_media = ids.eq(Array::from_int(placeholder as i32))?;
                token_ids = select(
                    &is_media,
                    Array::from_int(self.pad_token_id as i32).as_dtype(ids.dtype())?,
                    &token_ids,
                )?;
            }
        }
        let tokens = per_layer
            .embed_tokens_per_layer
            .lookup(&token_ids)?
            .multiply(&self.scales.per_layer_token)?
            .reshape(&[1, len, num_layers, width])?;
        let context = per_layer
            .per_layer_model_projection
            .forward(h)?
            .multiply(&self.scales.per_layer_projection)?;
        let context = fast::rms_norm(
            context.reshape(&[1, len, num_layers, width])?,
            Some(&per_layer.per_layer_projection_norm),
            self.config.rms_norm_eps,
        )?;
        Ok(Some(
            context
                .add(tokens)?
                .multiply(&self.scales.per_layer_combine)?,
        ))
    }
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
    let query_positions = arange::<i32, i32>(offset as i32, (offset + queries) as i32, None)?
        .reshape(&[queries as i32, 1])?;
    let key_positions = arange::<i32, i32>(first_key as i32, (offset + queries) as i32, None)?
        .reshape(&[1, keys as i32])?;
    let mut mask = query_positions.ge(&key_positions)?;
    if let Some(w) = window {
        mask = mask.logical_and(
            &query_positions
                .subtract(&key_positions)?
                .lt(Array::from_int(w as i32))?,
        )?;
    }
    Ok(Some(mask))
}
