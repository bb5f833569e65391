//! The generation loop: prompt-cache reuse, chunked prefill, pipelined decode. It knows nothing
//! of the model's insides: it feeds ids, gets logits, samples and streams text.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gemma::{KvCache, MediaFeatures, Model};
use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::transforms::{async_eval, eval};
use mlx_rs::Array;
use serde::Serialize;

use crate::detokenize::Detokenizer;
use crate::sampler::{Sampler, SamplerConfig};
use crate::tokenizer::{SpecialTokens, Tokenizer};

/// Errors of a generation.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] gemma::Error),
    #[error(transparent)]
    Sampler(#[from] crate::sampler::SamplerError),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("MLX: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
    #[error("the prompt has {prompt} tokens, but the context window holds {context}")]
    PromptTooLong { prompt: usize, context: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("reading a sampled token: {0}")]
    Token(String),
    #[error("the prompt has placeholders for {found} images (or rows) but {expected} were given")]
    ImageCount { expected: usize, found: usize },
    #[error("image: {0}")]
    Image(String),
}

/// Result of this module.
pub type Result<T, E = GenerateError> = std::result::Result<T, E>;

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The model produced an end-of-turn / end-of-sequence id.
    EndOfTurn,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context window is full.
    ContextFull,
    /// The caller cancelled.
    Cancelled,
}

/// What one generation cost.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose K/V were reused from the previous turn (not prefilled again).
    pub reused_tokens: usize,
    pub generated_tokens: usize,
    pub time_to_first_token_ms: f64,
    pub prefill_tokens_per_second: f64,
    pub decode_tokens_per_second: f64,
    pub stop_reason: StopReason,
}

/// Limits and sampling of one generation.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
    /// Positions the model may use in total (prompt + answer).
    pub context_window: usize,
    /// Prompt positions per prefill forward.
    pub prefill_chunk: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            sampler: SamplerConfig::default(),
            max_tokens: 1024,
            context_window: 32768,
            prefill_chunk: 512,
        }
    }
}

/// One streamed piece of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Delta {
    /// The sampled id; `None` for text held back until the end (an incomplete character).
    pub token: Option<u32>,
    /// New text (whole UTF-8 characters; may be empty while a character is incomplete).
    pub text: String,
}

/// A conversation's model state: the caches and exactly the tokens they hold.
pub struct Session {
    caches: Vec<KvCache>,
    tokens: Vec<u32>,
}

impl Session {
    /// An empty session for `model`.
    pub fn new(model: &Model) -> Self {
        Self {
            caches: model.new_caches(),
            tokens: Vec::new(),
        }
    }

    /// The tokens whose K/V the caches hold.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Rewinds to the longest prefix shared with `prompt` that the caches can return to,
    /// keeping at least one prompt token to prefill. Returns how many tokens are reused.
    pub fn rewind_for(&mut self, model: &Model, prompt: &[u32]) -> usize {
        let common = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        let reuse = common.min(prompt.len().saturating_sub(1));
        let drop = self.tokens.len() - reuse;
        if self.caches.iter().all(|c| c.can_trim(drop))
            && self.caches.iter_mut().all(|c| c.trim(drop).is_ok())
        {
            self.tokens.truncate(reuse);
            reuse
        } else {
            *self = Session::new(model);
            0
        }
    }
}

/// The images of a prompt: each run of `token_id` placeholders (in order) is one image, whose
/// projected features `[run length, hidden]` `features(k)` computes on demand — images wholly
/// inside the reused prefix are never computed (nor prefilled) again.
pub struct Images<'a> {
    pub token_id: u32,
    pub count: usize,
    pub features: &'a mut dyn FnMut(usize) -> Result<Array>,
}

/// `(start, length)` of every run of consecutive `token_id`s in `prompt`: one per image.
pub fn placeholder_runs(prompt: &[u32], token_id: u32) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, &t) in prompt.iter().enumerate() {
        if t == token_id {
            match runs.last_mut() {
                Some((start, len)) if *start + *len == i => *len += 1,
                _ => runs.push((i, 1)),
            }
        }
    }
    runs
}

/// Feature rows for the placeholders after the reused prefix, computing only the images needed.
fn image_rows_to_prefill(
    prompt: &[u32],
    reused: usize,
    images: &mut Images<'_>,
) -> Result<Option<(u32, Array)>> {
    let runs = placeholder_runs(prompt, images.token_id);
    if runs.len() != images.count {
        return Err(GenerateError::ImageCount {
            expected: images.count,
            found: runs.len(),
        });
    }
    let mut parts = Vec::new();
    for (k, &(start, len)) in runs.iter().enumerate() {
        let cached = reused.saturating_sub(start).min(len);
        if cached == len {
            continue;
        }
        let features = (images.features)(k)?;
        let rows = features.shape().first().copied().unwrap_or(0) as usize;
        if rows != len {
            return Err(GenerateError::ImageCount {
                expected: len,
                found: rows,
            });
        }
        parts.push(if cached > 0 {
            features.index(cached as i32..)
        } else {
            features
        });
    }
    Ok(match parts.len() {
        0 => None,
        1 => parts.pop().map(|f| (images.token_id, f)),
        _ => Some((images.token_id, concatenate(&parts, 0)?)),
    })
}

/// Generates an answer to `prompt` (already templated and tokenized, media expanded), reusing
/// the session's cache for the shared prefix. Calls `on_delta` for every token; checks `cancel`
/// between prefill chunks and between tokens.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &Model,
    session: &mut Session,
    prompt: &[u32],
    images: Option<&mut Images<'_>>,
    tokenizer: &Tokenizer,
    specials: &SpecialTokens,
    options: &GenerateOptions,
    cancel: &AtomicBool,
    mut on_delta: impl FnMut(Delta),
) -> Result<Usage> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    if prompt.len() >= options.context_window {
        return Err(GenerateError::PromptTooLong {
            prompt: prompt.len(),
            context: options.context_window,
        });
    }
    let start = Instant::now();
    let reused = session.rewind_for(model, prompt);
    let new = &prompt[reused..];
    let features = match images {
        Some(images) => image_rows_to_prefill(prompt, reused, images)?,
        None => None,
    };
    let media: Vec<MediaFeatures<'_>> = features
        .iter()
        .map(|(id, f)| MediaFeatures {
            token_id: *id,
            features: f,
        })
        .collect();
    let Some(logits) = prefill(model, session, new, &media, options.prefill_chunk, cancel)? else {
        // Stopped during a long prefill: what was prefilled stays cached for the next turn.
        return Ok(Usage {
            prompt_tokens: prompt.len(),
            reused_tokens: reused,
            generated_tokens: 0,
            time_to_first_token_ms: 0.0,
            prefill_tokens_per_second: 0.0,
            decode_tokens_per_second: 0.0,
            stop_reason: StopReason::Cancelled,
        });
    };
    let mut sampler = Sampler::new(options.sampler.clone())?;
    let penalize = options.sampler.repetition_penalty.is_some();
    let mut history = if penalize {
        let window = options.sampler.repetition_window.min(session.tokens.len());
        Array::from_slice(
            &session.tokens[session.tokens.len() - window..],
            &[window as i32],
        )
    } else {
        Array::from_slice::<u32>(&[], &[0])
    };
    let mut y = sampler.sample(&logits, &history)?;
    async_eval([&y])?;
    let prefill_done = start.elapsed();
    let mut first_token_at = None;
    let mut detok = Detokenizer::new(tokenizer, true);
    let mut generated = 0usize;
    let decode_start = Instant::now();
    let room = options.context_window.saturating_sub(prompt.len());
    let stop_reason = loop {
        // Build the next step from the device-resident token before reading it on the host,
        // so the graph of step n+1 is built while step n evaluates.
        let at_limit = generated + 1 >= options.max_tokens || generated + 1 >= room;
        let next = if at_limit || cancel.load(Ordering::Relaxed) {
            None
        } else {
            let logits = model.forward_array(&y.reshape(&[1])?, &mut session.caches, None)?;
            if penalize {
                history = concatenate(&[history, y.reshape(&[1])?], 0)?;
                let window = options.sampler.repetition_window as i32;
                if history.shape()[0] > window {
                    history = history.index(history.shape()[0] - window..);
                }
            }
            let next = sampler.sample(&logits, &history)?;
            async_eval([&next])?;
            Some(next)
        };
        let token: u32 = y
            .try_item_exact::<u32>()
            .map_err(|e| GenerateError::Token(e.to_string()))?;
        if next.is_some() {
            session.tokens.push(token);
        }
        generated += 1;
        first_token_at.get_or_insert_with(|| start.elapsed());
        if specials.is_stop(token) {
            break StopReason::EndOfTurn;
        }
        let text = detok.push(token)?.unwrap_or_default();
        on_delta(Delta {
            token: Some(token),
            text,
        });
        match next {
            Some(n) if !cancel.load(Ordering::Relaxed) => y = n,
            _ if cancel.load(Ordering::Relaxed) => break StopReason::Cancelled,
            _ if generated >= room => break StopReason::ContextFull,
            _ => break StopReason::MaxTokens,
        }
    };
    if let Some(rest) = detok.finish()? {
        on_delta(Delta {
            token: None,
            text: rest,
        });
    }
    let decode_secs = decode_start.elapsed().as_secs_f64();
    let prefill_secs = prefill_done.as_secs_f64().max(1e-9);
    Ok(Usage {
        prompt_tokens: prompt.len(),
        reused_tokens: reused,
        generated_tokens: generated,
        time_to_first_token_ms: first_token_at.unwrap_or(prefill_done).as_secs_f64() * 1000.0,
        prefill_tokens_per_second: new.len() as f64 / prefill_secs,
        decode_tokens_per_second: if decode_secs > 0.0 {
            generated as f64 / decode_secs
        } else {
            0.0
        },
        stop_reason,
    })
}

/// Evaluates a prefill chunk's output together with the caches it wrote (so the next chunk
/// builds on evaluated arrays, not on a growing graph).
pub fn eval_with_caches(caches: &[KvCache], out: &Array) -> Result<()> {
    let mut to_eval: Vec<&Array> = caches.iter().flat_map(|c| c.arrays()).collect();
    to_eval.push(out);
    eval(to_eval)?;
    Ok(())
}

/// Feeds `new` prompt tokens in chunks; returns the last position's logits `[1, vocab]`, or
/// `None` when `cancel` was set between chunks.
fn prefill(
    model: &Model,
    session: &mut Session,
    new: &[u32],
    media: &[MediaFeatures<'_>],
    chunk: usize,
    cancel: &AtomicBool,
) -> Result<Option<Array>> {
    let chunk = chunk.max(1);
    let mut logits = None;
    let mut done = 0;
    while done < new.len() {
        if cancel.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let end = (done + chunk).min(new.len());
        let part = &new[done..end];
        // Media rows for the placeholders inside this chunk.
        let sliced: Vec<(u32, Array)> = media
            .iter()
            .filter_map(|m| {
                let before = new[..done].iter().filter(|&&t| t == m.token_id).count() as i32;
                let inside = part.iter().filter(|&&t| t == m.token_id).count() as i32;
                (inside > 0).then(|| (m.token_id, m.features.index(before..before + inside)))
            })
            .collect();
        let chunk_media: Vec<MediaFeatures<'_>> = sliced
            .iter()
            .map(|(id, f)| MediaFeatures {
                token_id: *id,
                features: f,
            })
            .collect();
        let out = model.forward(part, &chunk_media, &mut session.caches, Some(1))?;
        eval_with_caches(&session.caches, &out)?;
        session.tokens.extend_from_slice(part);
        logits = Some(out);
        done = end;
    }
    logits.map(Some).ok_or(GenerateError::EmptyPrompt)
}
