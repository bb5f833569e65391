//! The engine thread. MLX state stays on one thread; the app talks to it through channels:
//! requests in, token / usage / error events out. Cancellation is a flag checked between tokens.
//! Several answers are written at once (see `serve.rs`).

use std::cell::{OnceCell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::audio::AudioClip;
use crate::constraint::{Constraint, Grammars};
use crate::generate::{generate, Delta, GenerateError, GenerateOptions, Usage};
use crate::image::Preprocessed;
use crate::media::FeatureCache;
use crate::output::Marker;
use crate::sampler::SamplerConfig;
use crate::serve::{Batch, Job, Sessions, DEFAULT_PARALLEL, MAX_PARALLEL};
use crate::speculative::{Proposer, SpeculativeOptions};
use crate::stream::{CancelFlag, MediaRuns, PrefillProgress, Session, SessionSlot, TokenStream};
use crate::template::{expand_placeholders, ChatTemplate, MediaKind, Message, RenderOptions, Role};
use crate::tokenizer::{SpecialTokens, Tokenizer};
use gemma::{Drafter, LoadOptions, Model};

/// Errors the engine reports (also inside events).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no model is loaded")]
    NoModel,
    #[error("the engine thread has stopped")]
    Stopped,
    #[error(transparent)]
    Model(#[from] gemma::Error),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error(transparent)]
    Template(#[from] crate::template::TemplateError),
    #[error(transparent)]
    Generate(#[from] crate::generate::GenerateError),
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    /// The last message alone (with the system prompt) does not fit the context window: a new
    /// chat would not help, only a shorter message or a larger window.
    #[error("the message alone is {message} tokens, but the context window holds {context}")]
    MessageTooLong { message: usize, context: usize },
}

/// Projected features of this many recent images and audio clips stay cached (see
/// [`FeatureCache`]).
const MEDIA_FEATURES_KEPT: usize = 16;

/// A loaded model folder: weights, tokenizer, template and special ids, and the features of
/// recently seen images and audio clips.
pub struct LoadedModel {
    pub dir: PathBuf,
    pub model: Model,
    /// Shared so that counting a draft's tokens never waits behind a generation.
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    pub specials: SpecialTokens,
    features: RefCell<FeatureCache>,
    /// The MTP drafter every answer speculates with, when one is set.
    drafter: Option<(Drafter, SpeculativeOptions)>,
    /// The token trie and grammar compiler, built by the first constrained answer.
    grammars: OnceCell<Grammars>,
}

/// A conversation ready for generation: its ids, each image and audio placeholder already
/// expanded to its soft-token run, and the images and clips those runs stand for, in order.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub images: Vec<Arc<Preprocessed>>,
    pub audio: Vec<Arc<AudioClip>>,
}

impl Prompt {
    /// A prompt given as ids, with no images (benchmarks and checks that plan their own ids).
    pub fn from_ids(ids: Vec<u32>) -> Self {
        Self {
            ids,
            ..Self::default()
        }
    }
}

impl LoadedModel {
    /// Loads everything a chat needs from `dir`.
    pub fn load(dir: &Path, options: &LoadOptions) -> Result<Self, EngineError> {
        let model = Model::load(dir, options)?;
        let tokenizer = Arc::new(Tokenizer::load(dir)?);
        let template = ChatTemplate::load(dir)?;
        let specials = SpecialTokens::load(dir, &tokenizer)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            model,
            tokenizer,
            template,
            specials,
            features: RefCell::new(FeatureCache::new(MEDIA_FEATURES_KEPT)),
            drafter: None,
            grammars: OnceCell::new(),
        })
    }

    /// Loads the MTP drafter in `dir` for this model (refused, with the reason, when it does
    /// not fit) and speculates with it from the next answer on.
    pub fn load_drafter(
        &mut self,
        dir: &Path,
        options: Option<SpeculativeOptions>,
    ) -> Result<(), EngineError> {
        let drafter = Drafter::load(dir, &self.model)?;
        let options = options.unwrap_or_else(|| SpeculativeOptions {
            block_size: drafter.block_size(),
            min_accepted: Some(self.model.tuning().min_drafts_accepted),
            ..SpeculativeOptions::default()
        });
        self.drafter = Some((drafter, options));
        Ok(())
    }

    /// Stops speculating (the drafter is dropped).
    pub fn unload_drafter(&mut self) {
        self.drafter = None;
    }

    /// The drafter in use and its options, if any.
    pub fn drafter(&self) -> Option<&(Drafter, SpeculativeOptions)> {
        self.drafter.as_ref()
    }

    /// The one way a conversation becomes ids: the checkpoint's template renders it, and
    /// control-token text that a person, a file or the model wrote inside a message stays text
    /// (see [`ChatTemplate::prompt_ids`]); then each image placeholder the template wrote is
    /// expanded to the soft-token run of its image (`images` in the order of the messages'
    /// `Part::Image` items). Conversations with audio go through [`Self::prompt_with_tools`].
    pub fn prompt(
        &self,
        messages: &[Message],
        thinking: bool,
        images: &[Arc<Preprocessed>],
    ) -> Result<Prompt, EngineError> {
        self.prompt_with_tools(messages, &[], thinking, images, &[])
    }

    /// [`Self::prompt`] with `tools` declared to the model (OpenAI's function-tool objects;
    /// their text is data, as a message's is: see [`ChatTemplate::prompt_ids_with_tools`]) and
    /// `audio` clips (in the order of the messages' `Part::Audio` items), each expanded to its
    /// soft-token run as images are.
    pub fn prompt_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        thinking: bool,
        images: &[Arc<Preprocessed>],
        audio: &[Arc<AudioClip>],
    ) -> Result<Prompt, EngineError> {
        let options = RenderOptions {
            add_generation_prompt: true,
            enable_thinking: thinking,
        };
        let ids = self
            .template
            .prompt_ids_with_tools(&self.tokenizer, messages, tools, options)?;
        let counts: Vec<usize> = images.iter().map(|i| i.soft_tokens).collect();
        let ids = expand_placeholders(&ids, MediaKind::Image, &counts, &self.specials)?;
        let counts: Vec<usize> = audio.iter().map(|c| c.soft_tokens).collect();
        Ok(Prompt {
            ids: expand_placeholders(&ids, MediaKind::Audio, &counts, &self.specials)?,
            images: images.to_vec(),
            audio: audio.to_vec(),
        })
    }

    /// The ids answering `prompt`, one at a time: the session's cache is reused for the shared
    /// prefix, the rest prefilled with the images and audio clips bound to their runs (their
    /// features computed once per content). `cancel` is read between prefill chunks and between tokens.
    pub fn token_stream<'a>(
        &'a self,
        session: impl Into<SessionSlot<'a>>,
        prompt: &Prompt,
        options: &GenerateOptions,
        cancel: impl Into<CancelFlag<'a>>,
    ) -> Result<TokenStream<'a>, EngineError> {
        self.token_stream_reporting(session, prompt, options, cancel, &mut |_| {})
    }

    /// [`Self::token_stream`], telling `on_prefill` how far the prefill has come.
    pub fn token_stream_reporting<'a>(
        &'a self,
        session: impl Into<SessionSlot<'a>>,
        prompt: &Prompt,
        options: &GenerateOptions,
        cancel: impl Into<CancelFlag<'a>>,
        on_prefill: &mut dyn FnMut(PrefillProgress),
    ) -> Result<TokenStream<'a>, EngineError> {
        // Compiled before anything is read, so a grammar that cannot be enforced is refused
        // first.
        let constraint = match &options.constraint {
            Some(grammar) => Some(
                self.grammars()?
                    .compile(grammar)
                    .map_err(GenerateError::from)?,
            ),
            None => None,
        };
        let model = &self.model;
        let (images, clips) = (&prompt.images, &prompt.audio);
        let cache = &self.features;
        let mut image_features = |k: usize| -> crate::generate::Result<mlx_rs::Array> {
            let image = images.get(k).ok_or(GenerateError::MediaCount {
                kind: MediaKind::Image,
                expected: images.len(),
                found: k + 1,
            })?;
            cache.borrow_mut().features(model, image)
        };
        let mut audio_features = |k: usize| -> crate::generate::Result<mlx_rs::Array> {
            let clip = clips.get(k).ok_or(GenerateError::MediaCount {
                kind: MediaKind::Audio,
                expected: clips.len(),
                found: k + 1,
            })?;
            cache.borrow_mut().audio_features(model, clip)
        };
        let mut bound = Vec::with_capacity(2);
        if let (Some(tokens), false) = (self.specials.image, images.is_empty()) {
            bound.push(MediaRuns {
                kind: MediaKind::Image,
                token_id: tokens.placeholder,
                count: images.len(),
                features: &mut image_features,
            });
        }
        if let (Some(tokens), false) = (self.specials.audio, clips.is_empty()) {
            bound.push(MediaRuns {
                kind: MediaKind::Audio,
                token_id: tokens.placeholder,
                count: clips.len(),
                features: &mut audio_features,
            });
        }
        let mut stream = TokenStream::start_constrained(
            model,
            session,
            &prompt.ids,
            &mut bound,
            options,
            constraint,
            cancel,
            on_prefill,
        )?;
        // (A constrained answer is refused, with the reason in its stats: it steps one id at a
        // time, as each mask depends on the id before.)
        if let Some((drafter, options)) = &self.drafter {
            stream.speculate(Proposer::Mtp(drafter), options.clone());
        }
        Ok(stream)
    }

    /// The token trie and grammar compiler of this model, built on first use.
    pub fn grammars(&self) -> Result<&Grammars, EngineError> {
        if let Some(grammars) = self.grammars.get() {
            return Ok(grammars);
        }
        let built = Grammars::new(
            self.tokenizer.clone(),
            &self.specials,
            self.model.config().text.vocab_size,
        )
        .map_err(GenerateError::from)?;
        Ok(self.grammars.get_or_init(|| built))
    }

    /// Compiles `grammar` for one answer with this model's vocabulary (refused with the
    /// reason when it cannot be enforced).
    pub fn constraint(
        &self,
        grammar: &crate::constraint::Grammar,
    ) -> Result<Constraint, EngineError> {
        Ok(self
            .grammars()?
            .compile(grammar)
            .map_err(GenerateError::from)?)
    }

    /// Answers `prompt`: the token stream under the generator (text deltas through `on_delta`,
    /// stop ids, limits, usage). What the app, the CLI, the warm-up and the bench all run.
    pub fn generate(
        &self,
        session: &mut Session,
        prompt: &Prompt,
        options: &GenerateOptions,
        cancel: &AtomicBool,
        on_delta: impl FnMut(Delta),
    ) -> Result<Usage, EngineError> {
        self.generate_reporting(session, prompt, options, cancel, &mut |_| {}, on_delta)
    }

    /// [`Self::generate`], telling `on_prefill` how far the prefill has come.
    pub fn generate_reporting(
        &self,
        session: &mut Session,
        prompt: &Prompt,
        options: &GenerateOptions,
        cancel: &AtomicBool,
        on_prefill: &mut dyn FnMut(PrefillProgress),
        on_delta: impl FnMut(Delta),
    ) -> Result<Usage, EngineError> {
        let stream = self.token_stream_reporting(session, prompt, options, cancel, on_prefill)?;
        Ok(generate(stream, &self.tokenizer, &self.specials, on_delta)?)
    }

    /// Forgets the cached image and audio features, so that the next question about an image
    /// or a clip runs its tower again (the bench times a first question about an image).
    pub fn forget_media_features(&self) {
        *self.features.borrow_mut() = FeatureCache::new(MEDIA_FEATURES_KEPT);
    }

    /// How many times the vision tower has run (images asked about again reuse its features).
    pub fn vision_tower_runs(&self) -> usize {
        self.features.borrow().tower_runs()
    }

    /// How many times the audio tower has run (clips asked about again reuse its features).
    pub fn audio_tower_runs(&self) -> usize {
        self.features.borrow().audio_tower_runs()
    }

    /// Tokens of the warm-up's first message, from the model's tuning: on a GPU the first use
    /// of a GEMM shape class loads kernels (see "Why the defaults" in `bench/results.md`).
    pub fn warm_up_history(&self) -> usize {
        self.model.tuning().warm_up_history
    }

    /// Runs a two-turn chat of two tokens per answer and throws it away, so that the user's
    /// first messages do not pay the backend's one-time work (kernels loaded or compiled on
    /// first use, compiled elementwise traces, the allocator's first buffers). It covers the
    /// three shapes a chat meets: a prefill from empty caches, decode steps, and a follow-up
    /// prefill over a cached history of [`Self::warm_up_history`] tokens. Leaves no state
    /// behind.
    pub fn warm_up(&self) -> Result<(), EngineError> {
        self.warm_up_over(self.warm_up_history(), &AtomicBool::new(false))
            .map(|_| ())
    }

    /// [`Self::warm_up`] with a first message of about `history` tokens, so that the
    /// follow-up's prefill attends a history of that length (0: a one-word message). Stops
    /// early, between prefill chunks or tokens, once `stop` is set; true if it ran to the end.
    pub fn warm_up_over(&self, history: usize, stop: &AtomicBool) -> Result<bool, EngineError> {
        let options = GenerateOptions {
            sampler: SamplerConfig::greedy(),
            max_tokens: 2,
            ..GenerateOptions::default()
        };
        let mut session = Session::new(&self.model);
        let mut turn = |messages: &[Message]| -> Result<String, EngineError> {
            let prompt = self.prompt(messages, false, &[])?;
            let mut answer = Vec::new();
            self.generate(&mut session, &prompt, &options, stop, |d| {
                answer.extend(d.token)
            })?;
            Ok(self.tokenizer.decode(&answer, true)?)
        };
        let unit = "Hello! ";
        let repeats = history / self.tokenizer.encode(unit)?.len().max(1);
        let first = unit.repeat(repeats.max(1));
        let mut messages = vec![Message::text(Role::User, first.trim_end())];
        let answer = turn(&messages)?;
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        messages.push(Message::text(Role::Assistant, answer));
        messages.push(Message::text(Role::User, "Thanks. And then?"));
        turn(&messages)?;
        Ok(!stop.load(Ordering::Relaxed))
    }
}

/// What a loaded model can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelInfo {
    /// Whether it has a vision tower (and the tokens to place images in a prompt).
    pub vision: bool,
    /// Whether it has an audio tower (and the tokens to place audio clips in a prompt).
    pub audio: bool,
}

/// A chat turn to answer.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// Identifies the conversation whose cache may be reused.
    pub conversation: String,
    pub messages: Vec<Message>,
    /// The images of `messages`, in the order of their `Part::Image` items.
    pub images: Vec<Arc<Preprocessed>>,
    /// The audio clips of `messages`, in the order of their `Part::Audio` items.
    pub audio: Vec<Arc<AudioClip>>,
    pub thinking: bool,
    /// Tools declared to the model (OpenAI's function-tool objects); empty: none.
    pub tools: Vec<serde_json::Value>,
    pub options: GenerateOptions,
}

/// What the engine streams about one generation.
#[derive(Debug)]
pub enum Event {
    /// The prompt is being read: `done` of `total` new prompt tokens (the reused prefix not
    /// counted). Comes before the first [`Event::Delta`], once before the first chunk and after each.
    Prefill {
        generation_id: u64,
        done: usize,
        total: usize,
    },
    Delta {
        generation_id: u64,
        delta: String,
        token_count: usize,
        /// What the id marks (a thought's or a tool call's bounds, a call's string
        /// delimiter), whose text `delta` does not show.
        marker: Option<Marker>,
    },
    Done {
        generation_id: u64,
        usage: Usage,
        /// Every id the answer generated (the end-of-turn id not): kept with the answer, they
        /// let the next turn reuse the cache over it (see [`Message::generated`]).
        ids: Vec<u32>,
    },
    /// The generation failed; nothing more comes for it.
    Error {
        generation_id: u64,
        error: EngineError,
    },
}

enum Command {
    Load {
        dir: PathBuf,
        options: LoadOptions,
        reply: Sender<Result<ModelInfo, EngineError>>,
    },
    Unload {
        reply: Sender<()>,
    },
    Generate {
        id: u64,
        request: ChatRequest,
        cancel: Arc<AtomicBool>,
        events: Box<dyn FnMut(Event) + Send>,
        /// Runs before the ordinary generations waiting (the window's chat before the API's).
        first: bool,
    },
    SetDrafter {
        dir: Option<PathBuf>,
        reply: Sender<Result<Option<DrafterInfo>, EngineError>>,
    },
    SetParallel {
        answers: usize,
    },
    Shutdown,
}

/// A drafter the loaded model speculates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrafterInfo {
    /// Parameters of its checkpoint.
    pub parameters: usize,
    /// Tokens per verify (drafts + 1).
    pub block_size: usize,
}

/// Handle to the engine thread.
pub struct Engine {
    commands: Sender<Command>,
    queue: Arc<Queue>,
    /// The loaded model's tokenizer, read outside the engine thread (see [`Engine::count_tokens`]).
    tokenizer: TokenizerSlot,
    next_id: AtomicU64,
    running: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>>,
    thread: Option<JoinHandle<()>>,
}

/// The tokenizer of the model loaded now, if any; the engine thread sets it.
type TokenizerSlot = Arc<Mutex<Option<Arc<Tokenizer>>>>;

/// What lets the warm-up after a load yield to the user: commands sent and not yet taken by
/// the engine thread, and the flag that stops the warm-up when there are any.
#[derive(Default)]
struct Queue {
    pending: AtomicUsize,
    stop_warm_up: AtomicBool,
}

impl Queue {
    /// Before a command is sent.
    fn sending(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.stop_warm_up.store(true, Ordering::SeqCst);
    }

    /// The engine thread took a command.
    fn taken(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
    }

    /// The flag for a warm-up starting now: set at once if a command already waits, and by
    /// every later one (cleared first, so that no command sent meanwhile is missed).
    fn warm_up_stop(&self) -> &AtomicBool {
        self.stop_warm_up.store(false, Ordering::SeqCst);
        if self.pending.load(Ordering::SeqCst) > 0 {
            self.stop_warm_up.store(true, Ordering::SeqCst);
        }
        &self.stop_warm_up
    }
}

impl Engine {
    /// Starts the engine thread.
    pub fn spawn() -> Self {
        let (commands, inbox) = channel();
        let running: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>> = Arc::default();
        let finished = running.clone();
        let queue = Arc::new(Queue::default());
        let taken = queue.clone();
        let tokenizer = TokenizerSlot::default();
        let published = tokenizer.clone();
        let thread = std::thread::Builder::new()
            .name("gemma-engine".into())
            .spawn(move || run(inbox, &taken, finished, &published))
            .ok();
        Self {
            commands,
            queue,
            tokenizer,
            next_id: AtomicU64::new(1),
            running,
            thread,
        }
    }

    /// Loads a model folder (blocking until loaded or failed), replacing any loaded one.
    /// Generations queued or running are stopped first: they end as cancelled, with what they
    /// wrote, before the load begins.
    pub fn load(&self, dir: &Path, options: LoadOptions) -> Result<ModelInfo, EngineError> {
        self.cancel_all();
        let (reply, answer) = channel();
        self.queue.sending();
        self.commands
            .send(Command::Load {
                dir: dir.to_path_buf(),
                options,
                reply,
            })
            .map_err(|_| EngineError::Stopped)?;
        answer.recv().map_err(|_| EngineError::Stopped)?
    }

    /// Speculates with the MTP drafter in `dir` from the next answer on (`None`: stops); blocks
    /// until it is loaded and warmed up, or refused with the reason (the model keeps answering
    /// without it). A model loaded later starts without a drafter.
    pub fn set_drafter(&self, dir: Option<&Path>) -> Result<Option<DrafterInfo>, EngineError> {
        let (reply, answer) = channel();
        self.queue.sending();
        self.commands
            .send(Command::SetDrafter {
                dir: dir.map(Path::to_path_buf),
                reply,
            })
            .map_err(|_| EngineError::Stopped)?;
        answer.recv().map_err(|_| EngineError::Stopped)?
    }

    /// Lets go of the loaded model (blocking until it is gone), stopping generations first as
    /// [`Engine::load`] does. Requests after it fail with [`EngineError::NoModel`].
    pub fn unload(&self) -> Result<(), EngineError> {
        self.cancel_all();
        let (reply, answer) = channel();
        self.queue.sending();
        self.commands
            .send(Command::Unload { reply })
            .map_err(|_| EngineError::Stopped)?;
        answer.recv().map_err(|_| EngineError::Stopped)
    }

    /// How many answers may be written at once (1 to [`MAX_PARALLEL`]; default
    /// [`DEFAULT_PARALLEL`]): requests beyond it wait for one to end. The window's chat never
    /// waits (see [`Engine::generate_first`]). Takes effect between decode steps.
    pub fn set_parallel(&self, answers: usize) -> Result<(), EngineError> {
        self.queue.sending();
        self.commands
            .send(Command::SetParallel {
                answers: answers.clamp(1, MAX_PARALLEL),
            })
            .map_err(|_| EngineError::Stopped)
    }

    fn cancel_all(&self) {
        if let Ok(running) = self.running.lock() {
            running
                .values()
                .for_each(|f| f.store(true, Ordering::Relaxed));
        }
    }

    /// Queues a generation; events arrive through `events` on the engine thread. Returns its id.
    /// It is written together with the others running while there are fewer than
    /// [`Engine::set_parallel`] of them, and waits for one to end otherwise.
    pub fn generate(
        &self,
        request: ChatRequest,
        events: impl FnMut(Event) + Send + 'static,
    ) -> Result<u64, EngineError> {
        self.queue_generation(request, Box::new(events), false)
    }

    /// Queues a generation ahead of the ordinary ones waiting, which joins the answers being
    /// written at once, whatever their number (see [`Engine::set_parallel`]). The window's chat
    /// uses it, so that requests of the local API never make the person at the window wait
    /// behind them. Loads, unloads and other commands keep their place.
    pub fn generate_first(
        &self,
        request: ChatRequest,
        events: impl FnMut(Event) + Send + 'static,
    ) -> Result<u64, EngineError> {
        self.queue_generation(request, Box::new(events), true)
    }

    fn queue_generation(
        &self,
        request: ChatRequest,
        events: Box<dyn FnMut(Event) + Send>,
        first: bool,
    ) -> Result<u64, EngineError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cancel = Arc::new(AtomicBool::new(false));
        if let Ok(mut running) = self.running.lock() {
            running.insert(id, cancel.clone());
        }
        self.queue.sending();
        self.commands
            .send(Command::Generate {
                id,
                request,
                cancel,
                events,
                first,
            })
            .map_err(|_| EngineError::Stopped)?;
        Ok(id)
    }

    /// Asks a generation to stop after the current token; true if it was queued or running.
    pub fn cancel(&self, id: u64) -> bool {
        self.canceller().cancel(id)
    }

    /// Tokens of `text` as a message's text, by the loaded model's tokenizer (see
    /// [`Tokenizer::count_text`]). Counted on the caller's thread: it answers at once, also
    /// while a generation runs.
    pub fn count_tokens(&self, text: &str) -> Result<usize, EngineError> {
        let tokenizer = self.tokenizer.lock().ok().and_then(|slot| slot.clone());
        Ok(tokenizer.ok_or(EngineError::NoModel)?.count_text(text)?)
    }

    /// A handle that can stop generations, e.g. from inside an event callback, without holding
    /// the engine (whose last owner joins the engine thread when dropped).
    pub fn canceller(&self) -> Canceller {
        Canceller {
            running: self.running.clone(),
        }
    }
}

/// Stops generations of one engine by id (see [`Engine::canceller`]).
#[derive(Clone)]
pub struct Canceller {
    running: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>>,
}

impl Canceller {
    /// Asks a generation to stop after the current token; true if it was queued or running.
    pub fn cancel(&self, id: u64) -> bool {
        match self.running.lock().ok().and_then(|r| r.get(&id).cloned()) {
            Some(flag) => {
                flag.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.cancel_all();
        self.queue.sending();
        let _ = self.commands.send(Command::Shutdown);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    inbox: Receiver<Command>,
    queue: &Queue,
    running: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>>,
    tokenizer: &TokenizerSlot,
) {
    let publish = |loaded: Option<&LoadedModel>| {
        if let Ok(mut slot) = tokenizer.lock() {
            *slot = loaded.map(|m| m.tokenizer.clone());
        }
    };
    let mut loaded: Option<LoadedModel> = None;
    let mut parallel = DEFAULT_PARALLEL;
    // A conversation's cache per answer that may run at once: follow-ups reuse theirs, and
    // memory stays bounded.
    let mut sessions = Sessions::new(parallel);
    // Commands received and not yet run, so that one sent first can be run before others.
    let mut waiting: VecDeque<Command> = VecDeque::new();
    loop {
        waiting.extend(inbox.try_iter());
        if waiting.is_empty() {
            match inbox.recv() {
                Ok(command) => waiting.push_back(command),
                Err(_) => break,
            }
        }
        let kinds: Vec<Kind> = waiting.iter().map(Command::kind).collect();
        let Some(command) = waiting.remove(next_to_run(&kinds)) else {
            continue;
        };
        queue.taken();
        match command {
            Command::Shutdown => break,
            Command::Load {
                dir,
                options,
                reply,
            } => {
                sessions.clear();
                loaded = None;
                publish(None);
                let result = LoadedModel::load(&dir, &options).map(|m| {
                    let info = ModelInfo {
                        vision: m.model.vision().is_some() && m.specials.image.is_some(),
                        audio: m.model.audio().is_some() && m.specials.audio.is_some(),
                    };
                    loaded = Some(m);
                    info
                });
                publish(loaded.as_ref());
                // The flag before the reply: a request sent once the caller has it stops the
                // warm-up (between prefill chunks or tokens), so the app is ready at once and
                // the user's first message waits for at most one chunk of it. A failure here
                // would show again, with its message, on the first real request; the model
                // stays loaded.
                let stop = queue.warm_up_stop();
                let _ = reply.send(result);
                if let Some(m) = &loaded {
                    if let Err(e) = m.warm_up_over(m.warm_up_history(), stop) {
                        eprintln!("warm-up after loading {} failed: {e}", m.dir.display());
                    }
                }
            }
            Command::SetDrafter { dir, reply } => {
                let Some(m) = loaded.as_mut() else {
                    let _ = reply.send(Err(EngineError::NoModel));
                    continue;
                };
                let result = match dir {
                    None => {
                        m.unload_drafter();
                        Ok(None)
                    }
                    Some(dir) => m.load_drafter(&dir, None).map(|()| {
                        m.drafter().map(|(d, o)| DrafterInfo {
                            parameters: d.parameter_count(),
                            block_size: o.block_size,
                        })
                    }),
                };
                let stop = queue.warm_up_stop();
                let warm = matches!(result, Ok(Some(_)));
                let _ = reply.send(result);
                // A round's shapes (the drafter's steps, a verify of several rows) met once now,
                // not in the user's next answer.
                if warm {
                    if let Err(e) = m.warm_up_over(0, stop) {
                        eprintln!("warm-up with the drafter failed: {e}");
                    }
                }
            }
            Command::Unload { reply } => {
                sessions.clear();
                loaded = None;
                publish(None);
                let _ = reply.send(());
            }
            Command::SetParallel { answers } => {
                parallel = answers;
                sessions.set_parallel(answers);
            }
            Command::Generate {
                id,
                request,
                cancel,
                events,
                ..
            } => {
                let mut job = Job {
                    id,
                    request,
                    cancel,
                    events,
                };
                let Some(m) = loaded.as_ref() else {
                    (job.events)(Event::Error {
                        generation_id: id,
                        error: EngineError::NoModel,
                    });
                    if let Ok(mut r) = running.lock() {
                        r.remove(&id);
                    }
                    continue;
                };
                // Answers run together until none is left; generations sent meanwhile join
                // between steps while there is room (the window's at once), and nothing passes
                // a load, an unload or a drafter change.
                let mut batch = Batch::new(m, running.clone());
                batch.start(job, &mut sessions);
                loop {
                    waiting.extend(inbox.try_iter());
                    // A new number of answers at once applies at once (it is no barrier).
                    waiting.retain(|command| match command {
                        Command::SetParallel { answers } => {
                            parallel = *answers;
                            sessions.set_parallel(*answers);
                            queue.taken();
                            false
                        }
                        _ => true,
                    });
                    while let Some(job) = joining(&mut waiting, &batch, parallel) {
                        queue.taken();
                        batch.start(job, &mut sessions);
                    }
                    if batch.len() == 0 {
                        break;
                    }
                    batch.step(&mut sessions);
                }
            }
        }
    }
}

/// The generation that joins the answers running now (at most `parallel`), if one may: the
/// one [`next_to_run`] picks, when it is a generation and there is room, in number and in
/// memory (see [`Batch::fits`]); a generation sent first (the window's) always joins.
fn joining(waiting: &mut VecDeque<Command>, batch: &Batch<'_>, parallel: usize) -> Option<Job> {
    let kinds: Vec<Kind> = waiting.iter().map(Command::kind).collect();
    let next = next_to_run(&kinds);
    let joins = match (kinds.get(next)?, waiting.get(next)?) {
        (Kind::GenerateFirst, _) => true,
        (Kind::Generate, Command::Generate { id, request, .. }) => {
            batch.len() < parallel && batch.fits(*id, request)
        }
        _ => false,
    };
    if !joins {
        return None;
    }
    match waiting.remove(next)? {
        Command::Generate {
            id,
            request,
            cancel,
            events,
            ..
        } => Some(Job {
            id,
            request,
            cancel,
            events,
        }),
        _ => None,
    }
}

/// What decides a command's turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Generate,
    GenerateFirst,
    /// Load, unload, drafter, shutdown: nothing passes them.
    Other,
}

impl Command {
    fn kind(&self) -> Kind {
        match self {
            Self::Generate { first: true, .. } => Kind::GenerateFirst,
            Self::Generate { .. } => Kind::Generate,
            _ => Kind::Other,
        }
    }
}

/// Which waiting command runs next: the oldest generation sent first, when only ordinary
/// generations are ahead of it; otherwise the oldest command.
fn next_to_run(waiting: &[Kind]) -> usize {
    waiting
        .iter()
        .take_while(|kind| **kind != Kind::Other)
        .position(|kind| *kind == Kind::GenerateFirst)
        .unwrap_or(0)
}

#[cfg(test)]
mod queue_tests {
    use super::*;

    #[test]
    fn a_generation_sent_first_passes_ordinary_ones_but_never_a_load() {
        use Kind::*;
        assert_eq!(next_to_run(&[Generate]), 0);
        assert_eq!(next_to_run(&[Generate, Generate, GenerateFirst]), 2);
        assert_eq!(
            next_to_run(&[GenerateFirst, Generate, GenerateFirst]),
            0,
            "the window's own requests keep their order"
        );
        assert_eq!(
            next_to_run(&[Generate, Other, GenerateFirst]),
            0,
            "a load or unload waiting is not passed"
        );
        assert_eq!(next_to_run(&[Other, GenerateFirst]), 0);
    }

    #[test]
    fn a_warm_up_stops_for_a_command_sent_before_or_during_it_and_only_then() {
        let queue = Queue::default();
        // Nothing waits: the warm-up runs.
        assert!(!queue.warm_up_stop().load(Ordering::SeqCst));
        // A command sent during it stops it.
        let stop = queue.warm_up_stop();
        queue.sending();
        assert!(stop.load(Ordering::SeqCst));
        // One sent before it started, not yet taken, stops it at once.
        assert!(queue.warm_up_stop().load(Ordering::SeqCst));
        // Once taken, the next warm-up runs again.
        queue.taken();
        assert!(!queue.warm_up_stop().load(Ordering::SeqCst));
    }
}
