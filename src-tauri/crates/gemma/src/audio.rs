//! The Gemma 4 audio tower (a USM-style conformer) and its projection into the text embedding
//! space: log-mel → two stride-2 convolutions → conformer blocks (feed-forward, chunked local
//! attention with relative positions, light convolution, feed-forward) → `output_proj` →
//! `embed_audio` (weight-free RMSNorm, linear to the text width).
//!
//! Every step runs in float32 with the stored (bf16) weights promoted by MLX, as the reference
//! does; the two places where the reference computes in bf16 are reproduced with bf16 arrays
//! (docs/AUDIO.md "The audio tower").

use mlx_rs::fast;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{addmm, clip, conv2d, conv_general, maximum, pad, select, sigmoid};
use mlx_rs::{Array, Dtype};

mod attention;

use attention::{AudioAttention, Chunking};

use crate::config::{AudioConfig, Config};
use crate::error::{Error, Result};
use crate::quant::Linear;
use crate::weights::Weights;

/// Log-mel features of one clip: `data` is `[frames, 128]` row-major float32, `valid[i]` says
/// whether frame `i` holds audio (padding frames are false).
pub struct Mel<'a> {
    pub data: &'a [f32],
    pub frames: usize,
    pub valid: &'a [bool],
}

/// The epsilon the reference hard-codes for the feed-forward and block norms.
const BLOCK_EPS: f32 = 1e-6;

/// A float scalar array (Python's weak float scalars become the other operand's dtype).
fn scalar(value: f32, dtype: Dtype) -> Result<Array> {
    Ok(Array::from_f32(value).as_dtype(dtype)?)
}

/// A mask array of `shape` from host booleans.
fn mask_array(values: &[bool], shape: &[i32]) -> Array {
    Array::from_slice(values, shape)
}

/// `x · silu(x)`, as the reference's `nn.silu`.
fn silu(x: &Array) -> Result<Array> {
    Ok(x.multiply(sigmoid(x)?)?)
}

/// A linear layer with its weight as stored (`y = x · Wᵀ (+ b)`).
struct Plain {
    weight: Array,
    bias: Option<Array>,
}

impl Plain {
    fn load(weights: &Weights<'_>, out: usize, inp: usize, bias: bool) -> Result<Self> {
        Ok(Self {
            weight: weights.float("weight", &[out, inp])?,
            bias: if bias {
                Some(weights.float("bias", &[out])?)
            } else {
                None
            },
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![&self.weight];
        out.extend(&self.bias);
        out
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let wt = self.weight.transpose()?;
        Ok(match &self.bias {
            None => x.matmul(&wt)?,
            Some(b) => addmm(b, x, &wt, None, None)?,
        })
    }
}

/// A linear layer whose input and output are clamped to 0-d bounds stored beside it (±∞ when
/// the checkpoint has none, as the reference initialises them).
struct ClippableLinear {
    linear: Plain,
    input_min: Array,
    input_max: Array,
    output_min: Array,
    output_max: Array,
}

impl ClippableLinear {
    fn load(weights: &Weights<'_>, out: usize, inp: usize) -> Result<Self> {
        let bound = |leaf: &str, default: f32| -> Result<Array> {
            if weights.contains(leaf) {
                weights.float(leaf, &[])
            } else {
                Ok(Array::from_f32(default))
            }
        };
        Ok(Self {
            linear: Plain::load(&weights.at("linear"), out, inp, false)?,
            input_min: bound("input_min", f32::NEG_INFINITY)?,
            input_max: bound("input_max", f32::INFINITY)?,
            output_min: bound("output_min", f32::NEG_INFINITY)?,
            output_max: bound("output_max", f32::INFINITY)?,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = self.linear.arrays();
        out.extend([
            &self.input_min,
            &self.input_max,
            &self.output_min,
            &self.output_max,
        ]);
        out
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let x = clip(x, (&self.input_min, &self.input_max))?;
        let y = self.linear.forward(&x)?;
        Ok(clip(&y, (&self.output_min, &self.output_max))?)
    }
}

/// The value clamp the reference applies around norms (`gradient_clipping`, 1e10: a no-op
/// except for infinities, kept for parity).
struct Clamp {
    min: Array,
    max: Array,
}

impl Clamp {
    fn new(limit: f32) -> Self {
        Self {
            min: Array::from_f32(-limit),
            max: Array::from_f32(limit),
        }
    }

    fn apply(&self, x: &Array) -> Result<Array> {
        Ok(clip(x, (&self.min, &self.max))?)
    }
}

/// One stride-2 3×3 convolution + channel LayerNorm + ReLU (`subsample_conv_projection.layerN`).
struct ConvBlock {
    conv: Array, // [out, 3, 3, in]
    norm: Array,
    eps: f32,
}

impl ConvBlock {
    /// Loads the block; a weight stored channel-first (`[out, in, 3, 3]`) is transposed, as
    /// the reference does whenever the last axis is not the input channels.
    fn load(weights: &Weights<'_>, inp: usize, out: usize, eps: f32) -> Result<Self> {
        let channel_first = weights
            .shape("conv.weight")
            .is_some_and(|s| s.len() == 4 && s[3] != inp);
        let conv = if channel_first {
            weights
                .float("conv.weight", &[out, inp, 3, 3])?
                .transpose_axes(&[0, 2, 3, 1])?
        } else {
            weights.float("conv.weight", &[out, 3, 3, inp])?
        };
        Ok(Self {
            conv,
            norm: weights.float("norm.weight", &[out])?,
            eps,
        })
    }

    /// `x` `[1, T, F, C]`, `invalid` per frame → `[1, ceil(T/2), ceil(F/2), out]` and its mask.
    fn forward(&self, x: &Array, invalid: &[bool]) -> Result<(Array, Vec<bool>)> {
        let t = invalid.len() as i32;
        let x = select(mask_array(invalid, &[1, t, 1, 1]), Array::from_f32(0.0), x)?;
        let x = pad(&x, &[(0, 0), (1, 1), (1, 1), (0, 0)], None, None)?;
        let x = conv2d(&x, &self.conv, (2, 2), (0, 0), (1, 1), 1)?;
        let t_out = x.shape()[1] as usize;
        let mask: Vec<bool> = invalid.iter().step_by(2).take(t_out).copied().collect();
        let x = fast::layer_norm(&x, &self.norm, None, self.eps)?;
        Ok((maximum(&x, Array::from_f32(0.0))?, mask))
    }
}

/// Macaron feed-forward with a half-weighted residual (`feed_forward1`, `feed_forward2`).
struct FeedForward {
    pre_layer_norm: Array,
    ffw_layer_1: ClippableLinear,
    ffw_layer_2: ClippableLinear,
    post_layer_norm: Array,
    residual_weight: Array,
}

impl FeedForward {
    fn load(weights: &Weights<'_>, cfg: &AudioConfig) -> Result<Self> {
        let d = cfg.hidden_size;
        Ok(Self {
            pre_layer_norm: weights.float("pre_layer_norm.weight", &[d])?,
            ffw_layer_1: ClippableLinear::load(&weights.at("ffw_layer_1"), 4 * d, d)?,
            ffw_layer_2: ClippableLinear::load(&weights.at("ffw_layer_2"), d, 4 * d)?,
            post_layer_norm: weights.float("post_layer_norm.weight", &[d])?,
            residual_weight: Array::from_f32(cfg.residual_weight),
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![&self.pre_layer_norm, &self.post_layer_norm];
        out.extend(self.ffw_layer_1.arrays());
        out.extend(self.ffw_layer_2.arrays());
        out
    }

    fn forward(&self, x: &Array, clamp: &Clamp) -> Result<Array> {
        let h = fast::rms_norm(clamp.apply(x)?, Some(&self.pre_layer_norm), BLOCK_EPS)?;
        let h = silu(&self.ffw_layer_1.forward(&h)?)?;
        let h = clamp.apply(&self.ffw_layer_2.forward(&h)?)?;
        let h = fast::rms_norm(&h, Some(&self.post_layer_norm), BLOCK_EPS)?;
        Ok(x.add(h.multiply(&self.residual_weight)?)?)
    }
}

/// Light convolution: norm → linear → GLU → causal depthwise conv → norm → SiLU → linear,
/// plus the residual (`lconv1d`).
struct LightConv {
    pre_layer_norm: Array,
    linear_start: ClippableLinear,
    depthwise: Array, // [D, K, 1]
    conv_norm: Array,
    linear_end: ClippableLinear,
    kernel: i32,
    eps: f32,
}

impl LightConv {
    fn load(weights: &Weights<'_>, cfg: &AudioConfig) -> Result<Self> {
        let (d, k) = (cfg.hidden_size, cfg.conv_kernel_size);
        let leaf = "depthwise_conv1d.weight";
        // Stored channel-first ([D, 1, K]) in HF dumps: transposed as the reference does.
        let depthwise = if weights
            .shape(leaf)
            .is_some_and(|s| s.len() == 3 && s[2] != 1)
        {
            weights
                .float(leaf, &[d, 1, k])?
                .transpose_axes(&[0, 2, 1])?
        } else {
            weights.float(leaf, &[d, k, 1])?
        };
        Ok(Self {
            pre_layer_norm: weights.float("pre_layer_norm.weight", &[d])?,
            linear_start: ClippableLinear::load(&weights.at("linear_start"), 2 * d, d)?,
            depthwise,
            conv_norm: weights.float("conv_norm.weight", &[d])?,
            linear_end: ClippableLinear::load(&weights.at("linear_end"), d, d)?,
            kernel: k as i32,
            eps: cfg.rms_norm_eps,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![&self.pre_layer_norm, &self.depthwise, &self.conv_norm];
        out.extend(self.linear_start.arrays());
        out.extend(self.linear_end.arrays());
        out
    }

    fn forward(&self, x: &Array, clamp: &Clamp) -> Result<Array> {
        let h = fast::rms_norm(x, Some(&self.pre_layer_norm), self.eps)?;
        let h = self.linear_start.forward(&h)?;
        let d = h.shape()[2] / 2;
        let h = h
            .index((.., .., ..d))
            .multiply(sigmoid(h.index((.., .., d..)))?)?;
        let h = pad(&h, &[(0, 0), (self.kernel - 1, 0), (0, 0)], None, None)?;
        let h = conv_general(&h, &self.depthwise, &[1][..], &[0][..], None, None, d, None)?;
        let h = fast::rms_norm(clamp.apply(&h)?, Some(&self.conv_norm), self.eps)?;
        Ok(self.linear_end.forward(&silu(&h)?)?.add(x)?)
    }
}

/// One conformer block (`audio_tower.layers.N`).
struct ConformerBlock {
    feed_forward1: FeedForward,
    self_attn: AudioAttention,
    lconv1d: LightConv,
    feed_forward2: FeedForward,
    norm_pre_attn: Array,
    norm_post_attn: Array,
    norm_out: Array,
}

impl ConformerBlock {
    fn load(weights: &Weights<'_>, cfg: &AudioConfig, chunking: Chunking) -> Result<Self> {
        let d = cfg.hidden_size;
        let norm = |name: &str| weights.float(&format!("{name}.weight"), &[d]);
        Ok(Self {
            feed_forward1: FeedForward::load(&weights.at("feed_forward1"), cfg)?,
            self_attn: AudioAttention::load(&weights.at("self_attn"), cfg, chunking)?,
            lconv1d: LightConv::load(&weights.at("lconv1d"), cfg)?,
            feed_forward2: FeedForward::load(&weights.at("feed_forward2"), cfg)?,
            norm_pre_attn: norm("norm_pre_attn")?,
            norm_post_attn: norm("norm_post_attn")?,
            norm_out: norm("norm_out")?,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = self.feed_forward1.arrays();
        out.extend(self.self_attn.arrays());
        out.extend(self.lconv1d.arrays());
        out.extend(self.feed_forward2.arrays());
        out.extend([&self.norm_pre_attn, &self.norm_post_attn, &self.norm_out]);
        out
    }

    /// `valid` `[1, T, 1]` float32 (1 on real frames) zeroes padding rows before the convolution.
    fn forward(
        &self,
        x: &Array,
        clamp: &Clamp,
        attention: (i32, &Array),
        valid: &Array,
    ) -> Result<Array> {
        let x = self.feed_forward1.forward(x, clamp)?;
        let h = fast::rms_norm(clamp.apply(&x)?, Some(&self.norm_pre_attn), BLOCK_EPS)?;
        let h = clamp.apply(&self.self_attn.forward(&h, attention.0, attention.1)?)?;
        let x = x.add(fast::rms_norm(&h, Some(&self.norm_post_attn), BLOCK_EPS)?)?;
        let x = x.multiply(valid)?;
        let x = self.lconv1d.forward(&x, clamp)?;
        let x = self.feed_forward2.forward(&x, clamp)?;
        Ok(fast::rms_norm(
            clamp.apply(&x)?,
            Some(&self.norm_out),
            BLOCK_EPS,
        )?)
    }
}

/// The audio tower plus `embed_audio`.
pub struct AudioTower {
    cfg: AudioConfig,
    layer0: ConvBlock,
    layer1: ConvBlock,
    input_proj_linear: Plain,
    layers: Vec<ConformerBlock>,
    output_proj: Option<Plain>,
    embedding_projection: Linear,
    clamp: Clamp,
    chunking: Chunking,
}

impl AudioTower {
    /// Loads `audio_tower.*` and `embed_audio.*`; `None` when the config has no audio tower.
    /// Float tensors come as `root` hands them out: as stored (bf16, never quantized) under
    /// [`Weights::as_stored`], which is how the reference runs a checkpoint, or cast to the
    /// dtype a caller chose (float32 parity runs, as the reference cast to float32); the bf16
    /// quirks follow the weights' dtype as in the reference. `embed_audio` may be quantized.
    /// What is missing or wrong is recorded in the store and stands in as zeros.
    pub fn load(root: &Weights<'_>, config: &Config) -> Result<Option<Self>> {
        let Some(cfg) = config.audio.clone() else {
            return Ok(None);
        };
        let tower = root.at("audio_tower");
        let sscp = tower.at("subsample_conv_projection");
        let [c0, c1] = [
            cfg.subsampling_conv_channels[0],
            cfg.subsampling_conv_channels[1],
        ];
        let eps = cfg.rms_norm_eps;
        let layer0 = ConvBlock::load(&sscp.at("layer0"), 1, c0, eps)?;
        let layer1 = ConvBlock::load(&sscp.at("layer1"), c0, c1, eps)?;
        let freq = AudioConfig::MEL_BINS.div_ceil(2).div_ceil(2);
        let d = cfg.hidden_size;
        let input_proj_linear = Plain::load(&sscp.at("input_proj_linear"), d, freq * c1, false)?;
        let chunking = Chunking {
            chunk: cfg.attention_chunk_size,
            past: cfg.attention_context_left.saturating_sub(1),
            future: cfg.attention_context_right,
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| ConformerBlock::load(&tower.at(&format!("layers.{i}")), &cfg, chunking))
            .collect::<Result<Vec<_>>>()?;
        let output_proj = match cfg.output_proj_dims {
            Some(out) => Some(Plain::load(&tower.at("output_proj"), out, d, true)?),
            None => None,
        };
        let embedding_projection = Linear::load(
            &root.at("embed_audio.embedding_projection"),
            config.text.hidden_size,
            cfg.output_dims(),
        )?;
        Ok(Some(Self {
            clamp: Clamp::new(cfg.gradient_clipping),
            cfg,
            layer0,
            layer1,
            input_proj_linear,
            layers,
            output_proj,
            embedding_projection,
            chunking,
        }))
    }

    /// Every weight array of the tower (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![
            &self.layer0.conv,
            &self.layer0.norm,
            &self.layer1.conv,
            &self.layer1.norm,
        ];
        out.extend(self.input_proj_linear.arrays());
        for layer in &self.layers {
            out.extend(layer.arrays());
        }
        if let Some(p) = &self.output_proj {
            out.extend(p.arrays());
        }
        out.extend(self.embedding_projection.arrays());
        out
    }

    /// The tower's configuration.
    pub fn config(&self) -> &AudioConfig {
        &self.cfg
    }

    /// Encoder rows of a clip of `frames` mel frames: ceil(frames / 4).
    pub fn output_rows(frames: usize) -> usize {
        frames.div_ceil(2).div_ceil(2)
    }

    /// The tower's output before `embed_audio`: (`[T2, output_proj_dims]` float32 with the rows
    /// of padding frames zero, `valid[T2]`), T2 = ceil(frames / 4).
    pub fn tower(&self, mel: &Mel<'_>) -> Result<(Array, Vec<bool>)> {
        check(mel)?;
        let bins = AudioConfig::MEL_BINS as i32;
        let invalid: Vec<bool> = mel.valid.iter().map(|v| !v).collect();
        let x = Array::from_slice(mel.data, &[1, mel.frames as i32, bins, 1]);
        let (x, invalid) = self.layer0.forward(&x, &invalid)?;
        let (x, invalid) = self.layer1.forward(&x, &invalid)?;
        let shape = x.shape();
        let t2 = shape[1];
        let x = x.reshape(&[1, t2, shape[2] * shape[3]])?;
        let mut x = self.input_proj_linear.forward(&x)?;

        let (blocks, condition) = self.chunking.condition(&invalid);
        let w = self.chunking.chunk as i32;
        let c = self.chunking.context() as i32;
        let condition = mask_array(&condition, &[1, 1, blocks as i32, w, c]);
        let valid: Vec<f32> = invalid.iter().map(|&i| if i { 0.0 } else { 1.0 }).collect();
        let valid_rows = Array::from_slice(&valid, &[1, t2, 1]);
        for layer in &self.layers {
            x = layer.forward(&x, &self.clamp, (blocks as i32, &condition), &valid_rows)?;
        }
        if let Some(p) = &self.output_proj {
            x = p.forward(&x)?;
        }
        let x = select(mask_array(&invalid, &[1, t2, 1]), Array::from_f32(0.0), &x)?;
        let width = x.shape()[2];
        Ok((
            x.reshape(&[t2, width])?,
            invalid.iter().map(|i| !i).collect(),
        ))
    }

    /// Features for `soft_tokens` placeholder positions, `[soft_tokens, text_hidden]` float32:
    /// `embed_audio(tower(mel))` mapped as the reference's scatter does for one clip --
    /// placeholder k receives encoder row k mod T2, so with T2 + 1 placeholders the last one
    /// gets row 0 again, and rows of padding frames are zero (docs/AUDIO.md). `soft_tokens`
    /// must be between 1 and T2 + 1.
    pub fn encode(&self, mel: &Mel<'_>, soft_tokens: usize) -> Result<Array> {
        check(mel)?;
        check_placeholders(Self::output_rows(mel.frames), soft_tokens)?;
        let (encoded, _) = self.tower(mel)?;
        self.embed(&encoded, soft_tokens)
    }

    /// The second half of [`Self::encode`]: `embed_audio` of the tower's output `[T2, width]`,
    /// mapped onto `soft_tokens` placeholders.
    pub fn embed(&self, encoded: &Array, soft_tokens: usize) -> Result<Array> {
        let width = self.cfg.output_dims() as i32;
        let rows = match encoded.shape() {
            &[rows, w] if w == width && rows > 0 => rows as usize,
            other => {
                return Err(Error::Input(format!(
                    "the audio tower's output must be [rows, {width}], not {other:?}"
                )))
            }
        };
        check_placeholders(rows, soft_tokens)?;
        let normed = fast::rms_norm(encoded, None, self.cfg.rms_norm_eps)?;
        let embedded = self
            .embedding_projection
            .forward_as_stored(&normed)?
            .as_dtype(Dtype::Float32)?;
        let order: Vec<i32> = (0..soft_tokens).map(|k| (k % rows) as i32).collect();
        Ok(embedded.take_axis(Array::from_slice(&order, &[soft_tokens as i32]), 0)?)
    }
}

/// A clip's `rows` encoder rows fill `rows` placeholders, or `rows + 1` (the reference's count
/// can exceed the rows by one; docs/AUDIO.md).
fn check_placeholders(rows: usize, soft_tokens: usize) -> Result<()> {
    if soft_tokens == 0 || soft_tokens > rows + 1 {
        return Err(Error::Input(format!(
            "{soft_tokens} audio placeholders for {rows} encoder rows; they fill 1 to {} placeholders",
            rows + 1
        )));
    }
    Ok(())
}

/// Checks the shape of a clip's features before anything is built from them.
fn check(mel: &Mel<'_>) -> Result<()> {
    let bins = AudioConfig::MEL_BINS;
    if mel.frames == 0 {
        return Err(Error::Input(
            "the audio clip has no mel frames (too short to encode)".into(),
        ));
    }
    if mel.frames > i32::MAX as usize / bins {
        return Err(Error::Input(format!(
            "the audio clip has {} mel frames, more than can be encoded",
            mel.frames
        )));
    }
    if mel.data.len() != mel.frames * bins {
        return Err(Error::Input(format!(
            "audio features hold {} values; {} frames of {bins} mel bins need {}",
            mel.data.len(),
            mel.frames,
            mel.frames * bins
        )));
    }
    if mel.valid.len() != mel.frames {
        return Err(Error::Input(format!(
            "the audio mask has {} entries for {} mel frames",
            mel.valid.len(),
            mel.frames
        )));
    }
    if let Some(i) = mel.data.iter().position(|v| !v.is_finite()) {
        return Err(Error::Input(format!(
            "audio feature {i} (frame {}) is not a finite number",
            i / bins
        )));
    }
    Ok(())
}
