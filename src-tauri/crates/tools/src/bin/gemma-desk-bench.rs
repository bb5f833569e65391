//! `gemma-desk-bench`: our side of the benchmark against mlx-vlm (`bench/bench.py` drives both).
//!
//! One process runs one repetition of the plan written by `bench/reference_worker.py prepare`
//! (the same token ids the reference gets) and prints one JSON object: load time with a cold
//! and a warm page cache, the app's warm-up after loading, time to first token of each
//! prefill, decode timings, image and follow-up time to first token, peak RSS and MLX's peak
//! memory. End of sequence is disabled, sampling is greedy, and each measurement is wall-clock
//! around the engine's public API.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use serde::Deserialize;
use serde_json::json;

use engine::image::{preprocess_path, SoftTokenBudget};
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::prompt::Prompt;
use engine::sampler::{Sampler, SamplerConfig};
use engine::stream::{eval_with_caches, Session, StreamRequest};
use engine::template::{Message, Part, Role};
use gemma::tuning::{DecodeAttention, DenseFrom as DenseFromRows};
use gemma::{LoadOptions, Tuning};
use mlx_rs::{Array, Dtype};
use tools::mlx_probe::{graph_kinds, median, mlx_clear_cache, mlx_peak_bytes, with_caches};
use tools::phase;

#[derive(Parser)]
#[command(
    name = "gemma-desk-bench",
    about = "Run one repetition of the benchmark plan with our engine; prints JSON"
)]
struct Cli {
    /// The plan (`bench/reference_worker.py prepare` writes it).
    #[arg(long, required_unless_present_any = ["api_overhead", "batch", "memory"])]
    plan: Option<PathBuf>,
    /// Instead of the plan: several answers at once (`tools::batch`), from the batch plan
    /// `bench/batch.py` writes.
    #[arg(long, value_name = "BATCH_PLAN", conflicts_with_all = ["plan", "api_overhead"])]
    batch: Option<PathBuf>,
    /// Instead of the plan: the local API's cost over the engine for the model in this folder
    /// (`tools::api_overhead`): the same greedy request straight to the engine and over HTTP.
    #[arg(long, value_name = "MODEL_DIR", conflicts_with = "plan")]
    api_overhead: Option<PathBuf>,
    /// Repetitions of each path with `--api-overhead`.
    #[arg(long, default_value_t = 5)]
    api_reps: usize,
    /// Words (about one token each) of the request's message with `--api-overhead`.
    #[arg(long, default_value_t = 512)]
    api_prompt_words: usize,
    /// Tokens answered with `--api-overhead`.
    #[arg(long, default_value_t = 128)]
    api_max_tokens: usize,
    /// Compute dtype (default: the engine's choice for this device).
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
    /// Prompt positions per prefill forward (default: the engine's).
    #[arg(long)]
    prefill_chunk: Option<usize>,
    /// Skip the warm-up the app runs after loading (to measure what it changes).
    #[arg(long)]
    no_warm_up: bool,
    /// Tokens of the warm-up's first message (default: the engine's choice for this backend).
    #[arg(long)]
    warm_up_history: Option<usize>,
    /// Input rows from which quantized layers run as dequantize + dense matmul, or `never`
    /// (default: the engine's measured choice for this backend and dtype).
    #[arg(long, value_parser = parse_rows)]
    dense_from: Option<DenseFrom>,
    /// Lanes (CPU streams) a quantized layer's rows are shared among on MLX's CPU backend
    /// (default: one per core, at most 4; 1 = none).
    #[arg(long)]
    cpu_lanes: Option<usize>,
    /// How a decode step composes attention where MLX has no fused kernel for the head size
    /// (default: grouped-rows).
    #[arg(long, value_enum)]
    decode_attention: Option<DecodeAttentionArg>,
    /// Measure speculative decoding with this MTP drafter instead of the plan's cases (only
    /// its decode prompt is used): per-round costs, decode at controlled acceptance, memory.
    #[arg(long)]
    mtp: Option<PathBuf>,
    /// Tokens per verify with `--mtp`.
    #[arg(long, default_value_t = 4)]
    mtp_block: usize,
    /// Step several sequences' decode rows each over its own caches instead of over buffers
    /// shared by the rows (`Tuning::batched_rows`), for A/B measurements.
    #[arg(long)]
    rows_each: bool,
    /// Instead of the plan: where the memory goes for the model in this folder
    /// (`tools::memory`): weights by part, KV caches, MLX and process memory after loading and
    /// after a prefill.
    #[arg(long, value_name = "MODEL_DIR", conflicts_with_all = ["plan", "api_overhead", "batch"])]
    memory: Option<PathBuf>,
    /// Prompt lengths prefilled from empty caches with `--memory` (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2048")]
    memory_prefill: Vec<usize>,
    /// A drafter folder whose weights `--memory` lists too.
    #[arg(long)]
    memory_drafter: Option<PathBuf>,
    /// Keep the per-layer token table in MLX memory (`LoadOptions::ple_resident`), for A/B
    /// measurements.
    #[arg(long)]
    ple_resident: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum DecodeAttentionArg {
    GroupedRows,
    HeadScores,
}

/// `--dense-from`'s value: a row count, or `None` for never. (A bare `Option<Option<_>>` field
/// would make clap read the flag's value as optional.)
#[derive(Clone, Copy)]
struct DenseFrom(Option<usize>);

fn parse_rows(text: &str) -> std::result::Result<DenseFrom, String> {
    match text {
        "never" => Ok(DenseFrom(None)),
        rows => rows
            .parse()
            .map(|n| DenseFrom(Some(n)))
            .map_err(|e| format!("expected a row count or never, found {rows:?}: {e}")),
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum DtypeArg {
    Bfloat16,
    Float32,
}

#[derive(Deserialize)]
struct Plan {
    model: PathBuf,
    warmup: Generation,
    prefill: Vec<Prefill>,
    decode: Generation,
    image: ImageCase,
    /// Questions about clips (plans prepared with `--audio`).
    #[serde(default)]
    audio: Option<AudioPlan>,
    followup: FollowUp,
    /// Prompt lengths of the prefill curve (prefixes of the decode prompt).
    curve: Vec<usize>,
}

#[derive(Deserialize)]
struct Generation {
    ids: Vec<u32>,
    tokens: usize,
}

#[derive(Deserialize)]
struct Prefill {
    tokens: usize,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct ImageCase {
    path: PathBuf,
    question: String,
    /// Max soft tokens (the processor's default, 280, unless the plan lowers it).
    budget: usize,
    warmup: bool,
}

#[derive(Deserialize)]
struct AudioPlan {
    question: String,
    clips: Vec<AudioCase>,
    warmup: bool,
}

#[derive(Deserialize)]
struct AudioCase {
    path: PathBuf,
    seconds: u32,
}

#[derive(Deserialize)]
struct FollowUp {
    turn1: Vec<u32>,
    answer_tokens: usize,
    suffix: Vec<u32>,
}

/// Token ids of one generation and when each arrived (seconds after the call began).
struct Timed {
    ids: Vec<u32>,
    times: Vec<f64>,
    reused: usize,
}

struct Bench {
    loaded: LoadedModel,
    options: GenerateOptions,
}

impl Bench {
    fn generate(&self, session: &mut Session, ids: &[u32], max_tokens: usize) -> Result<Timed> {
        let options = GenerateOptions {
            max_tokens,
            ..self.options.clone()
        };
        let cancel = AtomicBool::new(false);
        let start = Instant::now();
        let mut timed = Timed {
            ids: Vec::new(),
            times: Vec::new(),
            reused: 0,
        };
        let prompt = Prompt::from_ids(ids.to_vec());
        let usage = self.loaded.generate(
            StreamRequest::new(session, &prompt, &options, &cancel),
            |delta| {
                if let Some(id) = delta.token {
                    timed.times.push(start.elapsed().as_secs_f64());
                    timed.ids.push(id);
                }
            },
        )?;
        timed.reused = usage.reused_tokens;
        Ok(timed)
    }

    /// From the request (question text + image path) to the first token, the vision tower
    /// included (no features cached from an earlier call).
    fn image_ttft(&self, case: &ImageCase) -> Result<(f64, usize)> {
        let loaded = &self.loaded;
        loaded.forget_media_features();
        let start = Instant::now();
        let budget = SoftTokenBudget::try_from(case.budget)?;
        let image = Arc::new(preprocess_path(&case.path, budget)?);
        let messages = [Message::new(
            Role::User,
            vec![
                Part::Image,
                Part::Text {
                    text: case.question.clone(),
                },
            ],
        )];
        let prompt = loaded.prompt(&messages, false, &[image])?;
        Ok((self.first_token(&prompt, start)?, prompt.ids.len()))
    }

    /// Seconds from `start` to the first token answering `prompt` in a new session.
    fn first_token(&self, prompt: &Prompt, start: Instant) -> Result<f64> {
        let loaded = &self.loaded;
        let options = GenerateOptions {
            max_tokens: 1,
            ..self.options.clone()
        };
        let cancel = AtomicBool::new(false);
        let mut first = None;
        loaded.generate(
            StreamRequest::new(Session::new(&loaded.model), prompt, &options, &cancel),
            |_| {
                first.get_or_insert_with(|| start.elapsed().as_secs_f64());
            },
        )?;
        first.context("no token was generated")
    }

    /// From the request (question text + audio file path) to the first token: decoding, the
    /// features and the audio tower included (no features cached from an earlier call).
    /// Returns the time to the first token, the prompt's length and the part of the time spent
    /// reading and featurizing the file (on the CPU).
    fn audio_ttft(&self, question: &str, path: &Path) -> Result<(f64, usize, f64)> {
        let loaded = &self.loaded;
        loaded.forget_media_features();
        let start = Instant::now();
        let clips =
            engine::audio::prepare_path(path, &engine::audio::AudioLimits::default())?.clips;
        let prepared = start.elapsed().as_secs_f64();
        let mut parts = vec![Part::Text {
            text: question.to_owned(),
        }];
        parts.extend(clips.iter().map(|_| Part::Audio));
        let messages = [Message::new(Role::User, parts)];
        let prompt = loaded.prompt_with_tools(&messages, &[], false, &[], &clips)?;
        Ok((
            self.first_token(&prompt, start)?,
            prompt.ids.len(),
            prepared,
        ))
    }

    /// Where a decode step's time goes, per token (median milliseconds): building the graph,
    /// dispatching it (`async_eval`: MLX encodes every primitive on this thread), and waiting
    /// for the previous token while the device works — read from the app's own token stream.
    fn decode_profile(&self, prompt: &[u32], steps: usize) -> Result<serde_json::Value> {
        let loaded = &self.loaded;
        let options = GenerateOptions {
            max_tokens: steps + 1,
            ..self.options.clone()
        };
        let cancel = AtomicBool::new(false);
        let mut session = Session::new(&loaded.model);
        let prompt = Prompt::from_ids(prompt.to_vec());
        let mut stream =
            loaded.token_stream(StreamRequest::new(&mut session, &prompt, &options, &cancel))?;
        let (mut build, mut dispatch, mut wait) = (Vec::new(), Vec::new(), Vec::new());
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let start = Instant::now();
        for _ in 0..steps {
            stream
                .next_token()?
                .context("the stream ended before its steps")?;
            let step = stream.last_step();
            build.push(ms(step.build));
            dispatch.push(ms(step.dispatch));
            wait.push(ms(step.wait));
        }
        let total = start.elapsed().as_secs_f64() * 1e3 / steps.max(1) as f64;
        Ok(json!({
            "steps": steps,
            "build_ms": median(&mut build),
            "dispatch_ms": median(&mut dispatch),
            "wait_ms": median(&mut wait),
            "per_token_ms": total,
        }))
    }
}

/// Prefills `prompt` into fresh caches and samples the first token (greedy): the start of a
/// decode loop.
fn first_token(
    model: &gemma::Model,
    prompt: &[u32],
) -> Result<(Vec<gemma::KvCache>, Sampler, Array)> {
    let mut caches = model.new_caches();
    let logits = model.forward(prompt, &[], &mut caches, Some(1))?;
    let mut sampler = Sampler::new(SamplerConfig::greedy())?;
    let y = sampler.sample(&logits, &no_history())?;
    Ok((caches, sampler, y))
}

/// The greedy sampler's (unused) token history.
fn no_history() -> Array {
    Array::from_slice::<u32>(&[], &[0])
}

/// Where a follow-up turn's time goes: `history` is prefilled once, then the `new` tokens are
/// prefilled `reps` times from the same cached state (a snapshot of the caches), each split into
/// building the graph, evaluating it, and sampling the first token (milliseconds, in order:
/// the first repetition pays any one-time work for these shapes).
fn followup_profile(
    model: &gemma::Model,
    history: &[u32],
    new: &[u32],
    chunk: usize,
    reps: usize,
) -> Result<serde_json::Value> {
    let mut caches = model.new_caches();
    for part in history.chunks(chunk.max(1)) {
        let out = model.forward(part, &[], &mut caches, Some(1))?;
        eval_with_caches(&caches, &out)?;
    }
    let none = no_history();
    let (mut build, mut evaluate, mut sample) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let mut turn = caches.clone();
        let t0 = Instant::now();
        let logits = model.forward(new, &[], &mut turn, Some(1))?;
        let t1 = Instant::now();
        eval_with_caches(&turn, &logits)?;
        let t2 = Instant::now();
        let mut sampler = Sampler::new(SamplerConfig::greedy())?;
        sampler.sample(&logits, &none)?.try_item_exact::<u32>()?;
        let t3 = Instant::now();
        build.push((t1 - t0).as_secs_f64() * 1e3);
        evaluate.push((t2 - t1).as_secs_f64() * 1e3);
        sample.push((t3 - t2).as_secs_f64() * 1e3);
    }
    // Turns of other lengths from the same state, in this order: a length met before costs
    // what a warm shape costs, a new one shows what the first turn of its length pays.
    let mut sweep = Vec::new();
    for (i, n) in [
        new.len() + 3,
        new.len(),
        new.len() + 9,
        new.len() + 3,
        64,
        100,
        64,
    ]
    .into_iter()
    .enumerate()
    {
        phase(&format!("sweep-{i}-{n}"));
        let ids: Vec<u32> = new.iter().copied().cycle().take(n).collect();
        let mut turn = caches.clone();
        let t0 = Instant::now();
        let logits = model.forward(&ids, &[], &mut turn, Some(1))?;
        eval_with_caches(&turn, &logits)?;
        sweep.push(json!({ "tokens": n, "ms": t0.elapsed().as_secs_f64() * 1e3 }));
    }
    // The same new tokens with no history: what the conversation adds to their prefill.
    phase("follow-up-no-history");
    let mut fresh = Vec::new();
    for _ in 0..2 {
        let mut empty = model.new_caches();
        let t0 = Instant::now();
        let logits = model.forward(new, &[], &mut empty, Some(1))?;
        eval_with_caches(&empty, &logits)?;
        fresh.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(json!({
        "history_tokens": history.len(),
        "new_tokens": new.len(),
        "no_history_ms": fresh,
        "build_ms": build,
        "eval_ms": evaluate,
        "sample_ms": sample,
        "sweep": sweep,
    }))
}

/// Prefill cost against prompt length, from empty caches (milliseconds from the call to the
/// evaluated logits and caches): for each length of `lengths` the first call (which pays any
/// one-time work for its shapes) and the median of `reps` more.
fn prefill_curve(
    model: &gemma::Model,
    ids: &[u32],
    lengths: &[usize],
    reps: usize,
) -> Result<serde_json::Value> {
    let mut rows = Vec::new();
    for &n in lengths.iter().filter(|&&n| n <= ids.len()) {
        let mut times = Vec::new();
        for _ in 0..=reps {
            let mut caches = model.new_caches();
            let t0 = Instant::now();
            let logits = model.forward(&ids[..n], &[], &mut caches, Some(1))?;
            eval_with_caches(&caches, &logits)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let first = times.remove(0);
        rows.push(json!({ "tokens": n, "first_ms": first, "ms": median(&mut times) }));
    }
    Ok(json!(rows))
}

/// Primitives MLX evaluates for one decode step (the sampled token and the updated caches),
/// by kind, read from MLX's DOT export of the graph.
fn step_graph(model: &gemma::Model, prompt: &[u32]) -> Result<serde_json::Value> {
    let (mut caches, mut sampler, y) = first_token(model, prompt)?;
    let none = no_history();
    eval_with_caches(&caches, &y)?;
    let logits = model.decode(&y, &mut caches)?;
    let next = sampler.sample(&logits, &none)?;
    graph_kinds(&with_caches(&caches, [&next]))
}

/// What a decode step costs after MLX's compile cache is cleared against the steps after it
/// (milliseconds, the step and its greedy token evaluated): MLX's own first-use work (its
/// compiled elementwise chains traced again), then the median of 7 more steps.
fn first_step_cost(model: &gemma::Model, prompt: &[u32]) -> Result<serde_json::Value> {
    use mlx_rs::ops::indexing::argmax_axis;
    let (mut caches, _, mut y) = first_token(model, prompt)?;
    eval_with_caches(&caches, &y)?;
    let step = |caches: &mut Vec<gemma::KvCache>, y: &mut Array| -> Result<f64> {
        let t0 = Instant::now();
        let logits = model.decode(y, caches)?;
        let next = argmax_axis(&logits, -1, None)?.as_dtype(Dtype::Uint32)?;
        eval_with_caches(caches, &next)?;
        *y = next;
        Ok(t0.elapsed().as_secs_f64() * 1e3)
    };
    step(&mut caches, &mut y)?;
    mlx_rs::transforms::compile::clear_cache();
    let first = step(&mut caches, &mut y)?;
    let mut replays = (0..7)
        .map(|_| step(&mut caches, &mut y))
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({ "first_ms": first, "replay_ms": median(&mut replays) }))
}

fn load(dir: &Path, options: &LoadOptions) -> Result<(LoadedModel, f64)> {
    let start = Instant::now();
    let loaded =
        LoadedModel::load(dir, options).with_context(|| format!("loading {}", dir.display()))?;
    Ok((loaded, start.elapsed().as_secs_f64()))
}

/// The process's high-water resident set (VmHWM), in bytes.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The engine's tuning for this backend with the command line's overrides: every mode (the
/// plan, `--batch`, `--api-overhead`) loads with it, so that an A/B flag changes what it names.
fn tuning_from(cli: &Cli) -> Tuning {
    let mut tuning = Tuning::for_backend();
    if let Some(DenseFrom(rows)) = cli.dense_from {
        tuning.dense_from = DenseFromRows::all(rows);
    }
    if let Some(lanes) = cli.cpu_lanes {
        tuning.cpu_lanes = lanes.max(1);
    }
    if let Some(path) = cli.decode_attention {
        tuning.decode_attention = match path {
            DecodeAttentionArg::GroupedRows => DecodeAttention::GroupedRows,
            DecodeAttentionArg::HeadScores => DecodeAttention::HeadScores,
        };
    }
    if cli.rows_each {
        tuning.batched_rows = false;
    }
    tuning
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let dtype = cli.dtype.map(|d| match d {
        DtypeArg::Bfloat16 => Dtype::Bfloat16,
        DtypeArg::Float32 => Dtype::Float32,
    });
    let tuning = tuning_from(&cli);
    if let Some(model) = &cli.api_overhead {
        let result = tools::api_overhead::run(&tools::api_overhead::Plan {
            model,
            load: LoadOptions {
                dtype,
                tuning,
                ..LoadOptions::default()
            },
            prompt_words: cli.api_prompt_words,
            max_tokens: cli.api_max_tokens,
            reps: cli.api_reps.max(1),
        })?;
        println!("{result}");
        return Ok(());
    }
    if let Some(path) = &cli.batch {
        let plan = tools::batch::Plan::read(path)?;
        let load = LoadOptions {
            dtype,
            tuning,
            ..LoadOptions::default()
        };
        println!("{}", tools::batch::run(&plan, &load)?);
        return Ok(());
    }
    let ple_resident = cli.ple_resident;
    if let Some(dir) = &cli.memory {
        let options = LoadOptions {
            dtype,
            tuning,
            ple_resident,
            ..LoadOptions::default()
        };
        let (drafter, prefills) = (cli.memory_drafter.as_deref(), &cli.memory_prefill);
        let report = tools::memory::run(dir, drafter, &options, prefills, cli.prefill_chunk)?;
        println!("{report}");
        return Ok(());
    }
    let plan_path = cli.plan.as_ref().context("--plan is required")?;
    let plan: Plan = serde_json::from_str(
        &std::fs::read_to_string(plan_path)
            .with_context(|| format!("reading {}", plan_path.display()))?,
    )
    .context("parsing the plan")?;

    let options = LoadOptions {
        dtype,
        tuning,
        ple_resident,
        ..LoadOptions::default()
    };
    phase("load");
    let (cold, load_cold) = load(&plan.model, &options)?;
    drop(cold);
    mlx_clear_cache();
    let (mut loaded, load_warm) = load(&plan.model, &options)?;
    if let Some(history) = cli.warm_up_history {
        loaded.policy.warm_up_history = history;
    }
    // What the app's engine thread does right after it replies to a load (the app is usable
    // meanwhile): timed apart from the load, which mlx-vlm has no counterpart of.
    let warm_up_history = loaded.warm_up_history();
    let warm_up_s = if cli.no_warm_up {
        None
    } else {
        phase("warm-up");
        let start = Instant::now();
        loaded
            .warm_up_over(warm_up_history, &AtomicBool::new(false))
            .context("warming up")?;
        Some(start.elapsed().as_secs_f64())
    };
    loaded.specials.eos.clear();
    let mut options = GenerateOptions {
        sampler: SamplerConfig::greedy(),
        ..GenerateOptions::default()
    };
    if let Some(chunk) = cli.prefill_chunk {
        options.prefill_chunk = chunk;
    }
    let bench = Bench { loaded, options };
    let dtype_name = format!("{:?}", bench.loaded.model.dtype()).to_lowercase();

    if let Some(dir) = &cli.mtp {
        let decode = (plan.decode.ids.as_slice(), plan.decode.tokens);
        let result = tools::mtp::run(&bench.loaded, &bench.options, dir, decode, cli.mtp_block)?;
        println!("{result}");
        return Ok(());
    }

    phase("plan-warm-up");
    bench.generate(
        &mut Session::new(&bench.loaded.model),
        &plan.warmup.ids,
        plan.warmup.tokens,
    )?;
    if plan.image.warmup {
        bench.image_ttft(&plan.image)?;
    }
    if let Some(audio) = plan.audio.as_ref().filter(|a| a.warmup) {
        // Every clip length once, as the image: one-time kernel work apart.
        for clip in &audio.clips {
            bench.audio_ttft(&audio.question, &clip.path)?;
        }
    }

    let mut prefill = Vec::new();
    for case in &plan.prefill {
        phase(&format!("prefill-{}", case.tokens));
        let t = bench.generate(&mut Session::new(&bench.loaded.model), &case.ids, 1)?;
        prefill.push(json!({ "tokens": case.tokens, "ttft_s": t.times[0] }));
    }

    phase("decode");
    let d = bench.generate(
        &mut Session::new(&bench.loaded.model),
        &plan.decode.ids,
        plan.decode.tokens,
    )?;
    let decode = json!({
        "tokens": d.ids.len(),
        "ttft_s": d.times[0],
        "decode_s": d.times[d.times.len() - 1] - d.times[0],
        "ids": d.ids,
    });

    phase("decode-profile");
    let profile = bench.decode_profile(&plan.decode.ids, plan.decode.tokens.min(64))?;
    phase("step-graph");
    let graph = step_graph(&bench.loaded.model, &plan.decode.ids)?;
    let first_step = first_step_cost(&bench.loaded.model, &plan.decode.ids)?;
    phase("prefill-curve");
    let curve = prefill_curve(&bench.loaded.model, &plan.decode.ids, &plan.curve, 3)?;

    phase("image");
    let (image_ttft, image_tokens) = bench.image_ttft(&plan.image)?;
    let mut audio = Vec::new();
    if let Some(plan_audio) = &plan.audio {
        for clip in &plan_audio.clips {
            phase(&format!("audio-{}s", clip.seconds));
            let (ttft, tokens, prepare) = bench.audio_ttft(&plan_audio.question, &clip.path)?;
            audio.push(json!({
                "seconds": clip.seconds,
                "ttft_s": ttft,
                "prompt_tokens": tokens,
                "prepare_s": prepare,
            }));
        }
    }

    let f = &plan.followup;
    let mut session = Session::new(&bench.loaded.model);
    phase("conversation");
    let answer = bench.generate(&mut session, &f.turn1, f.answer_tokens)?;
    let turn2: Vec<u32> = [f.turn1.as_slice(), &answer.ids, &f.suffix].concat();
    phase("follow-up");
    let t = bench.generate(&mut session, &turn2, 1)?;
    // The same kind of turn once more: its shapes have been met once in this process, so the
    // difference from the first follow-up is one-time work (kernel compilation, allocation).
    let turn3: Vec<u32> = [turn2.as_slice(), &t.ids, &f.suffix].concat();
    phase("follow-up-again");
    let again = bench.generate(&mut session, &turn3, 1)?;
    let history: Vec<u32> = [f.turn1.as_slice(), &answer.ids].concat();
    phase("follow-up-profile");
    let profile_followup = followup_profile(
        &bench.loaded.model,
        &history[..history.len() - 1],
        &turn2[history.len() - 1..],
        bench.options.prefill_chunk,
        4,
    )?;

    phase("end");
    let result = json!({
        "engine": "gemma-desk",
        "dtype": dtype_name,
        "dense_from": tuning.dense_from.rows(bench.loaded.model.dtype()),
        "cpu_lanes": tuning.cpu_lanes,
        "decode_attention": format!("{:?}", tuning.decode_attention),
        "load_cold_s": load_cold,
        "load_warm_s": load_warm,
        "warm_up_s": warm_up_s,
        "warm_up_history": warm_up_history,
        "prefill": prefill,
        "decode": decode,
        "decode_profile": profile,
        "decode_graph": graph,
        "decode_first_step": first_step,
        "prefill_curve": curve,
        "image": { "ttft_s": image_ttft, "prompt_tokens": image_tokens },
        "audio": audio,
        "followup": {
            "ttft_s": t.times[0],
            "prompt_tokens": turn2.len(),
            "reused_tokens": t.reused,
            "again_ttft_s": again.times[0],
            "again_reused_tokens": again.reused,
            "profile": profile_followup,
        },
        "peak_rss_bytes": peak_rss_bytes(),
        "mlx_peak_bytes": mlx_peak_bytes(),
    });
    println!("{result}");
    Ok(())
}
