//! Loading a model folder into a runnable model.

use std::path::{Path, PathBuf};

use mlx_rs::transforms::eval;
use mlx_rs::{Array, Dtype, Stream};

use crate::audio::AudioTower;
use crate::batch::BatchKvCache;
use crate::cache::KvCache;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::layers::{layer_table, KvSource, LayerSpec};
use crate::lora::{Adapter, AdapterInfo};
use crate::taps::Taps;
use crate::text::{MediaFeatures, TextModel};
use crate::tuning::Tuning;
use crate::vision::VisionTower;
use crate::weights::WeightStore;

/// How to load a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Activation and dequantization dtype; `None` = the checkpoint's own (bf16 for E4B).
    pub dtype: Option<Dtype>,
    /// Store K/V quantized as the checkpoint's `kv_config.json` says (OptiQ), when it has one.
    /// Off by default: the reference ignores that file.
    pub kv_quantization: bool,
    /// Kernel choices and parallelism; defaults to [`Tuning::for_backend`].
    pub tuning: Tuning,
    /// Keep the per-layer token table in MLX memory instead of reading its rows from the
    /// checkpoint file per forward (`ple.rs`).
    pub ple_resident: bool,
    /// An adapter folder to put on after the load (see [`Model::load_adapter`]).
    pub adapter: Option<PathBuf>,
}

/// A loaded Gemma 4 model: the text model in MLX memory; the vision and audio towers checked
/// at load and read from the checkpoint only when asked for ([`Model::load_vision`],
/// [`Model::load_audio`]), so that a text-only chat never holds their bytes. Who asks decides
/// how long a tower stays (the engine's `LoadedModel`, docs/MODEL.md "Towers on demand").
pub struct Model {
    config: Config,
    table: Vec<LayerSpec>,
    text: TextModel,
    towers: TowerSource,
    tuning: Tuning,
}

/// What reading a tower again from the checkpoint needs: the folder, the dtypes chosen at load,
/// and which towers the load found (checked, not read).
struct TowerSource {
    dir: PathBuf,
    /// The compute dtype of the load (the checkpoint's own unless one was chosen).
    dtype: Dtype,
    /// Whether a dtype was chosen: the audio tower then computes in it instead of as stored.
    dtype_chosen: bool,
    vision: bool,
    audio: bool,
}

/// A tower's checkpoint names: the tower and its projection into the text width.
fn is_vision(name: &str) -> bool {
    name.starts_with("vision_tower.") || name.starts_with("embed_vision.")
}

/// See [`is_vision`].
fn is_audio(name: &str) -> bool {
    name.starts_with("audio_tower.") || name.starts_with("embed_audio.")
}

impl Model {
    /// Loads `dir` strictly: one error lists every missing, unexpected or misshapen tensor.
    pub fn load(dir: &Path, options: &LoadOptions) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Unsupported(format!(
                "{} is not a folder",
                dir.display()
            )));
        }
        let config = Config::load(dir)?;
        let mut table = layer_table(&config.text)?;
        if options.kv_quantization {
            apply_kv_config(dir, &mut table)?;
        }
        // On the default device's stream: with MLX's CUDA backend, tensors are then read straight
        // into device memory instead of into host-resident unified memory.
        let mut store = mlx_rs::with_stream(&Stream::new(), || WeightStore::open(dir))?;
        let dtype = match options.dtype {
            Some(d) => d,
            None => checkpoint_dtype(&store),
        };
        let shared: Vec<usize> = table
            .iter()
            .filter(|l| matches!(l.kv, KvSource::Shared { .. }))
            .map(|l| l.index)
            .collect();
        let has_audio = config.audio.is_some();
        store.ignore_where(|name| is_unused(name, &shared, has_audio));
        // Missing or wrong tensors stand in as zeros until `finish` reports them all at once.
        let root = store.root(&config.quantization, dtype, options.tuning);
        let text = TextModel::load(&root, &config, &table, !options.ple_resident)?;
        // The towers are built here only to check their tensors (names, shapes, dtypes) with
        // the rest: MLX reads a tensor's bytes only when it is evaluated, and these never are.
        let vision = VisionTower::load(&root, &config)?;
        let audio = AudioTower::load(&audio_root(&root, options.dtype), &config)?;
        store.finish()?;
        let towers = TowerSource {
            dir: dir.to_path_buf(),
            dtype,
            dtype_chosen: options.dtype.is_some(),
            vision: vision.is_some(),
            audio: audio.is_some(),
        };
        drop((vision, audio));
        // Read every weight of the text model now (one pass over the files, casts done once),
        // so that the first request pays no loading and no source copy of a cast weight stays
        // alive.
        eval(text.arrays())?;
        let mut model = Self {
            config,
            table,
            text,
            towers,
            tuning: options.tuning,
        };
        if let Some(dir) = &options.adapter {
            let adapter = model.load_adapter(dir)?;
            model.set_adapter(Some(adapter))?;
        }
        Ok(model)
    }

    /// Reads the adapter in `dir` (mlx-lm / mlx-vlm or PEFT; `docs/ADAPTERS.md`) and checks it
    /// against this model: every problem in one error, each naming its tensor. It is not put
    /// on: see [`Self::set_adapter`]. Several may be kept and switched without a reload.
    pub fn load_adapter(&self, dir: &Path) -> Result<Adapter> {
        let base_weight =
            |layer: usize, target: crate::lora::Target| self.text.base_weight(layer, target);
        crate::lora::load(
            dir,
            &self.config.text,
            &self.table,
            self.text.dtype(),
            &base_weight,
        )
    }

    /// Puts `adapter` on from the next forward (prefill, decode, verify and batched rows alike:
    /// every row of a forward runs under it), or takes it off with `None`; returns the one it
    /// replaces. Refused for an adapter checked against another model.
    pub fn set_adapter(&mut self, adapter: Option<Adapter>) -> Result<Option<Adapter>> {
        if let Some(a) = &adapter {
            if !a.fits(&self.config.text) {
                return Err(Error::Adapter {
                    path: a.info().dir.clone(),
                    message: "was checked against another base model".into(),
                });
            }
        }
        Ok(self.text.set_adapter(adapter))
    }

    /// The adapter on, if any.
    pub fn adapter(&self) -> Option<&AdapterInfo> {
        self.text.adapter().map(Adapter::info)
    }

    /// Whether the checkpoint has a vision tower (checked at load; see [`Self::load_vision`]).
    pub fn has_vision(&self) -> bool {
        self.towers.vision
    }

    /// Whether the checkpoint's config has an audio tower (`audio_config` not null) and its
    /// tensors were found at load (see [`Self::load_audio`]).
    pub fn has_audio(&self) -> bool {
        self.towers.audio
    }

    /// Reads the vision tower from the checkpoint into MLX memory (every weight evaluated, in
    /// the dtype of the load); `None` when the checkpoint has none. The tensors are checked
    /// again: a checkpoint changed on disk since the load is an error in words.
    pub fn load_vision(&self) -> Result<Option<VisionTower>> {
        if !self.towers.vision {
            return Ok(None);
        }
        let tower = self.load_tower(is_vision, |root| VisionTower::load(root, &self.config))?;
        if let Some(t) = &tower {
            eval(t.arrays())?;
        }
        Ok(tower)
    }

    /// Reads the audio tower from the checkpoint into MLX memory, as [`Self::load_vision`]
    /// does: float weights as stored unless the load chose a dtype (docs/AUDIO.md "The audio
    /// tower"); `None` when the checkpoint has none.
    pub fn load_audio(&self) -> Result<Option<AudioTower>> {
        if !self.towers.audio {
            return Ok(None);
        }
        let chosen = self.towers.dtype_chosen.then_some(self.towers.dtype);
        let tower = self.load_tower(is_audio, |root| {
            AudioTower::load(&audio_root(root, chosen), &self.config)
        })?;
        if let Some(t) = &tower {
            eval(t.arrays())?;
        }
        Ok(tower)
    }

    /// Opens the checkpoint again for the tensors `part` names only, builds them with `build`,
    /// and checks them as strictly as the load did.
    fn load_tower<T>(
        &self,
        part: fn(&str) -> bool,
        build: impl FnOnce(&crate::weights::Weights<'_>) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let dir = &self.towers.dir;
        let mut store = mlx_rs::with_stream(&Stream::new(), || WeightStore::open(dir))?;
        store.ignore_where(|name| !part(name));
        let root = store.root(&self.config.quantization, self.towers.dtype, self.tuning);
        let tower = build(&root)?;
        store.finish()?;
        Ok(tower)
    }

    /// The backend tuning this model runs with.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The checkpoint's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The per-layer token table (E2B/E4B), read from the file or resident (`ple.rs`).
    pub fn ple_table(&self) -> Option<&crate::ple::PleTable> {
        self.text.ple_table()
    }

    /// The per-layer geometry.
    pub fn layers(&self) -> &[LayerSpec] {
        &self.table
    }

    /// The activation dtype in use.
    pub fn dtype(&self) -> Dtype {
        self.text.dtype()
    }

    /// Fresh caches for a new conversation.
    pub fn new_caches(&self) -> Vec<KvCache> {
        self.text.new_caches()
    }

    /// Bytes the caches of one conversation hold after `positions` tokens, the last decoded:
    /// keys and values of every cache-owning layer (a full layer's buffers have room up to
    /// `cache::full_capacity`, a sliding layer's `cache::sliding_capacity`; after a long
    /// prefill chunk, for a few steps, the chunk more), in the activation dtype or quantized as
    /// the layer stores them. Right after a prompt a layer holds just its positions, less than
    /// this. What deciding how many answers fit in memory at once needs (the engine's batching).
    pub fn kv_bytes(&self, positions: usize) -> usize {
        let text = &self.config.text;
        let dtype_bytes = match self.dtype() {
            Dtype::Float32 => 4.0,
            _ => 2.0,
        };
        self.table
            .iter()
            .filter(|l| l.owns_kv())
            .map(|l| {
                let held = match l.kind {
                    crate::config::AttentionKind::Full => crate::cache::full_capacity(positions),
                    crate::config::AttentionKind::Sliding => {
                        crate::cache::sliding_capacity(text.sliding_window)
                    }
                };
                // Quantized: packed bits plus a scale and a bias (in the dtype) per group.
                let per_value = match l.kv_quant {
                    Some(q) => q.bits as f64 / 8.0 + 2.0 * dtype_bytes / q.group_size as f64,
                    None => dtype_bytes,
                };
                let values = 2 * held * text.num_key_value_heads * l.head_dim;
                (values as f64 * per_value).ceil() as usize
            })
            .sum()
    }

    /// Teacher-forced forward over host token ids, continuing `caches`: logits of the last
    /// `keep` positions (`[keep, vocab]`), or of every position when `keep` is `None`.
    /// Checks ids against the vocabulary and media placeholder counts against feature rows.
    pub fn forward(
        &self,
        ids: &[u32],
        media: &[MediaFeatures<'_>],
        caches: &mut [KvCache],
        keep: Option<usize>,
    ) -> Result<Array> {
        self.check_ids(ids, media)?;
        let placeholders = self.text.has_placeholders(ids);
        let ids = Array::from_slice(ids, &[ids.len() as i32]);
        self.text.forward(&ids, media, caches, keep, placeholders)
    }

    /// [`Self::forward`] that also returns the final-normed hidden states of the same rows:
    /// `(hidden [rows, hidden], logits [rows, vocab])`.
    pub fn forward_with_hidden(
        &self,
        ids: &[u32],
        media: &[MediaFeatures<'_>],
        caches: &mut [KvCache],
        keep: Option<usize>,
    ) -> Result<(Array, Array)> {
        self.check_ids(ids, media)?;
        let placeholders = self.text.has_placeholders(ids);
        let ids = Array::from_slice(ids, &[ids.len() as i32]);
        let h = self
            .text
            .forward_normed(&ids, media, caches, keep, placeholders)?;
        let logits = self.text.head(&h)?;
        Ok((h, logits))
    }

    /// [`Self::forward_array`] over every row, with the final-normed hidden states:
    /// `(hidden [T, hidden], logits [T, vocab])` — a speculative round's verify.
    pub fn forward_array_with_hidden(
        &self,
        ids: &Array,
        caches: &mut [KvCache],
    ) -> Result<(Array, Array)> {
        let h = self.text.forward_normed(ids, &[], caches, None, false)?;
        let logits = self.text.head(&h)?;
        Ok((h, logits))
    }

    /// [`Self::forward`] over every position (no media) keeping the hidden states `taps` asks
    /// for: logits `[T, vocab]`, the same as without taps. A prefill, a decode step and a
    /// verify are all this forward, so `taps` sees whichever ran (see [`Taps::stacked`]).
    pub fn forward_tapped(
        &self,
        ids: &[u32],
        caches: &mut [KvCache],
        taps: &mut Taps,
    ) -> Result<Array> {
        self.check_ids(ids, &[])?;
        let placeholders = self.text.has_placeholders(ids);
        let ids = Array::from_slice(ids, &[ids.len() as i32]);
        let h =
            self.text
                .forward_normed_tapped(&ids, &[], caches, None, placeholders, Some(taps))?;
        self.text.head(&h)
    }

    /// One decode step of several sequences at once (continuous batching): `ids` `[n]` holds
    /// each sequence's next token (device-resident, in range, no media placeholders) and
    /// `caches[i]` sequence `i`'s caches. Logits `[n, vocab]`; row `i` is what
    /// [`Self::forward_array`] gives sequence `i` alone.
    ///
    /// Two rows or more step over the buffers of `batch` (see [`BatchKvCache`]), which the
    /// caller keeps from step to step while the same rows step together; each row's caches
    /// become views of them. Row `i` then attends exactly its own positions, over a longer,
    /// masked key range: on MLX's CPU backend its logits are its lone ones bit for bit; a GPU's
    /// kernels may group the float sums differently (the last bits). Caches stored quantized
    /// step per row, each over its own caches, as alone.
    pub fn forward_rows(
        &self,
        ids: &Array,
        caches: &mut [&mut [KvCache]],
        batch: &mut BatchKvCache,
    ) -> Result<Array> {
        if !self.tuning.batched_rows || caches.len() < 2 {
            return self.text.forward_rows(ids, caches, None);
        }
        let result = match batch.for_rows(caches) {
            Ok(kv) => self.text.forward_rows(ids, caches, kv),
            Err(e) => Err(e),
        };
        if result.is_err() {
            batch.clear();
        }
        result
    }

    /// One plain decode step of one sequence: `id` (`[1]`, device-resident, in range, not a
    /// media placeholder) fed forward after `caches`; logits `[1, vocab]`.
    pub fn decode(&self, id: &Array, caches: &mut [KvCache]) -> Result<Array> {
        self.forward_array(id, caches, None)
    }

    /// Token embeddings `[T, hidden]` of device-resident ids, scaled as the decoder's input.
    pub fn embed(&self, ids: &Array) -> Result<Array> {
        self.text.embed(ids, &[])
    }

    /// Ids must be in the vocabulary and media placeholder counts must match feature rows.
    fn check_ids(&self, ids: &[u32], media: &[MediaFeatures<'_>]) -> Result<()> {
        let vocab = self.config.text.vocab_size as u32;
        if let Some(bad) = ids.iter().find(|&&id| id >= vocab) {
            return Err(Error::Input(format!(
                "token id {bad} is outside the vocabulary (size {vocab})"
            )));
        }
        for m in media {
            let found = ids.iter().filter(|&&id| id == m.token_id).count();
            let rows = m.features.shape().first().copied().unwrap_or(0) as usize;
            if found != rows {
                return Err(Error::Input(format!(
                    "the prompt has {found} placeholder tokens (id {}) but the media supply {rows} rows",
                    m.token_id
                )));
            }
        }
        Ok(())
    }

    /// Forward over device-resident ids (`[T]` integers, e.g. the token just sampled), without
    /// host round trips; the caller guarantees ids are in range and carry no media placeholders.
    pub fn forward_array(
        &self,
        ids: &Array,
        caches: &mut [KvCache],
        keep: Option<usize>,
    ) -> Result<Array> {
        self.text.forward(ids, &[], caches, keep, false)
    }
}

/// Tensors the model knowingly does not use: audio tensors of a checkpoint whose config has
/// no audio tower (the reference drops them too), K/V of shared layers (some uploads carry
/// them), rotary buffers and text-side clip scalars (mlx-vlm drops both).
fn is_unused(name: &str, shared_layers: &[usize], has_audio: bool) -> bool {
    if !has_audio && (name.starts_with("audio_tower.") || name.starts_with("embed_audio.")) {
        return true;
    }
    if name.contains("rotary_emb") {
        return true;
    }
    if let Some(rest) = name.strip_prefix("language_model.model.layers.") {
        let mut parts = rest.split('.');
        let layer: Option<usize> = parts.next().and_then(|p| p.parse().ok());
        let (attn, module) = (parts.next(), parts.next());
        if let (Some(layer), Some("self_attn"), Some(module)) = (layer, attn, module) {
            if shared_layers.contains(&layer)
                && matches!(module, "k_proj" | "v_proj" | "k_norm" | "v_norm")
            {
                return true;
            }
        }
        if ["input_min", "input_max", "output_min", "output_max"]
            .iter()
            .any(|s| name.ends_with(s))
        {
            return true;
        }
    }
    false
}

/// Reads `kv_config.json` (a list of `{layer_idx, bits, group_size}` for cache-owning layers)
/// into the layer table, if the file exists (`LoadOptions::kv_quantization`; also read by the
/// fit estimate before a load).
pub fn apply_kv_config(dir: &Path, table: &mut [LayerSpec]) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Entry {
        layer_idx: usize,
        bits: i32,
        group_size: i32,
    }
    let path = dir.join("kv_config.json");
    if !path.exists() {
        return Ok(());
    }
    let bad = |message: String| Error::Config {
        path: path.clone(),
        message,
    };
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let entries: Vec<Entry> = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    for e in entries {
        let layer = table
            .get_mut(e.layer_idx)
            .ok_or_else(|| bad(format!("layer_idx {} does not exist", e.layer_idx)))?;
        if !layer.owns_kv() {
            return Err(bad(format!(
                "layer {} has no cache of its own",
                e.layer_idx
            )));
        }
        if ![4, 8].contains(&e.bits)
            || e.group_size <= 0
            || layer.head_dim % e.group_size as usize != 0
        {
            return Err(bad(format!(
                "layer {}: {} bits with group {} is not supported",
                e.layer_idx, e.bits, e.group_size
            )));
        }
        layer.kv_quant = Some(crate::config::QuantSpec {
            bits: e.bits,
            group_size: e.group_size,
        });
    }
    Ok(())
}

/// The audio tower computes in float32 from its weights as stored, unless a dtype was chosen
/// (docs/AUDIO.md "The audio tower").
fn audio_root<'a>(
    root: &crate::weights::Weights<'a>,
    chosen: Option<Dtype>,
) -> crate::weights::Weights<'a> {
    match chosen {
        Some(_) => root.clone(),
        None => root.as_stored(),
    }
}

fn checkpoint_dtype(store: &WeightStore) -> Dtype {
    match store.header_dtype("language_model.model.norm.weight") {
        Some(safetensors::Dtype::F32) => Dtype::Float32,
        Some(safetensors::Dtype::F16) => Dtype::Float16,
        _ => Dtype::Bfloat16,
    }
}
