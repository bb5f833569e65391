//! The token stream: prompt-cache reuse, chunked prefill, then decode, one sampled id at a time,
//! with a cancel flag read between prefill chunks and between ids. It knows nothing of text,
//! stop ids or usage: [`crate::generate`] builds those on top of it, as mlx-lm's
//! `stream_generate` builds on `generate_step`.
//!
//! One core and the ways of choosing the next ids beside it (docs/ENGINE.md, "The token
//! stream"):
//! - this file: the stream's state and the bookkeeping every id goes through once
//!   ([`TokenStream::next_token`] drains the ids ready, reads one with [`read_id`] and counts it
//!   with `hand_out`);
//! - [`session`]: the caches and the tokens they hold; [`prefill`]: the prompt and its media;
//! - the modes ([`Mode`]): [`plain`] (pipelined decode), [`constrained`] (each draw masked by a
//!   grammar), [`speculative`] (draft, verify, accept; drafts from a
//!   [`crate::speculative::Proposer`]); and [`batched`], one forward for the plain steps of
//!   several streams.

mod batched;
mod constrained;
mod plain;
mod prefill;
mod request;
mod session;
mod speculative;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use gemma::{MediaFeatures, Model};
use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::transforms::async_eval;
use mlx_rs::Array;

use crate::constraint::Constraint;
use crate::error::{GenerateError, Result};
use crate::sampler::Sampler;
use crate::speculative::SpeculativeStats;

pub use batched::next_tokens;
pub use prefill::{eval_with_caches, placeholder_runs, MediaRuns};
pub use request::{Drafting, StreamRequest};
pub use session::{shared_prefix, CancelFlag, Session, SessionSlot};

/// Why a token stream ended (an end-of-turn id is the generator's to see, not the stream's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The caller's `max_tokens` were produced.
    MaxTokens,
    /// The context window is full.
    ContextFull,
    /// The cancel flag was set (during prefill or decode).
    Cancelled,
}

/// What the prefill of a stream did.
#[derive(Debug, Clone, Copy)]
pub struct Prefill {
    /// Tokens of the whole prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose K/V the session already held.
    pub reused_tokens: usize,
    /// From the call to the first id sampled and dispatched (not yet read).
    pub time: Duration,
}

/// How far a prefill has come: `done` of the `total` prompt tokens it feeds (the reused prefix
/// not counted). Reported before the first chunk (`done` 0: images are encoded then) and after
/// each, so a long prompt shows progress instead of a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillProgress {
    pub done: usize,
    pub total: usize,
}

/// Where one decode step's time went: building its graph on the host, dispatching it to the
/// device (`async_eval`), and waiting for the previous id while the device works.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepTimes {
    pub build: Duration,
    pub dispatch: Duration,
    pub wait: Duration,
}

/// How a stream chooses its next ids. A closed set the core matches once per id; what varies
/// inside a mode from the outside (where drafts come from) is a trait,
/// [`crate::speculative::Proposer`].
enum Mode<'a> {
    /// Pipelined decode: the next id's forward is dispatched before this one is read.
    Plain,
    /// Every draw masked by the grammar, which is fed each id read.
    Constrained(Box<Constraint>),
    /// Rounds of drafts verified in one forward (until drafting stops; then plain).
    Speculative(Box<speculative::Speculation<'a>>),
}

/// Sampled ids of one answer, produced on demand (see the module doc).
pub struct TokenStream<'a> {
    model: &'a Model,
    session: SessionSlot<'a>,
    cancel: CancelFlag<'a>,
    sampler: Sampler,
    /// The recent ids a repetition penalty looks at, when one is set: `(ids, window)`.
    penalty: Option<(Array, usize)>,
    /// The next id, sampled on the device and not yet read.
    pending: Option<Array>,
    /// Ids already read and not yet handed out (a speculative round yields several).
    ready: VecDeque<u32>,
    /// How many ids the stream may still hand out in all: `max_tokens` and the room left in the
    /// context window.
    limit: usize,
    room: usize,
    produced: usize,
    end: Option<StreamEnd>,
    prefill: Prefill,
    last_step: StepTimes,
    /// The final-normed hidden state of the last prefilled position (a drafter starts there).
    last_hidden: Option<Array>,
    /// Whether the prefilled part of the prompt held media.
    media: bool,
    mode: Mode<'a>,
    /// What speculation did, kept once it has stopped.
    spec_stats: Option<SpeculativeStats>,
}

impl<'a> TokenStream<'a> {
    /// Reuses the session's cache for the prompt's shared prefix, prefills the rest in chunks
    /// of `options.prefill_chunk` (binding `media` to their placeholder runs) and samples the
    /// first id, masked by `constraint` when one is given (compiled from `options.constraint`
    /// by [`crate::loaded::LoadedModel::token_stream`], which is how callers start a stream).
    /// A stop during prefill gives a stream that has ended, `Cancelled`; what was prefilled
    /// stays cached for the next turn. Speculates from the first id on with the request's
    /// proposer, where it can (see [`Self::speculating`]).
    pub(crate) fn start(
        model: &'a Model,
        request: StreamRequest<'a, '_>,
        media: &mut [MediaRuns<'_>],
        constraint: Option<Constraint>,
    ) -> Result<Self> {
        let StreamRequest {
            mut session,
            prompt,
            options,
            cancel,
            on_prefill,
            drafting,
        } = request;
        let prompt = prompt.ids.as_slice();
        let mut nobody = |_: PrefillProgress| {};
        let on_prefill: &mut dyn FnMut(PrefillProgress) = match on_prefill {
            Some(on_prefill) => on_prefill,
            None => &mut nobody,
        };
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
        on_prefill(PrefillProgress {
            done: 0,
            total: new.len(),
        });
        let mut features = Vec::with_capacity(media.len());
        for runs in media.iter_mut() {
            features.extend(prefill::rows_to_prefill(prompt, reused, runs)?);
        }
        let media: Vec<MediaFeatures<'_>> = features
            .iter()
            .map(|(id, f)| MediaFeatures {
                token_id: *id,
                features: f,
            })
            .collect();
        let sampler = Sampler::new(options.sampler.clone())?;
        let room = options.context_window.saturating_sub(prompt.len());
        let mut stream = Self {
            model,
            session,
            cancel,
            sampler,
            penalty: None,
            pending: None,
            ready: VecDeque::new(),
            limit: options.max_tokens.min(room),
            room,
            produced: 0,
            end: None,
            prefill: Prefill {
                prompt_tokens: prompt.len(),
                reused_tokens: reused,
                time: Duration::ZERO,
            },
            last_step: StepTimes::default(),
            last_hidden: None,
            media: !media.is_empty(),
            mode: match constraint {
                Some(constraint) => Mode::Constrained(Box::new(constraint)),
                None => Mode::Plain,
            },
            spec_stats: None,
        };
        let Some(logits) = stream.prefill(new, &media, options.prefill_chunk, on_prefill)? else {
            stream.end = Some(StreamEnd::Cancelled);
            return Ok(stream);
        };
        stream.session.mark_answer_start();
        if options.sampler.repetition_penalty.is_some() {
            let tokens = &stream.session.tokens;
            let window = options.sampler.repetition_window;
            let recent = &tokens[tokens.len() - window.min(tokens.len())..];
            stream.penalty = Some((Array::from_slice(recent, &[recent.len() as i32]), window));
        }
        let logits = match &mut stream.mode {
            Mode::Constrained(constraint) => constraint.mask(&logits)?,
            _ => logits,
        };
        let first = stream.sampler.sample(&logits, &stream.history())?;
        async_eval([&first])?;
        stream.pending = Some(first);
        stream.prefill.time = start.elapsed();
        if let Drafting::With(proposer, options) = drafting {
            stream.speculate(proposer, options);
        }
        Ok(stream)
    }

    /// What the prefill did.
    pub fn prefill_stats(&self) -> Prefill {
        self.prefill
    }

    /// Where the time of the last [`Self::next_token`] went.
    pub fn last_step(&self) -> StepTimes {
        self.last_step
    }

    /// Why the stream ended, once [`Self::next_token`] has returned `None`.
    pub fn end(&self) -> Option<StreamEnd> {
        self.end
    }

    /// The next sampled id, or `None` once the stream has ended: an id a speculative round
    /// has ready, else one step of the stream's mode.
    pub fn next_token(&mut self) -> Result<Option<u32>> {
        // A stop drops what a speculative round had ready: nothing reaches the caller after it.
        if self.end.is_none() && self.cancel.is_set() {
            self.ready.clear();
            self.finish(StreamEnd::Cancelled);
            return Ok(None);
        }
        if let Some(id) = self.ready.pop_front() {
            return Ok(Some(id));
        }
        if self.end.is_some() {
            return Ok(None);
        }
        match self.mode {
            Mode::Plain => self.next_plain(),
            Mode::Constrained(_) => self.next_constrained(),
            Mode::Speculative(_) => self.next_speculative(),
        }
    }

    /// The bookkeeping of an id handed out, the same in every mode: it counts toward the
    /// limit, and joins the session's tokens when it has been fed forward (`fed`; the caches
    /// hold an id once it has, and the last id of an answer never is).
    fn hand_out(&mut self, token: u32, fed: bool) {
        if fed {
            self.session.tokens.push(token);
        }
        self.produced += 1;
    }

    /// Whether the id about to be handed out is the last the stream may give.
    fn last_allowed(&self) -> bool {
        self.produced + 1 >= self.limit
    }

    fn finish(&mut self, end: StreamEnd) {
        self.pending = None;
        self.end = Some(end);
        if matches!(self.mode, Mode::Speculative(_)) {
            if let Mode::Speculative(spec) = std::mem::replace(&mut self.mode, Mode::Plain) {
                self.spec_stats = Some(spec.stats);
            }
        }
    }

    /// The end to report once the stream may hand out nothing more.
    fn limit_end(&self) -> StreamEnd {
        if self.produced >= self.room {
            StreamEnd::ContextFull
        } else {
            StreamEnd::MaxTokens
        }
    }

    /// Adds `y`, the id just fed forward, to the window a repetition penalty looks at.
    fn remember(&mut self, y: &Array) -> Result<()> {
        if let Some((ids, window)) = &mut self.penalty {
            let mut grown = concatenate(&[&*ids, &y.reshape(&[1])?], 0)?;
            let len = grown.shape()[0];
            if len > *window as i32 {
                grown = grown.index(len - *window as i32..);
            }
            *ids = grown;
        }
        Ok(())
    }

    fn history(&self) -> Array {
        match &self.penalty {
            Some((ids, _)) => ids.clone(),
            None => Array::from_slice::<u32>(&[], &[0]),
        }
    }

    /// Positions the session's caches hold now.
    pub fn positions(&self) -> usize {
        self.session.tokens.len()
    }

    /// Gives the session back, when it was given to the stream (see [`SessionSlot`]). Caches
    /// that are views of batched rows' buffers get their own copy first, so that a kept
    /// session holds only its own positions; a session whose copy fails is not given back.
    pub fn into_session(self) -> Option<Session> {
        match self.session {
            SessionSlot::Given(mut session) => {
                let copied = session.caches.iter_mut().try_for_each(|c| c.detach());
                copied.ok().map(|()| *session)
            }
            SessionSlot::Lent(_) => None,
        }
    }
}

/// Reads a sampled id on the host (waiting for the device, when it is still computing it).
fn read_id(y: &Array) -> Result<u32> {
    y.try_item_exact::<u32>()
        .map_err(|e| GenerateError::Token(e.to_string()))
}
