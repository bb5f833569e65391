//! Speculative decoding, the stream's round: draft N ids with the request's
//! [`Proposer`], verify them in one forward of N + 1 rows, keep the accepted ones and the
//! target's own next id, roll the caches back over the rest (docs/SPECULATIVE.md). The ids are
//! the target's (greedy: its argmax; sampling: one draw of its sampler per id handed out), so
//! the answer is what plain decoding gives.

use std::time::Instant;

use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::{argmax_axis, IndexOp};
use mlx_rs::transforms::{async_eval, eval};
use mlx_rs::{Array, Dtype};

use crate::error::Result;
use crate::speculative::{
    reference_drops, sliding_view, DraftRound, Proposer, SpeculativeOptions, SpeculativeStats,
};

use super::{read_id, Mode, StepTimes, TokenStream};

/// The speculating half of a stream's state.
pub(super) struct Speculation<'a> {
    proposer: Box<dyn Proposer + 'a>,
    options: SpeculativeOptions,
    /// The target's final-normed hidden state at the last cached position `[1, 1, hidden]`.
    feature: Array,
    /// The last id handed out, not yet in the caches (the next verify's first row).
    bonus: Option<u32>,
    first_round: bool,
    media: bool,
    dropped: bool,
    pub(super) stats: SpeculativeStats,
}

impl Speculation<'_> {
    /// Why drafting should stop now, if it should.
    fn should_stop(&self) -> Option<String> {
        let min = self.options.min_accepted?;
        let window = self.options.window.max(1);
        let recent = &self.stats.accepted_per_round;
        if recent.len() < window {
            return None;
        }
        let last = &recent[recent.len() - window..];
        let mean = last.iter().sum::<usize>() as f32 / window as f32;
        (mean < min).then(|| {
            format!(
                "drafting stopped: {mean:.2} drafts accepted per round over the last {window} rounds (below {min})"
            )
        })
    }
}

impl<'a> TokenStream<'a> {
    /// Switches the rest of the answer to speculative decoding: each round drafts
    /// `options.block_size − 1` ids with `proposer`, checks them with one forward of the target
    /// and hands out the accepted ones plus the target's own next id. Returns false, staying
    /// plain, where it cannot run: before the first id is handed out only, not with a
    /// repetition penalty or a grammar, not once ended (the reason is kept in the stats).
    pub(super) fn speculate(
        &mut self,
        proposer: Box<dyn Proposer + 'a>,
        options: SpeculativeOptions,
    ) -> bool {
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
        if matches!(self.mode, Mode::Constrained(_)) {
            self.spec_stats = Some(stats("drafting is off with a constrained output"));
            return false;
        }
        if !proposer.fits(self.model) {
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
        self.mode = Mode::Speculative(Box::new(Speculation {
            proposer,
            options,
            feature,
            bonus: None,
            first_round: true,
            media: self.media,
            // The reference's sliding cache starts after the prompt's first `len − window`.
            dropped: self.session.tokens.len() > window,
            stats: SpeculativeStats::default(),
        }));
        true
    }

    /// Whether the stream is speculating now.
    pub fn speculating(&self) -> bool {
        matches!(self.mode, Mode::Speculative(_))
    }

    /// What speculative decoding did, when it was asked for.
    pub fn speculative_stats(&self) -> Option<&SpeculativeStats> {
        match &self.mode {
            Mode::Speculative(spec) => Some(&spec.stats),
            _ => self.spec_stats.as_ref(),
        }
    }

    /// Leaves speculative decoding for plain decoding from the next id on (the engine thread
    /// does when a second answer starts, so that both share each decode step). The answer is
    /// the same either way.
    pub fn stop_drafting(&mut self, why: &str) -> Result<()> {
        if !self.speculating() || self.end.is_some() {
            return Ok(());
        }
        if let Mode::Speculative(spec) = &self.mode {
            if spec.bonus.is_none() {
                // The first id is not handed out yet: it is still the pending plain one.
                if let Mode::Speculative(mut spec) = std::mem::replace(&mut self.mode, Mode::Plain)
                {
                    spec.stats.stopped = Some(why.into());
                    self.spec_stats = Some(spec.stats);
                }
                return Ok(());
            }
        }
        self.stop_speculating(why.into())
    }

    /// The next id while speculating: the first id as sampled after prefill, then a round
    /// whenever the ready ids run out.
    pub(super) fn next_speculative(&mut self) -> Result<Option<u32>> {
        let first = matches!(&self.mode, Mode::Speculative(spec) if spec.bonus.is_none());
        if first {
            let Some(y) = self.pending.take() else {
                self.finish(self.limit_end());
                return Ok(None);
            };
            let token = read_id(&y)?;
            if let Mode::Speculative(spec) = &mut self.mode {
                spec.bonus = Some(token);
            }
            self.hand_out(token, false);
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
        let stop = match &self.mode {
            Mode::Speculative(spec) => spec.should_stop(),
            _ => None,
        };
        if let Some(why) = stop {
            self.stop_speculating(why)?;
        }
        Ok(self.ready.pop_front())
    }

    /// Leaves speculation for plain decoding: the last id handed out is fed forward as a
    /// plain step would have.
    fn stop_speculating(&mut self, why: String) -> Result<()> {
        let Mode::Speculative(mut spec) = std::mem::replace(&mut self.mode, Mode::Plain) else {
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
        let Mode::Speculative(spec) = &mut self.mode else {
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
        let drafts = spec.proposer.draft(
            &DraftRound {
                model,
                caches: &self.session.caches,
                bonus,
                feature: &spec.feature,
                positions: kv,
                sliding: sliding_view(kv, window, spec.first_round, spec.media, spec.dropped),
                index: spec.stats.rounds,
                produced: self.produced,
            },
            n,
        )?;
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

        // Accept while the proposer's draft agrees with the target's own next id.
        let mut emitted = Vec::with_capacity(rows);
        let mut accepted = 0;
        for pos in 0..rows {
            let target: u32 = match &targets {
                Some(t) => t[pos],
                None => {
                    let row = logits.index(pos as i32..pos as i32 + 1);
                    let draw = self.sampler.sample(&row, &self.history())?;
                    read_id(&draw)?
                }
            };
            emitted.push(target);
            let agreed = pos < n && self.proposer_agrees(pos, drafted[pos], target);
            if agreed {
                // (The draft is the target's id, unless the proposer decides acceptance.)
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
        let Mode::Speculative(spec) = &mut self.mode else {
            return Ok(());
        };
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

    fn proposer_agrees(&self, pos: usize, drafted: u32, target: u32) -> bool {
        match &self.mode {
            Mode::Speculative(spec) => spec.proposer.agrees(pos, drafted, target),
            _ => drafted == target,
        }
    }
}
