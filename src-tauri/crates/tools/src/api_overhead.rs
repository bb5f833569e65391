//! `gemma-desk-bench --api-overhead`: what the local API costs on top of the engine it serves.
//!
//! One process loads the model once into one engine and starts the API server over it (as the
//! app and `gemma-desk-cli serve` do). Each repetition then answers the same greedy request twice,
//! in alternating order: straight through the engine (`Engine::generate`, what the window's chat
//! does) and through HTTP (`POST /v1/chat/completions`, streamed, from a plain HTTP/1.1 client on
//! a socket). Every answer's message starts with its own number, so no answer reuses another's
//! cache: both read the whole prompt (checked: the result says how many prompt tokens were reused). Measured, wall-clock from the request to: the first token (for HTTP,
//! the first SSE chunk that carries text) and the last; decode tokens/s over the tokens after
//! the first. Printed: one JSON object with the medians of both paths and their ratios.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use api::{ApiConfig, ApiKey, ServedModel, Server};
use engine::events::{ChatRequest, Event};
use engine::image::SoftTokenBudget;
use engine::options::GenerateOptions;
use engine::sampler::SamplerConfig;
use engine::template::{Message, Role};
use engine::worker::Engine;
use gemma::LoadOptions;
use serde_json::{json, Value};

/// What to measure.
pub struct Plan<'a> {
    pub model: &'a Path,
    pub load: LoadOptions,
    /// Words of the user's message (about one token each).
    pub prompt_words: usize,
    pub max_tokens: usize,
    pub reps: usize,
}

/// One answer's timings.
#[derive(Debug, Clone, Copy)]
struct Timing {
    first_s: f64,
    total_s: f64,
    tokens: usize,
    prompt_tokens: usize,
    reused: usize,
}

impl Timing {
    fn decode_tps(&self) -> f64 {
        if self.tokens < 2 {
            return 0.0;
        }
        (self.tokens - 1) as f64 / (self.total_s - self.first_s).max(1e-9)
    }
}

/// Runs the plan and returns the JSON result.
pub fn run(plan: &Plan<'_>) -> Result<Value> {
    let engine = Arc::new(Engine::spawn());
    let info = engine
        .load(plan.model, plan.load.clone())
        .with_context(|| format!("loading {}", plan.model.display()))?;
    let context_window = plan.prompt_words * 2 + plan.max_tokens + 256;
    let model = ServedModel {
        id: "bench".into(),
        aliases: Vec::new(),
        vision: info.vision,
        audio: info.audio,
        context_window,
        sampler: SamplerConfig::load(plan.model)?,
        image_budget: SoftTokenBudget::default(),
    };
    let key = ApiKey::generate()?;
    let mut config = ApiConfig::new(key.clone(), model);
    config.port = 0;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    let server = runtime.block_on(Server::start(engine.clone(), config))?;
    let port = server.address().port();

    let mut answers = 0usize;
    let mut text = || {
        answers += 1;
        format!("Request {answers}. {}", prompt_text(plan.prompt_words))
    };
    let options = GenerateOptions {
        sampler: SamplerConfig::greedy(),
        max_tokens: plan.max_tokens,
        context_window,
        ..GenerateOptions::default()
    };
    // Warm-up of both paths (kernels compiled, first allocations made); not counted.
    direct(&engine, &text(), &options)?;
    http(port, key.reveal(), &text(), plan.max_tokens)?;

    let mut direct_runs = Vec::new();
    let mut http_runs = Vec::new();
    for rep in 0..plan.reps {
        // Alternate which path goes first, so neither always follows the other.
        if rep % 2 == 0 {
            direct_runs.push(direct(&engine, &text(), &options)?);
            http_runs.push(http(port, key.reveal(), &text(), plan.max_tokens)?);
        } else {
            http_runs.push(http(port, key.reveal(), &text(), plan.max_tokens)?);
            direct_runs.push(direct(&engine, &text(), &options)?);
        }
    }
    runtime.block_on(server.shutdown())?;

    // Greedy over prompts that differ only in their number: every answer should be as long.
    let same_length = direct_runs
        .iter()
        .chain(&http_runs)
        .all(|t| t.tokens == direct_runs[0].tokens);
    let summary = |runs: &[Timing]| {
        json!({
            "ttft_ms": median(runs.iter().map(|t| t.first_s * 1e3)),
            "total_ms": median(runs.iter().map(|t| t.total_s * 1e3)),
            "decode_tps": median(runs.iter().map(Timing::decode_tps)),
            "tokens": runs[0].tokens,
            "prompt_tokens": runs[0].prompt_tokens,
            "reused_tokens_max": runs.iter().map(|t| t.reused).max().unwrap_or(0),
            "ttft_ms_all": runs.iter().map(|t| round(t.first_s * 1e3)).collect::<Vec<_>>(),
            "decode_tps_all": runs.iter().map(|t| round(t.decode_tps())).collect::<Vec<_>>(),
        })
    };
    let d = summary(&direct_runs);
    let h = summary(&http_runs);
    let ratio =
        |key: &str| h[key].as_f64().unwrap_or(0.0) / d[key].as_f64().unwrap_or(1.0).max(1e-9);
    Ok(json!({
        "case": "api-overhead",
        "reps": plan.reps,
        "prompt_words": plan.prompt_words,
        "max_tokens": plan.max_tokens,
        "same_length_every_answer": same_length,
        "direct": d,
        "http": h,
        "ratio_ttft_http_over_direct": round(ratio("ttft_ms")),
        "ratio_decode_tps_http_over_direct": round(ratio("decode_tps")),
    }))
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => round(v[n / 2]),
        n => round((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// A plain English-like prompt of about `words` tokens.
fn prompt_text(words: usize) -> String {
    const WORDS: [&str; 8] = [
        "river", "stone", "light", "window", "garden", "paper", "music", "cloud",
    ];
    let mut text = String::from("Continue this list: ");
    for i in 0..words {
        text.push_str(WORDS[(i * 7 + i / 8) % WORDS.len()]);
        text.push(' ');
    }
    text
}

/// The window's path: a request straight to the engine.
fn direct(engine: &Engine, text: &str, options: &GenerateOptions) -> Result<Timing> {
    let request = ChatRequest {
        tools: Vec::new(),
        conversation: "bench".into(),
        messages: vec![Message::text(Role::User, text)],
        images: Vec::new(),
        audio: Vec::new(),
        thinking: false,
        options: options.clone(),
    };
    let (send, receive) = channel();
    let start = Instant::now();
    engine.generate(request, move |event| {
        let _ = send.send((Instant::now(), event));
    })?;
    let mut first = None;
    loop {
        let (at, event) = receive.recv().context("the engine stopped")?;
        match event {
            Event::Prefill { .. } => {}
            // As a client sees it: the first piece of text (a token may hold back an
            // incomplete character, and a marker shows none).
            Event::Delta { delta, .. } if !delta.is_empty() => {
                first.get_or_insert(at);
            }
            Event::Delta { .. } => {}
            Event::Done { usage, .. } => {
                let first = first.unwrap_or(at);
                return Ok(Timing {
                    first_s: (first - start).as_secs_f64(),
                    total_s: (at - start).as_secs_f64(),
                    tokens: usage.generated_tokens,
                    prompt_tokens: usage.prompt_tokens,
                    reused: usage.reused_tokens,
                });
            }
            Event::Error { error, .. } => bail!("the engine failed: {error}"),
        }
    }
}

/// The API's path: the same request over HTTP, streamed, read as a client reads it.
fn http(port: u16, key: &str, text: &str, max_tokens: usize) -> Result<Timing> {
    let body = json!({
        "model": "bench",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string();
    let start = Instant::now();
    let mut socket = TcpStream::connect(("127.0.0.1", port))?;
    socket.set_nodelay(true)?;
    write!(
        socket,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reader = BufReader::new(socket);
    let mut status = String::new();
    reader.read_line(&mut status)?;
    if !status.contains(" 200 ") {
        let mut rest = String::new();
        let _ = reader.read_to_string(&mut rest);
        bail!("the API answered {}: {rest}", status.trim());
    }
    let mut chunked = false;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if line.eq_ignore_ascii_case("transfer-encoding: chunked") {
            chunked = true;
        }
    }
    let mut first = None;
    let mut usage = None;
    let mut pending = String::new();
    'read: loop {
        let piece = if chunked {
            read_chunk(&mut reader)?
        } else {
            read_some(&mut reader)?
        };
        let Some(piece) = piece else { break };
        let at = Instant::now();
        pending.push_str(&piece);
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                break 'read;
            }
            let chunk: Value =
                serde_json::from_str(data).context("an SSE chunk that is not JSON")?;
            if let Some(error) = chunk.get("error") {
                bail!("the API failed mid-stream: {error}");
            }
            let has_text = chunk["choices"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["delta"]["content"]
                        .as_str()
                        .is_some_and(|t| !t.is_empty())
                })
            });
            if has_text {
                first.get_or_insert(at);
            }
            if chunk["usage"].is_object() {
                usage = Some((chunk["usage"].clone(), at));
            }
        }
    }
    let (usage, end) = usage.ok_or_else(|| anyhow!("the stream ended without its usage chunk"))?;
    let first = first.unwrap_or(end);
    Ok(Timing {
        first_s: (first - start).as_secs_f64(),
        total_s: (end - start).as_secs_f64(),
        tokens: usage["completion_tokens"].as_u64().unwrap_or(0) as usize,
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0) as usize,
        reused: usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0) as usize,
    })
}

/// One chunk of a chunked body; `None` at its end.
fn read_chunk(reader: &mut impl BufRead) -> Result<Option<String>> {
    let mut size = String::new();
    if reader.read_line(&mut size)? == 0 {
        return Ok(None);
    }
    let size = usize::from_str_radix(size.trim(), 16).context("a chunk size that is not hex")?;
    if size == 0 {
        return Ok(None);
    }
    let mut data = vec![0; size + 2];
    reader.read_exact(&mut data)?;
    data.truncate(size);
    Ok(Some(String::from_utf8_lossy(&data).into_owned()))
}

/// Whatever bytes have arrived of a body that is not chunked; `None` at its end.
fn read_some(reader: &mut impl BufRead) -> Result<Option<String>> {
    let buffer = reader.fill_buf()?;
    if buffer.is_empty() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(buffer).into_owned();
    let n = buffer.len();
    reader.consume(n);
    Ok(Some(text))
}
