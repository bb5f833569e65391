//! Batching: the engine thread's answers, several at once (continuous batching). Answers join and leave
//! between decode steps; every plain decode step of the answers running is one forward of the
//! model ([`next_tokens`]), each row sampled by its own sampler, so every answer is the one it
//! would be alone. A new answer's prompt is prefilled in chunks, and between two chunks the
//! answers already running take a step: a long prompt never stalls them for more than a chunk.
//!
//! Each answer owns its conversation's session while it runs and gives it back when it ends;
//! a few sessions are kept for follow-ups (see [`Sessions`]). A drafter speculates only for an
//! answer running alone: when a second joins, both decode plainly (the same ids either way).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::error::EngineError;
use crate::events::{ChatRequest, Event};
use crate::generate::{Generation, Taken};
use crate::loaded::LoadedModel;
use crate::output::Markers;
use crate::stream::{
    next_tokens, shared_prefix, PrefillProgress, Session, StreamRequest, TokenStream,
};
use crate::template::{Message, Part, Role};

/// Answers at once unless set otherwise ([`crate::worker::Engine::set_parallel`]).
pub const DEFAULT_PARALLEL: usize = 4;
/// The most answers at once: the batched forward's rows.
pub const MAX_PARALLEL: usize = 8;

/// The flags of the generations queued or running, by id (a generation's is removed when it ends).
pub(crate) type Running = Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>>;

/// A generation taken from the queue, not started yet.
pub(crate) struct Job {
    pub id: u64,
    pub request: ChatRequest,
    pub cancel: Arc<AtomicBool>,
    pub events: Box<dyn FnMut(Event) + Send>,
}

/// The sessions kept between answers, most recently used last: one per answer that may run at
/// once and one more (so that the window's conversation outlasts a full round of API answers),
/// the oldest dropped first. An answer takes the one of its conversation that shares the longest
/// prefix with its prompt (API requests share one conversation name, so two clients' histories
/// each find their own), or a new one.
pub(crate) struct Sessions {
    kept: Vec<(String, Session)>,
    limit: usize,
}

impl Sessions {
    /// Sessions for `parallel` answers at once.
    pub fn new(parallel: usize) -> Self {
        Self {
            kept: Vec::new(),
            limit: parallel.max(1) + 1,
        }
    }

    pub fn clear(&mut self) {
        self.kept.clear();
    }

    /// Now `parallel` answers may run at once.
    pub fn set_parallel(&mut self, parallel: usize) {
        self.limit = parallel.max(1) + 1;
        self.trim();
    }

    /// The session `conversation` continues with `prompt`.
    fn take(&mut self, conversation: &str, prompt: &[u32], loaded: &LoadedModel) -> Session {
        let shared = |s: &Session| shared_prefix(s.tokens(), prompt);
        let best = self
            .kept
            .iter()
            .enumerate()
            .filter(|(_, (c, _))| c == conversation)
            .max_by_key(|(k, (_, s))| (shared(s), *k))
            .map(|(k, _)| k);
        match best {
            Some(k) => self.kept.remove(k).1,
            None => Session::new(&loaded.model),
        }
    }

    fn put(&mut self, conversation: String, session: Session) {
        self.kept.push((conversation, session));
        self.trim();
    }

    fn trim(&mut self) {
        let extra = self.kept.len().saturating_sub(self.limit);
        self.kept.drain(..extra);
    }
}

/// One answer being written: its stream, its generation (text, stop ids, usage) and where its
/// events go.
struct ActiveAnswer<'m> {
    id: u64,
    conversation: String,
    /// Positions the conversation may reach by the end of this answer.
    longest: usize,
    stream: TokenStream<'m>,
    generation: Generation<'m>,
    events: Box<dyn FnMut(Event) + Send>,
    /// Deltas sent, and the ids generated (kept with the answer, see [`Event::Done`]).
    count: usize,
    ids: Vec<u32>,
}

/// The answers running on one loaded model.
pub(crate) struct Batch<'m> {
    loaded: &'m LoadedModel,
    answers: Vec<ActiveAnswer<'m>>,
    /// Prompt lengths of requests waiting for memory, by generation id (so that a waiting
    /// request's prompt is rendered once, not at every step).
    waiting_prompts: RefCell<HashMap<u64, usize>>,
    markers: Markers,
    running: Running,
    /// The buffers the rows' decode steps share.
    kv: gemma::BatchKvCache,
}

impl<'m> Batch<'m> {
    pub fn new(loaded: &'m LoadedModel, running: Running) -> Self {
        Self {
            loaded,
            answers: Vec::new(),
            waiting_prompts: RefCell::default(),
            markers: Markers::new(&loaded.tokenizer),
            running,
            kv: gemma::BatchKvCache::new(),
        }
    }

    /// Answers running now.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether `request` may join the answers running as far as memory goes: MLX's active
    /// memory, what the running answers' caches will still grow by until their limits, and
    /// the new answer's caches at its longest must stay within MLX's memory limit. An answer
    /// that does not fit waits for one to end; the first always runs (as one always did).
    /// `id`: the generation's, under which its prompt's length is remembered while it waits.
    pub fn fits(&self, id: u64, request: &ChatRequest) -> bool {
        if self.answers.is_empty() {
            return true;
        }
        let model = &self.loaded.model;
        let known = self.waiting_prompts.borrow().get(&id).copied();
        let prompt = match known {
            Some(tokens) => tokens,
            None => {
                let Ok(prompt) = self.loaded.prompt_with_tools(
                    &request.messages,
                    &request.tools,
                    request.thinking,
                    &request.images,
                    &request.audio,
                ) else {
                    return true; // (refused with its reason once started)
                };
                self.waiting_prompts
                    .borrow_mut()
                    .insert(id, prompt.ids.len());
                prompt.ids.len()
            }
        };
        let options = &request.options;
        let longest = (prompt + options.max_tokens).min(options.context_window);
        let growing: usize = self
            .answers
            .iter()
            .map(|answer| {
                let now = answer.stream.positions();
                model
                    .kv_bytes(answer.longest)
                    .saturating_sub(model.kv_bytes(now))
            })
            .sum();
        let need = model.kv_bytes(longest) + growing;
        match (
            mlx_rs::memory::active_memory(),
            mlx_rs::memory::memory_limit(),
        ) {
            (Ok(active), Ok(limit)) if limit > 0 => active.saturating_add(need) <= limit,
            _ => true,
        }
    }

    /// Starts `job`: its prompt is prefilled (the running answers stepping between chunks)
    /// and it joins the next step. A request that cannot start gets its error event.
    pub fn start(&mut self, mut job: Job, sessions: &mut Sessions) {
        self.waiting_prompts.get_mut().remove(&job.id);
        let loaded = self.loaded;
        let (answers, markers, running, kv) = (
            &mut self.answers,
            &self.markers,
            &self.running,
            &mut self.kv,
        );
        let mut longest = 0;
        let mut started = || -> Result<TokenStream<'m>, EngineError> {
            let request = &job.request;
            let prompt = loaded.prompt_with_tools(
                &request.messages,
                &request.tools,
                request.thinking,
                &request.images,
                &request.audio,
            )?;
            let context = request.options.context_window;
            longest = (prompt.ids.len() + request.options.max_tokens).min(context);
            if prompt.ids.len() >= context {
                let message = alone_tokens(loaded, request)?;
                if message >= context {
                    return Err(EngineError::MessageTooLong { message, context });
                }
            }
            let session = sessions.take(&request.conversation, &prompt.ids, loaded);
            let events = RefCell::new(&mut job.events);
            let id = job.id;
            let mut on_prefill = |p: PrefillProgress| {
                (events.borrow_mut())(Event::Prefill {
                    generation_id: id,
                    done: p.done,
                    total: p.total,
                });
                // Between two chunks, the answers already running take a step.
                if p.done > 0 && p.done < p.total {
                    step(answers, markers, sessions, running, kv);
                }
            };
            let mut stream = loaded.token_stream(
                StreamRequest::new(session, &prompt, &request.options, job.cancel.clone())
                    .on_prefill(&mut on_prefill),
            )?;
            if !answers.is_empty() {
                let why = "another answer is running";
                stream.stop_drafting(why)?;
                for answer in answers.iter_mut() {
                    // (Should that step fail, the answer ends early: drafting is lossless, and
                    // its error is not the new request's.)
                    let _ = answer.stream.stop_drafting(why);
                }
            }
            Ok(stream)
        };
        match started() {
            Ok(stream) => {
                let generation = Generation::new(&stream, &loaded.tokenizer, &loaded.specials);
                answers.push(ActiveAnswer {
                    id: job.id,
                    conversation: job.request.conversation,
                    longest,
                    stream,
                    generation,
                    events: job.events,
                    count: 0,
                    ids: Vec::new(),
                });
            }
            Err(error) => {
                (job.events)(Event::Error {
                    generation_id: job.id,
                    error,
                });
                forget(running, job.id);
            }
        }
    }

    /// One step of every answer running; those that end send their last events and give
    /// their session back.
    pub fn step(&mut self, sessions: &mut Sessions) {
        step(
            &mut self.answers,
            &self.markers,
            sessions,
            &self.running,
            &mut self.kv,
        );
    }
}

fn step<'m>(
    answers: &mut Vec<ActiveAnswer<'m>>,
    markers: &Markers,
    sessions: &mut Sessions,
    running: &Running,
    kv: &mut gemma::BatchKvCache,
) {
    if answers.is_empty() {
        return;
    }
    let results = {
        let mut streams: Vec<&mut TokenStream<'m>> =
            answers.iter_mut().map(|a| &mut a.stream).collect();
        next_tokens(&mut streams, kv)
    };
    let mut ended = Vec::new();
    for (k, (answer, result)) in answers.iter_mut().zip(results).enumerate() {
        let taken = result
            .map_err(EngineError::from)
            .and_then(|next| Ok(answer.generation.take(next, answer.stream.end())?));
        match taken {
            Ok(Taken::Delta(delta)) => {
                answer.count += 1;
                answer.ids.extend(delta.token);
                (answer.events)(Event::Delta {
                    generation_id: answer.id,
                    delta: delta.text,
                    token_count: answer.count,
                    marker: delta.token.and_then(|id| markers.of(id)),
                });
            }
            Ok(Taken::Stop(stop)) => ended.push((k, Ok(stop))),
            Err(error) => ended.push((k, Err(error))),
        }
    }
    // The ended answers' sessions are kept (and, once no answer runs, the rows' buffers let
    // go) before their last events are sent: whoever hears "done" finds the memory free.
    let mut last_events = Vec::with_capacity(ended.len());
    for (k, outcome) in ended.into_iter().rev() {
        let ActiveAnswer {
            id,
            conversation,
            stream,
            generation,
            events,
            mut count,
            mut ids,
            ..
        } = answers.remove(k);
        let finished = outcome.and_then(|stop| Ok(generation.finish(stop, &stream)?));
        let mut sent = Vec::with_capacity(2);
        match finished {
            Ok((rest, usage)) => {
                if let Some(rest) = rest {
                    count += 1;
                    ids.extend(rest.token);
                    sent.push(Event::Delta {
                        generation_id: id,
                        delta: rest.text,
                        token_count: count,
                        marker: None,
                    });
                }
                sent.push(Event::Done {
                    generation_id: id,
                    usage,
                    ids,
                });
                if let Some(session) = stream.into_session() {
                    sessions.put(conversation, session);
                }
            }
            // (The session is dropped: its caches may hold half a step.)
            Err(error) => sent.push(Event::Error {
                generation_id: id,
                error,
            }),
        }
        last_events.push((id, events, sent));
    }
    // The rows' buffers can go once fewer than two answers run.
    if answers.len() < 2 {
        kv.clear();
    }
    for (id, mut events, sent) in last_events {
        for event in sent {
            events(event);
        }
        forget(running, id);
    }
}

fn forget(running: &Running, id: u64) {
    if let Ok(mut r) = running.lock() {
        r.remove(&id);
    }
}

/// Tokens of the request's last message as a new chat would send it: the system messages and
/// that message, with its images and audio clips.
fn alone_tokens(loaded: &LoadedModel, request: &ChatRequest) -> Result<usize, EngineError> {
    let Some((last, before)) = request.messages.split_last() else {
        return Ok(0);
    };
    let mut messages: Vec<Message> = before
        .iter()
        .filter(|message| message.role == Role::System)
        .cloned()
        .collect();
    messages.push(last.clone());
    let own = |kind: Part| last.content.iter().filter(|part| **part == kind).count();
    let images = &request.images[request.images.len().saturating_sub(own(Part::Image))..];
    let audio = &request.audio[request.audio.len().saturating_sub(own(Part::Audio))..];
    Ok(loaded
        .prompt_with_tools(&messages, &request.tools, request.thinking, images, audio)?
        .ids
        .len())
}
