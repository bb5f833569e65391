//! A loaded model folder and what is done with it: prompts rendered and tokenized one way,
//! token streams and generations started from one [`StreamRequest`], the warm-up.

use std::cell::{OnceCell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gemma::{Drafter, LoadOptions, Model};

use crate::audio::AudioClip;
use crate::constraint::{Constraint, Grammars};
use crate::error::{EngineError, GenerateError};
use crate::generate::{generate, Delta, Usage};
use crate::image::Preprocessed;
use crate::media::{FeatureCache, Towers};
use crate::options::GenerateOptions;
use crate::policy::Policy;
use crate::prompt::Prompt;
use crate::sampler::SamplerConfig;
use crate::speculative::{MtpProposer, SpeculativeOptions};
use crate::stream::{Drafting, MediaRuns, Session, StreamRequest, TokenStream};
use crate::template::{expand_placeholders, ChatTemplate, MediaKind, Message, RenderOptions, Role};
use crate::tokenizer::{SpecialTokens, Tokenizer};

/// Projected features of this many recent images and audio clips stay cached (see
/// [`FeatureCache`]).
const MEDIA_FEATURES_KEPT: usize = 16;

/// A loaded model folder: weights, tokenizer, template and special ids, the vision and audio
/// towers while they are in use, and the features of recently seen images and audio clips.
pub struct LoadedModel {
    pub dir: PathBuf,
    pub model: Model,
    /// Shared so that counting a draft's tokens never waits behind a generation.
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    pub specials: SpecialTokens,
    features: RefCell<FeatureCache>,
    /// The towers in MLX memory now: read by the first question that needs one, dropped by
    /// [`Self::release_idle_towers`].
    towers: RefCell<Towers>,
    /// The MTP drafter every answer speculates with, when one is set.
    drafter: Option<(Drafter, SpeculativeOptions)>,
    /// The token trie and grammar compiler, built by the first constrained answer.
    grammars: OnceCell<Grammars>,
    /// How the engine drives this model (warm-up, when drafting stops paying); the backend's
    /// defaults unless a caller (the bench) sets its own.
    pub policy: Policy,
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
            towers: RefCell::default(),
            drafter: None,
            grammars: OnceCell::new(),
            policy: Policy::for_backend(),
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
            min_accepted: Some(self.policy.min_drafts_accepted),
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

    /// The ids answering `request.prompt`, one at a time: the session's cache is reused for the
    /// shared prefix, the rest prefilled with the images and audio clips bound to their runs
    /// (their features computed once per content), every draw masked by `options.constraint`
    /// when one is set, drafted by the loaded drafter unless the request says otherwise.
    /// `cancel` is read between prefill chunks and between tokens.
    pub fn token_stream<'a>(
        &'a self,
        request: StreamRequest<'a, '_>,
    ) -> Result<TokenStream<'a>, EngineError> {
        // Compiled before anything is read, so a grammar that cannot be enforced is refused
        // first.
        let constraint = match &request.options.constraint {
            Some(grammar) => Some(
                self.grammars()?
                    .compile(grammar)
                    .map_err(GenerateError::from)?,
            ),
            None => None,
        };
        let model = &self.model;
        let prompt = request.prompt;
        let (images, clips) = (&prompt.images, &prompt.audio);
        let (cache, towers) = (&self.features, &self.towers);
        let mut image_features = |k: usize| -> crate::error::Result<mlx_rs::Array> {
            let image = images.get(k).ok_or(GenerateError::MediaCount {
                kind: MediaKind::Image,
                expected: images.len(),
                found: k + 1,
            })?;
            cache
                .borrow_mut()
                .features(&mut towers.borrow_mut(), model, image)
        };
        let mut audio_features = |k: usize| -> crate::error::Result<mlx_rs::Array> {
            let clip = clips.get(k).ok_or(GenerateError::MediaCount {
                kind: MediaKind::Audio,
                expected: clips.len(),
                found: k + 1,
            })?;
            cache
                .borrow_mut()
                .audio_features(&mut towers.borrow_mut(), model, clip)
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
        let mut request = request;
        if let Drafting::Loaded = request.drafting {
            // (A constrained answer is refused, with the reason in its stats: it steps one id
            // at a time, as each mask depends on the id before.)
            request.drafting = match &self.drafter {
                Some((drafter, options)) => {
                    Drafting::With(Box::new(MtpProposer { drafter }), options.clone())
                }
                None => Drafting::Off,
            };
        }
        Ok(TokenStream::start(model, request, &mut bound, constraint)?)
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

    /// Answers `request`: the token stream under the generator (text deltas through
    /// `on_delta`, stop ids, limits, usage). What the app, the CLI, the warm-up and the bench
    /// all run.
    pub fn generate<'a>(
        &'a self,
        request: StreamRequest<'a, '_>,
        on_delta: impl FnMut(Delta),
    ) -> Result<Usage, EngineError> {
        let stream = self.token_stream(request)?;
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

    /// Reads the checkpoint's vision and audio towers into memory now, as the first question
    /// about an image or a clip would (a tower the checkpoint lacks is skipped).
    pub fn load_towers(&self) -> Result<(), EngineError> {
        let mut towers = self.towers.borrow_mut();
        if self.model.has_vision() {
            towers.vision(&self.model)?;
        }
        if self.model.has_audio() {
            towers.audio(&self.model)?;
        }
        Ok(())
    }

    /// Drops each tower that has not run for `idle` (the engine thread calls it when idle:
    /// docs/ENGINE.md "Idle release"); true if one was dropped. A later question reads it
    /// again.
    pub fn release_idle_towers(&self, idle: Duration) -> bool {
        self.towers.borrow_mut().release_idle(idle, Instant::now())
    }

    /// When the first tower in memory will have been idle for `idle`; `None` when none is in
    /// memory.
    pub fn towers_idle_at(&self, idle: Duration) -> Option<Instant> {
        self.towers.borrow().idle_at(idle)
    }

    /// Bytes of the vision and audio towers in MLX memory now (0 for one not loaded).
    pub fn tower_bytes(&self) -> (usize, usize) {
        self.towers.borrow().resident_bytes()
    }

    /// How many times the vision and audio towers have been read from the checkpoint.
    pub fn tower_loads(&self) -> (usize, usize) {
        self.towers.borrow().loads()
    }

    /// How long the latest tower read took (part of its question's time to the first token).
    pub fn last_tower_load(&self) -> Option<Duration> {
        self.towers.borrow().last_load()
    }

    /// Tokens of the warm-up's first message, from the engine's policy: on a GPU the first
    /// use of a GEMM shape class loads kernels (see "Why the defaults" in `bench/results.md`).
    pub fn warm_up_history(&self) -> usize {
        self.policy.warm_up_history
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
            let request = StreamRequest::new(&mut session, &prompt, &options, stop);
            self.generate(request, |d| answer.extend(d.token))?;
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
