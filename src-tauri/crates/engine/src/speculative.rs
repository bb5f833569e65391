//! Speculative decoding's parts that know nothing of the stream: where drafts come from, which
//! of the target's K/V the MTP drafter reads in a round, and the statistics (docs/SPECULATIVE.md).
//! The round itself (draft → verify → accept → roll back) is [`crate::stream::TokenStream`]'s.

use gemma::{DonorKv, Drafter, KvCache, Model};
use serde::Serialize;

use crate::generate::Result;

/// How a stream speculates.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeculativeOptions {
    /// Tokens per verify: the bonus plus `block_size − 1` drafts (≥ 2).
    pub block_size: usize,
    /// Drafting stops for the rest of an answer when, over the last [`Self::window`] rounds,
    /// fewer drafts than this were accepted per round on average (`None`: never stops).
    pub min_accepted: Option<f32>,
    /// Rounds the acceptance is judged over.
    pub window: usize,
}

impl Default for SpeculativeOptions {
    fn default() -> Self {
        Self {
            block_size: gemma::drafter::DEFAULT_BLOCK_SIZE,
            min_accepted: Some(DEFAULT_MIN_ACCEPTED),
            window: 8,
        }
    }
}

/// Accepted drafts per round below which drafting stops when nothing else is said (Metal's
/// provisional figure). The engine uses the backend's own, `gemma::Tuning::min_drafts_accepted`.
pub const DEFAULT_MIN_ACCEPTED: f32 = 1.0;

/// Where a round's drafts come from.
pub enum Proposer<'a> {
    /// Gemma 4's MTP assistant drafter.
    Mtp(&'a Drafter),
    /// Drafts read from a known continuation, with misses placed on purpose: the tests' and
    /// the bench's way to drive exact acceptance counts (random-weight drafters are almost
    /// never right).
    Script(Script),
    /// The bench's controlled acceptance: the MTP drafter drafts and the round runs as ever,
    /// but exactly this many drafts are taken as accepted whatever the model says. The answer
    /// is then NOT the model's: for timing rounds at a given acceptance only (random-weight
    /// drafters are never right, and on a GPU a verify's rows can move a random model's
    /// near-ties, so a scripted continuation does not stay on track there).
    Forced(&'a Drafter, usize),
}

/// A scripted proposer: round `r` proposes the continuation's next tokens, correct for the
/// first `accepts[r % len]` drafts and wrong at the one after.
#[derive(Debug, Clone)]
pub struct Script {
    /// The target's own answer (first generated id first), e.g. from a plain greedy run.
    pub continuation: Vec<u32>,
    /// Correct drafts per round, cycled.
    pub accepts: Vec<usize>,
    /// The vocabulary size (a wrong draft is the right one + 1, wrapped).
    pub vocab: u32,
}

impl Script {
    /// `n` drafts for round `round`, after `produced` ids of the answer.
    pub fn drafts(&self, round: usize, produced: usize, n: usize) -> Vec<u32> {
        let right = self
            .accepts
            .get(round % self.accepts.len().max(1))
            .copied()
            .unwrap_or(0);
        (0..n)
            .map(|j| {
                let truth = self.continuation.get(produced + j).copied().unwrap_or(0);
                if j < right {
                    truth
                } else {
                    (truth + 1) % self.vocab.max(2)
                }
            })
            .collect()
    }
}

/// What speculation did over one answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpeculativeStats {
    /// Verify forwards run.
    pub rounds: usize,
    /// Drafts proposed.
    pub drafted: usize,
    /// Drafts the target agreed with.
    pub accepted: usize,
    /// Drafts accepted in each round, in order.
    pub accepted_per_round: Vec<usize>,
    /// Drafts proposed in each round, in order.
    pub drafts: Vec<Vec<u32>>,
    /// Why drafting stopped before the answer ended, in words (`None`: it ran throughout).
    pub stopped: Option<String>,
}

impl SpeculativeStats {
    /// Tokens emitted per round on average: the accepted drafts plus the target's own token.
    pub fn tokens_per_round(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            (self.accepted + self.rounds) as f64 / self.rounds as f64
        }
    }
}

/// Which positions of the target's sliding donor layer the drafter sees in a round. The
/// reference (mlx-vlm 0.7.10) reads the K/V its caches return, masked bidirectionally by the
/// window; what that leaves, in positions, is (`kv`: positions cached, `w`: the window):
/// - the first round of a text prompt longer than the window: `kv − w .. kv − 1` (its rotating
///   cache holds the last prompt token at slot 0, which the mask drops);
/// - the first round of an image prompt (prefilled in one piece): the last `w`;
/// - later rounds: the last `w` while its buffered cache still starts at position 0, the last
///   `w − 1` once it has dropped anything;
/// - everything when `kv ≤ w`.
///
/// The full donor layer is seen whole.
pub fn sliding_view(
    kv: usize,
    window: usize,
    first_round: bool,
    media: bool,
    dropped: bool,
) -> (usize, usize) {
    if kv <= window {
        return (0, kv);
    }
    match (first_round, media, dropped) {
        (true, false, _) => (kv - window, kv - 1),
        (true, true, _) | (false, _, false) => (kv - window, kv),
        (false, _, true) => (kv - (window - 1), kv),
    }
}

/// Whether the reference's buffered sliding cache drops positions when a verify of `rows` rows
/// is appended at `kv` cached positions, still starting at position 0: it keeps
/// `window + max(buffer, rows)` positions (buffer: 8 × the block size, within 32..=128) before
/// compacting to the last `window − 1`.
pub fn reference_drops(kv: usize, rows: usize, window: usize, block_size: usize) -> bool {
    let buffer = (8 * block_size.max(gemma::drafter::DEFAULT_BLOCK_SIZE)).clamp(32, 128);
    kv + rows > window + buffer.max(rows)
}

/// The donor K/V of a round: the sliding layer's `view` positions and every full position.
pub fn donor_kv(
    caches: &[KvCache],
    drafter: &Drafter,
    view: (usize, usize),
    kv: usize,
) -> Result<DonorKv> {
    let donors = drafter.donors();
    let cache = |slot: usize| {
        caches.get(slot).ok_or_else(|| {
            crate::generate::GenerateError::Model(gemma::Error::Input(format!(
                "no cache in slot {slot}"
            )))
        })
    };
    Ok(DonorKv {
        sliding: cache(donors.sliding)?.positions(view.0, view.1)?,
        full: cache(donors.full)?.positions(0, kv)?,
    })
}

/// The speculating half of a stream's state.
pub(crate) struct Speculation<'a> {
    pub proposer: Proposer<'a>,
    pub options: SpeculativeOptions,
    /// The target's final-normed hidden state at the last cached position `[1, 1, hidden]`.
    pub feature: mlx_rs::Array,
    /// The last id handed out, not yet in the caches (the next verify's first row).
    pub bonus: Option<u32>,
    pub first_round: bool,
    pub media: bool,
    pub dropped: bool,
    pub stats: SpeculativeStats,
}

impl Speculation<'_> {
    /// Why drafting should stop now, if it should.
    pub fn should_stop(&self) -> Option<String> {
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

/// The model a proposer drafts for (to check a drafter against).
pub fn proposer_fits(proposer: &Proposer<'_>, model: &Model) -> bool {
    match proposer {
        Proposer::Mtp(d) | Proposer::Forced(d, _) => {
            gemma::Donors::of(model).is_ok_and(|donors| donors == d.donors())
        }
        Proposer::Script(s) => s.vocab as usize == model.config().text.vocab_size,
    }
}
