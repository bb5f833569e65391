//! Batched decoding: the plain decode steps of several streams as one forward of the model
//! ([`gemma::Model::forward_rows`]), each stream's row sampled by its own sampler.

use std::time::Instant;

use gemma::KvCache;
use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::transforms::async_eval;
use mlx_rs::Array;

use crate::error::{GenerateError, Result};

use super::{read_id, StepTimes, StreamEnd, TokenStream};

/// The next id of each stream, as [`TokenStream::next_token`] gives it, with the plain decode
/// steps of every stream that takes one now run as one forward of the model
/// ([`gemma::Model::forward_rows`], over the buffers of `kv`, which the caller keeps from step
/// to step): continuous batching. Each row is sampled by its own stream's
/// sampler (its own seed and random stream), so every answer is the one it would be alone.
/// Streams that speculate, follow a grammar, hand out ids already read or end now step alone.
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
        match step_together(&mut rows, kv) {
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

/// One plain decode step of every stream together (each row's pending id fed forward, the
/// rows' next ids sampled and dispatched, the pending ids read): the batched form of the
/// plain step in [`TokenStream::next_token`].
fn step_together(
    rows: &mut [&mut TokenStream<'_>],
    kv: &mut gemma::BatchKvCache,
) -> Result<Vec<u32>> {
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
        let token = read_id(y)?;
        row.pending = Some(next);
        row.hand_out(token, true);
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
