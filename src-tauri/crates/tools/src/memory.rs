//! `gemma-desk-bench --memory MODEL_DIR`: where the memory goes (`docs/BENCHMARK.md`, "Memory").
//!
//! One process, one JSON object: the checkpoint's weights by part (as stored, and which parts
//! the loaded model holds in MLX memory), the KV caches of one conversation at 4k, 32k and 128k
//! positions (in the activation dtype, and stored with 8 and 4 KV bits), and MLX's active and
//! peak bytes and the process's resident set after loading and after a prefill through the
//! engine's own path (`LoadedModel::token_stream`: chunked as the app chunks, logits of the last row
//! only); then, when the model has a vision tower, a first question about an image (the tower
//! read from the checkpoint as part of its time to the first token) and the memory after the
//! tower's idle release; the same for a first question about a 30 s recording when the model has an
//! audio tower. `bench/memory.py` runs it beside mlx-vlm and prints the table.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use engine::audio::{prepare_samples, AudioLimits};
use engine::image::{preprocess_bytes, SoftTokenBudget};
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::prompt::Prompt;
use engine::stream::{Session, StreamRequest};
use engine::template::{Message, Part, Role};
use gemma::config::AttentionKind;
use gemma::memory::{counters, process_rss, release_cache, reset_peak};
use gemma::{LoadOptions, Model};

// The parts of the table are the fit check's (`engine::fit`).
use engine::fit::stored_by_part;

/// Bytes of one conversation's K/V after `positions` tokens: every cache-owning layer's keys
/// and values, at `bytes_per_value` (2 for bf16; `bits/8 + 2·2/group` stored quantized).
pub fn kv_bytes(model: &Model, positions: usize, bytes_per_value: f64) -> u64 {
    let text = &model.config().text;
    model
        .layers()
        .iter()
        .filter(|l| l.owns_kv())
        .map(|l| {
            let held = match l.kind {
                AttentionKind::Full => positions,
                AttentionKind::Sliding => positions.min(text.sliding_window),
            };
            let values = 2 * held * text.num_key_value_heads * l.head_dim;
            (values as f64 * bytes_per_value).ceil() as u64
        })
        .sum()
}

/// MLX's counters and the process's resident set now, as JSON (buffer cache not emptied).
fn snapshot() -> Result<Value> {
    let c = counters()?;
    Ok(json!({
        "mlx_active_bytes": c.active,
        "mlx_peak_bytes": c.peak,
        "mlx_cache_bytes": c.cache,
        "rss_bytes": process_rss(),
    }))
}

/// A prompt of `len` ids from the vocabulary, none of them a media placeholder.
fn prompt(model: &Model, len: usize) -> Vec<u32> {
    let config = model.config();
    let vocab = config.text.vocab_size as u32;
    let media = [
        config.image_token_id,
        config.audio_token_id,
        config.video_token_id,
    ];
    let mut ids = vec![2u32];
    let mut next = 7u64;
    while ids.len() < len {
        next = next
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = 10 + ((next >> 33) as u32) % (vocab - 10);
        if !media.contains(&Some(id)) {
            ids.push(id);
        }
    }
    ids
}

/// Measures `dir` (and the drafter folder `drafter`, if any) loaded with `options`; prefill of
/// each length in `prefills` from empty caches, in the engine's chunks of `chunk`.
pub fn run(
    dir: &Path,
    drafter: Option<&Path>,
    options: &LoadOptions,
    prefills: &[usize],
    chunk: Option<usize>,
) -> Result<Value> {
    let mut parts = stored_by_part(dir)?;
    if let Some(drafter) = drafter {
        let bytes: u64 = stored_by_part(drafter)?.iter().map(|(_, b)| b).sum();
        parts.push(("drafter", bytes));
    }
    release_cache()?;
    reset_peak()?;
    let before = snapshot()?;
    let started = Instant::now();
    let loaded =
        LoadedModel::load(dir, options).with_context(|| format!("loading {}", dir.display()))?;
    // As the app's engine thread bounds it at load.
    gemma::memory::limit_cache(loaded.policy.cache_limit)?;
    let model = &loaded.model;
    let load_s = started.elapsed().as_secs_f64();
    let after_load = snapshot()?;
    let ple = model.ple_table();
    let ple_from_file = ple.is_some_and(|t| t.from_file());
    let held: Vec<Value> = parts
        .iter()
        .filter(|(part, _)| *part != "drafter")
        .map(|(part, bytes)| {
            // The towers are read by the first question that needs one (`media_question`).
            let tower = matches!(*part, "vision tower" | "audio tower");
            let in_mlx = !(tower || *part == "PLE table" && ple_from_file);
            json!({"part": part, "stored_bytes": bytes, "in_mlx": in_mlx, "on_demand": tower})
        })
        .chain(
            parts
                .iter()
                .filter(|(part, _)| *part == "drafter")
                .map(|(part, bytes)| json!({"part": part, "stored_bytes": bytes, "in_mlx": false})),
        )
        .collect();
    let dtype_bytes = match model.dtype() {
        mlx_rs::Dtype::Float32 => 4.0,
        _ => 2.0,
    };
    let kv: Vec<Value> = [4096usize, 32768, 131072]
        .iter()
        .map(|&p| {
            json!({
                "positions": p,
                "activation_dtype_bytes": kv_bytes(model, p, dtype_bytes),
                "bf16_bytes": kv_bytes(model, p, 2.0),
                "kv8_bytes": kv_bytes(model, p, 1.0 + 4.0 / 64.0),
                "kv4_bytes": kv_bytes(model, p, 0.5 + 4.0 / 64.0),
            })
        })
        .collect();
    let mut generate = GenerateOptions {
        max_tokens: 1,
        context_window: prefills.iter().max().copied().unwrap_or(0) + 16,
        ..GenerateOptions::default()
    };
    if let Some(chunk) = chunk {
        generate.prefill_chunk = chunk;
    }
    let mut prefill_runs = Vec::new();
    for &len in prefills {
        release_cache()?;
        reset_peak()?;
        let start = snapshot()?;
        let ids = prompt(model, len);
        let mut session = Session::new(model);
        let started = Instant::now();
        let cancel = AtomicBool::new(false);
        let prompt = Prompt::from_ids(ids);
        let mut stream = loaded.token_stream(StreamRequest::new(
            &mut session,
            &prompt,
            &generate,
            &cancel,
        ))?;
        let first = stream.next_token()?;
        let secs = started.elapsed().as_secs_f64();
        let during = snapshot()?;
        drop(stream);
        prefill_runs.push(json!({
            "tokens": len,
            "chunk": generate.prefill_chunk,
            "seconds": secs,
            "first_token": first,
            "before": start,
            "after": during,
            "kv_bytes_estimate": model.kv_bytes(len),
        }));
        drop(session);
    }
    let image = match (model.has_vision(), loaded.specials.image) {
        (true, Some(_)) => Some(media_question(&loaded, &generate, Media::Image)?),
        _ => None,
    };
    let audio = match (model.has_audio(), loaded.specials.audio) {
        (true, Some(_)) => Some(media_question(&loaded, &generate, Media::Clip)?),
        _ => None,
    };
    release_cache()?;
    Ok(json!({
        "model": dir.display().to_string(),
        "backend": mlx_sys::FLAVOR,
        "dtype": format!("{:?}", model.dtype()),
        "ple_from_file": ple_from_file,
        "ple_table_bytes": ple.map(|t| t.stored_bytes()),
        "load_seconds": load_s,
        "weights_by_part": held,
        "kv_caches": kv,
        "before_load": before,
        "after_load": after_load,
        "prefills": prefill_runs,
        "image_question": image,
        "audio_question": audio,
        "cache_limit_bytes": loaded.policy.cache_limit,
        "tower_idle_seconds": loaded.policy.tower_idle.as_secs_f64(),
    }))
}

/// What a first media question attaches.
#[derive(Clone, Copy)]
enum Media {
    /// A 640×480 picture at the app's 280-token budget.
    Image,
    /// A 30 s recording (one full clip of the audio tower: `CLIP_SECONDS`).
    Clip,
}

/// Length of the recording of a first audio question: the longest clip the tower takes at once.
pub const CLIP_SECONDS: usize = 30;

/// A first question about an image or a clip after the load, through the engine's path: the
/// tower is read from the checkpoint inside it (its read time is part of the time to the first
/// token, and reported apart), then the tower is released as the idle period would.
fn media_question(loaded: &LoadedModel, options: &GenerateOptions, media: Media) -> Result<Value> {
    let options = GenerateOptions {
        context_window: options.context_window.max(2048),
        ..options.clone()
    };
    release_cache()?;
    reset_peak()?;
    let start = snapshot()?;
    let started = Instant::now();
    let (part, images, clips, question) = match media {
        Media::Image => {
            let image = preprocess_bytes(&gradient_bmp(640, 480), SoftTokenBudget::T280)?;
            (
                Part::Image,
                vec![Arc::new(image)],
                vec![],
                "Describe this picture.",
            )
        }
        Media::Clip => {
            let prepared = prepare_samples(&tone_sweep(CLIP_SECONDS), &AudioLimits::default())?;
            (Part::Audio, vec![], prepared.clips, "What do you hear?")
        }
    };
    let messages = [Message::new(
        Role::User,
        vec![
            part,
            Part::Text {
                text: question.into(),
            },
        ],
    )];
    let prompt = loaded.prompt_with_tools(&messages, &[], false, &images, &clips)?;
    let mut session = Session::new(&loaded.model);
    let cancel = AtomicBool::new(false);
    let mut stream =
        loaded.token_stream(StreamRequest::new(&mut session, &prompt, &options, &cancel))?;
    let first = stream.next_token()?;
    let ttft = started.elapsed().as_secs_f64();
    let during = snapshot()?;
    drop(stream);
    drop(session);
    let (vision_bytes, audio_bytes) = loaded.tower_bytes();
    let tower_bytes = match media {
        Media::Image => vision_bytes,
        Media::Clip => audio_bytes,
    };
    let tower_load = loaded.last_tower_load().map(|d| d.as_secs_f64());
    loaded.release_idle_towers(Duration::ZERO);
    loaded.forget_media_features();
    release_cache()?;
    Ok(json!({
        "prompt_tokens": prompt.ids.len(),
        "seconds_to_first_token": ttft,
        "tower_load_seconds": tower_load,
        "tower_bytes": tower_bytes,
        "first_token": first,
        "before": start,
        "after": during,
        "after_idle_release": snapshot()?,
    }))
}

/// `seconds` of 16 kHz mono: a tone gliding from 220 to 880 Hz under a quieter fixed 330 Hz one
/// (`bench/memory_reference.py` writes the same samples to a WAV file for mlx-vlm).
pub fn tone_sweep(seconds: usize) -> Vec<f32> {
    let rate = 16_000.0f64;
    let total = seconds as f64;
    (0..seconds * 16_000)
        .map(|i| {
            let t = i as f64 / rate;
            // Phase of a linear glide: 2π (f0 t + (f1 - f0) t² / (2 T)).
            let glide = std::f64::consts::TAU * (220.0 * t + 660.0 * t * t / (2.0 * total));
            let fixed = std::f64::consts::TAU * 330.0 * t;
            (0.3 * glide.sin() + 0.1 * fixed.sin()) as f32
        })
        .collect()
}

/// An uncompressed 24-bit BMP of a colour gradient, `width` × `height` (a multiple of 4 wide).
fn gradient_bmp(width: u32, height: u32) -> Vec<u8> {
    let data = width * height * 3;
    let mut out = Vec::with_capacity(54 + data as usize);
    out.extend(b"BM");
    for v in [54 + data, 0, 54, 40] {
        out.extend(v.to_le_bytes());
    }
    out.extend((width as i32).to_le_bytes());
    out.extend((height as i32).to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(24u16.to_le_bytes());
    for v in [0u32, data, 2835, 2835, 0, 0] {
        out.extend(v.to_le_bytes());
    }
    for y in 0..height {
        for x in 0..width {
            out.extend([
                (x * 255 / width) as u8,
                (y * 255 / height) as u8,
                ((x + y) % 256) as u8,
            ]);
        }
    }
    out
}
