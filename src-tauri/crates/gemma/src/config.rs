//! `config.json` of a Gemma 4 checkpoint in MLX format: the fields this engine uses.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// Attention kind of one decoder layer (from `layer_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AttentionKind {
    /// Windowed causal attention over the last `sliding_window` positions.
    #[serde(rename = "sliding_attention")]
    Sliding,
    /// Causal attention over every earlier position.
    #[serde(rename = "full_attention")]
    Full,
}

/// RoPE parameters of one attention kind.
#[derive(Debug, Clone, Deserialize)]
pub struct RopeParameters {
    #[serde(default = "default_rope_type")]
    pub rope_type: String,
    pub rope_theta: f32,
    #[serde(default = "one")]
    pub partial_rotary_factor: f32,
    #[serde(default = "one")]
    pub factor: f32,
}

fn default_rope_type() -> String {
    "default".into()
}
fn one() -> f32 {
    1.0
}
fn eps() -> f32 {
    1e-6
}

/// The language model's configuration (`text_config`).
#[derive(Debug, Clone, Deserialize)]
pub struct TextConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub global_head_dim: Option<usize>,
    pub layer_types: Vec<AttentionKind>,
    pub sliding_window: usize,
    pub rope_parameters: HashMap<String, RopeParameters>,
    #[serde(default)]
    pub num_kv_shared_layers: usize,
    #[serde(default)]
    pub hidden_size_per_layer_input: usize,
    pub vocab_size: usize,
    pub vocab_size_per_layer_input: Option<usize>,
    #[serde(default = "eps")]
    pub rms_norm_eps: f32,
    pub final_logit_softcapping: Option<f32>,
    #[serde(default)]
    pub use_double_wide_mlp: bool,
    #[serde(default)]
    pub enable_moe_block: bool,
    #[serde(default)]
    pub attention_k_eq_v: bool,
    pub use_bidirectional_attention: Option<String>,
}

/// The vision tower's configuration (`vision_config`).
#[derive(Debug, Clone, Deserialize)]
pub struct VisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub head_dim: usize,
    pub patch_size: usize,
    pub pooling_kernel_size: usize,
    pub position_embedding_size: usize,
    #[serde(default = "eps")]
    pub rms_norm_eps: f32,
    #[serde(default)]
    pub use_clipped_linears: bool,
    #[serde(default)]
    pub standardize: bool,
    pub default_output_length: Option<usize>,
    pub rope_parameters: Option<RopeParameters>,
}

/// The audio tower's configuration (`audio_config`; docs/AUDIO.md "The audio tower").
#[derive(Debug, Clone, Deserialize)]
pub struct AudioConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Output channels of the two subsampling convolutions.
    pub subsampling_conv_channels: Vec<usize>,
    #[serde(default = "five")]
    pub conv_kernel_size: usize,
    #[serde(default = "half")]
    pub residual_weight: f32,
    #[serde(default = "twelve")]
    pub attention_chunk_size: usize,
    #[serde(default = "thirteen")]
    pub attention_context_left: usize,
    #[serde(default)]
    pub attention_context_right: usize,
    #[serde(default = "fifty")]
    pub attention_logit_cap: f32,
    #[serde(default = "invalid_logit")]
    pub attention_invalid_logits_value: f32,
    #[serde(default = "eps")]
    pub rms_norm_eps: f32,
    #[serde(default = "gradient_clipping")]
    pub gradient_clipping: f32,
    /// Width of the tower's output (`output_proj`); `None` = no output projection.
    pub output_proj_dims: Option<usize>,
    #[serde(default = "silu")]
    pub hidden_act: String,
}

fn five() -> usize {
    5
}
fn half() -> f32 {
    0.5
}
fn twelve() -> usize {
    12
}
fn thirteen() -> usize {
    13
}
fn fifty() -> f32 {
    50.0
}
fn invalid_logit() -> f32 {
    -1e9
}
fn gradient_clipping() -> f32 {
    1e10
}
fn silu() -> String {
    "silu".into()
}

impl AudioConfig {
    /// Mel bins of the input features (fixed by the reference's subsampling block).
    pub const MEL_BINS: usize = 128;

    /// Width of the tower's output rows (before `embed_audio`).
    pub fn output_dims(&self) -> usize {
        self.output_proj_dims.unwrap_or(self.hidden_size)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let sizes = [
            ("hidden_size", self.hidden_size, 2, MAX_WIDTH),
            ("num_hidden_layers", self.num_hidden_layers, 1, MAX_HEADS),
            (
                "num_attention_heads",
                self.num_attention_heads,
                1,
                MAX_HEADS,
            ),
            ("conv_kernel_size", self.conv_kernel_size, 1, MAX_HEADS),
            (
                "attention_chunk_size",
                self.attention_chunk_size,
                1,
                MAX_HEADS,
            ),
            (
                "attention_context_left",
                self.attention_context_left,
                0,
                MAX_HEADS,
            ),
            (
                "attention_context_right",
                self.attention_context_right,
                0,
                MAX_HEADS,
            ),
            ("output_proj_dims", self.output_dims(), 1, MAX_WIDTH),
        ];
        for (name, value, min, max) in sizes {
            if !(min..=max).contains(&value) {
                return Err(format!(
                    "audio_config.{name} is {value}; it must be between {min} and {max}"
                ));
            }
        }
        if !self.hidden_size.is_multiple_of(2)
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "audio_config.hidden_size {} must be even and a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        match self.subsampling_conv_channels.as_slice() {
            [a, b] if (1..=MAX_WIDTH).contains(a) && (1..=MAX_WIDTH).contains(b) => {}
            other => {
                return Err(format!(
                    "audio_config.subsampling_conv_channels is {other:?}; expected two positive channel counts"
                ))
            }
        }
        if self.hidden_act != "silu" {
            return Err(format!(
                "audio_config.hidden_act \"{}\" is not supported (only \"silu\")",
                self.hidden_act
            ));
        }
        let positive = [
            ("attention_logit_cap", self.attention_logit_cap),
            ("rms_norm_eps", self.rms_norm_eps),
            ("gradient_clipping", self.gradient_clipping),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "audio_config.{name} is {v}; it must be a positive number"
                ));
            }
        }
        let finite = [
            ("residual_weight", self.residual_weight),
            (
                "attention_invalid_logits_value",
                self.attention_invalid_logits_value,
            ),
        ];
        for (name, v) in finite {
            if !v.is_finite() {
                return Err(format!(
                    "audio_config.{name} is {v}; it must be a finite number"
                ));
            }
        }
        Ok(())
    }
}

/// Bits and group size of one quantized module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct QuantSpec {
    pub bits: i32,
    pub group_size: i32,
}

/// `quantization`: a default plus per-module overrides keyed by module path.
#[derive(Debug, Clone, Default)]
pub struct Quantization {
    pub default: Option<QuantSpec>,
    pub per_module: HashMap<String, QuantSpec>,
    /// `mode` when given (MLX: "affine"; the microscaling modes are not supported).
    pub mode: Option<String>,
}

impl Quantization {
    /// Bits and group size of the module at `path`, if the config names any.
    pub fn for_module(&self, path: &str) -> Option<QuantSpec> {
        self.per_module.get(path).copied().or(self.default)
    }

    fn from_json(value: Option<&serde_json::Value>) -> Self {
        let Some(serde_json::Value::Object(map)) = value else {
            return Self::default();
        };
        let int =
            |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_i64()).map(|x| x as i32);
        let whole = serde_json::Value::Object(map.clone());
        let default = int(&whole, "bits").zip(int(&whole, "group_size"));
        let default = default.map(|(bits, group_size)| QuantSpec { bits, group_size });
        let per_module = map
            .iter()
            .filter_map(|(path, v)| {
                let bits = int(v, "bits")?;
                let group_size = int(v, "group_size").or(default.map(|d| d.group_size))?;
                Some((path.clone(), QuantSpec { bits, group_size }))
            })
            .collect();
        let mode = map
            .get("mode")
            .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned));
        Self {
            default,
            per_module,
            mode,
        }
    }
}

/// The top-level `config.json`.
#[derive(Debug, Clone)]
pub struct Config {
    pub text: TextConfig,
    pub vision: Option<VisionConfig>,
    /// `None` when `audio_config` is null or absent: the checkpoint has no audio tower.
    pub audio: Option<AudioConfig>,
    pub quantization: Quantization,
    pub image_token_id: Option<u32>,
    pub audio_token_id: Option<u32>,
    pub video_token_id: Option<u32>,
    pub boi_token_id: Option<u32>,
    pub eoi_token_id: Option<u32>,
    pub pad_token_id: u32,
    pub vision_soft_tokens_per_image: usize,
}

#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    text_config: TextConfig,
    vision_config: Option<VisionConfig>,
    audio_config: Option<serde_json::Value>,
    quantization: Option<serde_json::Value>,
    image_token_id: Option<u32>,
    audio_token_id: Option<u32>,
    video_token_id: Option<u32>,
    boi_token_id: Option<u32>,
    eoi_token_id: Option<u32>,
    pad_token_id: Option<u32>,
    vision_soft_tokens_per_image: Option<usize>,
}

impl Config {
    /// Reads and validates `config.json` of the model folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        Self::parse(&text).map_err(|message| Error::Config { path, message })
    }

    /// Parses the text of `config.json`; errors are messages in words.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if !json.is_object() {
            return Err("expected a JSON object of model settings".into());
        }
        let raw: RawConfig = serde_json::from_value(json).map_err(|e| e.to_string())?;
        match raw.model_type.as_deref() {
            Some("gemma4") => {}
            Some(other) => return Err(format!("model_type is \"{other}\", expected \"gemma4\"")),
            None => return Err("model_type is missing (expected \"gemma4\")".into()),
        }
        let audio = match raw.audio_config {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => Some(
                serde_json::from_value::<AudioConfig>(value)
                    .map_err(|e| format!("audio_config: {e}"))?,
            ),
        };
        let config = Config {
            audio,
            quantization: Quantization::from_json(raw.quantization.as_ref()),
            text: raw.text_config,
            vision: raw.vision_config,
            image_token_id: raw.image_token_id,
            audio_token_id: raw.audio_token_id,
            video_token_id: raw.video_token_id,
            boi_token_id: raw.boi_token_id,
            eoi_token_id: raw.eoi_token_id,
            pad_token_id: raw.pad_token_id.unwrap_or(0),
            vision_soft_tokens_per_image: raw.vision_soft_tokens_per_image.unwrap_or(280),
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let t = &self.text;
        // Sizes are bounded before anything is built from them: a zero divides, a huge one
        // overflows or allocates without end. The bounds are far above any Gemma 4 model.
        let v = self.vision.as_ref();
        let bounded = [
            (
                1..=MAX_WIDTH,
                vec![
                    ("text_config.hidden_size", Some(t.hidden_size)),
                    ("text_config.intermediate_size", Some(t.intermediate_size)),
                    ("vision_config.hidden_size", v.map(|v| v.hidden_size)),
                    (
                        "vision_config.intermediate_size",
                        v.map(|v| v.intermediate_size),
                    ),
                ],
            ),
            (
                0..=MAX_WIDTH,
                vec![(
                    "text_config.hidden_size_per_layer_input",
                    Some(t.hidden_size_per_layer_input),
                )],
            ),
            (
                1..=MAX_HEADS,
                vec![
                    ("text_config.num_hidden_layers", Some(t.num_hidden_layers)),
                    (
                        "text_config.num_attention_heads",
                        Some(t.num_attention_heads),
                    ),
                    (
                        "text_config.num_key_value_heads",
                        Some(t.num_key_value_heads),
                    ),
                    (
                        "vision_config.num_attention_heads",
                        v.map(|v| v.num_attention_heads),
                    ),
                    (
                        "vision_config.num_hidden_layers",
                        v.map(|v| v.num_hidden_layers.max(1)),
                    ),
                    ("vision_config.patch_size", v.map(|v| v.patch_size)),
                    (
                        "vision_config.pooling_kernel_size",
                        v.map(|v| v.pooling_kernel_size),
                    ),
                ],
            ),
            (
                2..=MAX_HEAD_DIM,
                vec![
                    ("text_config.head_dim", Some(t.head_dim)),
                    ("text_config.global_head_dim", t.global_head_dim),
                    ("vision_config.head_dim", v.map(|v| v.head_dim)),
                ],
            ),
            (
                1..=MAX_VOCAB,
                vec![
                    ("text_config.vocab_size", Some(t.vocab_size)),
                    (
                        "text_config.vocab_size_per_layer_input",
                        t.vocab_size_per_layer_input,
                    ),
                ],
            ),
            (
                1..=MAX_POSITIONS,
                vec![
                    ("text_config.sliding_window", Some(t.sliding_window)),
                    (
                        "vision_config.position_embedding_size",
                        v.map(|v| v.position_embedding_size),
                    ),
                    (
                        "vision_config.default_output_length",
                        v.and_then(|v| v.default_output_length),
                    ),
                    (
                        "vision_soft_tokens_per_image",
                        Some(self.vision_soft_tokens_per_image),
                    ),
                ],
            ),
        ];
        for (range, fields) in bounded {
            for (name, value) in fields {
                match value {
                    Some(value) if !range.contains(&value) => {
                        let (min, max) = (range.start(), range.end());
                        return Err(format!(
                            "{name} is {value}; it must be between {min} and {max}"
                        ));
                    }
                    _ => {}
                }
            }
        }
        let finite = |name: &str, v: f32| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{name} is {v}; it must be a positive number"))
            }
        };
        finite("text_config.rms_norm_eps", t.rms_norm_eps)?;
        if let Some(audio) = &self.audio {
            audio.validate()?;
        }
        if let Some(cap) = t.final_logit_softcapping {
            finite("text_config.final_logit_softcapping", cap)?;
        }
        let quantized = self
            .quantization
            .default
            .iter()
            .map(|q| ("quantization", q));
        let per_module = self
            .quantization
            .per_module
            .iter()
            .map(|(m, q)| (m.as_str(), q));
        for (module, q) in quantized.chain(per_module) {
            if ![2, 3, 4, 5, 6, 8].contains(&q.bits) {
                return Err(format!(
                    "{module}: {} bits is not supported (2, 3, 4, 5, 6 or 8)",
                    q.bits
                ));
            }
            if q.group_size < 16 || q.group_size > 1024 || q.group_size.count_ones() != 1 {
                return Err(format!(
                    "{module}: group size {} is not supported (a power of two from 16 to 1024)",
                    q.group_size
                ));
            }
        }
        if let Some(mode) = &self.quantization.mode {
            if mode != "affine" {
                return Err(format!(
                    "quantization mode \"{mode}\" is not supported (only \"affine\")"
                ));
            }
        }
        let vision_rope = self
            .vision
            .iter()
            .filter_map(|v| v.rope_parameters.as_ref().map(|r| ("vision_config", r)));
        let text_rope = t.rope_parameters.iter().map(|(kind, r)| (kind.as_str(), r));
        for (kind, rope) in text_rope.chain(vision_rope) {
            finite(
                &format!("rope_parameters.{kind}.rope_theta"),
                rope.rope_theta,
            )?;
            finite(&format!("rope_parameters.{kind}.factor"), rope.factor)?;
            if !(0.0..=1.0).contains(&rope.partial_rotary_factor) {
                return Err(format!(
                    "rope_parameters.{kind}.partial_rotary_factor is {}; it must be between 0 and 1",
                    rope.partial_rotary_factor
                ));
            }
        }
        if t.layer_types.len() != t.num_hidden_layers {
            return Err(format!(
                "text_config.layer_types has {} entries for {} layers",
                t.layer_types.len(),
                t.num_hidden_layers
            ));
        }
        if t.num_kv_shared_layers >= t.num_hidden_layers {
            return Err("num_kv_shared_layers must be smaller than num_hidden_layers".into());
        }
        if t.enable_moe_block || t.attention_k_eq_v {
            return Err(
                "mixture-of-experts and k=v attention (Gemma 4 26B/31B) are not supported".into(),
            );
        }
        if t.num_attention_heads == 0
            || t.num_key_value_heads == 0
            || !t.num_attention_heads.is_multiple_of(t.num_key_value_heads)
        {
            return Err(
                "num_attention_heads must be a positive multiple of num_key_value_heads".into(),
            );
        }
        for kind in ["sliding_attention", "full_attention"] {
            if t.layer_types.iter().any(|k| kind_name(*k) == kind)
                && !t.rope_parameters.contains_key(kind)
            {
                return Err(format!("rope_parameters.{kind} is missing"));
            }
        }
        Ok(())
    }
}

/// Upper bounds of config sizes (far above any Gemma 4 model, far below overflow).
const MAX_WIDTH: usize = 1 << 18;
/// Also bounds layer counts, patch and pooling sizes.
const MAX_HEADS: usize = 1024;
const MAX_HEAD_DIM: usize = 8192;
const MAX_VOCAB: usize = 1 << 22;
const MAX_POSITIONS: usize = 1 << 24;

/// The config name of an attention kind.
pub fn kind_name(kind: AttentionKind) -> &'static str {
    match kind {
        AttentionKind::Sliding => "sliding_attention",
        AttentionKind::Full => "full_attention",
    }
}
