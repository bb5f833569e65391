//! `gemma-desk-cli`: the same engine as the app, for headless use and for checks.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::sync::Arc;

use engine::audio::{AudioClip, AudioLimits};
use engine::generate::StopReason;
use engine::image::{preprocess_path, SoftTokenBudget};
use engine::loaded::LoadedModel;
use engine::media::{FeatureCache, Towers};
use engine::options::GenerateOptions;
use engine::sampler::SamplerConfig;
use engine::speculative::SpeculativeOptions;
use engine::stream::{placeholder_runs, Session, StreamRequest};
use engine::template::{Message, Part, Role};
use gemma::{LoadOptions, MediaFeatures, Model, TapPoint, Taps};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype};

#[derive(Parser)]
#[command(
    name = "gemma-desk-cli",
    version,
    about = "Gemma 4 on MLX, from the terminal"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum DtypeArg {
    Bfloat16,
    Float32,
}

#[derive(clap::Args)]
struct SamplingArgs {
    /// Maximum tokens to generate.
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    /// Sampling temperature (0 = greedy); default from generation_config.json.
    #[arg(long)]
    temperature: Option<f32>,
    #[arg(long)]
    top_p: Option<f32>,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    min_p: Option<f32>,
    #[arg(long)]
    repetition_penalty: Option<f32>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Compute dtype (default: the checkpoint's).
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
    /// Let the model think before answering (Gemma 4 thinking mode).
    #[arg(long)]
    thinking: bool,
    /// Quantize the KV cache as the checkpoint's kv_config.json says (OptiQ).
    #[arg(long)]
    kv_quantization: bool,
    /// Images to ask about (repeatable); they come before the prompt text.
    #[arg(long)]
    image: Vec<PathBuf>,
    /// Soft-token budget per image (70, 140, 280, 560 or 1120).
    #[arg(long, default_value_t = 280)]
    max_soft_tokens: usize,
    /// Audio files to ask about (repeatable: WAV, MP3, FLAC, OGG/Vorbis, M4A/AAC); they come
    /// after the prompt text. A recording longer than 30 s is heard as consecutive 30 s clips.
    #[arg(long)]
    audio: Vec<PathBuf>,
    /// A Gemma 4 MTP assistant drafter folder: answers are drafted by it and checked by the
    /// model (the same tokens, faster where the device has spare compute).
    #[arg(long)]
    draft_model: Option<PathBuf>,
    /// Tokens per check: the drafts plus one (default: the drafter's, 4).
    #[arg(long, requires = "draft_model")]
    draft_block_size: Option<usize>,
    /// Keep drafting however few drafts are accepted (by default drafting stops for the rest
    /// of an answer when it does not pay).
    #[arg(long, requires = "draft_model")]
    draft_always: bool,
    /// A LoRA/DoRA adapter folder (mlx-lm, mlx-vlm or PEFT) to answer with (docs/ADAPTERS.md).
    #[arg(long)]
    adapter: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Answer one prompt, streaming the text to stdout.
    Generate {
        #[arg(long)]
        model: PathBuf,
        #[arg(long)]
        prompt: String,
        #[arg(long)]
        system: Option<String>,
        /// One JSON object per line: token ids, text deltas, then a usage record.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        sampling: SamplingArgs,
    },
    /// An interactive chat in the terminal: /help lists its commands, /bye or Ctrl-D leaves,
    /// Ctrl-C stops an answer, an empty line is ignored.
    Chat {
        #[arg(long)]
        model: PathBuf,
        #[arg(long)]
        system: Option<String>,
        #[command(flatten)]
        sampling: SamplingArgs,
    },
    /// Serve the OpenAI-compatible local API until Ctrl+C: 127.0.0.1 only, API key required
    /// (docs/API.md).
    Serve(ServeArgs),
    /// Teacher-forced logits over a token list, written as a float32 safetensors tensor `logits`.
    Logits {
        #[arg(long)]
        model: PathBuf,
        /// Comma-separated token ids.
        #[arg(long, value_delimiter = ',', required = true)]
        tokens: Vec<u32>,
        /// Compute dtype (default: the checkpoint's).
        #[arg(long, value_enum)]
        dtype: Option<DtypeArg>,
        /// Every position's row ([T, vocab]) instead of the last one ([vocab]).
        #[arg(long)]
        all_positions: bool,
        /// Prefill only the first N tokens in one forward, then feed the rest one at a time
        /// through the decode path (rows are returned for every position).
        #[arg(long)]
        prefill: Option<usize>,
        /// Images filling the token list's placeholder runs (boi, n × image, eoi), in order.
        #[arg(long)]
        image: Vec<PathBuf>,
        /// Soft-token budget per image (70, 140, 280, 560 or 1120).
        #[arg(long, default_value_t = 280)]
        max_soft_tokens: usize,
        /// Audio files whose clips fill the token list's audio placeholder runs (boa,
        /// n × audio, eoa), in order; a file longer than 30 s fills one run per 30 s clip.
        #[arg(long)]
        audio: Vec<PathBuf>,
        /// Quantize the KV cache as the checkpoint's kv_config.json says (OptiQ).
        #[arg(long)]
        kv_quantization: bool,
        /// A LoRA/DoRA adapter folder (mlx-lm, mlx-vlm or PEFT) applied over the model.
        #[arg(long)]
        adapter: Option<PathBuf>,
        #[arg(long)]
        out: PathBuf,
    },
    /// Hidden states of a token list (or a prompt's ids) after the chosen decoder layers, and
    /// after the final norm with --final-norm: float32 safetensors tensor `hidden`
    /// [points, T, hidden].
    Hidden {
        #[arg(long)]
        model: PathBuf,
        /// Comma-separated token ids.
        #[arg(
            long,
            value_delimiter = ',',
            required_unless_present = "prompt",
            conflicts_with = "prompt"
        )]
        tokens: Vec<u32>,
        /// Text whose ids (as the tokenizer makes them, no template) are fed instead.
        #[arg(long)]
        prompt: Option<String>,
        /// Comma-separated layer indices (0-based), in output order.
        #[arg(long, value_delimiter = ',', required_unless_present = "final_norm")]
        layers: Vec<usize>,
        /// Also (last) the state after the final norm, which the head reads.
        #[arg(long)]
        final_norm: bool,
        /// Prefill only the first N tokens, then one token per forward (the decode path).
        #[arg(long)]
        prefill: Option<usize>,
        /// Compute dtype (default: the checkpoint's).
        #[arg(long, value_enum)]
        dtype: Option<DtypeArg>,
        /// A LoRA/DoRA adapter folder applied over the model.
        #[arg(long)]
        adapter: Option<PathBuf>,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    #[arg(long)]
    model: PathBuf,
    /// Port on 127.0.0.1 (0: any free port, printed). A busy port is an error.
    #[arg(long, default_value_t = api::DEFAULT_PORT)]
    port: u16,
    /// The key clients must send (visible to other users in the process list: prefer
    /// --api-key-file). Without either, the key kept in the app's data folder is used (made
    /// the first time; its path is printed).
    #[arg(long, conflicts_with_all = ["api_key_file", "new_key"])]
    api_key: Option<String>,
    /// A file holding the key clients must send.
    #[arg(long, conflicts_with = "new_key")]
    api_key_file: Option<PathBuf>,
    /// Replace the kept key with a new one (clients holding the old key then get 401).
    #[arg(long)]
    new_key: bool,
    /// A browser origin allowed to call the API, exactly as the browser sends it (e.g.
    /// `chrome-extension://<id>`); repeatable. None by default.
    #[arg(long = "allow-origin")]
    allow_origins: Vec<String>,
    /// Tokens a request may use, prompt and answer together.
    #[arg(long, default_value_t = api::config::DEFAULT_CONTEXT)]
    context_length: usize,
    /// Answers written at once, 1 to 8 (requests beyond wait; each answer is the one it would
    /// be alone).
    #[arg(long, default_value_t = engine::batch::DEFAULT_PARALLEL,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
              .range(1..=engine::batch::MAX_PARALLEL as u64))]
    parallel: usize,
    /// Requests that may wait behind the ones being answered (more get 503).
    #[arg(long, default_value_t = api::config::DEFAULT_QUEUE_DEPTH)]
    queue_depth: usize,
    /// Soft-token budget per image (70, 140, 280, 560 or 1120).
    #[arg(long, default_value_t = 280)]
    max_soft_tokens: usize,
    /// Compute dtype (default: the checkpoint's).
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
    /// A LoRA/DoRA adapter folder (mlx-lm, mlx-vlm or PEFT) every answer uses.
    #[arg(long)]
    adapter: Option<PathBuf>,
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Generate {
            model,
            prompt,
            system,
            json,
            sampling,
        } => generate_once(&model, &prompt, system, json, &sampling),
        Command::Chat {
            model,
            system,
            sampling,
        } => chat(&model, system, &sampling),
        Command::Serve(args) => serve(&args),
        Command::Logits {
            model,
            tokens,
            dtype,
            all_positions,
            prefill,
            image,
            max_soft_tokens,
            audio,
            kv_quantization,
            adapter,
            out,
        } => logits(
            (&model, adapter.as_deref()),
            &tokens,
            dtype,
            all_positions,
            prefill,
            (&image, max_soft_tokens),
            &audio,
            kv_quantization,
            &out,
        ),
        Command::Hidden {
            model,
            tokens,
            prompt,
            layers,
            final_norm,
            prefill,
            dtype,
            adapter,
            out,
        } => hidden(
            (&model, adapter.as_deref(), dtype),
            (&tokens, prompt.as_deref()),
            &layers,
            final_norm,
            prefill,
            &out,
        ),
    }
}

/// The `hidden` command: see [`Command::Hidden`].
fn hidden(
    (dir, adapter, dtype): (&Path, Option<&Path>, Option<DtypeArg>),
    (tokens, prompt): (&[u32], Option<&str>),
    layers: &[usize],
    final_norm: bool,
    prefill: Option<usize>,
    out: &Path,
) -> Result<()> {
    let model = load(dir, dtype, false, adapter)?;
    let ids = match prompt {
        Some(text) => engine::tokenizer::Tokenizer::load(dir)?.encode(text)?,
        None => tokens.to_vec(),
    };
    if ids.is_empty() {
        bail!("no tokens to read hidden states of");
    }
    let split = prefill.unwrap_or(ids.len());
    if !(1..=ids.len()).contains(&split) {
        bail!("--prefill must be between 1 and {}", ids.len());
    }
    let mut points: Vec<TapPoint> = layers.iter().map(|&l| TapPoint::Layer(l)).collect();
    if final_norm {
        points.push(TapPoint::FinalNorm);
    }
    let mut taps = Taps::new(points);
    let mut caches = model.new_caches();
    model.forward_tapped(&ids[..split], &mut caches, &mut taps)?;
    for t in split..ids.len() {
        model.forward_tapped(&ids[t..t + 1], &mut caches, &mut taps)?;
    }
    write_f32(out, "hidden", &taps.stacked()?)
}

fn dtype_of(dtype: Option<DtypeArg>) -> Option<Dtype> {
    dtype.map(|d| match d {
        DtypeArg::Bfloat16 => Dtype::Bfloat16,
        DtypeArg::Float32 => Dtype::Float32,
    })
}

fn load(
    dir: &Path,
    dtype: Option<DtypeArg>,
    kv_quantization: bool,
    adapter: Option<&Path>,
) -> Result<Model> {
    Model::load(
        dir,
        &LoadOptions {
            dtype: dtype_of(dtype),
            kv_quantization,
            adapter: adapter.map(Path::to_path_buf),
            ..LoadOptions::default()
        },
    )
    .with_context(|| format!("loading {}", dir.display()))
}

fn load_chat(dir: &Path, sampling: &SamplingArgs) -> Result<(LoadedModel, GenerateOptions)> {
    let loaded = LoadedModel::load(
        dir,
        &LoadOptions {
            dtype: dtype_of(sampling.dtype),
            kv_quantization: sampling.kv_quantization,
            adapter: sampling.adapter.clone(),
            ..LoadOptions::default()
        },
    )
    .with_context(|| format!("loading {}", dir.display()))?;
    let mut loaded = loaded;
    if let Some(draft) = &sampling.draft_model {
        let mut speculative = SpeculativeOptions {
            min_accepted: Some(loaded.policy.min_drafts_accepted),
            ..SpeculativeOptions::default()
        };
        if let Some(n) = sampling.draft_block_size {
            if !(2..=64).contains(&n) {
                bail!("--draft-block-size must be between 2 and 64, found {n}");
            }
            speculative.block_size = n;
        }
        if sampling.draft_always {
            speculative.min_accepted = None;
        }
        let explicit = sampling.draft_block_size.is_some() || sampling.draft_always;
        loaded
            .load_drafter(draft, explicit.then_some(speculative))
            .with_context(|| format!("loading the drafter {}", draft.display()))?;
    }
    let mut sampler = SamplerConfig::load(dir)?;
    if let Some(t) = sampling.temperature {
        sampler.temperature = t;
    }
    sampler.top_p = sampling.top_p.or(sampler.top_p);
    sampler.top_k = sampling.top_k.or(sampler.top_k);
    sampler.min_p = sampling.min_p.or(sampler.min_p);
    sampler.repetition_penalty = sampling.repetition_penalty.or(sampler.repetition_penalty);
    sampler.seed = sampling.seed;
    sampler.validate()?;
    let options = GenerateOptions {
        sampler,
        max_tokens: sampling.max_tokens,
        ..GenerateOptions::default()
    };
    Ok((loaded, options))
}

fn generate_once(
    dir: &Path,
    prompt: &str,
    system: Option<String>,
    json: bool,
    sampling: &SamplingArgs,
) -> Result<()> {
    let (m, options) = load_chat(dir, sampling)?;
    let mut messages: Vec<Message> = system
        .into_iter()
        .map(|s| Message::text(Role::System, s))
        .collect();
    let budget = SoftTokenBudget::try_from(sampling.max_soft_tokens)?;
    let images = sampling
        .image
        .iter()
        .map(|p| {
            preprocess_path(p, budget)
                .map(Arc::new)
                .with_context(|| format!("reading {}", p.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let clips = audio_clips(&sampling.audio)?;
    // Images before the text, audio after it: the order mlx-vlm writes them in.
    let mut parts: Vec<Part> = images.iter().map(|_| Part::Image).collect();
    parts.push(Part::Text {
        text: prompt.to_string(),
    });
    parts.extend(clips.iter().map(|_| Part::Audio));
    messages.push(Message::new(Role::User, parts));
    let prompt = m.prompt_with_tools(&messages, &[], sampling.thinking, &images, &clips)?;
    let mut session = Session::new(&m.model);
    let cancel = AtomicBool::new(false);
    let mut out = std::io::stdout().lock();
    let usage = m.generate(
        StreamRequest::new(&mut session, &prompt, &options, &cancel),
        |d| {
            let line = if json {
                let record = match d.token {
                    Some(token) => serde_json::json!({ "token": token, "text": d.text }),
                    None => serde_json::json!({ "text": d.text }),
                };
                format!("{record}\n")
            } else {
                d.text
            };
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
        },
    )?;
    if json {
        writeln!(out, "{}", serde_json::json!({ "usage": usage }))?;
    } else {
        writeln!(out)?;
        let why = stop_words(usage.stop_reason, &options)
            .unwrap_or_else(|| "the answer is complete".to_owned());
        eprintln!(
            "[{} prompt tokens, {} generated, {:.1} tok/s, first token after {:.0} ms; {why}]",
            usage.prompt_tokens,
            usage.generated_tokens,
            usage.decode_tokens_per_second,
            usage.time_to_first_token_ms,
        );
        if let Some(spec) = &usage.speculative {
            eprintln!("[{}]", speculation_line(spec));
        }
    }
    Ok(())
}

/// Why an answer stopped, in words, when it stopped before its end of turn.
fn stop_words(reason: StopReason, options: &GenerateOptions) -> Option<String> {
    match reason {
        StopReason::EndOfTurn => None,
        StopReason::MaxTokens => Some(format!(
            "stopped: reached the token limit ({})",
            options.max_tokens
        )),
        StopReason::ContextFull => Some(format!(
            "stopped: the context is full ({} tokens)",
            options.context_window
        )),
        StopReason::Cancelled => Some("stopped with Ctrl+C".to_owned()),
    }
}

/// The chat's commands and keys, as `/help` prints them.
const CHAT_HELP: &str = "\
Commands:
  /help, /?          this list
  /clear             start a new conversation (the system prompt is kept)
  /bye, /quit, /exit leave (as Ctrl+D does)
Keys: Ctrl+C stops the answer being written (it is kept); Ctrl+D leaves.
An empty line is ignored. To send a message that starts with /, begin it with //.";

/// What a line typed at the chat's prompt asks for.
#[derive(Debug, PartialEq)]
enum Typed<'a> {
    /// Nothing (an empty line): ask again.
    Nothing,
    /// A message for the model.
    Message(&'a str),
    Help,
    Clear,
    Leave,
    /// A `/word` that is no command: said, never sent.
    Unknown(&'a str),
}

fn typed(line: &str) -> Typed<'_> {
    let line = line.trim();
    if line.is_empty() {
        return Typed::Nothing;
    }
    let Some(rest) = line.strip_prefix('/') else {
        return Typed::Message(line);
    };
    if rest.starts_with('/') {
        return Typed::Message(rest);
    }
    let command = line.split_whitespace().next().unwrap_or(line);
    match command {
        "/help" | "/?" => Typed::Help,
        "/clear" => Typed::Clear,
        "/bye" | "/quit" | "/exit" => Typed::Leave,
        _ => Typed::Unknown(command),
    }
}

/// An interactive chat, as `ollama run`: Ctrl+C stops the answer being written (it is kept, and
/// the chat goes on); at the prompt it says how to leave; Ctrl+D or `/bye` leaves; an empty line
/// is ignored; `/help` and the other `/commands` are handled here, never sent to the model.
fn chat(dir: &Path, system: Option<String>, sampling: &SamplingArgs) -> Result<()> {
    let (m, options) = load_chat(dir, sampling)?;
    let first: Vec<Message> = system
        .into_iter()
        .map(|s| Message::text(Role::System, s))
        .collect();
    let mut messages = first.clone();
    let mut session = Session::new(&m.model);
    let cancel = Arc::new(AtomicBool::new(false));
    let answering = Arc::new(AtomicBool::new(false));
    {
        // Ctrl+C is read on a thread of its own (signal-hook: plain POSIX signals, nothing
        // platform-specific), which decides what it means now.
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT])
            .context("listening for Ctrl+C")?;
        let (cancel, answering) = (cancel.clone(), answering.clone());
        std::thread::spawn(move || {
            for _ in signals.forever() {
                if answering.load(Ordering::SeqCst) {
                    cancel.store(true, Ordering::SeqCst);
                } else {
                    eprint!("\n(Ctrl+D or /bye leaves)\n> ");
                }
            }
        });
    }
    eprintln!(
        "Chatting with {}. /help lists the commands; Ctrl+C stops an answer; Ctrl+D or /bye \
         leaves.",
        dir.display()
    );
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            // Ctrl+D: leave the shell's prompt on a line of its own.
            eprintln!();
            return Ok(());
        }
        let text = match typed(&line) {
            Typed::Nothing => continue,
            Typed::Leave => return Ok(()),
            Typed::Help => {
                eprintln!("{CHAT_HELP}");
                continue;
            }
            Typed::Clear => {
                messages = first.clone();
                eprintln!("(a new conversation)");
                continue;
            }
            Typed::Unknown(command) => {
                eprintln!("Unknown command {command}: /help lists the commands.");
                continue;
            }
            Typed::Message(text) => text,
        };
        messages.push(Message::text(Role::User, text));
        let prompt = m.prompt(&messages, sampling.thinking, &[])?;
        let mut answer = String::new();
        let mut ids = Vec::new();
        cancel.store(false, Ordering::SeqCst);
        answering.store(true, Ordering::SeqCst);
        let usage = m.generate(
            StreamRequest::new(&mut session, &prompt, &options, &cancel),
            |d| {
                print!("{}", d.text);
                let _ = std::io::stdout().flush();
                answer.push_str(&d.text);
                ids.extend(d.token);
            },
        );
        answering.store(false, Ordering::SeqCst);
        let usage = usage?;
        println!();
        let stopped = stop_words(usage.stop_reason, &options)
            .map(|why| format!("{why}; "))
            .unwrap_or_default();
        let drafted = usage
            .speculative
            .as_ref()
            .map(|s| format!(", {:.2} tokens/round", s.tokens_per_round()))
            .unwrap_or_default();
        eprintln!(
            "[{stopped}{:.1} tok/s{drafted}, {} prompt tokens, {} of them reused]",
            usage.decode_tokens_per_second, usage.prompt_tokens, usage.reused_tokens
        );
        // With the ids it generated, so that the next turn reuses the cache over this answer.
        // A stopped answer is kept too: the next question follows what was shown.
        messages.push(Message::text(Role::Assistant, answer).with_generated(ids));
    }
}

/// The local API over the engine, until Ctrl+C (or SIGTERM): the same server, defaults and
/// checks as the app's.
fn serve(args: &ServeArgs) -> Result<()> {
    use api::config::{MAX_CONTEXT, MIN_CONTEXT};
    use api::{ApiConfig, ApiKey, ServedModel, Server};
    use tools::serve_cli::{kept_key, kept_key_path, PrintRequests};

    // Where the key came from, said at start when it was not given.
    let (key, kept) = match (&args.api_key, &args.api_key_file) {
        (Some(key), _) => (ApiKey::new(key)?, None),
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading the API key from {}", file.display()))?;
            let key =
                ApiKey::new(&text).with_context(|| format!("the API key in {}", file.display()))?;
            (key, None)
        }
        (None, None) => {
            let path = kept_key_path()?;
            let (key, made) = kept_key(&path, args.new_key)?;
            (key, Some((path, made)))
        }
    };
    if !(MIN_CONTEXT..=MAX_CONTEXT).contains(&args.context_length) {
        bail!(
            "--context-length must be between {MIN_CONTEXT} and {MAX_CONTEXT}, not {}",
            args.context_length
        );
    }
    let budget = SoftTokenBudget::try_from(args.max_soft_tokens)?;
    // Said before the model loads (the slow part), and checked again when the server binds.
    if args.port != 0 {
        std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, args.port)).map_err(
            |e| match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    anyhow::Error::new(api::ServeError::PortInUse { port: args.port })
                }
                _ => anyhow::Error::new(e)
                    .context(format!("cannot listen on 127.0.0.1:{}", args.port)),
            },
        )?;
    }
    let engine = Arc::new(engine::worker::Engine::spawn());
    let info = engine
        .load(
            &args.model,
            LoadOptions {
                dtype: dtype_of(args.dtype),
                adapter: args.adapter.clone(),
                ..LoadOptions::default()
            },
        )
        .with_context(|| format!("loading {}", args.model.display()))?;
    let folder_name = |dir: &Path| {
        dir.canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default()
    };
    let folder = folder_name(&args.model);
    // With an adapter the server answers as `base:adapter` (docs/ADAPTERS.md), never as the
    // plain base it does not serve.
    let id = match &args.adapter {
        Some(adapter) => format!(
            "{}:{}",
            ServedModel::id_from_folder_name(&folder),
            ServedModel::id_from_folder_name(&folder_name(adapter))
        ),
        None => ServedModel::id_from_folder_name(&folder),
    };
    let model = ServedModel {
        id,
        aliases: Vec::new(),
        vision: info.vision,
        audio: info.audio,
        context_window: args.context_length,
        sampler: SamplerConfig::load(&args.model)?,
        image_budget: budget,
    };
    let mut config = ApiConfig::new(key.clone(), model.clone());
    config.port = args.port;
    config.allowed_origins = args.allow_origins.clone();
    config.queue_depth = args.queue_depth;
    config.parallel = args.parallel;
    engine.set_parallel(args.parallel)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        // Ctrl+C and SIGTERM stop the server.
        let mut interrupt = signal(SignalKind::interrupt()).context("listening for Ctrl+C")?;
        let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        let server = Server::start(engine, config).await?;
        server.watch(Some(Arc::new(PrintRequests)));
        println!("Serving {} at {}", model.id, server.base_url());
        if let Some((path, made)) = &kept {
            let new = if *made { "new; " } else { "" };
            println!(
                "API key: {} ({new}kept in {}; --new-key replaces it)",
                key.reveal(),
                path.display()
            );
        }
        println!("Ctrl+C stops the server. Requests are logged on stderr.");
        let _ = std::io::stdout().flush();
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("Stopping…");
        server.shutdown().await?;
        Ok::<_, anyhow::Error>(())
    })
}

#[allow(clippy::too_many_arguments)]
fn logits(
    (dir, adapter): (&Path, Option<&Path>),
    tokens: &[u32],
    dtype: Option<DtypeArg>,
    all: bool,
    prefill: Option<usize>,
    (images, max_soft_tokens): (&[PathBuf], usize),
    audio: &[PathBuf],
    kv_quantization: bool,
    out: &Path,
) -> Result<()> {
    let model = load(dir, dtype, kv_quantization, adapter)?;
    let mut bound: Vec<(u32, Array)> = Vec::new();
    bound.extend(image_features(&model, images, max_soft_tokens, tokens)?);
    bound.extend(audio_features(&model, audio, tokens)?);
    // Teacher-forced forward over `part`, which starts at `start` in `tokens`: each media kind
    // fills its placeholders in `part` with its next rows.
    let forward = |part: &[u32],
                   start: usize,
                   caches: &mut [gemma::KvCache],
                   keep: Option<usize>|
     -> Result<Array> {
        let rows: Vec<(u32, Array)> = bound
            .iter()
            .filter_map(|(token, features)| {
                let before = tokens[..start].iter().filter(|&&t| t == *token).count() as i32;
                let inside = part.iter().filter(|&&t| t == *token).count() as i32;
                (inside > 0).then(|| (*token, features.index(before..before + inside)))
            })
            .collect();
        let media: Vec<MediaFeatures<'_>> = rows
            .iter()
            .map(|(token_id, features)| MediaFeatures {
                token_id: *token_id,
                features,
            })
            .collect();
        Ok(model.forward(part, &media, caches, keep)?)
    };
    let mut caches = model.new_caches();
    let rows: Array = match prefill {
        Some(n) => {
            if n == 0 || n > tokens.len() {
                bail!(
                    "--prefill must be between 1 and the number of tokens ({})",
                    tokens.len()
                );
            }
            let mut parts = vec![forward(&tokens[..n], 0, &mut caches, None)?];
            for (i, token) in tokens.iter().enumerate().skip(n) {
                let row = forward(std::slice::from_ref(token), i, &mut caches, None)?;
                row.eval()?;
                parts.push(row);
            }
            mlx_rs::ops::concatenate(&parts, 0)?
        }
        None => forward(tokens, 0, &mut caches, if all { None } else { Some(1) })?,
    };
    let rows = if all || prefill.is_some() {
        rows
    } else {
        rows.reshape(&[-1])?
    };
    write_f32(out, "logits", &rows)
}

/// Features of `images` (in order) for a token list that already holds their placeholder runs;
/// a run/image count mismatch is an error naming both counts.
fn image_features(
    model: &Model,
    images: &[PathBuf],
    budget: usize,
    tokens: &[u32],
) -> Result<Option<(u32, Array)>> {
    let image_token = model.config().image_token_id;
    let runs = image_token.map_or(0, |id| placeholder_runs(tokens, id).len());
    if runs != images.len() {
        bail!(
            "the token list has {runs} image placeholder runs but {} --image files were given",
            images.len()
        );
    }
    let (Some(image_token), false) = (image_token, images.is_empty()) else {
        return Ok(None);
    };
    let budget = SoftTokenBudget::try_from(budget)?;
    let (mut cache, mut towers) = (FeatureCache::new(images.len()), Towers::default());
    let mut parts = Vec::new();
    for path in images {
        let image =
            preprocess_path(path, budget).with_context(|| format!("reading {}", path.display()))?;
        parts.push(cache.features(&mut towers, model, &image)?);
    }
    let features = mlx_rs::ops::concatenate(&parts, 0)?;
    let rows = features.shape()[0] as usize;
    let found = tokens.iter().filter(|&&t| t == image_token).count();
    if rows != found {
        bail!(
            "the images make {rows} soft tokens but the token list has {found} image placeholders"
        );
    }
    Ok(Some((image_token, features)))
}

/// The clips of `files` (in order; a recording over 30 s is several), decoded and featurized.
/// A recording cut at the clip limit is said on stderr.
fn audio_clips(files: &[PathBuf]) -> Result<Vec<Arc<AudioClip>>> {
    let limits = AudioLimits::default();
    let mut clips = Vec::new();
    for path in files {
        let prepared = engine::audio::prepare_path(path, &limits)
            .with_context(|| format!("reading {}", path.display()))?;
        if prepared.limit_reached {
            eprintln!(
                "note: only the first {:.0} s of {} ({:.0} s) are heard: at most {} clips of 30 s",
                prepared.kept_seconds,
                path.display(),
                prepared.seconds,
                limits.max_clips
            );
        }
        clips.extend(prepared.clips);
    }
    Ok(clips)
}

/// Features of the clips of `files` for a token list that already holds one audio placeholder
/// run per clip; a count mismatch is an error naming both counts.
fn audio_features(
    model: &Model,
    files: &[PathBuf],
    tokens: &[u32],
) -> Result<Option<(u32, Array)>> {
    let audio_token = model.config().audio_token_id;
    let runs = audio_token.map_or_else(Vec::new, |id| placeholder_runs(tokens, id));
    let clips = audio_clips(files)?;
    if runs.len() != clips.len() {
        bail!(
            "the token list has {} audio placeholder runs but the --audio files make {} clips",
            runs.len(),
            clips.len()
        );
    }
    let (Some(audio_token), false) = (audio_token, clips.is_empty()) else {
        return Ok(None);
    };
    let (mut cache, mut towers) = (FeatureCache::new(clips.len()), Towers::default());
    let mut parts = Vec::new();
    for (clip, (_, len)) in clips.iter().zip(&runs) {
        if clip.soft_tokens != *len {
            bail!(
                "a clip of {:.2} s makes {} soft tokens but its placeholder run has {len}",
                clip.seconds,
                clip.soft_tokens
            );
        }
        parts.push(cache.audio_features(&mut towers, model, clip)?);
    }
    Ok(Some((audio_token, mlx_rs::ops::concatenate(&parts, 0)?)))
}

/// Writes one float32 tensor to a safetensors file.
fn write_f32(path: &Path, name: &str, array: &Array) -> Result<()> {
    let array = array.as_dtype(Dtype::Float32)?;
    array.eval()?;
    let data: Vec<u8> = array
        .as_slice::<f32>()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let shape: Vec<usize> = array.shape().iter().map(|&d| d as usize).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, &data)?;
    safetensors::serialize_to_file([(name, view)], None, path)?;
    Ok(())
}

/// Speculative decoding's statistics in one line, as mlx-vlm prints them.
fn speculation_line(spec: &engine::speculative::SpeculativeStats) -> String {
    let mut line = format!(
        "speculative decoding: {:.2} tokens/round ({} of {} drafts accepted) over {} rounds",
        spec.tokens_per_round(),
        spec.accepted,
        spec.drafted,
        spec.rounds
    );
    if let Some(why) = &spec.stopped {
        line.push_str("; ");
        line.push_str(why);
    }
    line
}
