//! `gemma-desk-bench --batch PLAN`: several answers at once (continuous batching).
//!
//! The plan (`bench/batch.py` writes it) names the model and gives the prompts as token ids,
//! the same ids mlx-vlm's `BatchGenerator` gets in `bench/reference_worker.py batch`. Measured:
//!
//! - **Aggregate decode** at each number of streams: that many answers prefilled, then stepped
//!   together ([`next_tokens`], what the engine thread does) for `decode` tokens each, end of
//!   sequence ignored; tokens/s over all streams from the step after every stream's first
//!   token to the last. Each count is run once untimed first (a backend's per-shape work).
//! - **The window's time to first token** through the engine thread (`Engine::generate_first`,
//!   what the window's chat does): idle, and while four API-like answers are being written
//!   (`Engine::generate`). A message of `window_words` words, each time in a conversation of
//!   its own (no cache reuse).
//!
//! Printed: one JSON object.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use engine::events::{ChatRequest, Event};
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::prompt::Prompt;
use engine::sampler::SamplerConfig;
use engine::stream::{next_tokens, Session, StreamRequest};
use engine::template::{Message, Role};
use engine::worker::Engine;
use gemma::LoadOptions;
use serde::Deserialize;
use serde_json::{json, Value};

/// What `bench/batch.py` writes.
#[derive(Debug, Deserialize)]
pub struct Plan {
    pub model: PathBuf,
    /// One prompt per stream, at least as many as the largest count.
    pub prompts: Vec<Vec<u32>>,
    /// Numbers of streams to measure.
    pub streams: Vec<usize>,
    /// Tokens each stream decodes.
    pub decode: usize,
    /// Words of the window's message.
    pub window_words: usize,
    /// Repetitions of the window's time to first token (median reported).
    pub window_reps: usize,
}

impl Plan {
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let plan: Plan = serde_json::from_str(&text).context("parsing the batch plan")?;
        if plan
            .streams
            .iter()
            .any(|&n| n == 0 || n > plan.prompts.len())
        {
            bail!(
                "the plan has {} prompts for streams {:?}",
                plan.prompts.len(),
                plan.streams
            );
        }
        Ok(plan)
    }
}

/// Runs the plan and returns the JSON result.
pub fn run(plan: &Plan, load: &LoadOptions) -> Result<Value> {
    let m = LoadedModel::load(&plan.model, load)
        .with_context(|| format!("loading {}", plan.model.display()))?;
    m.warm_up()?;
    let mut aggregate = serde_json::Map::new();
    for &n in &plan.streams {
        crate::phase(&format!("batch-warm-{n}"));
        decode_together(&m, &plan.prompts[..n], 4)?;
        crate::phase(&format!("batch-{n}"));
        let (tokens, secs) = decode_together(&m, &plan.prompts[..n], plan.decode)?;
        eprintln!(
            "batch: {n} streams: {:.1} tok/s together",
            tokens as f64 / secs
        );
        aggregate.insert(
            n.to_string(),
            json!({ "tokens": tokens, "seconds": secs, "tokens_per_second": tokens as f64 / secs }),
        );
    }
    let dtype = format!("{:?}", m.model.dtype()).to_lowercase();
    drop(m);
    crate::phase("window");
    let (idle, loaded) = window_under_load(plan, load)?;
    Ok(json!({
        "engine": "gemma-desk",
        "dtype": dtype,
        "decode": plan.decode,
        "prompt_tokens": plan.prompts.first().map_or(0, Vec::len),
        "aggregate": aggregate,
        // What an A/B flag of the bench changed (it must reach the model: tuning_from).
        "batched_rows": load.tuning.batched_rows,
        "decode_attention": format!("{:?}", load.tuning.decode_attention),
        "window_ttft_idle_ms": idle,
        "window_ttft_loaded_ms": loaded,
    }))
}

/// `prompts.len()` greedy answers of `decode` tokens, stepped together once each is
/// prefilled: the tokens handed out after every stream's first, and the seconds they took.
fn decode_together(m: &LoadedModel, prompts: &[Vec<u32>], decode: usize) -> Result<(usize, f64)> {
    let options = GenerateOptions {
        sampler: SamplerConfig::greedy(),
        max_tokens: decode,
        context_window: prompts.iter().map(Vec::len).max().unwrap_or(0) + decode + 1,
        ..GenerateOptions::default()
    };
    let cancel = AtomicBool::new(false);
    let mut streams = prompts
        .iter()
        .map(|ids| {
            m.token_stream(StreamRequest::new(
                Session::new(&m.model),
                &Prompt::from_ids(ids.clone()),
                &options,
                &cancel,
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut live: Vec<_> = streams.iter_mut().collect();
    let mut kv = gemma::BatchKvCache::new();
    // Every stream's first id (sampled at the end of its prefill).
    for id in next_tokens(&mut live, &mut kv) {
        id?;
    }
    let start = Instant::now();
    let mut tokens = 0;
    loop {
        let mut live: Vec<_> = streams.iter_mut().filter(|s| s.end().is_none()).collect();
        if live.is_empty() {
            break;
        }
        for id in next_tokens(&mut live, &mut kv) {
            tokens += usize::from(id?.is_some());
        }
    }
    Ok((tokens, start.elapsed().as_secs_f64()))
}

fn request(conversation: String, text: String, max_tokens: usize) -> ChatRequest {
    ChatRequest {
        conversation,
        messages: vec![Message::text(Role::User, text)],
        images: Vec::new(),
        audio: Vec::new(),
        thinking: false,
        tools: Vec::new(),
        options: GenerateOptions {
            sampler: SamplerConfig::greedy(),
            max_tokens,
            ..GenerateOptions::default()
        },
    }
}

/// Milliseconds from `generate_first` to the window's first text delta.
fn window_ttft(engine: &Engine, k: usize, words: usize) -> Result<f64> {
    let text = format!(
        "Question {k}: {}",
        "tell me more about the sea ".repeat(words / 6 + 1)
    );
    let (tx, rx) = channel();
    let sent = Instant::now();
    engine.generate_first(request(format!("window-{k}"), text, 2), move |e| {
        let _ = tx.send((Instant::now(), e));
    })?;
    let first = first_delta(&rx)?;
    // The rest of its events.
    while let Ok((_, e)) = rx.recv_timeout(Duration::from_secs(600)) {
        if matches!(e, Event::Done { .. } | Event::Error { .. }) {
            break;
        }
    }
    Ok((first - sent).as_secs_f64() * 1000.0)
}

fn first_delta(rx: &Receiver<(Instant, Event)>) -> Result<Instant> {
    loop {
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok((at, Event::Delta { .. })) => return Ok(at),
            Ok((_, Event::Error { error, .. })) => bail!("the window's answer failed: {error}"),
            Ok((_, Event::Done { .. })) => bail!("the window's answer ended with no token"),
            Ok(_) => {}
            Err(_) => bail!("no answer within 10 minutes"),
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The window's time to first token idle and while four answers are written (medians).
fn window_under_load(plan: &Plan, load: &LoadOptions) -> Result<(f64, f64)> {
    let engine = Engine::spawn();
    engine.load(&plan.model, load.clone())?;
    let reps = plan.window_reps.max(1);
    let mut k = 0;
    let mut idle = Vec::new();
    window_ttft(&engine, usize::MAX, plan.window_words)?; // (untimed: first use)
    for _ in 0..reps {
        k += 1;
        idle.push(window_ttft(&engine, k, plan.window_words)?);
    }
    let mut loaded = Vec::new();
    for rep in 0..reps {
        // Four API-like answers, each under way before the window sends.
        let (tx, rx) = channel();
        let mut ids = Vec::new();
        for a in 0..4 {
            let tx = tx.clone();
            let text = format!("Story {rep}-{a}: write a long story about a lighthouse.");
            ids.push(engine.generate(
                request(format!("api-{rep}-{a}"), text, 100_000),
                move |e| {
                    let _ = tx.send(e);
                },
            )?);
        }
        let mut started = std::collections::HashSet::new();
        while started.len() < 4 {
            match rx.recv_timeout(Duration::from_secs(600)) {
                Ok(Event::Delta { generation_id, .. }) => {
                    started.insert(generation_id);
                }
                Ok(Event::Done { .. }) => bail!("an API answer ended before the window sent"),
                Ok(Event::Error { error, .. }) => bail!("an API answer failed: {error}"),
                Ok(_) => {}
                Err(_) => bail!("the API answers did not start"),
            }
        }
        k += 1;
        loaded.push(window_ttft(&engine, k, plan.window_words)?);
        for id in ids {
            engine.cancel(id);
        }
        let mut ended = 0;
        while ended < 4 {
            if let Ok(Event::Done { .. } | Event::Error { .. }) =
                rx.recv_timeout(Duration::from_secs(600))
            {
                ended += 1;
            }
        }
    }
    Ok((median(idle), median(loaded)))
}
