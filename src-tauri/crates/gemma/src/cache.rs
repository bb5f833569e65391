//! Key/value caches of the cache-owning layers, behind one small interface.
//!
//! Buffers are kept in temporal order and written in place: a step's keys and values go into room
//! the buffers already have, so a decode step copies one position, not the history. A sliding
//! cache keeps the last `window − 1` positions (plus [`REWIND_SLACK`] more, so a follow-up turn
//! can rewind a few tokens) and the new ones; when its buffers are full, what it keeps moves to
//! the front of new ones with room for [`SLIDING_ROOM`] more steps. The window mask gives every
//! query exactly its own `window` positions. Shared layers attend the same buffer in the same
//! forward call, as in mlx-vlm.
//!
//! Optionally (OptiQ's `kv_config.json`), a cache stores K and V affine-quantized along the head
//! dimension and hands out their dequantized form: less memory, the same attention code.

use mlx_rs::ops::indexing::{IndexOp, TryIndexUpdateOp, UpdateMode};
use mlx_rs::ops::{concatenate, dequantize, quantize, zeros_dtype};
use mlx_rs::Array;

use crate::config::QuantSpec;
use crate::error::{Error, Result};

/// Positions a full cache grows by: its buffers are allocated that many positions at a time and
/// each step's K/V written into them in place, so a decode step copies one position, not the
/// whole history, whose copy would grow with the chat (bench/results.md, "a full cache's write
/// per decode step").
pub const FULL_STEP: usize = 256;

/// Extra positions a sliding cache keeps beyond its window so that the next turn of a chat can
/// drop the last few tokens (a re-tokenized answer rarely matches the sampled ids to the end)
/// without re-prefilling the whole conversation.
pub const REWIND_SLACK: usize = 64;

/// Room a sliding cache's buffers have beyond `window + REWIND_SLACK` positions: decode steps
/// write into it in place, and once it is used up the positions kept move to the front of new
/// buffers (one copy of the window every this many steps, where appending copied the window
/// every step: ~23 MB per token on E4B). The buffers are then `window + REWIND_SLACK +
/// SLIDING_ROOM` positions, unless a prompt chunk needs more.
pub const SLIDING_ROOM: usize = 64;

/// Positions a full cache's buffers have room for once they hold `len`: the next multiple of
/// [`FULL_STEP`].
pub fn full_capacity(len: usize) -> usize {
    len.div_ceil(FULL_STEP) * FULL_STEP
}

/// Positions a sliding cache's buffers have room for while decoding: its window, the rewind
/// slack and [`SLIDING_ROOM`].
pub fn sliding_capacity(window: usize) -> usize {
    window + REWIND_SLACK + SLIDING_ROOM
}

/// One owning layer's cache. A clone shares the (immutable) arrays: it is a snapshot the
/// original's later appends do not change.
#[derive(Clone)]
pub enum KvCache {
    /// Every position since the start (full-attention layers).
    Full(Buffer),
    /// The last `window − 1` positions (plus slack) and the current call's (sliding layers).
    Sliding { buffer: Buffer, window: usize },
}

/// Keys and values `[1, kv_heads, capacity, head_dim]` (stored plain, or quantized as packed
/// weights, scales and biases of each), the positions held (`held` of the capacity, from
/// `start`) and the number of positions processed.
#[derive(Clone, Default)]
pub struct Buffer {
    /// Every stored array has the positions on axis 2: `[k, v]` or `[kq, ks, kb, vq, vs, vb]`.
    parts: Vec<Array>,
    /// Where on axis 2 the held positions start (0 for a full cache; a sliding cache lets go of
    /// its oldest positions by moving it).
    start: usize,
    /// Positions held: `start..start + held` of axis 2 (the buffers have room beyond).
    held: usize,
    quant: Option<QuantSpec>,
    offset: usize,
    /// Set while the parts are a view of the rows' buffers of a batched step (the step's stamp
    /// and the row), cleared by any change (see `batch.rs`; why it stays: docs/ARCHITECTURE.md
    /// §7).
    lent: Option<(u64, usize)>,
}

impl Buffer {
    fn new(quant: Option<QuantSpec>) -> Self {
        Self {
            parts: Vec::new(),
            start: 0,
            held: 0,
            quant,
            offset: 0,
            lent: None,
        }
    }

    fn capacity(&self) -> usize {
        self.parts
            .first()
            .map(|a| a.shape()[2] as usize)
            .unwrap_or(0)
    }

    fn encode(&self, keys: Array, values: Array) -> Result<Vec<Array>> {
        Ok(match self.quant {
            None => vec![keys, values],
            Some(q) => {
                let (kq, ks, kb) = quantize(&keys, q.group_size, q.bits)?;
                let (vq, vs, vb) = quantize(&values, q.group_size, q.bits)?;
                vec![kq, ks, kb, vq, vs, vb]
            }
        })
    }

    /// The stored keys and values of the last `last` positions (all when `None`), dequantized
    /// when quantized.
    fn fetch(&self, last: Option<usize>) -> Result<(Array, Array)> {
        let end = self.start + self.held;
        let start = end - last.map_or(self.held, |n| n.min(self.held));
        let whole = start == 0 && end == self.capacity();
        let tail = |a: &Array| {
            if whole {
                a.clone()
            } else {
                a.index((.., .., start as i32..end as i32, ..))
            }
        };
        match (self.quant, self.parts.as_slice()) {
            (None, [k, v]) => Ok((tail(k), tail(v))),
            (Some(q), [kq, ks, kb, vq, vs, vb]) => Ok((
                dequantize(tail(kq), tail(ks), &tail(kb), q.group_size, q.bits)?,
                dequantize(tail(vq), tail(vs), &tail(vb), q.group_size, q.bits)?,
            )),
            _ => Err(Error::Input("the cache is empty".into())),
        }
    }

    /// Appends after keeping at most `keep_last` old positions: in place where the buffers
    /// have room (MLX reuses a buffer nothing else holds; a snapshot's clone keeps its own),
    /// else into new buffers with room (see [`Self::room_after`]).
    fn append(&mut self, keys: Array, values: Array, keep_last: Option<usize>) -> Result<()> {
        let added = keys.shape()[2] as usize;
        let new = self.encode(keys, values)?;
        let kept = keep_last.map_or(self.held, |n| self.held.min(n));
        if self.parts.is_empty() {
            // A prompt is stored as it is.
            self.parts = new;
            self.start = 0;
        } else {
            let end = self.start + self.held;
            let old = std::mem::take(&mut self.parts);
            if end + added <= old[0].shape()[2] as usize {
                self.parts = old
                    .iter()
                    .zip(&new)
                    .map(|(o, n)| slice_update_positions(o, n, end))
                    .collect::<Result<_>>()?;
                self.start = end - kept;
            } else {
                let room = Self::room_after(kept + added, keep_last);
                self.parts = old
                    .into_iter()
                    .zip(new)
                    .map(|(o, n)| {
                        let kept = o.index((.., .., (end - kept) as i32..end as i32, ..));
                        let mut joined = vec![kept, n];
                        if room > 0 {
                            let mut shape = o.shape().to_vec();
                            shape[2] = room as i32;
                            joined.push(zeros_dtype(&shape, o.dtype())?);
                        }
                        Ok(concatenate(&joined, 2)?)
                    })
                    .collect::<Result<_>>()?;
                self.start = 0;
            }
        }
        self.held = kept + added;
        self.offset += added;
        self.lent = None;
        Ok(())
    }

    /// Room new buffers get after `len` positions: a full cache's grow to [`full_capacity`]; a
    /// sliding cache's (`keep_last` = `window − 1 + REWIND_SLACK`) to [`sliding_capacity`], or
    /// by `SLIDING_ROOM` when a prompt chunk made them longer.
    fn room_after(len: usize, keep_last: Option<usize>) -> usize {
        match keep_last {
            None => full_capacity(len) - len,
            Some(keep) => {
                let window = keep + 1 - REWIND_SLACK;
                sliding_capacity(window)
                    .saturating_sub(len)
                    .max(SLIDING_ROOM)
            }
        }
    }
}

/// `buffer` with `update` written at positions (axis 2) `at..at + len`.
fn slice_update_positions(buffer: &Array, update: &Array, at: usize) -> Result<Array> {
    let end = at as i32 + update.shape()[2];
    buffer
        .try_index_update((.., .., at as i32..end, ..), update, UpdateMode::Replace)
        .map_err(|e| Error::Input(format!("cannot write the cache: {e}")))
}

impl KvCache {
    /// A cache for a full-attention layer (`quant`: store K/V quantized).
    pub fn full(quant: Option<QuantSpec>) -> Self {
        KvCache::Full(Buffer::new(quant))
    }

    /// A cache for a sliding-window layer.
    pub fn sliding(window: usize, quant: Option<QuantSpec>) -> Self {
        KvCache::Sliding {
            buffer: Buffer::new(quant),
            window,
        }
    }

    /// Positions processed so far (the RoPE offset of the next call).
    pub fn offset(&self) -> usize {
        self.buffer().offset
    }

    /// Number of key positions the next call with `new` positions will attend: for a sliding
    /// cache, the `window − 1` positions before the first new one (what its first query sees)
    /// and the new ones — so a single new position sees all it is given, with no mask.
    pub fn keys_after(&self, new: usize) -> usize {
        match self {
            KvCache::Full(b) => b.held + new,
            KvCache::Sliding { buffer, window } => buffer.held.min(window - 1) + new,
        }
    }

    fn buffer(&self) -> &Buffer {
        match self {
            KvCache::Full(b) | KvCache::Sliding { buffer: b, .. } => b,
        }
    }

    /// Adds this call's keys and values and returns everything the call attends.
    /// (The positions a sliding cache keeps as rewind slack are not attended.)
    pub fn update_and_fetch(&mut self, keys: Array, values: Array) -> Result<(Array, Array)> {
        let new = keys.shape()[2] as usize;
        match self {
            KvCache::Full(b) => {
                b.append(keys, values, None)?;
                b.fetch(None)
            }
            KvCache::Sliding { buffer, window } => {
                buffer.append(keys, values, Some(*window - 1 + REWIND_SLACK))?;
                buffer.fetch(Some(*window - 1 + new))
            }
        }
    }

    /// True when the last `n` positions can be dropped so that the cache is exactly what it
    /// would be after `offset − n` positions (a sliding cache cannot bring back what it let go).
    pub fn can_trim(&self, n: usize) -> bool {
        let b = self.buffer();
        if n > b.offset {
            return false;
        }
        match self {
            KvCache::Full(_) => true,
            KvCache::Sliding { window, .. } => b.held >= n + (b.offset - n).min(window - 1),
        }
    }

    /// Keys and values of the absolute positions `start..end` (`end` ≤ [`Self::offset`]),
    /// dequantized when stored quantized: what a reader outside the forward pass (the
    /// speculative drafter) attends. Errors when the cache no longer holds them all.
    pub fn positions(&self, start: usize, end: usize) -> Result<(Array, Array)> {
        let b = self.buffer();
        let held = b.offset - b.held;
        if start > end || end > b.offset || start < held {
            return Err(Error::Input(format!(
                "the cache holds positions {held}..{}, not {start}..{end}",
                b.offset
            )));
        }
        let (k, v) = b.fetch(Some(b.offset - start))?;
        let n = (end - start) as i32;
        Ok((k.index((.., .., ..n, ..)), v.index((.., .., ..n, ..))))
    }

    /// Drops the last `n` positions.
    pub fn trim(&mut self, n: usize) -> Result<()> {
        if !self.can_trim(n) {
            return Err(Error::Input(format!(
                "cannot rewind the cache by {n} positions"
            )));
        }
        let b = self.buffer_mut();
        if n == 0 {
            return Ok(());
        }
        // The next write goes over the dropped positions.
        let keep = b.held - n;
        if keep == 0 {
            b.parts = Vec::new();
            b.start = 0;
        }
        b.held = keep;
        b.offset -= n;
        b.lent = None;
        Ok(())
    }

    /// Whether K/V are stored quantized.
    pub fn is_quantized(&self) -> bool {
        self.buffer().quant.is_some()
    }

    /// Positions the cache holds (the last `held` of [`Self::offset`]).
    pub fn held(&self) -> usize {
        self.buffer().held
    }

    /// The batched step and row whose buffers this cache is a view of, if it is one.
    pub(crate) fn lent_to(&self) -> Option<(u64, usize)> {
        self.buffer().lent
    }

    /// Whether this cache is a view of the buffers of rows stepped together (see
    /// [`crate::Model::forward_rows`]) rather than arrays of its own.
    pub fn is_batch_view(&self) -> bool {
        self.lent_to().is_some()
    }

    /// Makes the cache a view of a batched step's buffers: `keys`/`values` are the positions it
    /// holds, ending at `offset`.
    pub(crate) fn lend(
        &mut self,
        keys: Array,
        values: Array,
        offset: usize,
        stamp: (u64, usize),
    ) -> Result<()> {
        let b = self.buffer_mut();
        if b.quant.is_some() {
            return Err(Error::Input("a quantized cache cannot be batched".into()));
        }
        b.start = 0;
        b.held = keys.shape()[2] as usize;
        b.parts = vec![keys, values];
        b.offset = offset;
        b.lent = Some(stamp);
        Ok(())
    }

    /// Gives a cache that is a view of a batched step's buffers its own copy, so that keeping
    /// it (a conversation's session) does not keep every row's buffers alive.
    pub fn detach(&mut self) -> Result<()> {
        let b = self.buffer_mut();
        if b.lent.take().is_some() {
            let (start, end) = (b.start as i32, (b.start + b.held) as i32);
            b.parts = b
                .parts
                .iter()
                .map(|a| a.index((.., .., start..end, ..)).contiguous())
                .collect::<std::result::Result<_, _>>()?;
            b.start = 0;
            mlx_rs::transforms::eval(b.parts.iter())?;
        }
        Ok(())
    }

    fn buffer_mut(&mut self) -> &mut Buffer {
        match self {
            KvCache::Full(b) | KvCache::Sliding { buffer: b, .. } => b,
        }
    }

    /// The arrays this cache holds (to evaluate them together with a step's output).
    pub fn arrays(&self) -> Vec<&Array> {
        self.buffer().parts.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::random;

    fn normal(shape: &[i32], seed: u64) -> Array {
        random::normal::<f32>(shape, None, None, &random::key(seed).unwrap()).unwrap()
    }

    fn host(a: &Array) -> Vec<f32> {
        // (A full cache hands out a view of its first positions: not contiguous.)
        a.contiguous().unwrap().as_slice::<f32>().to_vec()
    }

    #[test]
    fn a_quantized_cache_returns_exactly_the_dequantized_keys_and_values() {
        let q = QuantSpec {
            bits: 4,
            group_size: 64,
        };
        let mut cache = KvCache::full(Some(q));
        let (k1, v1) = (normal(&[1, 2, 5, 64], 1), normal(&[1, 2, 5, 64], 2));
        let (k2, v2) = (normal(&[1, 2, 1, 64], 3), normal(&[1, 2, 1, 64], 4));
        cache.update_and_fetch(k1.clone(), v1.clone()).unwrap();
        let (k, v) = cache.update_and_fetch(k2.clone(), v2.clone()).unwrap();
        let expect = |a: &Array| {
            let (w, s, b) = quantize(a, 64, 4).unwrap();
            dequantize(&w, &s, &b, 64, 4).unwrap()
        };
        let k_expect = concatenate(&[expect(&k1), expect(&k2)], 2).unwrap();
        let v_expect = concatenate(&[expect(&v1), expect(&v2)], 2).unwrap();
        assert_eq!(host(&k), host(&k_expect));
        assert_eq!(host(&v), host(&v_expect));
        assert_eq!(cache.offset(), 6);
        // Quantization is lossy but close.
        let raw = host(&concatenate(&[k1, k2], 2).unwrap());
        let err = raw
            .iter()
            .zip(host(&k))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(err > 0.0 && err < 0.5, "{err}");
        // It stores packed words, not floats.
        assert_eq!(cache.arrays().len(), 6);
    }

    #[test]
    fn a_full_cache_writes_in_place_grows_in_steps_and_rewinds_exactly() {
        let mut cache = KvCache::full(None);
        let capacity = |c: &KvCache| c.buffer().capacity();
        // What the cache must hand out: every position written and not dropped, in order.
        let mut expect: Vec<Array> = Vec::new();
        let check = |c: &KvCache, expect: &[Array]| {
            let (k, v) = c.buffer().fetch(None).unwrap();
            let want = host(&concatenate(expect, 2).unwrap());
            assert_eq!(host(&k), want);
            assert_eq!(host(&v.multiply(Array::from_f32(-1.0)).unwrap()), want);
        };
        let write = |c: &mut KvCache, expect: &mut Vec<Array>, len: i32, seed: u64| {
            let k = normal(&[1, 2, len, 4], seed);
            let v = k.multiply(Array::from_f32(-1.0)).unwrap();
            let (fk, _) = c.update_and_fetch(k.clone(), v).unwrap();
            expect.push(k);
            assert_eq!(fk.shape()[2] as usize, c.offset());
        };
        write(&mut cache, &mut expect, 10, 0);
        assert_eq!(capacity(&cache), 10, "a prompt is stored as it is");
        write(&mut cache, &mut expect, 1, 1);
        assert_eq!(
            capacity(&cache),
            FULL_STEP,
            "then room for a step of positions"
        );
        let mut snapshot = None;
        for step in 2..300 {
            write(&mut cache, &mut expect, 1, step);
            if step == 100 {
                snapshot = Some((cache.clone(), expect.clone()));
            }
        }
        check(&cache, &expect);
        assert_eq!(cache.offset(), 309);
        assert_eq!(capacity(&cache), 2 * FULL_STEP);
        // A rewind drops positions; the next writes go over them.
        cache.trim(7).unwrap();
        let mut kept: Vec<Array> = Vec::new();
        let flat = concatenate(&expect, 2).unwrap();
        kept.push(flat.index((.., .., ..302, ..)));
        write(&mut cache, &mut kept, 3, 500);
        write(&mut cache, &mut kept, 1, 501);
        check(&cache, &kept);
        assert_eq!(cache.offset(), 306);
        // A snapshot taken earlier still holds what it held.
        let (snap, snap_expect) = snapshot.unwrap();
        check(&snap, &snap_expect);
        assert_eq!(snap.offset(), 110);
    }

    #[test]
    fn a_sliding_cache_writes_in_place_and_hands_out_exactly_its_last_positions() {
        let window = 8;
        let keep = window - 1 + REWIND_SLACK;
        let mut cache = KvCache::sliding(window, None);
        let capacity = |c: &KvCache| c.buffer().capacity();
        // Every position written and not dropped, in order: the cache must hand out its tail.
        let mut written: Vec<Array> = Vec::new();
        let write = |c: &mut KvCache, written: &mut Vec<Array>, len: i32, seed: u64| {
            let k = normal(&[1, 2, len, 4], seed);
            let v = k.multiply(Array::from_f32(-1.0)).unwrap();
            let (fk, fv) = c.update_and_fetch(k.clone(), v).unwrap();
            written.push(k);
            let all = concatenate(written, 2).unwrap();
            let total = all.shape()[2];
            let seen = (window as i32 - 1 + len).min(total);
            let want = host(&all.index((.., .., total - seen.., ..)));
            assert_eq!(host(&fk), want, "keys after {total} positions");
            assert_eq!(host(&fv.multiply(Array::from_f32(-1.0)).unwrap()), want);
        };
        write(&mut cache, &mut written, 20, 0);
        assert_eq!(capacity(&cache), 20, "a prompt is stored as it is");
        write(&mut cache, &mut written, 1, 1);
        let steady = window + REWIND_SLACK + SLIDING_ROOM;
        assert_eq!(capacity(&cache), steady, "then room for steps");
        let mut snapshot = None;
        for step in 2..(3 * steady as u64) {
            write(&mut cache, &mut written, 1, step);
            assert_eq!(
                capacity(&cache),
                steady,
                "step {step}: the buffers keep their size"
            );
            assert_eq!(cache.held(), (20 + step as usize - 1).min(keep) + 1);
            if step == 100 {
                snapshot = Some((cache.clone(), concatenate(&written, 2).unwrap()));
            }
        }
        // A rewind within reach drops the newest positions; the next writes go over them.
        cache.trim(REWIND_SLACK).unwrap();
        assert_eq!(cache.held(), window, "the window is still whole");
        assert!(!cache.can_trim(1 + 1), "not more than the slack");
        let all = concatenate(&written, 2).unwrap();
        let mut kept = vec![all.index((.., .., ..all.shape()[2] - REWIND_SLACK as i32, ..))];
        for step in 0..(2 * SLIDING_ROOM as u64) {
            write(&mut cache, &mut kept, 1, 1000 + step);
        }
        // A prompt chunk longer than the room gets buffers of its own, then decoding goes on.
        write(&mut cache, &mut kept, 100, 2000);
        assert_eq!(capacity(&cache), keep + 100 + SLIDING_ROOM);
        for step in 0..(3 * SLIDING_ROOM as u64) {
            write(&mut cache, &mut kept, 1, 3000 + step);
        }
        assert_eq!(capacity(&cache), steady);
        // A snapshot taken earlier still holds what it held.
        let (snap, snap_all) = snapshot.unwrap();
        let (k, _) = snap.buffer().fetch(None).unwrap();
        let total = snap_all.shape()[2];
        let want = snap_all.index((.., .., total - snap.held() as i32.., ..));
        assert_eq!(host(&k), host(&want));
    }

    #[test]
    fn a_sliding_cache_keeps_its_window_and_rewinds_only_within_reach() {
        let mut cache = KvCache::sliding(4, None);
        for step in 0..(4 + REWIND_SLACK + 10) {
            let k = normal(&[1, 1, 1, 8], step as u64);
            cache.update_and_fetch(k.clone(), k).unwrap();
        }
        // One new position sees exactly its window; the slack is kept, not attended.
        assert_eq!(cache.keys_after(1), 4);
        let (k, _) = cache
            .update_and_fetch(normal(&[1, 1, 1, 8], 99), normal(&[1, 1, 1, 8], 99))
            .unwrap();
        assert_eq!(k.shape()[2], 4);
        assert_eq!(cache.keys_after(3), 4 - 1 + 3);
        assert!(cache.can_trim(REWIND_SLACK));
        assert!(!cache.can_trim(REWIND_SLACK + 2));
        let before = cache.offset();
        cache.trim(5).unwrap();
        assert_eq!(cache.offset(), before - 5);
        assert!(cache.trim(REWIND_SLACK + 10).is_err());
    }
}
