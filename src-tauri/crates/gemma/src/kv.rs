//! The keys and values the attention layers of one forward pass read and write, whatever kind
//! of cache holds them. A [`StepKv`] is made once per forward pass; each layer hands it its new
//! keys and values, and it writes every row's into the cache and hands back what the rows
//! attend, the mask over it and where each row's positions start (RoPE). Three kinds of
//! caches (and the drafter's donors):
//!
//! - one sequence over its own caches (a prompt chunk, a decode step, a speculative verify);
//! - decode rows of several sequences, each over its own caches (one write and one attention
//!   per row and layer: caches stored quantized);
//! - decode rows over a batch's buffers ([`BatchKvCache`](crate::BatchKvCache)): one write of
//!   every row's keys and values and one attention per layer, each row masked to what it would
//!   see alone.
//!
//! A layer that shares another layer's K/V (`KvSource::Shared`) attends what its producer
//! attended in the same pass, as in mlx-vlm.

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::Array;

use crate::batch::{RowsKv, RowsStep};
use crate::cache::KvCache;
use crate::config::AttentionKind;
use crate::error::{Error, Result};
use crate::layers::{KvSource, LayerSpec};

/// Where RoPE starts: one sequence's first new position, or each row's (`[rows]` int32). RoPE
/// of a row at position `p` is the same arithmetic either way.
#[derive(Clone)]
pub(crate) enum Offsets {
    One(usize),
    Rows(Array),
}

/// What hides keys from queries in one kind of layer.
#[derive(Clone)]
pub(crate) enum Mask {
    /// A sequence's boolean `[queries, keys]` mask, or nothing hidden (`None`).
    Causal(Option<Array>),
    /// Decode rows over a batch's buffers: boolean `[rows, 1, 1, keys]`, each row's own
    /// positions.
    Rows(Array),
}

/// The keys and values a layer attended: one pair per group of rows that attend together (one
/// for a sequence or a batch, one per row for rows each over its own caches).
pub(crate) type Attended = Vec<(Array, Array)>;

enum Caches<'a, 'c> {
    /// One sequence's caches, one per cache-owning layer.
    One(&'a mut [KvCache]),
    /// Each row's caches.
    Rows(&'a mut [&'c mut [KvCache]]),
    /// A batch's buffers, with this step's geometry.
    Batch { kv: &'a mut RowsKv, step: RowsStep },
    /// No caches: every layer attends a donor's keys and values (the speculative drafter),
    /// sliding then full.
    Donors([(Array, Array); 2]),
}

/// The caches of one forward pass (see the module's documentation).
pub(crate) struct StepKv<'a, 'c> {
    caches: Caches<'a, 'c>,
    offsets: Offsets,
    /// The full and the sliding layers' masks.
    masks: [Mask; 2],
    /// Leading positions per row that the layers from here on no longer compute (a prompt
    /// whose last positions alone are needed past the layers that write caches).
    skip: usize,
    /// What each layer attended, for the layers sharing its K/V.
    attended: Vec<Option<Attended>>,
}

impl<'a, 'c> StepKv<'a, 'c> {
    fn new(caches: Caches<'a, 'c>, offsets: Offsets, masks: [Mask; 2], layers: usize) -> Self {
        Self {
            caches,
            offsets,
            masks,
            skip: 0,
            attended: vec![None; layers],
        }
    }

    /// One sequence over its own `caches`, its new positions from `offset`, masked by
    /// `full` and `sliding` (`[queries, keys]`, `None`: nothing hidden).
    pub fn one(
        caches: &'a mut [KvCache],
        offset: usize,
        full: Option<Array>,
        sliding: Option<Array>,
        layers: usize,
    ) -> Self {
        let masks = [Mask::Causal(full), Mask::Causal(sliding)];
        Self::new(Caches::One(caches), Offsets::One(offset), masks, layers)
    }

    /// Decode rows, each over its own caches, at `positions` (`[rows]` int32). A lone row
    /// keeps its scalar offset: its graph is the single-sequence one.
    pub fn rows(caches: &'a mut [&'c mut [KvCache]], positions: &Array, layers: usize) -> Self {
        let offsets = match &*caches {
            [one] => Offsets::One(one.first().map_or(0, |c| c.offset())),
            _ => Offsets::Rows(positions.clone()),
        };
        let masks = [Mask::Causal(None), Mask::Causal(None)];
        Self::new(Caches::Rows(caches), offsets, masks, layers)
    }

    /// Decode rows over a batch's buffers `kv`, at `positions`, with the step's geometry.
    pub fn batch(kv: &'a mut RowsKv, step: RowsStep, positions: &Array, layers: usize) -> Self {
        let masks = [
            Mask::Rows(step.of(AttentionKind::Full).mask.clone()),
            Mask::Rows(step.of(AttentionKind::Sliding).mask.clone()),
        ];
        let offsets = Offsets::Rows(positions.clone());
        Self::new(Caches::Batch { kv, step }, offsets, masks, layers)
    }

    /// One query at `position` attending the donors' `sliding` and `full` keys and values,
    /// whatever the layer (the speculative drafter).
    pub fn donors(sliding: (Array, Array), full: (Array, Array), position: usize) -> Self {
        let masks = [Mask::Causal(None), Mask::Causal(None)];
        Self::new(
            Caches::Donors([sliding, full]),
            Offsets::One(position),
            masks,
            0,
        )
    }

    /// From here on, the layers compute only the last positions of each row, `skip` fewer.
    pub fn skip(&mut self, skip: usize) {
        self.skip = skip;
    }

    /// Where RoPE starts for the rows the layers compute now.
    pub fn offsets(&self) -> Offsets {
        match &self.offsets {
            Offsets::One(offset) => Offsets::One(offset + self.skip),
            rows => rows.clone(),
        }
    }

    /// What a layer of `kind` masks, for the rows the layers compute now.
    pub fn mask(&self, kind: AttentionKind) -> Mask {
        let mask = match kind {
            AttentionKind::Full => &self.masks[0],
            AttentionKind::Sliding => &self.masks[1],
        };
        match mask {
            Mask::Causal(Some(m)) if self.skip > 0 => {
                Mask::Causal(Some(m.index((self.skip as i32.., ..))))
            }
            mask => mask.clone(),
        }
    }

    /// The keys and values layer `spec` attends: its new ones (`new`, `[rows, kv_heads, T,
    /// d]`) written into its cache, every row's, and what the cache then holds; or what its
    /// producer attended.
    pub fn update_and_fetch(
        &mut self,
        spec: &LayerSpec,
        new: Option<(Array, Array)>,
    ) -> Result<Attended> {
        let slot = match (&self.caches, spec.kv) {
            (Caches::Donors(donors), _) => {
                let donor = match spec.kind {
                    AttentionKind::Sliding => &donors[0],
                    AttentionKind::Full => &donors[1],
                };
                return Ok(vec![donor.clone()]);
            }
            (_, KvSource::Shared { producer }) => {
                return self
                    .attended
                    .get(producer)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| Error::Input(format!("layer {producer} produced no K/V")));
            }
            (_, KvSource::Own { cache }) => cache,
        };
        let Some((keys, values)) = new else {
            return Err(Error::Input(format!(
                "layer {} has no K/V projections",
                spec.index
            )));
        };
        let few = || Error::Input("too few caches for this model".into());
        let attended = match &mut self.caches {
            Caches::One(caches) => {
                vec![caches
                    .get_mut(slot)
                    .ok_or_else(few)?
                    .update_and_fetch(keys, values)?]
            }
            Caches::Rows(rows) => {
                let n = rows.len();
                let pick = |a: &Array, i: usize| {
                    if n == 1 {
                        a.clone()
                    } else {
                        a.index(i as i32..i as i32 + 1)
                    }
                };
                rows.iter_mut()
                    .enumerate()
                    .map(|(i, caches)| {
                        let cache = caches.get_mut(slot).ok_or_else(few)?;
                        cache.update_and_fetch(pick(&keys, i), pick(&values, i))
                    })
                    .collect::<Result<_>>()?
            }
            Caches::Batch { kv, step } => {
                let layer = kv.layers_mut().get_mut(slot).ok_or_else(few)?;
                vec![layer.write_and_fetch(&keys, &values, step)?]
            }
            Caches::Donors(_) => return Err(Error::Input("donors have no caches".into())),
        };
        if let Some(entry) = self.attended.get_mut(spec.index) {
            *entry = Some(attended.clone());
        }
        Ok(attended)
    }
}
