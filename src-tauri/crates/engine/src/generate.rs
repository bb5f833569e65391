//! The generator: text, stop ids, limits and usage over a [`TokenStream`]. It knows nothing of
//! the model's insides; the stream feeds ids and samples, this turns ids into an answer.

use std::time::Instant;

use serde::Serialize;

use crate::constraint::Grammar;
use crate::detokenize::{Detokenizer, Shown};
use crate::sampler::SamplerConfig;
use crate::speculative::SpeculativeStats;
use crate::stream::{StreamEnd, TokenStream};
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
    #[error("{0}")]
    Image(String),
    /// The answer's grammar cannot be enforced (refused before anything is generated), or
    /// its matcher failed.
    #[error(transparent)]
    Constraint(#[from] crate::constraint::ConstraintError),
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
    /// What speculative decoding did, when the answer used a drafter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeStats>,
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
    /// What the answer must follow (a JSON schema, any JSON object, a Lark grammar), enforced
    /// while sampling; `None` leaves the model free, at no cost. Compiled per answer by
    /// [`crate::worker::LoadedModel::token_stream`]; an answer under one never speculates.
    pub constraint: Option<Grammar>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            sampler: SamplerConfig::default(),
            max_tokens: 1024,
            context_window: 32768,
            prefill_chunk: 512,
            constraint: None,
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

/// Runs `stream` to its end: streams each id's text through `on_delta` (whole characters), stops
/// at an end-of-turn id, and reports what the answer cost.
pub fn generate(
    mut stream: TokenStream<'_>,
    tokenizer: &Tokenizer,
    specials: &SpecialTokens,
    mut on_delta: impl FnMut(Delta),
) -> Result<Usage> {
    let prefill = stream.prefill_stats();
    let decode_start = Instant::now();
    let mut first_token_at = None;
    let shown = Shown::new(tokenizer);
    let mut detok = Detokenizer::new(tokenizer, false);
    let mut generated = 0usize;
    let stop_reason = loop {
        let Some(token) = stream.next_token()? else {
            break match stream.end() {
                Some(StreamEnd::Cancelled) => StopReason::Cancelled,
                Some(StreamEnd::ContextFull) => StopReason::ContextFull,
                Some(StreamEnd::MaxTokens) | None => StopReason::MaxTokens,
            };
        };
        generated += 1;
        first_token_at.get_or_insert_with(|| prefill.time + decode_start.elapsed());
        if specials.is_stop(token) {
            break StopReason::EndOfTurn;
        }
        let text = if shown.shows(tokenizer, token) {
            detok.push(token)?.unwrap_or_default()
        } else {
            String::new()
        };
        on_delta(Delta {
            token: Some(token),
            text,
        });
    };
    if let Some(rest) = detok.finish()? {
        on_delta(Delta {
            token: None,
            text: rest,
        });
    }
    let decode_secs = decode_start.elapsed().as_secs_f64();
    // A stop during prefill sampled nothing: no time to a first token, no prefill rate.
    let prefill_secs = prefill.time.as_secs_f64();
    let prefilled = prefill.prompt_tokens - prefill.reused_tokens;
    Ok(Usage {
        prompt_tokens: prefill.prompt_tokens,
        reused_tokens: prefill.reused_tokens,
        generated_tokens: generated,
        time_to_first_token_ms: first_token_at.unwrap_or(prefill.time).as_secs_f64() * 1000.0,
        prefill_tokens_per_second: if prefill_secs > 0.0 {
            prefilled as f64 / prefill_secs
        } else {
            0.0
        },
        decode_tokens_per_second: if decode_secs > 0.0 && generated > 0 {
            generated as f64 / decode_secs
        } else {
            0.0
        },
        stop_reason,
        speculative: stream.speculative_stats().cloned(),
    })
}
