//! The caches of several sequences decoding together, held in one buffer per layer: a kind of
//! cache ([`BatchKvCache`], as mlx-lm's `BatchKVCache`) that whoever steps the rows owns.
//!
//! Stepping n sequences over their own caches costs n cache updates and n attentions per layer:
//! on a GPU, where a decode step is bound by dispatch and weight reads, those per-row kernels
//! are what keeps 4 answers at once from costing little more than one. Here each cache-owning
//! layer keeps every row's keys and values in one array `[rows, kv_heads, capacity, d]`, index
//! `j` holding absolute position `base + j` of each row (a row shorter than the others has
//! unused space after its own positions). A step writes every row's new K/V with one `select`
//! and attends all rows at once, each row masked to exactly the positions it would see alone
//! (a sliding layer: its last `window` positions).
//!
//! The sequences keep owning their caches: after each step every row's [`KvCache`] is set to a
//! view of its part of the buffers, stamped with the step, so that the next step finds them
//! unchanged and reuses the buffers, while anything else (a row stepping alone, a rewind, the
//! next turn of its chat) reads and changes its cache as usual. A changed cache loses its stamp
//! and the buffers are gathered again from the rows' caches.

use std::sync::atomic::{AtomicU64, Ordering};

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{arange, concatenate, zeros_dtype};
use mlx_rs::Array;

use crate::cache::{KvCache, REWIND_SLACK};
use crate::config::AttentionKind;
use crate::error::{Error, Result};

/// The buffers of decode rows stepping together, between steps: owned by whoever steps the rows
/// (the engine's batch) and handed to [`crate::Model::forward_rows`] at each step, which
/// gathers them anew from the rows' caches whenever those are not exactly the rows it last
/// stepped, unchanged.
#[derive(Default)]
pub struct BatchKvCache {
    kv: Option<RowsKv>,
}

impl BatchKvCache {
    /// No buffers yet: the first step gathers them.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets go of the buffers; the rows' caches keep what they hold.
    pub fn clear(&mut self) {
        self.kv = None;
    }

    /// The buffers of `caches`' rows, gathered anew unless these are exactly the rows last
    /// stepped, unchanged; `None` when the rows cannot be batched this way (see
    /// [`RowsKv::gather`]).
    pub(crate) fn for_rows(&mut self, caches: &[&mut [KvCache]]) -> Result<Option<&mut RowsKv>> {
        if !self.kv.as_ref().is_some_and(|kv| kv.holds(caches)) {
            self.kv = None; // (the old buffers go before the new ones are made)
            self.kv = RowsKv::gather(caches)?;
        }
        Ok(self.kv.as_mut())
    }
}

/// Buffers grow (and a sliding buffer's start moves) in steps of this many positions.
const CHUNK: usize = 256;

/// The source of stamps: each gathered or stepped state of the rows' buffers gets a new one.
static STAMPS: AtomicU64 = AtomicU64::new(1);

/// Where the buffers of one kind of layer start and how far they reach (every layer of a kind
/// has the same: they are written by the same steps).
#[derive(Clone, Copy)]
struct Span {
    /// Absolute position at index 0.
    base: usize,
    capacity: usize,
}

/// One cache-owning layer's keys and values of every row.
pub(crate) struct LayerRows {
    keys: Array,
    values: Array,
    kind: AttentionKind,
}

/// Every cache-owning layer's buffers for a set of rows.
pub(crate) struct RowsKv {
    stamp: u64,
    layers: Vec<LayerRows>,
    full: Span,
    sliding: Span,
    /// The sliding layers' window (`None`: the model has none).
    window: Option<usize>,
    /// Per row: positions processed (the position of its next token).
    offsets: Vec<usize>,
    /// Per row: positions its sliding caches hold (all of a row's sliding caches hold the same).
    held: Vec<usize>,
}

/// What one kind of layer needs for one step: where each row's new K/V goes, the range of
/// the buffer attended, and each row's mask over that range.
pub(crate) struct KindStep {
    /// `[rows, 1, capacity, 1]`: true at each row's new position.
    write: Array,
    /// Buffer indices attended.
    range: (i32, i32),
    /// `[rows, 1, 1, attended]`: the keys each row sees.
    pub mask: Array,
}

/// One step's geometry for both kinds of layers.
pub(crate) struct RowsStep {
    full: KindStep,
    sliding: KindStep,
}

impl RowsStep {
    pub fn of(&self, kind: AttentionKind) -> &KindStep {
        match kind {
            AttentionKind::Full => &self.full,
            AttentionKind::Sliding => &self.sliding,
        }
    }
}

impl LayerRows {
    /// Writes each row's new keys and values (`[rows, kv_heads, 1, d]`) at its position and
    /// returns the range of the buffers the step attends.
    pub fn write_and_fetch(
        &mut self,
        keys: &Array,
        values: &Array,
        step: &RowsStep,
    ) -> Result<(Array, Array)> {
        let step = step.of(self.kind);
        self.keys = mlx_rs::ops::select(&step.write, keys, &self.keys)?;
        self.values = mlx_rs::ops::select(&step.write, values, &self.values)?;
        let (lo, hi) = step.range;
        let range = |a: &Array| a.index((.., .., lo..hi, ..));
        Ok((range(&self.keys), range(&self.values)))
    }
}

/// Each row's position (the position of its next token) as `[rows]` int32.
pub(crate) fn row_positions(caches: &[&mut [KvCache]]) -> Array {
    let positions: Vec<i32> = caches
        .iter()
        .map(|c| c.first().map_or(0, |c| c.offset() as i32))
        .collect();
    Array::from_slice(&positions, &[positions.len() as i32])
}

fn round_up(n: usize) -> usize {
    n.div_ceil(CHUNK).max(1) * CHUNK
}

impl RowsKv {
    /// True when `caches` are exactly the rows these buffers were last stepped with, unchanged.
    pub fn holds(&self, caches: &[&mut [KvCache]]) -> bool {
        caches.len() == self.offsets.len()
            && caches.iter().enumerate().all(|(row, c)| {
                c.len() == self.layers.len()
                    && c.iter()
                        .all(|cache| cache.lent_to() == Some((self.stamp, row)))
            })
    }

    /// Gathers the rows' caches into buffers; `None` when they cannot be batched this way
    /// (caches stored quantized, an empty cache, rows of differing layouts).
    pub fn gather(caches: &[&mut [KvCache]]) -> Result<Option<Self>> {
        let Some(first) = caches.first() else {
            return Ok(None);
        };
        let slots = first.len();
        let mut offsets = Vec::with_capacity(caches.len());
        let mut held = Vec::with_capacity(caches.len());
        let mut window = None;
        for row in caches {
            if row.len() != slots || row.iter().any(|c| c.is_quantized() || c.held() == 0) {
                return Ok(None);
            }
            let offset = row[0].offset();
            let mut sliding_held = None;
            for cache in row.iter() {
                if cache.offset() != offset {
                    return Ok(None);
                }
                if let KvCache::Sliding { window: w, .. } = cache {
                    if window.is_some_and(|known| known != *w)
                        || sliding_held.is_some_and(|h| h != cache.held())
                    {
                        return Ok(None);
                    }
                    window = Some(*w);
                    sliding_held = Some(cache.held());
                }
            }
            offsets.push(offset);
            held.push(sliding_held.unwrap_or(0));
        }
        let last = offsets.iter().copied().max().unwrap_or(0);
        let full = Span {
            base: 0,
            capacity: round_up(last + 1),
        };
        let base = offsets
            .iter()
            .zip(&held)
            .map(|(o, h)| o - h)
            .min()
            .unwrap_or(0);
        let sliding = Span {
            base,
            capacity: round_up(last + 1 - base),
        };
        let mut layers = Vec::with_capacity(slots);
        for slot in 0..slots {
            let kind = match first[slot] {
                KvCache::Full(_) => AttentionKind::Full,
                KvCache::Sliding { .. } => AttentionKind::Sliding,
            };
            let span = match kind {
                AttentionKind::Full => full,
                AttentionKind::Sliding => sliding,
            };
            let (mut keys, mut values) = (Vec::new(), Vec::new());
            for row in caches {
                let cache = &row[slot];
                let (k, v) = cache.positions(cache.offset() - cache.held(), cache.offset())?;
                let before = cache.offset() - cache.held() - span.base;
                let after = span.capacity - (cache.offset() - span.base);
                keys.push(pad(&k, before, after)?);
                values.push(pad(&v, before, after)?);
            }
            layers.push(LayerRows {
                keys: concatenate(&keys, 0)?,
                values: concatenate(&values, 0)?,
                kind,
            });
        }
        Ok(Some(Self {
            stamp: STAMPS.fetch_add(1, Ordering::Relaxed),
            layers,
            full,
            sliding,
            window,
            offsets,
            held,
        }))
    }

    /// Positions a row's sliding caches hold after the next step: what a sliding cache
    /// stepped alone keeps (`window − 1` plus the rewind slack) and the new one.
    fn held_after(&self, row: usize) -> usize {
        let keep = self.window.map_or(usize::MAX, |w| w - 1 + REWIND_SLACK);
        self.held[row].min(keep) + 1
    }

    /// Makes room for one more position of every row: a sliding buffer drops what no row's
    /// cache holds any longer and a buffer that is full grows, a chunk at a time (so that the
    /// buffers' shapes change only every [`CHUNK`] steps).
    fn make_room(&mut self) -> Result<()> {
        let n = self.offsets.len();
        let last = self.offsets.iter().copied().max().unwrap_or(0);
        let first_held = (0..n)
            .map(|r| self.offsets[r] + 1 - self.held_after(r))
            .min()
            .unwrap_or(0);
        let drop = (first_held - self.sliding.base) / CHUNK * CHUNK;
        if drop > 0 {
            for layer in self.layers.iter_mut() {
                if layer.kind == AttentionKind::Sliding {
                    let from = drop as i32;
                    layer.keys = layer.keys.index((.., .., from.., ..));
                    layer.values = layer.values.index((.., .., from.., ..));
                }
            }
            self.sliding.base += drop;
            self.sliding.capacity -= drop;
        }
        for (kind, span) in [
            (AttentionKind::Full, &mut self.full),
            (AttentionKind::Sliding, &mut self.sliding),
        ] {
            let need = last + 1 - span.base;
            if need > span.capacity {
                let grown = round_up(need);
                for layer in self.layers.iter_mut().filter(|l| l.kind == kind) {
                    layer.keys = pad(&layer.keys, 0, grown - span.capacity)?;
                    layer.values = pad(&layer.values, 0, grown - span.capacity)?;
                }
                span.capacity = grown;
            }
        }
        Ok(())
    }

    /// Makes room for one more position of every row and returns the step's geometry;
    /// `positions` is each row's new position as `[rows]` int32. Each kind of layer attends
    /// only the range of its buffers some row sees.
    pub fn begin(&mut self, positions: &Array) -> Result<RowsStep> {
        self.make_room()?;
        let last = self.offsets.iter().copied().max().unwrap_or(0);
        let first_seen = self
            .offsets
            .iter()
            .map(|&o| (o + 1).saturating_sub(self.window.unwrap_or(usize::MAX)))
            .min()
            .unwrap_or(0)
            .max(self.sliding.base);
        Ok(RowsStep {
            full: kind_step(self.full, positions, 0, last + 1, None)?,
            sliding: kind_step(self.sliding, positions, first_seen, last + 1, self.window)?,
        })
    }

    /// Every cache-owning layer's buffers, in slot order, for a step.
    pub fn layers_mut(&mut self) -> &mut [LayerRows] {
        &mut self.layers
    }

    /// After a step: sets every row's caches to its part of the buffers, stamped so that the
    /// next step knows them.
    pub fn finish(&mut self, caches: &mut [&mut [KvCache]]) -> Result<()> {
        let stamp = STAMPS.fetch_add(1, Ordering::Relaxed);
        for (row, row_caches) in caches.iter_mut().enumerate() {
            let end = self.offsets[row] + 1;
            let held = self.held_after(row);
            for (layer, cache) in self.layers.iter().zip(row_caches.iter_mut()) {
                let (start, base) = match layer.kind {
                    AttentionKind::Full => (0, self.full.base),
                    AttentionKind::Sliding => (end - held, self.sliding.base),
                };
                let r = row as i32;
                let range = (start - base) as i32..(end - base) as i32;
                let view = |a: &Array| a.index((r..r + 1, .., range.clone(), ..));
                cache.lend(view(&layer.keys), view(&layer.values), end, (stamp, row))?;
            }
            self.offsets[row] = end;
            self.held[row] = held;
        }
        self.stamp = stamp;
        Ok(())
    }
}

/// `a` with `before` and `after` zero positions around its own on axis 2.
fn pad(a: &Array, before: usize, after: usize) -> Result<Array> {
    if before == 0 && after == 0 {
        return Ok(a.clone());
    }
    let shape = a.shape();
    let zeros = |len: usize| zeros_dtype(&[shape[0], shape[1], len as i32, shape[3]], a.dtype());
    let mut parts = Vec::with_capacity(3);
    if before > 0 {
        parts.push(zeros(before)?);
    }
    parts.push(a.clone());
    if after > 0 {
        parts.push(zeros(after)?);
    }
    Ok(concatenate(&parts, 2)?)
}

/// The geometry of one kind of layer for a step: rows write at `positions`; the attended range
/// covers absolute positions `first..end`; each row sees its own positions up to its new one
/// (and, in a sliding layer, only its last `window`).
fn kind_step(
    span: Span,
    positions: &Array,
    first: usize,
    end: usize,
    window: Option<usize>,
) -> Result<KindStep> {
    if first < span.base || end > span.base + span.capacity {
        return Err(Error::Input(format!(
            "positions {first}..{end} are outside the rows' buffers ({}..{})",
            span.base,
            span.base + span.capacity
        )));
    }
    let index = arange::<i32, i32>(span.base as i32, (span.base + span.capacity) as i32, None)?;
    let range = ((first - span.base) as i32, (end - span.base) as i32);
    geometry(&index, positions, range, window)
}

/// Where each row writes (`index`: the absolute position of each buffer index, `[capacity]`)
/// and, over the buffer indices `range`, the keys each row sees: its own
/// positions up to its new one (in a sliding layer, only its last `window`).
fn geometry(
    index: &Array,
    positions: &Array,
    range: (i32, i32),
    window: Option<usize>,
) -> Result<KindStep> {
    let rows = positions.reshape(&[-1, 1, 1, 1])?;
    let write = index.reshape(&[1, 1, -1, 1])?.eq(&rows)?;
    let seen = index.index(range.0..range.1).reshape(&[1, 1, 1, -1])?;
    let mut mask = seen.le(&rows)?;
    if let Some(w) = window {
        mask = mask.logical_and(&seen.add(Array::from_int(w as i32))?.gt(&rows)?)?;
    }
    Ok(KindStep { write, range, mask })
}
