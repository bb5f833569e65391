//! The bench's speculative-decoding measurements (`gemma-desk-bench --mtp`): the app's own
//! stream and draft loop, timed against plain decoding, with the acceptance forced where a
//! random-weight drafter would never be right.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context, Result};
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::prompt::Prompt;
use engine::speculative::{DraftRound, MtpProposer, Proposer, SpeculativeOptions};
use engine::stream::{eval_with_caches, Drafting, Session, StreamRequest};
use mlx_rs::Array;
use serde_json::json;

use crate::mlx_probe::{
    graph_kinds, median, mlx_active_bytes, mlx_clear_cache, mlx_peak_bytes, reset_peak, with_caches,
};
use crate::phase;

/// Speculative decoding against plain decoding, on the plan's decode prompt (greedy, no end of
/// sequence): what one round's parts cost next to a plain step, decode speed with the drafter's
/// acceptance forced to exactly 1, 2 or 3 drafts per round (the drafter and the model run as
/// ever; only the comparison is overridden), with every draft rejected (drafting kept on,
/// and with its stopping rule), and the memory the drafter adds. Whether each speculative
/// answer equals the plain one is reported (on a GPU a verify's several rows can move a
/// near-tie; the tests check equality on the CPU).
pub fn run(
    loaded: &LoadedModel,
    options: &GenerateOptions,
    dir: &Path,
    decode: (&[u32], usize),
    block: usize,
) -> Result<serde_json::Value> {
    let model = &loaded.model;
    let before = mlx_active_bytes();
    let load_start = Instant::now();
    let drafter = gemma::Drafter::load(dir, model)
        .with_context(|| format!("loading the drafter {}", dir.display()))?;
    let drafter_load_s = load_start.elapsed().as_secs_f64();
    let drafter_bytes = mlx_active_bytes().saturating_sub(before);
    let (ids, tokens) = decode;
    let prompt = Prompt::from_ids(ids.to_vec());
    let options = GenerateOptions {
        max_tokens: tokens,
        ..options.clone()
    };

    // One decode run: ids, seconds from the first id to the last, stats, and MLX's peak bytes
    // while decoding (the peak is reset once the prompt is prefilled: prefill's transients are
    // the same with and without a drafter).
    let run = |proposer: Option<(Box<dyn Proposer + '_>, SpeculativeOptions)>| -> Result<(
        Vec<u32>,
        f64,
        Option<engine::speculative::SpeculativeStats>,
        u64,
    )> {
        mlx_clear_cache();
        let cancel = AtomicBool::new(false);
        let mut session = Session::new(model);
        let drafting = match proposer {
            Some((proposer, options)) => Drafting::With(proposer, options),
            None => Drafting::Off,
        };
        let request = StreamRequest::new(&mut session, &prompt, &options, &cancel);
        let mut stream = loaded.token_stream(request.drafting(drafting))?;
        reset_peak();
        let mut ids = Vec::new();
        let mut first = None;
        while let Some(id) = stream.next_token()? {
            first.get_or_insert_with(Instant::now);
            ids.push(id);
        }
        let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        Ok((
            ids,
            secs,
            stream.speculative_stats().cloned(),
            mlx_peak_bytes(),
        ))
    };
    let always = SpeculativeOptions {
        block_size: block,
        min_accepted: None,
        ..SpeculativeOptions::default()
    };
    let rate = |ids: &[u32], secs: f64| (ids.len().saturating_sub(1)) as f64 / secs.max(1e-9);

    phase("mtp-warm-up");
    run(None)?;
    let (plain, plain_s, _, plain_peak) = run(None)?;
    run(Some((forced(&drafter, 1), always.clone())))?; // the round's shapes, once
    let mut controlled = Vec::new();
    let mut spec_peak = 0;
    for accepts in 1..block {
        phase(&format!("mtp-accept-{accepts}"));
        let (ids, secs, stats, peak) = run(Some((forced(&drafter, accepts), always.clone())))?;
        spec_peak = spec_peak.max(peak);
        let stats = stats.context("no stats")?;
        controlled.push(json!({
            "accepted_per_round": accepts,
            "tokens_per_round": stats.tokens_per_round(),
            "tok_s": rate(&ids, secs),
        }));
    }
    phase("mtp-rejected");
    let (ids, secs, stats, _) = run(Some((
        Box::new(MtpProposer { drafter: &drafter }),
        always.clone(),
    )))?;
    let rejected_same = ids == plain;
    let rejected_accepted = stats.map_or(0, |s| s.accepted);
    let rejected = rate(&ids, secs);
    let default_options = SpeculativeOptions {
        block_size: block,
        min_accepted: Some(loaded.policy.min_drafts_accepted),
        ..SpeculativeOptions::default()
    };
    let (ids, secs, stats, _) = run(Some((
        Box::new(MtpProposer { drafter: &drafter }),
        default_options,
    )))?;
    let stopped = stats.and_then(|s| s.stopped);
    let rejected_with_stop = rate(&ids, secs);
    let _ = ids;

    phase("mtp-round-parts");
    let parts = round_parts(model, &drafter, &prompt.ids, block)?;
    Ok(json!({
        "mtp": {
            "block_size": block,
            "prompt_tokens": prompt.ids.len(),
            "tokens": plain.len(),
            "drafter_load_s": drafter_load_s,
            "drafter_bytes": drafter_bytes,
            "drafter_parameters": drafter.parameter_count(),
            "plain_tok_s": rate(&plain, plain_s),
            "controlled": controlled,
            "rejected_tok_s": rejected,
            "rejected_accepted": rejected_accepted,
            "rejected_same_answer": rejected_same,
            "rejected_with_stop_tok_s": rejected_with_stop,
            "stopped": stopped,
            "plain_peak_bytes": plain_peak,
            "spec_peak_bytes": spec_peak,
            "parts": parts,
        }
    }))
}

/// The bench's controlled acceptance: the MTP drafter drafts and the round runs as ever, but
/// exactly `accepts` drafts per round are taken as accepted whatever the model says. The answer
/// is then NOT the model's: for timing rounds at a given acceptance only (random-weight
/// drafters are never right, and on a GPU a verify's rows can move a random model's near-ties,
/// so a scripted continuation does not stay on track there).
struct Forced<'a> {
    mtp: MtpProposer<'a>,
    accepts: usize,
}

fn forced(drafter: &gemma::Drafter, accepts: usize) -> Box<dyn Proposer + '_> {
    Box::new(Forced {
        mtp: MtpProposer { drafter },
        accepts,
    })
}

impl Proposer for Forced<'_> {
    fn fits(&self, model: &gemma::Model) -> bool {
        self.mtp.fits(model)
    }

    fn draft(&mut self, round: &DraftRound<'_>, n: usize) -> engine::error::Result<Array> {
        self.mtp.draft(round, n)
    }

    fn agrees(&self, pos: usize, _drafted: u32, _target: u32) -> bool {
        pos < self.accepts
    }
}

/// Median milliseconds, from the cached state after the prompt, of: one plain decode step (a
/// forward of 1 row and its argmax, evaluated), a verify of `block` rows, and a draft block of
/// `block − 1` drafter steps; and the MLX primitives of the step and of the verify.
fn round_parts(
    model: &gemma::Model,
    drafter: &gemma::Drafter,
    prompt: &[u32],
    block: usize,
) -> Result<serde_json::Value> {
    use mlx_rs::ops::indexing::argmax_axis;
    let mut caches = model.new_caches();
    let (hidden, logits) = model.forward_with_hidden(prompt, &[], &mut caches, Some(1))?;
    eval_with_caches(&caches, &logits)?;
    let kv = prompt.len();
    let feature = hidden.reshape(&[1, 1, -1])?;
    let ids: Vec<u32> = (0..block as u32).map(|i| 10 + i).collect();
    let reps = 21;
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        f()?;
        let mut ms = Vec::new();
        for _ in 0..reps {
            let t0 = Instant::now();
            f()?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        Ok(median(&mut ms))
    };
    // Each one's primitives, from its first call; each part under its own phase, so that a
    // traced run (bench/cuda/apitrace.c) tells a step's, a verify's and a draft block's host
    // and GPU time apart (22 calls each).
    let mut step_graph = None;
    phase("parts-step");
    let step = time(&mut || {
        let mut c = caches.clone();
        let logits = model.forward_array(&Array::from_slice(&ids[..1], &[1]), &mut c, None)?;
        let y = argmax_axis(&logits, -1, None)?;
        let outs = with_caches(&c, [&y]);
        if step_graph.is_none() {
            step_graph = Some(graph_kinds(&outs)?);
        }
        mlx_rs::transforms::eval(outs)?;
        Ok(())
    })?;
    let mut verify_graph = None;
    phase("parts-verify");
    let verify = time(&mut || {
        let mut c = caches.clone();
        let (h, logits) =
            model.forward_array_with_hidden(&Array::from_slice(&ids, &[block as i32]), &mut c)?;
        let y = argmax_axis(&logits, -1, None)?;
        let outs = with_caches(&c, [&y, &h]);
        if verify_graph.is_none() {
            verify_graph = Some(graph_kinds(&outs)?);
        }
        mlx_rs::transforms::eval(outs)?;
        Ok(())
    })?;
    let window = model.config().text.sliding_window;
    let view = engine::speculative::sliding_view(kv, window, false, false, true);
    phase("parts-draft");
    // The app's own draft loop (the stream's speculative round calls the same proposer).
    let mut proposer = MtpProposer { drafter };
    let draft = time(&mut || {
        let round = DraftRound {
            model,
            caches: &caches,
            bonus: ids[0],
            feature: &feature,
            positions: kv,
            sliding: view,
            index: 1,
            produced: 1,
        };
        let drafts = proposer.draft(&round, block - 1)?;
        mlx_rs::transforms::eval([&drafts])?;
        Ok(())
    })?;
    Ok(json!({
        "step_ms": step,
        "verify_ms": verify,
        "draft_block_ms": draft,
        "step_graph": step_graph,
        "verify_graph": verify_graph,
    }))
}
