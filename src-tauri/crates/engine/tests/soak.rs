//! Soak: 300 turns through the engine thread on the tiny fixture — conversations that alternate
//! (so the kept cache is dropped and rebuilt), grow, and start over, some with images — after
//! which memory has not grown beyond a stated bound and no thread or file handle is left behind.
//!
//! Resident memory is read from /proc, so the resource checks run on Linux; elsewhere the turns
//! still run and must all be answered.

mod common;
use common::fixture;

use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::events::{ChatRequest, Event};
use engine::image::{preprocess_bytes, Preprocessed, SoftTokenBudget};
use engine::options::GenerateOptions;
use engine::sampler::SamplerConfig;
use engine::template::{Message, Part, Role};
use engine::worker::Engine;
use gemma::LoadOptions;
use image::{ExtendedColorType, ImageEncoder};

const TURNS: usize = 300;
/// Turns before the baseline is taken: caches, MLX's buffer pool and the allocator fill up.
const WARM_UP: usize = 30;
/// Resident memory may grow this much over the 270 measured turns. A leaked conversation cache
/// is over a megabyte and leaked image features a quarter of one, so a per-turn leak of either
/// crosses it; allocator and buffer-pool jitter stays well below.
const RSS_GROWTH_LIMIT_KB: u64 = 32 * 1024;
/// Turns in one conversation before switching to the next.
const RUN: usize = 5;
/// Messages a conversation reaches before the person starts a new one.
const HISTORY: usize = 8;

/// Resident memory, threads and open file descriptors of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Usage {
    rss_kb: u64,
    threads: usize,
    fds: usize,
}

fn usage() -> Option<Usage> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    // Listing the folder opens one descriptor itself, the same one every time.
    let fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(Usage {
        rss_kb: field("VmRSS:")?,
        threads: field("Threads:")? as usize,
        fds,
    })
}

fn picture(seed: u8) -> Arc<Preprocessed> {
    let (width, height) = (64u32, 48u32);
    let pixels: Vec<u8> = (0..width * height * 3)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect();
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&pixels, width, height, ExtendedColorType::Rgb8)
        .unwrap();
    Arc::new(preprocess_bytes(&png, SoftTokenBudget::T70).unwrap())
}

/// One person's chats: three conversations taken in turn, each growing until it is replaced by
/// a new one; every other new conversation opens with a picture.
struct Script {
    pictures: Vec<Arc<Preprocessed>>,
    conversations: Vec<(String, Vec<Message>, Vec<Arc<Preprocessed>>)>,
    started: usize,
}

impl Script {
    fn new() -> Self {
        let mut script = Self {
            pictures: (1..=3).map(picture).collect(),
            conversations: Vec::new(),
            started: 0,
        };
        for _ in 0..3 {
            let fresh = script.fresh();
            script.conversations.push(fresh);
        }
        script
    }

    fn fresh(&mut self) -> (String, Vec<Message>, Vec<Arc<Preprocessed>>) {
        self.started += 1;
        let id = format!("conversation {}", self.started);
        let images = if self.started.is_multiple_of(2) {
            vec![self.pictures[self.started % self.pictures.len()].clone()]
        } else {
            Vec::new()
        };
        (id, Vec::new(), images)
    }

    /// The request of turn `turn`.
    fn request(&mut self, turn: usize) -> ChatRequest {
        let slot = (turn / RUN) % self.conversations.len();
        if self.conversations[slot].1.len() >= HISTORY {
            self.conversations[slot] = self.fresh();
        }
        let (id, messages, images) = &mut self.conversations[slot];
        let question = format!("Question {turn}: what about bread and rivers?");
        let content = if messages.is_empty() && !images.is_empty() {
            vec![Part::Image, Part::Text { text: question }]
        } else {
            vec![Part::Text { text: question }]
        };
        messages.push(Message::new(Role::User, content));
        ChatRequest {
            conversation: id.clone(),
            messages: messages.clone(),
            images: images.clone(),
            audio: Vec::new(),
            thinking: false,
            tools: Vec::new(),
            options: GenerateOptions {
                sampler: SamplerConfig::greedy(),
                max_tokens: 3,
                ..GenerateOptions::default()
            },
        }
    }

    fn answered(&mut self, turn: usize, answer: String) {
        let slot = (turn / RUN) % self.conversations.len();
        self.conversations[slot]
            .1
            .push(Message::text(Role::Assistant, answer));
    }
}

/// Sends one request and waits for its end; returns the streamed answer.
fn ask(engine: &Engine, request: ChatRequest) -> Result<String, String> {
    let (tx, rx) = channel();
    engine
        .generate(request, move |event| {
            let _ = tx.send(event);
        })
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Event::Prefill { .. }) => {}
            Ok(Event::Delta { delta, .. }) => answer.push_str(&delta),
            Ok(Event::Done { .. }) => return Ok(answer),
            Ok(Event::Error { error, .. }) => return Err(error.to_string()),
            Err(_) => return Err("no answer within 120 s".into()),
        }
    }
}

fn float32() -> LoadOptions {
    LoadOptions {
        dtype: Some(mlx_rs::Dtype::Float32),
        ..LoadOptions::default()
    }
}

#[test]
fn three_hundred_turns_leave_no_growth_and_no_leaks() {
    // MLX starts its own threads and pools on first use; they live as long as the process.
    // A short session first, so the baseline includes them.
    {
        let engine = Engine::spawn();
        engine.load(&fixture(), float32()).unwrap();
        let mut script = Script::new();
        for turn in [0, RUN] {
            let answer = ask(&engine, script.request(turn)).unwrap();
            script.answered(turn, answer);
        }
    }
    let before = usage();

    let start = Instant::now();
    let engine = Engine::spawn();
    engine.load(&fixture(), float32()).unwrap();
    let mut script = Script::new();
    let mut baseline = None;
    let mut samples = Vec::new();
    for turn in 0..TURNS {
        let request = script.request(turn);
        let answer = ask(&engine, request).unwrap_or_else(|e| panic!("turn {turn}: {e}"));
        script.answered(turn, answer);
        if turn + 1 == WARM_UP {
            baseline = usage();
        }
        if (turn + 1) % WARM_UP == 0 {
            samples.push((turn + 1, usage()));
        }
    }
    let after = usage();
    eprintln!(
        "{TURNS} turns in {:.1} s, {} conversations",
        start.elapsed().as_secs_f64(),
        script.started
    );
    for (turn, sample) in &samples {
        if let Some(u) = sample {
            eprintln!(
                "after {turn:>3} turns: RSS {:>7} kB, {} threads, {} fds",
                u.rss_kb, u.threads, u.fds
            );
        }
    }
    drop(engine);
    let end = usage();

    let (Some(before), Some(baseline), Some(after), Some(end)) = (before, baseline, after, end)
    else {
        eprintln!("no /proc here: resource checks skipped");
        return;
    };
    let growth = after.rss_kb.saturating_sub(baseline.rss_kb);
    eprintln!(
        "RSS grew {growth} kB over {} turns (limit {RSS_GROWTH_LIMIT_KB} kB)",
        TURNS - WARM_UP
    );
    assert!(
        growth <= RSS_GROWTH_LIMIT_KB,
        "RSS grew {growth} kB from turn {WARM_UP} to {TURNS}"
    );
    assert_eq!(
        (after.threads, after.fds),
        (baseline.threads, baseline.fds),
        "threads and fds during the run"
    );
    // MLX gives every OS thread that uses it a stream thread of its own, which outlives it, and
    // on the CPU each extra lane (`gemma::Tuning::cpu_lanes`) is another stream: one per lane per
    // engine thread, however many turns or model loads it ran. Nothing else may remain.
    assert_eq!(end.fds, before.fds, "fds once the engine is dropped");
    assert!(
        end.threads <= before.threads + gemma::Tuning::for_backend().cpu_lanes,
        "{} threads once the engine is dropped, {} before it started",
        end.threads,
        before.threads
    );
}
