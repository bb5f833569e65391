//! Choosing the next token from logits, on device.
//!
//! Sampling is a value ([`SamplerConfig`]) turned into a [`Sampler`] that owns its PRNG key.
//! The order of the filters follows mlx-vlm's `sample_utils` (the numeric reference):
//! repetition penalty on the logits; then log-probabilities; then top-p, min-p and top-k on
//! the untempered log-probabilities; then a categorical draw at the given temperature.
//! No step syncs with the host: the drawn token stays an [`Array`] so the generation loop
//! can `async_eval` it.

use std::path::{Path, PathBuf};

use mlx_rs::ops::indexing::{argmax_axis, TryIndexOp};
use mlx_rs::ops::{argpartition_axis, cumsum, exp, logsumexp_axis, max_axis, select, sort_axis};
use mlx_rs::{random, Array, Dtype};
use serde::{Deserialize, Serialize};

use crate::checkpoint::GENERATION_CONFIG_FILE;

/// mlx-vlm clamps positive temperatures below this (a smaller one overflows the logits).
pub const MIN_TEMPERATURE: f32 = 0.01;
/// Tokens looked back at by the repetition penalty unless configured (mlx-lm's default).
pub const DEFAULT_REPETITION_WINDOW: usize = 20;

/// Everything that can go wrong configuring or running the sampler.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// A setting is out of its range.
    #[error("sampler setting `{field}` must be {expected}, found {found}")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// Its range, in words.
        expected: &'static str,
        /// The value given.
        found: String,
    },
    /// generation_config.json could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// generation_config.json is not valid JSON or has a field of the wrong type.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The logits are not one distribution: `[vocab]` with any number of leading 1s.
    #[error("logits must hold one distribution ([vocab], [1, vocab], [1, 1, vocab], …), found {shape:?}")]
    LogitsShape {
        /// The shape given.
        shape: Vec<i32>,
    },
    /// The token history is not a 1-D array of integer ids.
    #[error("token history must be a 1-D integer array, found shape {shape:?} of {dtype:?}")]
    History {
        /// The shape given.
        shape: Vec<i32>,
        /// The dtype given.
        dtype: Dtype,
    },
    /// MLX reported an error.
    #[error("MLX: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
}

/// Result of this module.
pub type Result<T, E = SamplerError> = std::result::Result<T, E>;

/// How to pick the next token. `None` switches a filter off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerConfig {
    /// Softmax temperature; `0` picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches `p` (0 < p ≤ 1).
    pub top_p: Option<f32>,
    /// Keep tokens at least `min_p` times as likely as the most likely one (0 ≤ min_p ≤ 1).
    pub min_p: Option<f32>,
    /// Divide positive / multiply negative logits of recently seen tokens by this (> 0),
    /// as HF and mlx-lm do; `1` changes nothing.
    pub repetition_penalty: Option<f32>,
    /// How many of the latest tokens the repetition penalty looks at.
    pub repetition_window: usize,
    /// Seed of the sampler's own PRNG key: the same seed, logits and history give the same
    /// tokens.
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// Plain sampling at temperature 1, every filter off, seed 0.
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repetition_penalty: None,
            repetition_window: DEFAULT_REPETITION_WINDOW,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// The checkpoint's defaults from `dir/generation_config.json` (E4B: temperature 1.0,
    /// top-k 64, top-p 0.95); fields it lacks keep [`SamplerConfig::default`]. A missing
    /// file gives the defaults. `do_sample: false` means greedy.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(GENERATION_CONFIG_FILE);
        if !path.exists() {
            return Ok(Self::default());
        }
        let bytes = std::fs::read(&path).map_err(|source| SamplerError::Io {
            path: path.clone(),
            source,
        })?;
        let json: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|err| SamplerError::Config {
                path: path.clone(),
                message: format!("not valid JSON: {err}"),
            })?;
        Self::from_generation_config(&path, &json)
    }

    /// Reads the sampling fields of a parsed generation_config.json; `path` names it in errors.
    pub fn from_generation_config(path: &Path, json: &serde_json::Value) -> Result<Self> {
        let field = |name: &str| json.get(name).filter(|v| !v.is_null());
        let float = |name: &str| -> Result<Option<f32>> {
            match field(name) {
                None => Ok(None),
                Some(value) => {
                    value
                        .as_f64()
                        .map(|v| Some(v as f32))
                        .ok_or_else(|| SamplerError::Config {
                            path: path.to_owned(),
                            message: format!("`{name}` must be a number, found {value}"),
                        })
                }
            }
        };
        let mut config = Self::default();
        if let Some(temperature) = float("temperature")? {
            config.temperature = temperature;
        }
        if let Some(value) = field("top_k") {
            let k = value.as_u64().ok_or_else(|| SamplerError::Config {
                path: path.to_owned(),
                message: format!("`top_k` must be a non-negative integer, found {value}"),
            })?;
            // HF treats 0 as "off".
            config.top_k = (k > 0).then_some(k as usize);
        }
        config.top_p = float("top_p")?.filter(|&p| p < 1.0);
        config.min_p = float("min_p")?.filter(|&p| p > 0.0);
        config.repetition_penalty = float("repetition_penalty")?.filter(|&p| p != 1.0);
        if field("do_sample").and_then(|v| v.as_bool()) == Some(false) {
            config.temperature = 0.0;
        }
        config.validate().map_err(|err| SamplerError::Config {
            path: path.to_owned(),
            message: err.to_string(),
        })?;
        Ok(config)
    }

    /// Checks every setting is within its range.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field, expected, found: String| {
            Err(SamplerError::Invalid {
                field,
                expected,
                found,
            })
        };
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return invalid("temperature", "a number ≥ 0", self.temperature.to_string());
        }
        if self.top_k == Some(0) {
            return invalid("top_k", "at least 1 (or off)", "0".into());
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return invalid("top_p", "in (0, 1]", p.to_string());
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return invalid("min_p", "in [0, 1]", p.to_string());
            }
        }
        if let Some(p) = self.repetition_penalty {
            if !(p.is_finite() && p > 0.0) {
                return invalid("repetition_penalty", "a number > 0", p.to_string());
            }
        }
        if self.repetition_window == 0 {
            return invalid("repetition_window", "at least 1", "0".into());
        }
        Ok(())
    }
}

/// A sampler: its settings and the PRNG key it splits once per draw.
#[derive(Debug)]
pub struct Sampler {
    config: SamplerConfig,
    key: Array,
}

impl Sampler {
    /// A sampler whose key is `mlx_rs::random::key(config.seed)`.
    pub fn new(config: SamplerConfig) -> Result<Self> {
        config.validate()?;
        let key = random::key(config.seed)?;
        Ok(Self { config, key })
    }

    /// Its settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Draws the next token from `logits`: one distribution, `[vocab]` with any number of
    /// leading 1s (`[1, vocab]`, `[1, 1, vocab]`), any float dtype.
    /// `history` holds the ids seen so far (1-D, any integer dtype, may be empty); the
    /// repetition penalty looks at its last `repetition_window` entries.
    ///
    /// Returns a lazy `uint32` array of the logits' shape without the vocabulary axis (`[]`
    /// for `[vocab]`, `[1]` for `[1, vocab]`). Nothing is evaluated here.
    pub fn sample(&mut self, logits: &Array, history: &Array) -> Result<Array> {
        let out_shape = match logits.shape() {
            [leading @ .., vocab] if *vocab > 0 && leading.iter().all(|&d| d == 1) => {
                leading.to_vec()
            }
            shape => {
                return Err(SamplerError::LogitsShape {
                    shape: shape.to_vec(),
                })
            }
        };
        let mut logits = logits.reshape(&[-1])?.as_dtype(Dtype::Float32)?;
        if let Some(penalty) = self.config.repetition_penalty {
            logits =
                apply_repetition_penalty(&logits, history, penalty, self.config.repetition_window)?;
        }

        let token = if self.config.temperature == 0.0 {
            argmax_axis(&logits, -1, None)?
        } else {
            let mut logprobs = logits.subtract(logsumexp_axis(&logits, -1, true)?)?;
            if let Some(p) = self.config.top_p.filter(|&p| p < 1.0) {
                logprobs = apply_top_p(&logprobs, p)?;
            }
            if let Some(p) = self.config.min_p.filter(|&p| p > 0.0) {
                logprobs = apply_min_p(&logprobs, p)?;
            }
            if let Some(k) = self.config.top_k {
                logprobs = apply_top_k(&logprobs, k)?;
            }
            let temperature = self.config.temperature.max(MIN_TEMPERATURE);
            let scaled = logprobs.multiply(Array::from_f32(1.0 / temperature))?;
            let (next, draw) = random::split(&self.key, 2)?;
            self.key = next;
            random::categorical(&scaled, -1, None, &draw)?
        };
        Ok(token.as_dtype(Dtype::Uint32)?.reshape(&out_shape)?)
    }
}

/// HF / mlx-lm repetition penalty on 1-D logits: each id among the last `window` of
/// `history` has its logit divided by `penalty` if positive, multiplied if negative
/// (once, however often it occurred).
pub fn apply_repetition_penalty(
    logits: &Array,
    history: &Array,
    penalty: f32,
    window: usize,
) -> Result<Array> {
    let len = match history.shape() {
        [n] if !history.dtype().is_float() && !history.dtype().is_complex() => *n,
        shape => {
            return Err(SamplerError::History {
                shape: shape.to_vec(),
                dtype: history.dtype(),
            })
        }
    };
    if len == 0 || penalty == 1.0 {
        return Ok(logits.clone());
    }
    let window = i32::try_from(window).unwrap_or(i32::MAX);
    let recent = history
        .try_index((len - window.min(len))..)?
        .as_dtype(Dtype::Int32)?;
    let seen = logits.take_axis(&recent, -1)?;
    let penalty = Array::from_f32(penalty);
    let penalized = select(
        seen.lt(Array::from_f32(0.0))?,
        seen.multiply(&penalty)?,
        seen.divide(&penalty)?,
    )?;
    Ok(logits.put_along_axis(&recent, &penalized, -1)?)
}

/// Top-p on 1-D log-probabilities: keeps the smallest set of most likely tokens whose mass
/// reaches `top_p` (ties with the last kept token are kept too); the rest become `-inf`.
pub fn apply_top_p(logprobs: &Array, top_p: f32) -> Result<Array> {
    // mlx-vlm's formulation: an exclusive reverse scan over the ascending sort gives, for
    // each token, the mass of all more likely ones; tokens whose "mass above" already
    // reaches top_p are dropped. It always keeps the most likely token.
    let sorted = sort_axis(logprobs, -1)?;
    let probs = exp(&sorted)?;
    let mass_above = cumsum(&probs, -1, true, false)?;
    let total = mass_above.try_index(..1)?.add(probs.try_index(..1)?)?;
    let dropped = mass_above
        .ge(total.multiply(Array::from_f32(top_p))?)?
        .sum_axis(-1, true)?;
    let threshold = sorted.take_along_axis(&dropped, -1)?;
    mask_below(logprobs, &threshold)
}

/// Min-p on 1-D log-probabilities: tokens less likely than `min_p` × the most likely
/// token's probability become `-inf`.
pub fn apply_min_p(logprobs: &Array, min_p: f32) -> Result<Array> {
    let top = max_axis(logprobs, -1, true)?;
    let threshold = top.add(Array::from_f32(min_p.ln()))?;
    mask_below(logprobs, &threshold)
}

/// Top-k on 1-D log-probabilities: all but the `k` most likely tokens become `-inf`.
pub fn apply_top_k(logprobs: &Array, k: usize) -> Result<Array> {
    let vocab = logprobs.shape().last().copied().unwrap_or(0);
    let k = i32::try_from(k).unwrap_or(i32::MAX);
    if k >= vocab {
        return Ok(logprobs.clone());
    }
    let order = argpartition_axis(logprobs.negative()?, k - 1, -1)?;
    let dropped = order.try_index(k..)?;
    Ok(logprobs.put_along_axis(&dropped, Array::from_f32(f32::NEG_INFINITY), -1)?)
}

fn mask_below(logprobs: &Array, threshold: &Array) -> Result<Array> {
    Ok(select(
        logprobs.lt(threshold)?,
        Array::from_f32(f32::NEG_INFINITY),
        logprobs,
    )?)
}
