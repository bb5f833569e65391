//! Key/value caches of the cache-owning layers, behind one small interface.
//!
//! Buffers are kept in temporal order. A sliding cache keeps the last `window − 1` positions
//! (plus [`REWIND_SLACK`] more, so a follow-up turn can rewind a few tokens) and appends the new
//! ones; the window mask gives every query exactly its own `window` positions. Shared layers
//! attend the same buffer in the same forward call, as in mlx-vlm.

use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::Array;

use crate::error::{Error, Result};

/// Extra positions a sliding cache keeps beyond its window so that the next turn of a chat can
/// drop the last few tokens (a re-tokenized answer rarely matches the sampled ids to the end)
/// without re-prefilling the whole conversation.
pub const REWIND_SLACK: usize = 64;

/// One owning layer's cache.
pub enum KvCache {
    /// Every position since the start (full-attention layers).
    Full(Buffer),
    /// The last `window − 1` positions plus the current call's (sliding layers).
    Sliding { buffer: Buffer, window: usize },
}

/// Keys and values `[1, kv_heads, len, head_dim]` and the number of positions processed.
#[derive(Default)]
pub struct Buffer {
    kv: Option<(Array, Array)>,
    offset: usize,
}

impl Buffer {
    fn len(&self) -> usize {
        self.kv
            .as_ref()
            .map(|(k, _)| k.shape()[2] as usize)
            .unwrap_or(0)
    }

    /// Appends after keeping at most `keep_last` old positions; returns the whole buffer.
    fn append(
        &mut self,
        keys: Array,
        values: Array,
        keep_last: Option<usize>,
    ) -> Result<(Array, Array)> {
        let added = keys.shape()[2] as usize;
        let merged = match self.kv.take() {
            None => (keys, values),
            Some((k, v)) => {
                let len = k.shape()[2];
                let start = keep_last.map(|n| len - (n as i32).min(len)).unwrap_or(0);
                let (k, v) = if start > 0 {
                    (
                        k.index((.., .., start.., ..)),
                        v.index((.., .., start.., ..)),
                    )
                } else {
                    (k, v)
                };
                (concatenate(&[k, keys], 2)?, concatenate(&[v, values], 2)?)
            }
        };
        self.offset += added;
        self.kv = Some(merged.clone());
        Ok(merged)
    }
}

impl KvCache {
    /// A cache for a full-attention layer.
    pub fn full() -> Self {
        KvCache::Full(Buffer::default())
    }

    /// A cache for a sliding-window layer.
    pub fn sliding(window: usize) -> Self {
        KvCache::Sliding {
            buffer: Buffer::default(),
            window,
        }
    }

    /// Positions processed so far (the RoPE offset of the next call).
    pub fn offset(&self) -> usize {
        self.buffer().offset
    }

    /// Number of key positions the next call with `new` positions will attend.
    pub fn keys_after(&self, new: usize) -> usize {
        match self {
            KvCache::Full(b) => b.len() + new,
            KvCache::Sliding { buffer, window } => {
                buffer.len().min(window - 1 + REWIND_SLACK) + new
            }
        }
    }

    fn buffer(&self) -> &Buffer {
        match self {
            KvCache::Full(b) | KvCache::Sliding { buffer: b, .. } => b,
        }
    }

    /// Adds this call's keys and values and returns everything the call attends.
    pub fn update_and_fetch(&mut self, keys: Array, values: Array) -> Result<(Array, Array)> {
        match self {
            KvCache::Full(b) => b.append(keys, values, None),
            KvCache::Sliding { buffer, window } => {
                buffer.append(keys, values, Some(*window - 1 + REWIND_SLACK))
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
            KvCache::Sliding { window, .. } => b.len() >= n + (b.offset - n).min(window - 1),
        }
    }

    /// Drops the last `n` positions.
    pub fn trim(&mut self, n: usize) -> Result<()> {
        if !self.can_trim(n) {
            return Err(Error::Input(format!(
                "cannot rewind the cache by {n} positions"
            )));
        }
        let b = match self {
            KvCache::Full(b) | KvCache::Sliding { buffer: b, .. } => b,
        };
        if n == 0 {
            return Ok(());
        }
        let len = b.len() as i32;
        let keep = len - n as i32;
        b.kv = match b.kv.take() {
            Some((k, v)) if keep > 0 => {
                Some((k.index((.., .., ..keep, ..)), v.index((.., .., ..keep, ..))))
            }
            _ => None,
        };
        b.offset -= n;
        Ok(())
    }

    /// The arrays this cache holds (to evaluate them together with a step's output).
    pub fn arrays(&self) -> Vec<&Array> {
        match &self.buffer().kv {
            Some((k, v)) => vec![k, v],
            None => vec![],
        }
    }
}
