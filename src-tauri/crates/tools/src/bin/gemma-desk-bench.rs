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

use engine::generate::GenerateOptions;
use engine::image::{preprocess_path, SoftTokenBudget};
use engine::sampler::{Sampler, SamplerConfig};
use engine::stream::{eval_with_caches, Session};
use engine::template::{Message, Part, Role};
use engine::worker::{LoadedModel, Prompt};
use gemma::tuning::{DecodeAttention, DenseFrom as DenseFromRows};
use gemma::{LoadOptions, Tuning};
use mlx_rs::{Array, Dtype};

#[derive(Parser)]
#[command(
    name = "gemma-desk-bench",
    about = "Run one repetition of the benchmark plan with our engine; prints JSON"
)]
struct Cli {
    /// The plan (`bench/reference_worker.py prepare` writes it).
    #[arg(long)]
    plan: PathBuf,
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
    /// Pad the dense path's input rows to a multiple of this (default: no padding), so that
    /// prefills of different lengths share shapes.
    #[arg(long)]
    dense_bucket: Option<usize>,
    /// Lanes (CPU streams) a quantized layer's rows are shared among on MLX's CPU backend
    /// (default: one per core, at most 4; 1 = none).
    #[arg(long)]
    cpu_lanes: Option<usize>,
    /// How a decode step composes attention where MLX has no fused kernel for the head size
    /// (default: grouped-rows).
    #[arg(long, value_enum)]
    decode_attention: Option<DecodeAttentionArg>,
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
        let usage = self
            .loaded
            .generate(session, &prompt, &options, &cancel, |delta| {
                if let Some(id) = delta.token {
                    timed.times.push(start.elapsed().as_secs_f64());
                    timed.ids.push(id);
                }
            })?;
        timed.reused = usage.reused_tokens;
        Ok(timed)
    }

    /// From the request (question text + image path) to the first token, the vision tower
    /// included (no features cached from an earlier call).
    fn image_ttft(&self, case: &ImageCase) -> Result<(f64, usize)> {
        let m = &self.loaded;
        m.forget_image_features();
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
        let prompt = m.prompt(&messages, false, &[image])?;
        let mut session = Session::new(&m.model);
        let options = GenerateOptions {
            max_tokens: 1,
            ..self.options.clone()
        };
        let cancel = AtomicBool::new(false);
        let mut first = None;
        m.generate(&mut session, &prompt, &options, &cancel, |_| {
            first.get_or_insert_with(|| start.elapsed().as_secs_f64());
        })?;
        Ok((first.context("no token was generated")?, prompt.ids.len()))
    }

    /// Where a decode step's time goes, per token (median milliseconds): building the graph,
    /// dispatching it (`async_eval`: MLX encodes every primitive on this thread), and waiting
    /// for the previous token while the device works — read from the app's own token stream.
    fn decode_profile(&self, prompt: &[u32], steps: usize) -> Result<serde_json::Value> {
        let m = &self.loaded;
        let options = GenerateOptions {
            max_tokens: steps + 1,
            ..self.options.clone()
        };
        let cancel = AtomicBool::new(false);
        let mut session = Session::new(&m.model);
        let prompt = Prompt::from_ids(prompt.to_vec());
        let mut stream = m.token_stream(&mut session, &prompt, &options, &cancel)?;
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

/// Names the step the bench is in, for `bench/cuda/apitrace.c` (which reads the file named by
/// `APITRACE_PHASES`); nothing happens when the variable is unset.
fn phase(name: &str) {
    use std::os::unix::fs::FileExt;
    let Some(path) = std::env::var_os("APITRACE_PHASES") else {
        return;
    };
    let mut record = [0u8; 64];
    let n = name.len().min(63);
    record[..n].copy_from_slice(&name.as_bytes()[..n]);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .and_then(|f| f.write_all_at(&record, 0));
    if let Err(e) = written {
        eprintln!("APITRACE_PHASES={}: {e}", path.to_string_lossy());
    }
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
    let logits = model.forward_array(&y.reshape(&[1])?, &mut caches, None)?;
    let next = sampler.sample(&logits, &none)?;
    let mut outputs: Vec<&Array> = caches.iter().flat_map(|c| c.arrays()).collect();
    outputs.push(&next);
    let dot = std::env::temp_dir().join(format!("gemma-bench-{}.dot", std::process::id()));
    export_to_dot(&dot, &outputs)?;
    let text = std::fs::read_to_string(&dot)?;
    let _ = std::fs::remove_file(&dot);
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for line in text.lines().filter(|l| l.contains("shape=rectangle")) {
        if let Some(label) = line
            .split("label =\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        {
            *kinds.entry(label.to_string()).or_default() += 1;
        }
    }
    let total: usize = kinds.values().sum();
    Ok(json!({ "primitives": total, "kinds": kinds }))
}

fn export_to_dot(path: &Path, outputs: &[&Array]) -> Result<()> {
    extern "C" {
        fn fopen(
            path: *const std::ffi::c_char,
            mode: *const std::ffi::c_char,
        ) -> *mut mlx_sys::FILE;
        fn fclose(file: *mut mlx_sys::FILE) -> std::ffi::c_int;
    }
    let c_path = std::ffi::CString::new(path.to_string_lossy().as_bytes())?;
    let handles: Vec<mlx_sys::mlx_array> = outputs.iter().map(|a| a.as_ptr()).collect();
    // SAFETY: the file and vector are created, used and freed here; the arrays outlive the call.
    unsafe {
        let file = fopen(c_path.as_ptr(), c"w".as_ptr());
        anyhow::ensure!(!file.is_null(), "cannot write {}", path.display());
        let vector = mlx_sys::mlx_vector_array_new_data(handles.as_ptr(), handles.len());
        let namer = mlx_sys::mlx_node_namer_new();
        let status = mlx_sys::mlx_export_to_dot(file, namer, vector);
        mlx_sys::mlx_node_namer_free(namer);
        mlx_sys::mlx_vector_array_free(vector);
        fclose(file);
        anyhow::ensure!(status == 0, "MLX could not export the graph");
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
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

fn mlx_peak_bytes() -> u64 {
    let mut bytes: usize = 0;
    // SAFETY: writes one size_t through a valid pointer.
    unsafe { mlx_sys::mlx_get_peak_memory(&mut bytes) };
    bytes as u64
}

fn mlx_clear_cache() {
    // SAFETY: no arguments; frees MLX's unused buffer cache.
    unsafe { mlx_sys::mlx_clear_cache() };
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let plan: Plan = serde_json::from_str(
        &std::fs::read_to_string(&cli.plan)
            .with_context(|| format!("reading {}", cli.plan.display()))?,
    )
    .context("parsing the plan")?;
    let dtype = cli.dtype.map(|d| match d {
        DtypeArg::Bfloat16 => Dtype::Bfloat16,
        DtypeArg::Float32 => Dtype::Float32,
    });

    let mut tuning = Tuning::for_backend();
    if let Some(DenseFrom(rows)) = cli.dense_from {
        tuning.dense_from = DenseFromRows::all(rows);
    }
    if let Some(bucket) = cli.dense_bucket {
        tuning.dense_bucket = Some(bucket);
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
    if let Some(history) = cli.warm_up_history {
        tuning.warm_up_history = history;
    }
    let options = LoadOptions {
        dtype,
        tuning,
        ..LoadOptions::default()
    };
    phase("load");
    let (cold, load_cold) = load(&plan.model, &options)?;
    drop(cold);
    mlx_clear_cache();
    let (mut loaded, load_warm) = load(&plan.model, &options)?;
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

    phase("plan-warm-up");
    bench.generate(
        &mut Session::new(&bench.loaded.model),
        &plan.warmup.ids,
        plan.warmup.tokens,
    )?;
    if plan.image.warmup {
        bench.image_ttft(&plan.image)?;
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
    phase("prefill-curve");
    let curve = prefill_curve(&bench.loaded.model, &plan.decode.ids, &plan.curve, 3)?;

    phase("image");
    let (image_ttft, image_tokens) = bench.image_ttft(&plan.image)?;

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
        "dense_bucket": tuning.dense_bucket(),
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
        "prefill_curve": curve,
        "image": { "ttft_s": image_ttft, "prompt_tokens": image_tokens },
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
