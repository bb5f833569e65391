//! Prefill: the prompt after the reused prefix, fed in chunks with the media bound to their
//! placeholder runs (only the items not already cached are computed).

use gemma::{KvCache, MediaFeatures};
use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::transforms::eval;
use mlx_rs::Array;

use crate::error::{GenerateError, Result};
use crate::template::MediaKind;

use super::{PrefillProgress, TokenStream};

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

impl TokenStream<'_> {
    /// Feeds `new` prompt tokens in chunks; returns the last position's logits `[1, vocab]`,
    /// or `None` when `cancel` was set between chunks.
    pub(super) fn prefill(
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
pub(super) fn rows_to_prefill(
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
