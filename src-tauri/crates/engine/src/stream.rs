//! The token stream: prompt-cache reuse, chunked prefill, then pipelined decode, one sampled id
//! at a time, with a cancel flag read between prefill chunks and between tokens. It knows
//! nothing of text, stop ids or usage: [`crate::generate`] builds those on top of it, as
//! mlx-lm's `stream_generate` builds on `generate_step`.
//!
//! How later steps plug in: a speculative round (draft N ids, verify them in one forward of
//! N + 1 rows, keep the accepted ones, [`Session`] rewinds the rest) is another way to fill
//! the queue of ready ids that [`TokenStream::next_token`] drains, so the generator above does
//! not change. Several sequences at once are several sessions stepped by one batched forward;
//! each row is then a `TokenStream` whose decode step is shared.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gemma::{KvCache, MediaFeatures, Model};
use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::{argmax_axis, IndexOp};
use mlx_rs::transforms::{async_eval, eval};
use mlx_rs::Array;
use mlx_rs::Dtype;

use crate::constraint::{Constraint, ConstraintError};
use crate::generate::{GenerateError, GenerateOptions, Result};
use crate::sampler::Sampler;
use crate::speculative::{
    donor_kv, reference_drops, sliding_view, Proposer, Speculation, SpeculativeOptions,
    SpeculativeStats,
};
use crate::template::MediaKind;

/// A conversation's model state: the caches and exactly the tokens they hold.
pub struct Session {
    caches: Vec<KvCache>,
    tokens: Vec<u32>,
    /// The sliding caches as they were when the last answer began (its prompt prefilled), so
    /// that the next turn can return there even when the answer outran their rewind slack.
    answer_start: Option<Mark>,
}

/// A point a session can return to: its token count, and a snapshot of each sliding cache
/// there (`None` for full caches, which can always be trimmed back).
struct Mark {
    tokens: usize,
    sliding: Vec<Option<KvCache>>,
}

impl Session {
    /// An empty session for `model`.
    pub fn new(model: &Model) -> Self {
        Self {
            caches: model.new_caches(),
            tokens: Vec::new(),
            answer_start: None,
        }
    }

    /// The tokens whose K/V the caches hold.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The caches, one per cache-owning layer.
    pub fn caches(&self) -> &[KvCache] {
        &self.caches
    }

    /// Rewinds to the longest prefix shared with `prompt` that the caches can return to,
    /// keeping at least one prompt token to prefill. Returns how many tokens are reused.
    ///
    /// A sliding cache keeps only a little of what left its window, so going back over a long
    /// answer (a thought the template drops from the history, an answer that re-tokenizes
    /// differently) is done from the snapshot taken where that answer began.
    pub fn rewind_for(&mut self, model: &Model, prompt: &[u32]) -> usize {
        let common = shared_prefix(&self.tokens, prompt);
        let reuse = common.min(prompt.len().saturating_sub(1));
        if self.trim_to(reuse) {
            return reuse;
        }
        if let Some(mark) = self.answer_start.take() {
            if mark.tokens <= self.tokens.len() {
                let back = self.tokens.len() - mark.tokens;
                let restored =
                    self.caches.iter_mut().zip(mark.sliding).all(
                        |(cache, snapshot)| match snapshot {
                            Some(snapshot) => {
                                *cache = snapshot;
                                true
                            }
                            None => cache.trim(back).is_ok(),
                        },
                    );
                if restored {
                    self.tokens.truncate(mark.tokens);
                    let reuse = reuse.min(mark.tokens);
                    if self.trim_to(reuse) {
                        return reuse;
                    }
                }
            }
        }
        *self = Session::new(model);
        0
    }

    /// Drops the tokens after the first `keep`, if every cache can; false if not (nothing is
    /// changed then).
    fn trim_to(&mut self, keep: usize) -> bool {
        let drop = self.tokens.len().saturating_sub(keep);
        if !self.caches.iter().all(|c| c.can_trim(drop)) {
            return false;
        }
        if !self.caches.iter_mut().all(|c| c.trim(drop).is_ok()) {
            return false;
        }
        self.tokens.truncate(keep);
        if self.answer_start.as_ref().is_some_and(|m| m.tokens > keep) {
            self.answer_start = None;
        }
        true
    }

    /// Remembers this point as where an answer begins (see [`Self::rewind_for`]).
    fn mark_answer_start(&mut self) {
        let sliding = self
            .caches
            .iter()
            .map(|c| matches!(c, KvCache::Sliding { .. }).then(|| c.clone()))
            .collect();
        self.answer_start = Some(Mark {
            tokens: self.tokens.len(),
            sliding,
        });
    }
}

/// A stream's session: lent by the caller for the stream's life, or given to it (the engine
/// thread, which keeps several streams running, gives each its own and takes it back with
/// [`TokenStream::into_session`]).
pub enum SessionSlot<'a> {
    Lent(&'a mut Session),
    Given(Box<Session>),
}

impl<'a> From<&'a mut Session> for SessionSlot<'a> {
    fn from(session: &'a mut Session) -> Self {
        Self::Lent(session)
    }
}

impl From<Session> for SessionSlot<'_> {
    fn from(session: Session) -> Self {
        Self::Given(Box::new(session))
    }
}

impl std::ops::Deref for SessionSlot<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        match self {
            Self::Lent(s) => s,
            Self::Given(s) => s,
        }
    }
}

impl std::ops::DerefMut for SessionSlot<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        match self {
            Self::Lent(s) => s,
            Self::Given(s) => s,
        }
    }
}

/// A stream's cancel flag: lent by the caller, or shared with whoever may stop it.
pub enum CancelFlag<'a> {
    Lent(&'a AtomicBool),
    Shared(Arc<AtomicBool>),
}

impl<'a> From<&'a AtomicBool> for CancelFlag<'a> {
    fn from(flag: &'a AtomicBool) -> Self {
        Self::Lent(flag)
    }
}

impl From<Arc<AtomicBool>> for CancelFlag<'_> {
    fn from(flag: Arc<AtomicBool>) -> Self {
        Self::Shared(flag)
    }
}

impl CancelFlag<'_> {
    fn is_set(&self) -> bool {
        match self {
            Self::Lent(f) => f.load(Ordering::Relaxed),
            Self::Shared(f) => f.load(Ordering::Relaxed),
        }
    }
}

/// The media of one kind in a prompt (images, or audio clips): each run of `token_id`
/// placeholders (in order) is one item, whose projected features `[run length, hidden]`
/// `features(k)` computes on demand — items wholly inside the reused prefix are never computed
/// (nor prefilled) again.
pub struct MediaRuns<'a> {
    pub kind: MediaKind,
    pub token_id: u32,
    pub count: usize,
    pub features: &'a mut dyn FnMut(usize) -> Result<Array>,
}

/// `(start, length)` of every run of consecutive `token_id`s in `prompt`: one per media item.
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
    /// Speculative decoding, while it runs.
    spec: Option<Speculation<'a>>,
    /// What speculation did (kept once it has stopped).
    spec_stats: Option<SpeculativeStats>,
    /// The grammar the answer follows, when one is set: each draw is masked by it and each id
    /// read is fed to it.
    constraint: Option<Constraint>,
}

impl<'a> TokenStream<'a> {
    /// Reuses the session's cache for the prompt's shared prefix, prefills the rest in chunks
    /// of `options.prefill_chunk` (binding `media` to their placeholder runs) and samples the
    /// first id. A stop during prefill gives a stream that has ended, `Cancelled`; what was
    /// prefilled stays cached for the next turn.
    pub fn start(
        model: &'a Model,
        session: impl Into<SessionSlot<'a>>,
        prompt: &[u32],
        media: &mut [MediaRuns<'_>],
        options: &GenerateOptions,
        cancel: impl Into<CancelFlag<'a>>,
    ) -> Result<Self> {
        Self::start_reporting(model, session, prompt, media, options, cancel, &mut |_| {})
    }

    /// [`Self::start`], telling `on_prefill` how far the prefill has come.
    pub fn start_reporting(
        model: &'a Model,
        session: impl Into<SessionSlot<'a>>,
        prompt: &[u32],
        media: &mut [MediaRuns<'_>],
        options: &GenerateOptions,
        cancel: impl Into<CancelFlag<'a>>,
        on_prefill: &mut dyn FnMut(PrefillProgress),
    ) -> Result<Self> {
        if options.constraint.is_some() {
            return Err(ConstraintError::Invalid(
                "a constrained answer is compiled with the model's vocabulary: start it with \
                 LoadedModel::token_stream or TokenStream::start_constrained"
                    .into(),
            )
            .into());
        }
        Self::start_constrained(
            model, session, prompt, media, options, None, cancel, on_prefill,
        )
    }

    /// [`Self::start_reporting`] with every draw masked by `constraint` (compiled from
    /// `options.constraint` by [`crate::worker::LoadedModel::constraint`]), when one is given.
    #[allow(clippy::too_many_arguments)]
    pub fn start_constrained(
        model: &'a Model,
        session: impl Into<SessionSlot<'a>>,
        prompt: &[u32],
        media: &mut [MediaRuns<'_>],
        options: &GenerateOptions,
        constraint: Option<Constraint>,
        cancel: impl Into<CancelFlag<'a>>,
        on_prefill: &mut dyn FnMut(PrefillProgress),
    ) -> Result<Self> {
        let (mut session, cancel) = (session.into(), cancel.into());
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
            features.extend(rows_to_prefill(prompt, reused, runs)?);
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
            spec: None,
            spec_stats: None,
            constraint,
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
        let logits = match stream.constraint.as_mut() {
            Some(constraint) => constraint.mask(&logits)?,
            None => logits,
        };
        let first = stream.sampler.sample(&logits, &stream.history())?;
        async_eval([&first])?;
        stream.pending = Some(first);
        stream.prefill.time = start.elapsed();
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

    /// The next sampled id, or `None` once the stream has ended. The forward of the id after
    /// it is built and dispatched before this one is read, so the host builds step n + 1 while
    /// the device computes step n.
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
        if self.spec.is_some() {
            return self.next_speculative();
        }
        if self.constraint.is_some() {
            return self.next_constrained();
        }
        let Some(y) = self.pending.take() else {
            let end = if self.produced >= self.room {
                StreamEnd::ContextFull
            } else {
                StreamEnd::MaxTokens
            };
            self.finish(end);
            return Ok(None);
        };
        let last = self.produced + 1 >= self.limit;
        let built = Instant::now();
        let mut dispatched = built;
        if !last {
            let logits = self.model.decode(&y, &mut self.session.caches)?;
            self.remember(&y)?;
            let next = self.sampler.sample(&logits, &self.history())?;
            dispatched = Instant::now();
            async_eval([&next])?;
            self.pending = Some(next);
        }
        let waiting = Instant::now();
        let token: u32 = y
            .try_item_exact::<u32>()
            .map_err(|e| GenerateError::Token(e.to_string()))?;
        self.last_step = StepTimes {
            build: dispatched - built,
            dispatch: waiting - dispatched,
            wait: waiting.elapsed(),
        };
        // The caches hold an id once it has been fed forward; the last one of an answer never is.
        if !last {
            self.session.tokens.push(token);
        }
        self.produced += 1;
        Ok(Some(token))
    }

    /// [`Self::next_token`] under a grammar: the forward of the pending id is dispatched, then
    /// the id is read and fed to the grammar while the device works, and the next draw is made
    /// from the logits masked by what the grammar allows after it.
    fn next_constrained(&mut self) -> Result<Option<u32>> {
        let Some(y) = self.pending.take() else {
            self.finish(self.limit_end());
            return Ok(None);
        };
        let last = self.produced + 1 >= self.limit;
        let built = Instant::now();
        let logits = if last {
            None
        } else {
            let logits = self.model.decode(&y, &mut self.session.caches)?;
            async_eval([&logits])?;
            Some(logits)
        };
        let dispatched = Instant::now();
        let token: u32 = y
            .try_item_exact::<u32>()
            .map_err(|e| GenerateError::Token(e.to_string()))?;
        let waiting = Instant::now();
        if let Some(constraint) = self.constraint.as_mut() {
            constraint.consume(token)?;
        }
        if let Some(logits) = logits {
            self.remember(&y)?;
            let masked = match self.constraint.as_mut() {
                Some(constraint) => constraint.mask(&logits)?,
                None => logits,
            };
            let next = self.sampler.sample(&masked, &self.history())?;
            async_eval([&next])?;
            self.pending = Some(next);
            self.session.tokens.push(token);
        }
        self.last_step = StepTimes {
            build: dispatched - built,
            dispatch: Duration::ZERO,
            wait: waiting - dispatched,
        };
        self.produced += 1;
        Ok(Some(token))
    }

    fn finish(&mut self, end: StreamEnd) {
        self.pending = None;
        self.end = Some(end);
        if let Some(spec) = self.spec.take() {
            self.spec_stats = Some(spec.stats);
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

    /// Switches the rest of the answer to speculative decoding: each round drafts
    /// `options.block_size − 1` ids with `proposer`, checks them with one forward of the target
    /// and hands out the accepted ones plus the target's own next id. The ids are the target's
    /// (greedy: its argmax; sampling: one draw of its sampler per id handed out), so the answer
    /// is what plain decoding gives. Returns false, staying plain, where it cannot run: before
    /// the first id is handed out only, not with a repetition penalty, not once ended.
    pub fn speculate(&mut self, proposer: Proposer<'a>, options: SpeculativeOptions) -> bool {
        let stats = |why: &str| SpeculativeStats {
            stopped: Some(why.into()),
            ..SpeculativeStats::default()
        };
        if self.end.is_some() || self.produced > 0 || options.block_size < 2 {
            return false;
        }
        if self.penalty.is_some() {
            self.spec_stats = Some(stats("drafting is off with a repetition penalty"));
            return false;
        }
        if self.constraint.is_some() {
            self.spec_stats = Some(stats("drafting is off with a constrained output"));
            return false;
        }
        if !crate::speculative::proposer_fits(&proposer, self.model) {
            self.spec_stats = Some(stats("the drafter does not fit this model"));
            return false;
        }
        let Some(hidden) = self.last_hidden.take() else {
            return false;
        };
        let Ok(feature) = hidden.reshape(&[1, 1, -1]) else {
            return false;
        };
        let window = self.model.config().text.sliding_window;
        self.spec = Some(Speculation {
            proposer,
            options,
            feature,
            bonus: None,
            first_round: true,
            media: self.media,
            // The reference's sliding cache starts after the prompt's first `len − window`.
            dropped: self.session.tokens.len() > window,
            stats: SpeculativeStats::default(),
        });
        true
    }

    /// What speculative decoding did, when it was asked for.
    pub fn speculative_stats(&self) -> Option<&SpeculativeStats> {
        self.spec
            .as_ref()
            .map(|s| &s.stats)
            .or(self.spec_stats.as_ref())
    }

    /// [`Self::next_token`] while speculating: the first id as sampled after prefill, then a
    /// round whenever the ready ids run out.
    fn next_speculative(&mut self) -> Result<Option<u32>> {
        let first = self.spec.as_ref().is_some_and(|s| s.bonus.is_none());
        if first {
            let Some(y) = self.pending.take() else {
                self.finish(self.limit_end());
                return Ok(None);
            };
            let token: u32 = y
                .try_item_exact::<u32>()
                .map_err(|e| GenerateError::Token(e.to_string()))?;
            if let Some(spec) = self.spec.as_mut() {
                spec.bonus = Some(token);
            }
            self.produced += 1;
            return Ok(Some(token));
        }
        if self.produced >= self.limit {
            self.finish(self.limit_end());
            return Ok(None);
        }
        let started = Instant::now();
        self.round()?;
        self.last_step = StepTimes {
            build: started.elapsed(),
            ..StepTimes::default()
        };
        let stop = self.spec.as_ref().and_then(|s| s.should_stop());
        if let Some(why) = stop {
            self.stop_speculating(why)?;
        }
        Ok(self.ready.pop_front())
    }

    /// Leaves speculation for plain decoding: the last id handed out is fed forward as a
    /// plain step would have.
    fn stop_speculating(&mut self, why: String) -> Result<()> {
        let Some(mut spec) = self.spec.take() else {
            return Ok(());
        };
        spec.stats.stopped = Some(why);
        let bonus = spec.bonus;
        self.spec_stats = Some(spec.stats);
        let Some(bonus) = bonus else {
            return Ok(());
        };
        let handed_out = self.produced; // the ready ids count as handed out
        if handed_out < self.limit {
            let y = Array::from_slice(&[bonus], &[1]);
            let logits = self.model.decode(&y, &mut self.session.caches)?;
            let next = self.sampler.sample(&logits, &self.history())?;
            async_eval([&next])?;
            self.session.tokens.push(bonus);
            self.pending = Some(next);
        }
        Ok(())
    }

    /// One round: draft, verify in one forward, accept the longest agreeing prefix, roll the
    /// caches back over the rest, queue the ids.
    fn round(&mut self) -> Result<()> {
        let Some(spec) = self.spec.as_mut() else {
            return Ok(());
        };
        let Some(bonus) = spec.bonus else {
            return Ok(());
        };
        let model = self.model;
        let kv = self.session.tokens.len();
        let budget = self.limit - self.produced;
        let rows = spec.options.block_size.min(budget + 1).max(2);
        let n = rows - 1;
        let window = model.config().text.sliding_window;

        // Draft.
        let drafts = match &spec.proposer {
            Proposer::Mtp(drafter) | Proposer::Forced(drafter, _) => {
                let view = sliding_view(kv, window, spec.first_round, spec.media, spec.dropped);
                let donor = donor_kv(&self.session.caches, drafter, view, kv)?;
                let mut token = Array::from_slice(&[bonus], &[1]);
                let mut feature = spec.feature.clone();
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    let (next, id) =
                        drafter.step(model, &token, &feature, &donor, kv.saturating_sub(1))?;
                    feature = next;
                    token = id.as_dtype(Dtype::Uint32)?;
                    out.push(token.clone());
                }
                concatenate(&out, 0)?
            }
            Proposer::Script(script) => {
                let ids = script.drafts(spec.stats.rounds, self.produced, n);
                Array::from_slice(&ids, &[n as i32])
            }
        };
        if reference_drops(kv, rows, window, spec.options.block_size) {
            spec.dropped = true;
        }
        spec.first_round = false;

        // Verify: one forward over [bonus, drafts…].
        let ids = concatenate(&[Array::from_slice(&[bonus], &[1]), drafts.clone()], 0)?;
        let (hidden, logits) = model.forward_array_with_hidden(&ids, &mut self.session.caches)?;
        let greedy = self.sampler.config().temperature == 0.0;
        let targets = if greedy {
            Some(argmax_axis(logits.as_dtype(Dtype::Float32)?, -1, None)?)
        } else {
            None
        };
        let mut to_eval: Vec<&Array> = vec![&drafts, &hidden, &logits];
        to_eval.extend(targets.iter());
        to_eval.extend(self.session.caches.iter().flat_map(|c| c.arrays()));
        eval(to_eval)?;
        let drafted: Vec<u32> = drafts.as_slice::<u32>().to_vec();
        let targets: Option<Vec<u32>> = match targets {
            Some(t) => Some(t.as_dtype(Dtype::Uint32)?.as_slice::<u32>().to_vec()),
            None => None,
        };

        // Accept while the draft is the target's own next id.
        let forced = spec_proposer_forced(self.spec.as_ref()).map(|k| k.min(n));
        let mut emitted = Vec::with_capacity(rows);
        let mut accepted = 0;
        for pos in 0..rows {
            let target: u32 = match &targets {
                Some(t) => t[pos],
                None => {
                    let row = logits.index(pos as i32..pos as i32 + 1);
                    let draw = self.sampler.sample(&row, &self.history())?;
                    draw.try_item_exact::<u32>()
                        .map_err(|e| GenerateError::Token(e.to_string()))?
                }
            };
            emitted.push(target);
            let agreed = match forced {
                Some(k) => pos < k,
                None => pos < n && drafted[pos] == target,
            };
            if agreed {
                // (Forced: the draft stands in for the model's token.)
                if let Some(last) = emitted.last_mut() {
                    *last = drafted[pos];
                }
                accepted += 1;
            } else {
                break;
            }
        }

        // Keep the bonus and the accepted drafts in the caches; drop the rest.
        let rejected = rows - (accepted + 1);
        for cache in self.session.caches.iter_mut() {
            cache.trim(rejected)?;
        }
        self.session.tokens.push(bonus);
        self.session.tokens.extend_from_slice(&drafted[..accepted]);
        emitted.truncate(budget);
        let spec = self.spec.as_mut().expect("speculating");
        spec.feature = hidden
            .index(accepted as i32..accepted as i32 + 1)
            .reshape(&[1, 1, -1])?;
        spec.bonus = emitted.last().copied();
        spec.stats.rounds += 1;
        spec.stats.drafted += n;
        spec.stats.accepted += accepted;
        spec.stats.accepted_per_round.push(accepted);
        spec.stats.drafts.push(drafted);
        self.produced += emitted.len();
        self.ready.extend(emitted);
        Ok(())
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

    /// Leaves speculative decoding for plain decoding from the next id on (the engine thread
    /// does when a second answer starts, so that both share each decode step). The answer is
    /// the same either way.
    pub fn stop_drafting(&mut self, why: &str) -> Result<()> {
        if self.spec.is_none() || self.end.is_some() {
            return Ok(());
        }
        if self.spec.as_ref().is_some_and(|s| s.bonus.is_none()) {
            // The first id is not handed out yet: it is still the pending plain one.
            if let Some(mut spec) = self.spec.take() {
                spec.stats.stopped = Some(why.into());
                self.spec_stats = Some(spec.stats);
            }
            return Ok(());
        }
        self.stop_speculating(why.into())
    }

    /// Whether the next id comes from a plain decode step that other streams can share: no
    /// id is waiting, none is speculated or constrained, and the step is not the last.
    fn shares_next_step(&self) -> bool {
        self.end.is_none()
            && self.ready.is_empty()
            && self.spec.is_none()
            && self.constraint.is_none()
            && self.pending.is_some()
            && self.produced + 1 < self.limit
            && !self.cancel.is_set()
    }

    fn history(&self) -> Array {
        match &self.penalty {
            Some((ids, _)) => ids.clone(),
            None => Array::from_slice::<u32>(&[], &[0]),
        }
    }

    /// Feeds `new` prompt tokens in chunks; returns the last position's logits `[1, vocab]`,
    /// or `None` when `cancel` was set between chunks.
    fn prefill(
        &mut self,
        new: &[u32],
        media: &[MediaFeatures<'_>],
        chunk: usize,
        on_prefill: &mut dyn FnMut(PrefillProgress),
    ) -> Result<Option<Array>> {
        let chunk = chunk.max(1);
        let mut logits = None;
        let mut done = 0;
        while done < new.len() {
            if self.cancel.is_set() {
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
            let (hidden, out) = self.model.forward_with_hidden(
                part,
                &chunk_media,
                &mut self.session.caches,
                Some(1),
            )?;
            eval_with_caches(&self.session.caches, &out)?;
            self.session.tokens.extend_from_slice(part);
            self.last_hidden = Some(hidden);
            logits = Some(out);
            done = end;
            on_prefill(PrefillProgress {
                done,
                total: new.len(),
            });
        }
        logits.map(Some).ok_or(GenerateError::EmptyPrompt)
    }
}

/// The next id of each stream, as [`TokenStream::next_token`] gives it, with the plain decode
/// steps of every stream that takes one now run as one forward of the model
/// ([`Model::forward_rows`], over the buffers of `kv`, which the caller keeps from step to
/// step): continuous batching. Each row is sampled by its own stream's sampler (its own seed
/// and random stream), so every answer is the one it would be alone. Streams that speculate,
/// follow a grammar, hand out ids already read or end now step alone.
pub fn next_tokens(
    streams: &mut [&mut TokenStream<'_>],
    kv: &mut gemma::BatchKvCache,
) -> Vec<Result<Option<u32>>> {
    let shared: Vec<usize> = (0..streams.len())
        .filter(|&i| {
            streams[i].shares_next_step() && std::ptr::eq(streams[i].model, streams[0].model)
        })
        .collect();
    let mut out: Vec<Option<Result<Option<u32>>>> = (0..streams.len()).map(|_| None).collect();
    if shared.len() >= 2 {
        let mut rows: Vec<&mut TokenStream<'_>> = streams
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| shared.contains(i))
            .map(|(_, s)| &mut **s)
            .collect();
        match step_rows(&mut rows, kv) {
            Ok(tokens) => {
                for (&i, token) in shared.iter().zip(tokens) {
                    out[i] = Some(Ok(Some(token)));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for (&i, row) in shared.iter().zip(rows.iter_mut()) {
                    row.finish(StreamEnd::Cancelled);
                    out[i] = Some(Err(GenerateError::Batch(message.clone())));
                }
            }
        }
    }
    out.into_iter()
        .zip(streams.iter_mut())
        .map(|(done, stream)| match done {
            Some(result) => result,
            None => stream.next_token(),
        })
        .collect()
}

/// One plain decode step of every row together (each row's pending id fed forward, the
/// rows' next ids sampled and dispatched, the pending ids read): the batched form of the
/// plain step in [`TokenStream::next_token`].
fn step_rows(rows: &mut [&mut TokenStream<'_>], kv: &mut gemma::BatchKvCache) -> Result<Vec<u32>> {
    let Some(model) = rows.first().map(|r| r.model) else {
        return Ok(Vec::new());
    };
    let built = Instant::now();
    let ys: Vec<Array> = rows
        .iter_mut()
        .map(|r| r.pending.take().ok_or(GenerateError::EmptyPrompt))
        .collect::<Result<_>>()?;
    let flat: Vec<Array> = ys
        .iter()
        .map(|y| y.reshape(&[1]))
        .collect::<std::result::Result<_, _>>()?;
    let ids = concatenate(&flat, 0)?;
    let logits = {
        let mut caches: Vec<&mut [KvCache]> = rows
            .iter_mut()
            .map(|r| r.session.caches.as_mut_slice())
            .collect();
        model.forward_rows(&ids, &mut caches, kv)?
    };
    let mut nexts = Vec::with_capacity(rows.len());
    for (k, (row, y)) in rows.iter_mut().zip(&ys).enumerate() {
        row.remember(y)?;
        let own = logits.index(k as i32..k as i32 + 1);
        nexts.push(row.sampler.sample(&own, &row.history())?);
    }
    let dispatched = Instant::now();
    async_eval(nexts.iter())?;
    let waiting = Instant::now();
    let mut tokens = Vec::with_capacity(rows.len());
    for ((row, y), next) in rows.iter_mut().zip(&ys).zip(nexts) {
        let token: u32 = y
            .try_item_exact::<u32>()
            .map_err(|e| GenerateError::Token(e.to_string()))?;
        row.pending = Some(next);
        row.session.tokens.push(token);
        row.produced += 1;
        tokens.push(token);
    }
    let times = StepTimes {
        build: dispatched - built,
        dispatch: waiting - dispatched,
        wait: waiting.elapsed(),
    };
    for row in rows.iter_mut() {
        row.last_step = times;
    }
    Ok(tokens)
}

/// Evaluates a prefill chunk's output together with the caches it wrote (so the next chunk
/// builds on evaluated arrays, not on a growing graph).
pub fn eval_with_caches(caches: &[KvCache], out: &Array) -> Result<()> {
    let mut to_eval: Vec<&Array> = caches.iter().flat_map(|c| c.arrays()).collect();
    to_eval.push(out);
    eval(to_eval)?;
    Ok(())
}

/// Feature rows for the placeholders of one media kind after the reused prefix, computing only
/// the items needed.
fn rows_to_prefill(
    prompt: &[u32],
    reused: usize,
    media: &mut MediaRuns<'_>,
) -> Result<Option<(u32, Array)>> {
    let runs = placeholder_runs(prompt, media.token_id);
    if runs.len() != media.count {
        return Err(GenerateError::MediaCount {
            kind: media.kind,
            expected: media.count,
            found: runs.len(),
        });
    }
    let mut parts = Vec::new();
    for (k, &(start, len)) in runs.iter().enumerate() {
        let cached = reused.saturating_sub(start).min(len);
        if cached == len {
            continue;
        }
        let features = (media.features)(k)?;
        let rows = features.shape().first().copied().unwrap_or(0) as usize;
        if rows != len {
            return Err(GenerateError::MediaCount {
                kind: media.kind,
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
        1 => parts.pop().map(|f| (media.token_id, f)),
        _ => Some((media.token_id, concatenate(&parts, 0)?)),
    })
}

/// The bench's forced acceptance count, when the proposer is [`Proposer::Forced`].
fn spec_proposer_forced(spec: Option<&Speculation<'_>>) -> Option<usize> {
    match spec.map(|s| &s.proposer) {
        Some(Proposer::Forced(_, k)) => Some(*k),
        _ => None,
    }
}

/// How many ids `a` and `b` share from their start.
pub fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
