//! The generator: text, stop ids, limits and usage over a [`TokenStream`]. It knows nothing of
//! the model's insides; the stream feeds ids and samples, this turns ids into an answer.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::detokenize::{Detokenizer, Shown};
use crate::error::Result;
use crate::speculative::SpeculativeStats;
use crate::stream::{Prefill, StreamEnd, TokenStream};
use crate::tokenizer::{SpecialTokens, Tokenizer};

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
    let mut generation = Generation::new(&stream, tokenizer, specials);
    let stop = loop {
        match generation.take(stream.next_token()?, stream.end())? {
            Taken::Delta(delta) => on_delta(delta),
            Taken::Stop(stop) => break stop,
        }
    };
    let (rest, usage) = generation.finish(stop, &stream)?;
    if let Some(rest) = rest {
        on_delta(rest);
    }
    Ok(usage)
}

/// What [`Generation::take`] made of an id.
#[derive(Debug, Clone, PartialEq)]
pub enum Taken {
    /// A piece of the answer to stream.
    Delta(Delta),
    /// The answer ends here.
    Stop(StopReason),
}

/// One answer being generated, fed the ids of its stream one at a time: text, stop ids and
/// usage. [`generate`] drives it from one stream; the engine thread drives several, stepped
/// together (see [`crate::stream::next_tokens`]).
pub struct Generation<'t> {
    tokenizer: &'t Tokenizer,
    specials: &'t SpecialTokens,
    shown: Shown,
    detok: Detokenizer<'t>,
    prefill: Prefill,
    decode_start: Instant,
    first_token_at: Option<Duration>,
    generated: usize,
}

impl<'t> Generation<'t> {
    /// An answer to `stream`, whose prefill has run.
    pub fn new(
        stream: &TokenStream<'_>,
        tokenizer: &'t Tokenizer,
        specials: &'t SpecialTokens,
    ) -> Self {
        Self {
            tokenizer,
            specials,
            shown: Shown::new(tokenizer),
            detok: Detokenizer::new(tokenizer, false),
            prefill: stream.prefill_stats(),
            decode_start: Instant::now(),
            first_token_at: None,
            generated: 0,
        }
    }

    /// Takes what the stream gave for its next id (`None`: it ended, for `end`).
    pub fn take(&mut self, next: Option<u32>, end: Option<StreamEnd>) -> Result<Taken> {
        let Some(token) = next else {
            return Ok(Taken::Stop(match end {
                Some(StreamEnd::Cancelled) => StopReason::Cancelled,
                Some(StreamEnd::ContextFull) => StopReason::ContextFull,
                Some(StreamEnd::MaxTokens) | None => StopReason::MaxTokens,
            }));
        };
        self.generated += 1;
        let (prefill, start) = (self.prefill.time, self.decode_start);
        self.first_token_at
            .get_or_insert_with(|| prefill + start.elapsed());
        if self.specials.is_stop(token) {
            return Ok(Taken::Stop(StopReason::EndOfTurn));
        }
        let text = if self.shown.shows(self.tokenizer, token) {
            self.detok.push(token)?.unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Taken::Delta(Delta {
            token: Some(token),
            text,
        }))
    }

    /// Ends the answer for `stop`: the text held back (an incomplete character), if any, and
    /// what the answer cost.
    pub fn finish(
        mut self,
        stop: StopReason,
        stream: &TokenStream<'_>,
    ) -> Result<(Option<Delta>, Usage)> {
        let rest = self.detok.finish()?.map(|text| Delta { token: None, text });
        let prefill = self.prefill;
        let generated = self.generated;
        let decode_secs = self.decode_start.elapsed().as_secs_f64();
        // A stop during prefill sampled nothing: no time to a first token, no prefill rate.
        let prefill_secs = prefill.time.as_secs_f64();
        let prefilled = prefill.prompt_tokens - prefill.reused_tokens;
        let usage = Usage {
            prompt_tokens: prefill.prompt_tokens,
            reused_tokens: prefill.reused_tokens,
            generated_tokens: generated,
            time_to_first_token_ms: self.first_token_at.unwrap_or(prefill.time).as_secs_f64()
                * 1000.0,
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
            stop_reason: stop,
            speculative: stream.speculative_stats().cloned(),
        };
        Ok((rest, usage))
    }
}
