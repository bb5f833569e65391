//! Speculative decoding's parts that know nothing of the stream: where drafts come from (the
//! [`Proposer`] trait, the MTP drafter's [`MtpProposer`]), which of the target's K/V the MTP
//! drafter reads in a round, and the statistics (docs/SPECULATIVE.md). The round itself
//! (draft → verify → accept → roll back) is the stream's speculative mode (`stream/speculative.rs`).

use gemma::{DonorKv, Drafter, KvCache, Model};
use mlx_rs::ops::concatenate;
use mlx_rs::{Array, Dtype};
use serde::Serialize;

use crate::error::{GenerateError, Result};

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
/// provisional figure). The engine uses the backend's own, [`crate::policy::Policy::min_drafts_accepted`].
pub const DEFAULT_MIN_ACCEPTED: f32 = 1.0;

/// Where a round's drafts come from: the one seam of speculative decoding. The engine ships
/// [`MtpProposer`] (Gemma 4's MTP assistant); tests and the bench implement their own (scripted
/// drafts, forced acceptance) through this trait, outside the product.
pub trait Proposer {
    /// Whether it drafts for `model` (a stream refuses one that does not, and says why).
    fn fits(&self, model: &Model) -> bool;

    /// `n` drafts to follow `round.bonus`, as ids `[n]` (`uint32`; may be left unevaluated:
    /// the verify evaluates them with its own forward).
    fn draft(&mut self, round: &DraftRound<'_>, n: usize) -> Result<Array>;

    /// Whether the draft at `pos` counts as the target's own id `target`. The model's answer
    /// needs equality, the default; only a timing harness overrides it.
    fn agrees(&self, pos: usize, drafted: u32, target: u32) -> bool {
        let _ = pos;
        drafted == target
    }
}

/// What a proposer may read to draft one round.
pub struct DraftRound<'r> {
    pub model: &'r Model,
    /// The target's caches, holding [`Self::positions`] positions.
    pub caches: &'r [KvCache],
    /// The last id handed out, not in the caches yet: the verify's first row.
    pub bonus: u32,
    /// The target's final-normed hidden state at the last cached position `[1, 1, hidden]`.
    pub feature: &'r Array,
    pub positions: usize,
    /// Which positions of the sliding donor layer the MTP drafter sees (see [`sliding_view`]).
    pub sliding: (usize, usize),
    /// Rounds run before this one.
    pub index: usize,
    /// Ids of the answer handed out so far.
    pub produced: usize,
}

/// Gemma 4's MTP assistant drafter as a proposer: each draft one drafter step from the last,
/// reading the target's donor K/V.
pub struct MtpProposer<'a> {
    pub drafter: &'a Drafter,
}

impl Proposer for MtpProposer<'_> {
    fn fits(&self, model: &Model) -> bool {
        gemma::Donors::of(model).is_ok_and(|donors| donors == self.drafter.donors())
    }

    fn draft(&mut self, round: &DraftRound<'_>, n: usize) -> Result<Array> {
        let drafter = self.drafter;
        let donor = donor_kv(round.caches, drafter, round.sliding, round.positions)?;
        let mut token = Array::from_slice(&[round.bonus], &[1]);
        let mut feature = round.feature.clone();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (next, id) = drafter.step(
                round.model,
                &token,
                &feature,
                &donor,
                round.positions.saturating_sub(1),
            )?;
            feature = next;
            token = id.as_dtype(Dtype::Uint32)?;
            out.push(token.clone());
        }
        Ok(concatenate(&out, 0)?)
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
            GenerateError::Model(gemma::Error::Input(format!("no cache in slot {slot}")))
        })
    };
    Ok(DonorKv {
        sliding: cache(donors.sliding)?.positions(view.0, view.1)?,
        full: cache(donors.full)?.positions(0, kv)?,
    })
}
