//! Gemma 4's multi-token-prediction "assistant" drafter (`gemma4_assistant`): a 4-layer decoder
//! with queries only, attending the target's own K/V, that proposes the next few tokens for
//! the target to check in one forward (docs/SPECULATIVE.md).
//!
//! One draft step: `h = pre_projection([embed(token) · √hidden_target, h_prev])`, four decoder
//! layers over the donor layers' K/V (the last cache-owning sliding and full layers of the
//! target) at the RoPE position of the last cached token, the final norm, then
//! `h_prev ← post_projection(h)` and a token from the centroid-routed head.

use std::path::Path;

use mlx_rs::fast;
use mlx_rs::ops::indexing::{argmax_axis, IndexOp};
use mlx_rs::ops::{argpartition_axis, concatenate};
use mlx_rs::transforms::eval;
use mlx_rs::{Array, Dtype, Stream};
use serde::Deserialize;

use crate::config::{kind_name, AttentionKind, Quantization, TextConfig};
use crate::decoder::DecoderLayer;
use crate::error::{Error, Result};
use crate::kv::StepKv;
use crate::layers::{rope_for, KvSource, LayerSpec};
use crate::model::Model;
use crate::quant::Linear;
use crate::weights::{DtypeClass, WeightStore};

/// `config.json` of a drafter checkpoint, the fields we use.
#[derive(Debug, Clone, Deserialize)]
struct RawConfig {
    backbone_hidden_size: usize,
    #[serde(default)]
    use_ordered_embeddings: bool,
    num_centroids: Option<usize>,
    centroid_intermediate_top_k: Option<usize>,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
    block_size: Option<usize>,
    text_config: TextConfig,
    quantization: Option<serde_json::Value>,
}

fn yes() -> bool {
    true
}

/// Block size (drafts + 1) when the checkpoint names none, as mlx-vlm.
pub const DEFAULT_BLOCK_SIZE: usize = 4;

/// The target's K/V a drafter reads: cache slots of the last owning layer of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Donors {
    pub sliding: usize,
    pub full: usize,
}

impl Donors {
    /// The donor cache slots of `model`: its last cache-owning sliding and full layers (those
    /// whose K/V the KV-shared layers read).
    pub fn of(model: &Model) -> Result<Self> {
        let mut slot = 0;
        let (mut sliding, mut full) = (None, None);
        for layer in model.layers() {
            if let KvSource::Own { .. } = layer.kv {
                match layer.kind {
                    AttentionKind::Sliding => sliding = Some(slot),
                    AttentionKind::Full => full = Some(slot),
                }
                slot += 1;
            }
        }
        match (sliding, full) {
            (Some(sliding), Some(full)) => Ok(Self { sliding, full }),
            _ => Err(Error::Unsupported(
                "the model needs a cache-owning sliding and full layer for a drafter to read"
                    .into(),
            )),
        }
    }
}

/// The keys and values one draft block attends: `[1, kv_heads, n, head_dim]` each.
pub struct DonorKv {
    pub sliding: (Array, Array),
    pub full: (Array, Array),
}

/// A loaded drafter, bound to the target it was checked against.
pub struct Drafter {
    layers: Vec<DecoderLayer>,
    pre_projection: Linear,
    post_projection: Linear,
    norm: Array,
    embed: Array,
    centroids: Linear,
    /// `[num_centroids, vocab / num_centroids]` token ids per centroid.
    ordering: Array,
    top_k: i32,
    num_centroids: i32,
    eps: f32,
    block_size: usize,
    donors: Donors,
    backbone: usize,
    parameters: usize,
}

impl Drafter {
    /// Loads the drafter in `dir` for `target`: strict (every one of its tensors, each of the
    /// right shape, nothing else), unquantized only, and refused with both values named when it
    /// does not fit the target.
    pub fn load(dir: &Path, target: &Model) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let bad = |message: String| Error::Config {
            path: path.clone(),
            message,
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let model_type = value.get("model_type").and_then(|v| v.as_str());
        if model_type != Some("gemma4_assistant") {
            return Err(Error::Unsupported(format!(
                "{} is not a Gemma 4 assistant drafter (model_type {}, expected \"gemma4_assistant\")",
                dir.display(),
                model_type.map_or("missing".into(), |t| format!("\"{t}\""))
            )));
        }
        let raw: RawConfig = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        if raw.quantization.is_some() {
            return Err(Error::Unsupported(format!(
                "{} is a quantized drafter (config.json has \"quantization\"); use the bf16 or float32 one",
                dir.display()
            )));
        }
        let store = mlx_rs::with_stream(&Stream::new(), || WeightStore::open(dir))?;
        if let Some(name) = store.first_quantized() {
            return Err(Error::Unsupported(format!(
                "{} is a quantized drafter ({name}); use the bf16 or float32 one",
                dir.display()
            )));
        }
        let fit = check_fit(&raw, target)?;
        let t = &raw.text_config;
        let dtype = target.dtype();
        let none = Quantization::default();
        let root = store.root(&none, dtype, *target.tuning());
        let hidden = t.hidden_size;
        let layers = fit
            .specs
            .iter()
            .map(|spec| {
                DecoderLayer::load(&root.at(&format!("model.layers.{}", spec.index)), t, spec)
            })
            .collect::<Result<Vec<_>>>()?;
        let num_centroids = raw.num_centroids.unwrap_or(0);
        let per_centroid = t.vocab_size / num_centroids.max(1);
        let ordering = root
            .at("masked_embedding")
            .take("token_ordering", &[t.vocab_size], DtypeClass::Int)?
            .as_dtype(Dtype::Int32)?
            .reshape(&[num_centroids as i32, per_centroid as i32])?;
        let drafter = Self {
            pre_projection: Linear::load(
                &root.at("pre_projection"),
                hidden,
                2 * raw.backbone_hidden_size,
            )?,
            post_projection: Linear::load(
                &root.at("post_projection"),
                raw.backbone_hidden_size,
                hidden,
            )?,
            norm: root.float("model.norm.weight", &[hidden])?,
            embed: root.float("model.embed_tokens.weight", &[t.vocab_size, hidden])?,
            centroids: Linear::load(
                &root.at("masked_embedding.centroids"),
                num_centroids,
                hidden,
            )?,
            ordering,
            top_k: raw.centroid_intermediate_top_k.unwrap_or(0) as i32,
            num_centroids: num_centroids as i32,
            eps: t.rms_norm_eps,
            block_size: raw.block_size.unwrap_or(DEFAULT_BLOCK_SIZE).max(2),
            donors: Donors::of(target)?,
            backbone: raw.backbone_hidden_size,
            parameters: store.parameter_count(),
            layers,
        };
        store.finish()?;
        eval(drafter.arrays())?;
        Ok(drafter)
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out: Vec<&Array> = self.layers.iter().flat_map(|l| l.arrays()).collect();
        out.extend(self.pre_projection.arrays());
        out.extend(self.post_projection.arrays());
        out.extend(self.centroids.arrays());
        out.extend([&self.norm, &self.embed, &self.ordering]);
        out
    }

    /// Drafts + 1 per round as the checkpoint configures it (mlx-vlm's default: 4).
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The target cache slots it reads.
    pub fn donors(&self) -> Donors {
        self.donors
    }

    /// Parameters in the checkpoint (for the model info and the bench).
    pub fn parameter_count(&self) -> usize {
        self.parameters
    }

    /// One draft step: from the last token (`[1]`, device) and the previous feature
    /// (`[1, 1, backbone]`: the target's final-normed hidden state first, then the drafter's
    /// own), the next feature and the proposed token (`[1]` int32), lazily. `position` is the
    /// RoPE position of the queries: the last token in the target's caches.
    pub fn step(
        &self,
        target: &Model,
        token: &Array,
        feature: &Array,
        kv: &DonorKv,
        position: usize,
    ) -> Result<(Array, Array)> {
        let e = target
            .embed(token)?
            .reshape(&[1, 1, self.backbone as i32])?;
        let x = concatenate(&[e, feature.as_dtype(target.dtype())?], -1)?;
        let mut h = self.pre_projection.forward(&x)?;
        let mut donors = StepKv::donors(kv.sliding.clone(), kv.full.clone(), position);
        for layer in &self.layers {
            h = layer.forward(&h, &mut donors, None, None)?;
        }
        let hn = fast::rms_norm(&h, Some(&self.norm), self.eps)?;
        let next = self.post_projection.forward(&hn)?;
        Ok((next, self.argmax(&hn)?))
    }

    /// The centroid-routed head's most likely token (`[1]` int32) for `hn` (`[1, 1, hidden]`):
    /// the top-k centroids' tokens scored densely, the first best in argpartition order (as
    /// mlx-vlm's `MaskedEmbedder.argmax`).
    fn argmax(&self, hn: &Array) -> Result<Array> {
        let hn = hn.reshape(&[1, -1])?;
        let scores = self.centroids.forward(&hn)?; // [1, C]
        let kth = self.num_centroids - self.top_k;
        let top = argpartition_axis(&scores, kth, -1)?.index((.., kth..)); // [1, k]
        let ids = self
            .ordering
            .take_axis(top.reshape(&[-1])?, 0)?
            .reshape(&[-1])?; // [k · per]
        let rows = self.embed.take_axis(&ids, 0)?; // [k · per, hidden]
        let logits = hn.matmul(rows.transpose()?)?; // [1, k · per]
        let best = argmax_axis(&logits, -1, None)?;
        Ok(ids.take_axis(best, 0)?)
    }
}

/// The drafter's layer geometry, once it is known to fit the target.
struct Fit {
    specs: Vec<LayerSpec>,
}

/// Refuses a drafter that does not fit `target`, naming both values.
fn check_fit(raw: &RawConfig, target: &Model) -> Result<Fit> {
    let t = &raw.text_config;
    let m = &target.config().text;
    let mismatch = |what: &str, ours: String, theirs: String| {
        Err(Error::Unsupported(format!(
            "the drafter does not fit this model: its {what} is {ours}, the model's is {theirs}"
        )))
    };
    if raw.backbone_hidden_size != m.hidden_size {
        return mismatch(
            "backbone_hidden_size",
            raw.backbone_hidden_size.to_string(),
            m.hidden_size.to_string(),
        );
    }
    if t.vocab_size != m.vocab_size {
        return mismatch(
            "vocabulary",
            t.vocab_size.to_string(),
            m.vocab_size.to_string(),
        );
    }
    if t.head_dim != m.head_dim {
        return mismatch("head_dim", t.head_dim.to_string(), m.head_dim.to_string());
    }
    let global = |c: &TextConfig| c.global_head_dim.unwrap_or(c.head_dim);
    if global(t) != global(m) {
        return mismatch(
            "global_head_dim",
            global(t).to_string(),
            global(m).to_string(),
        );
    }
    if t.sliding_window != m.sliding_window {
        return mismatch(
            "sliding_window",
            t.sliding_window.to_string(),
            m.sliding_window.to_string(),
        );
    }
    if t.num_attention_heads == 0 || !t.num_attention_heads.is_multiple_of(m.num_key_value_heads) {
        return mismatch(
            "attention head count",
            t.num_attention_heads.to_string(),
            format!("a multiple of its {} K/V heads", m.num_key_value_heads),
        );
    }
    if t.num_key_value_heads != m.num_key_value_heads {
        return mismatch(
            "K/V head count",
            t.num_key_value_heads.to_string(),
            m.num_key_value_heads.to_string(),
        );
    }
    if t.hidden_size_per_layer_input != 0 {
        return Err(Error::Unsupported(format!(
            "the drafter has per-layer inputs (hidden_size_per_layer_input {}); a Gemma 4 assistant has none",
            t.hidden_size_per_layer_input
        )));
    }
    if !raw.use_ordered_embeddings || !raw.tie_word_embeddings {
        return Err(Error::Unsupported(
            "the drafter has no centroid head (use_ordered_embeddings and tie_word_embeddings must be true, as in the E2B/E4B assistants)".into(),
        ));
    }
    let centroids = raw.num_centroids.unwrap_or(0);
    let top_k = raw.centroid_intermediate_top_k.unwrap_or(0);
    if centroids == 0 || !t.vocab_size.is_multiple_of(centroids) || top_k == 0 || top_k > centroids
    {
        return Err(Error::Unsupported(format!(
            "the drafter's centroid head is inconsistent: {centroids} centroids, top {top_k}, vocabulary {}",
            t.vocab_size
        )));
    }
    if t.layer_types.len() != t.num_hidden_layers || t.num_hidden_layers == 0 {
        return Err(Error::Unsupported(format!(
            "the drafter lists {} layer types for {} layers",
            t.layer_types.len(),
            t.num_hidden_layers
        )));
    }
    let target_table = target.layers();
    let mut specs = Vec::new();
    for (index, &kind) in t.layer_types.iter().enumerate() {
        let Some(theirs) = target_table.iter().find(|l| l.kind == kind) else {
            return Err(Error::Unsupported(format!(
                "the drafter's layer {index} is {} attention, which the model has no layer of",
                kind_name(kind)
            )));
        };
        let head_dim = match kind {
            AttentionKind::Full => global(t),
            AttentionKind::Sliding => t.head_dim,
        };
        let rope = rope_for(t, kind, head_dim)?;
        if rope != theirs.rope {
            return mismatch(
                &format!("{} RoPE", kind_name(kind)),
                describe_rope(&rope),
                describe_rope(&theirs.rope),
            );
        }
        specs.push(LayerSpec {
            index,
            kind,
            head_dim,
            kv: KvSource::Shared { producer: index },
            mlp_width: t.intermediate_size,
            rope,
            kv_quant: None,
        });
    }
    Ok(Fit { specs })
}

fn describe_rope(rope: &crate::layers::Rope) -> String {
    match rope {
        crate::layers::Rope::Default { dims, base } => format!("base {base} over {dims} dims"),
        crate::layers::Rope::Proportional { dims, periods } => {
            let rotated = periods.iter().filter(|p| p.is_finite()).count() * 2;
            let base = periods.get(1).map_or(0.0, |p| p.powf(*dims as f32 / 2.0));
            format!("proportional, {rotated} of {dims} dims rotated (base ≈ {base:.0})")
        }
    }
}
