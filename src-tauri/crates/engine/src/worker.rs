//! The engine thread. MLX state stays on one thread; the app talks to it through channels:
//! requests in, token / usage / error events out (`events.rs`). Cancellation is a flag checked
//! between tokens. Several answers are written at once (`batch.rs`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gemma::LoadOptions;

use crate::batch::{Batch, Job, Running, Sessions, DEFAULT_PARALLEL, MAX_PARALLEL};
use crate::error::EngineError;
use crate::events::{ChatRequest, DrafterInfo, Event, ModelInfo};
use crate::loaded::LoadedModel;
use crate::policy::Policy;
use crate::tokenizer::Tokenizer;

/// What the app asks of the engine thread.
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
    SetTowerIdle {
        idle: Duration,
    },
    Shutdown,
}

/// Handle to the engine thread.
pub struct Engine {
    commands: Sender<Command>,
    queue: Arc<Queue>,
    /// The loaded model's tokenizer, read outside the engine thread (see [`Engine::count_tokens`]).
    tokenizer: TokenizerSlot,
    next_id: AtomicU64,
    running: Running,
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
        let running: Running = Arc::default();
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

    /// How long a vision or audio tower stays in memory after it last ran, for this and every
    /// later model (instead of their [`Policy::tower_idle`]); applies from the engine thread's
    /// next idle moment on.
    pub fn set_tower_idle(&self, idle: Duration) -> Result<(), EngineError> {
        self.queue.sending();
        self.commands
            .send(Command::SetTowerIdle { idle })
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
    running: Running,
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

/// The engine thread's state between commands.
struct EngineThread<'q> {
    inbox: Receiver<Command>,
    queue: &'q Queue,
    running: Running,
    tokenizer: &'q TokenizerSlot,
    loaded: Option<LoadedModel>,
    parallel: usize,
    /// A conversation's cache per answer that may run at once: follow-ups reuse theirs, and
    /// memory stays bounded.
    sessions: Sessions,
    /// Commands received and not yet run, so that one sent first can be run before others.
    waiting: VecDeque<Command>,
    /// When to let go of idle towers and of MLX's buffer cache (see [`EngineThread::idle`]).
    idle: Idle,
}

/// What the engine thread lets go of when it has nothing to do (docs/ENGINE.md "Idle release"):
/// the periods are the loaded model's [`Policy`], the towers' unless [`Engine::set_tower_idle`]
/// set one.
struct Idle {
    /// How long a tower stays after it last ran, when set apart from the policy.
    towers: Option<Duration>,
    /// When the last command ended.
    since: Instant,
    /// Whether the cache has been emptied since then.
    cache_released: bool,
}

fn run(inbox: Receiver<Command>, queue: &Queue, running: Running, tokenizer: &TokenizerSlot) {
    let mut thread = EngineThread {
        inbox,
        queue,
        running,
        tokenizer,
        loaded: None,
        parallel: DEFAULT_PARALLEL,
        sessions: Sessions::new(DEFAULT_PARALLEL),
        waiting: VecDeque::new(),
        idle: Idle {
            towers: None,
            since: Instant::now(),
            cache_released: false,
        },
    };
    while let Some(command) = thread.next_command() {
        match command {
            Command::Shutdown => break,
            Command::Load {
                dir,
                options,
                reply,
            } => thread.load(&dir, &options, reply),
            Command::SetDrafter { dir, reply } => thread.set_drafter(dir, reply),
            Command::Unload { reply } => {
                thread.unload();
                let _ = reply.send(());
            }
            Command::SetParallel { answers } => thread.set_parallel(answers),
            Command::SetTowerIdle { idle } => thread.idle.towers = Some(idle),
            Command::Generate {
                id,
                request,
                cancel,
                events,
                ..
            } => thread.generate(Job {
                id,
                request,
                cancel,
                events,
            }),
        }
        thread.idle.since = Instant::now();
        thread.idle.cache_released = false;
    }
}

impl EngineThread<'_> {
    /// The command to run next (see [`next_to_run`]), waiting for one if none is (and letting
    /// go of what idles meanwhile: [`Self::idle`]); `None` once every sender has gone.
    fn next_command(&mut self) -> Option<Command> {
        loop {
            self.waiting.extend(self.inbox.try_iter());
            while self.waiting.is_empty() {
                let received = match self.idle_deadline() {
                    None => self
                        .inbox
                        .recv()
                        .map_err(|_| RecvTimeoutError::Disconnected),
                    Some(at) => self
                        .inbox
                        .recv_timeout(at.saturating_duration_since(Instant::now())),
                };
                match received {
                    Ok(command) => self.waiting.push_back(command),
                    Err(RecvTimeoutError::Timeout) => self.idle(),
                    Err(RecvTimeoutError::Disconnected) => return None,
                }
            }
            let kinds: Vec<Kind> = self.waiting.iter().map(Command::kind).collect();
            if let Some(command) = self.waiting.remove(next_to_run(&kinds)) {
                self.queue.taken();
                return Some(command);
            }
        }
    }

    /// When the next idle release is due: the buffer cache's after the last command, or the
    /// first tower's after it last ran; `None` when nothing is left to let go of.
    fn idle_deadline(&self) -> Option<Instant> {
        let (towers_idle, cache_idle) = self.idle_periods();
        let cache = (!self.idle.cache_released).then(|| self.idle.since + cache_idle);
        let towers = self
            .loaded
            .as_ref()
            .and_then(|loaded| loaded.towers_idle_at(towers_idle));
        cache.into_iter().chain(towers).min()
    }

    /// How long a tower stays after it last ran, and how long the engine idles before it
    /// empties MLX's buffer cache.
    fn idle_periods(&self) -> (Duration, Duration) {
        let policy = match &self.loaded {
            Some(loaded) => loaded.policy,
            None => Policy::for_backend(),
        };
        (
            self.idle.towers.unwrap_or(policy.tower_idle),
            policy.cache_idle,
        )
    }

    /// Nothing to do: drops the towers idle for their period, and hands MLX's buffer cache back
    /// to the system once the engine has idled for its period or a tower was dropped (the
    /// tower's buffers would otherwise stay in the cache). Runs only while no command waits,
    /// and takes no longer than freeing buffers does.
    fn idle(&mut self) {
        let now = Instant::now();
        let (towers_idle, cache_idle) = self.idle_periods();
        let dropped = self
            .loaded
            .as_ref()
            .is_some_and(|loaded| loaded.release_idle_towers(towers_idle));
        let due = !self.idle.cache_released && now >= self.idle.since + cache_idle;
        if dropped || due {
            if let Err(e) = gemma::memory::release_cache() {
                eprintln!("emptying MLX's buffer cache failed: {e}");
            }
            self.idle.cache_released = true;
        }
    }

    fn publish_tokenizer(&self) {
        if let Ok(mut slot) = self.tokenizer.lock() {
            *slot = self.loaded.as_ref().map(|loaded| loaded.tokenizer.clone());
        }
    }

    fn unload(&mut self) {
        self.sessions.clear();
        self.loaded = None;
        self.publish_tokenizer();
    }

    fn set_parallel(&mut self, answers: usize) {
        self.parallel = answers;
        self.sessions.set_parallel(answers);
    }

    fn load(
        &mut self,
        dir: &Path,
        options: &LoadOptions,
        reply: Sender<Result<ModelInfo, EngineError>>,
    ) {
        self.unload();
        let result = LoadedModel::load(dir, options).map(|loaded| {
            // The towers are not in memory yet: whether the checkpoint has them was checked at
            // load.
            let info = ModelInfo {
                vision: loaded.model.has_vision() && loaded.specials.image.is_some(),
                audio: loaded.model.has_audio() && loaded.specials.audio.is_some(),
            };
            if let Err(e) = gemma::memory::limit_cache(loaded.policy.cache_limit) {
                eprintln!("bounding MLX's buffer cache failed: {e}");
            }
            self.loaded = Some(loaded);
            info
        });
        self.publish_tokenizer();
        // The flag before the reply: a request sent once the caller has it stops the warm-up
        // (between prefill chunks or tokens), so the app is ready at once and the user's first
        // message waits for at most one chunk of it. A failure here would show again, with its
        // message, on the first real request; the model stays loaded.
        let stop = self.queue.warm_up_stop();
        let _ = reply.send(result);
        if let Some(loaded) = &self.loaded {
            if let Err(e) = loaded.warm_up_over(loaded.warm_up_history(), stop) {
                eprintln!("warm-up after loading {} failed: {e}", loaded.dir.display());
            }
        }
    }

    fn set_drafter(
        &mut self,
        dir: Option<PathBuf>,
        reply: Sender<Result<Option<DrafterInfo>, EngineError>>,
    ) {
        let Some(loaded) = self.loaded.as_mut() else {
            let _ = reply.send(Err(EngineError::NoModel));
            return;
        };
        let result = match dir {
            None => {
                loaded.unload_drafter();
                Ok(None)
            }
            Some(dir) => loaded.load_drafter(&dir, None).map(|()| {
                loaded.drafter().map(|(drafter, options)| DrafterInfo {
                    parameters: drafter.parameter_count(),
                    block_size: options.block_size,
                })
            }),
        };
        let stop = self.queue.warm_up_stop();
        let warm = matches!(result, Ok(Some(_)));
        let _ = reply.send(result);
        // A round's shapes (the drafter's steps, a verify of several rows) met once now, not in
        // the user's next answer.
        if warm {
            if let Err(e) = loaded.warm_up_over(0, stop) {
                eprintln!("warm-up with the drafter failed: {e}");
            }
        }
    }

    /// Runs `job` and the answers that join it until none is left: generations sent meanwhile
    /// join between steps while there is room (the window's at once), and nothing passes a
    /// load, an unload or a drafter change.
    fn generate(&mut self, mut job: Job) {
        let Some(loaded) = self.loaded.as_ref() else {
            (job.events)(Event::Error {
                generation_id: job.id,
                error: EngineError::NoModel,
            });
            if let Ok(mut running) = self.running.lock() {
                running.remove(&job.id);
            }
            return;
        };
        let (waiting, inbox, queue) = (&mut self.waiting, &self.inbox, self.queue);
        let (sessions, parallel) = (&mut self.sessions, &mut self.parallel);
        let mut batch = Batch::new(loaded, self.running.clone());
        batch.start(job, sessions);
        loop {
            waiting.extend(inbox.try_iter());
            // A new number of answers at once applies at once (it is no barrier).
            waiting.retain(|command| match command {
                Command::SetParallel { answers } => {
                    *parallel = *answers;
                    sessions.set_parallel(*answers);
                    queue.taken();
                    false
                }
                _ => true,
            });
            while let Some(job) = joining(waiting, &batch, *parallel) {
                queue.taken();
                batch.start(job, sessions);
            }
            if batch.len() == 0 {
                break;
            }
            batch.step(sessions);
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
