//! The answer being written: what each engine event does to the saved message and to the UI.
//! Text is saved as it streams; the answer ends complete, stopped or failed, never lost, and an
//! answer that can no longer be saved is stopped and says so.

use std::sync::Arc;

use chats::{MessageStatus, Store, StreamWriter};
use engine::error::EngineError;
use engine::events::Event;
use engine::generate::Usage;
use engine::worker::Canceller;

use crate::chat::GenerationEvent;
use crate::error::{CommandError, Error, ErrorKind};
use crate::events::Events;

/// Records one answer: owns its stream writer and turns engine events into saved text and UI
/// events. Built by [`crate::chat::Chat`] and driven from the engine thread.
pub struct AnswerRecorder {
    conversation_id: String,
    message_id: String,
    /// `None` once the answer is finished or can no longer be saved.
    writer: Option<StreamWriter<Arc<Store>>>,
    /// Set when the answer could not be saved: it is stopped and ends with this error.
    save_error: Option<CommandError>,
    store: Arc<Store>,
    events: Arc<dyn Events>,
    canceller: Canceller,
    /// The context window the answer is written in, reported with it.
    context_window: u32,
    /// Called once, when the answer has ended (however it ended).
    on_finished: Option<Box<dyn FnOnce() + Send>>,
}

impl AnswerRecorder {
    /// A recorder writing through `writer`, an answer of `conversation_id`.
    pub fn new(
        writer: StreamWriter<Arc<Store>>,
        conversation_id: &str,
        store: Arc<Store>,
        events: Arc<dyn Events>,
        canceller: Canceller,
        context_window: u32,
        on_finished: impl FnOnce() + Send + 'static,
    ) -> Self {
        Self {
            conversation_id: conversation_id.to_owned(),
            message_id: writer.message_id().to_owned(),
            writer: Some(writer),
            save_error: None,
            store,
            events,
            canceller,
            context_window,
            on_finished: Some(Box::new(on_finished)),
        }
    }

    /// The saved answer's message id.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// Handles one engine event.
    pub fn on_event(&mut self, event: Event) {
        match event {
            Event::Prefill {
                generation_id,
                done,
                total,
            } => self.on_prefill(generation_id, done, total),
            Event::Delta {
                generation_id,
                delta,
                token_count,
                ..
            } => self.on_delta(generation_id, delta, token_count),
            Event::Done {
                generation_id,
                usage,
                ids,
            } => self.on_done(generation_id, &usage, &ids),
            Event::Error {
                generation_id,
                error,
            } => self.on_error(generation_id, error),
        }
    }

    /// Shows how far the prompt has been read (nothing to save yet).
    pub fn on_prefill(&mut self, generation_id: u64, done: usize, total: usize) {
        if self.save_error.is_some() {
            return;
        }
        self.events.generation(&GenerationEvent::Prefill {
            generation_id,
            conversation_id: self.conversation_id.clone(),
            message_id: self.message_id.clone(),
            done: done as u64,
            total: total as u64,
        });
    }

    /// Saves new text and shows it. When it cannot be saved (a full disk), the answer is
    /// stopped rather than streamed on as if kept; a deleted conversation was already stopped by
    /// its deletion and needs no word.
    pub fn on_delta(&mut self, generation_id: u64, delta: String, token_count: usize) {
        if let Some(Err(err)) = self.writer.as_mut().map(|w| w.push(&delta)) {
            self.writer = None;
            if self.store.get_conversation(&self.conversation_id).is_ok() {
                self.save_error = Some(CommandError {
                    kind: ErrorKind::Io,
                    message: format!(
                        "The answer could not be saved ({err}), so it was stopped. What was \
                         saved before is kept."
                    ),
                    context: None,
                });
                self.canceller.cancel(generation_id);
            }
        }
        if self.save_error.is_some() {
            return;
        }
        self.events.generation(&GenerationEvent::Delta {
            generation_id,
            conversation_id: self.conversation_id.clone(),
            message_id: self.message_id.clone(),
            delta,
            token_count: token_count as u64,
        });
    }

    /// The answer ended: saved complete (or stopped, when the user stopped it), with its usage
    /// and the ids it generated (when all its text was saved: they must spell exactly it).
    pub fn on_done(&mut self, generation_id: u64, usage: &Usage, ids: &[u32]) {
        let usage = stored_usage(usage, self.context_window);
        let status = match usage.stop_reason {
            chats::StopReason::Cancelled => MessageStatus::Stopped,
            _ => MessageStatus::Complete,
        };
        if let Some(mut writer) = self.writer.take() {
            // Only a speed-up for the next turn: an answer whose ids cannot be kept is still kept.
            if writer.flush().is_ok() {
                let _ = self.store.set_generated_ids(&self.message_id, ids);
            }
            let _ = writer.finish(status, Some(&usage), None);
        }
        self.finished();
        let event = match self.save_error.take() {
            Some(error) => GenerationEvent::Error {
                generation_id,
                conversation_id: self.conversation_id.clone(),
                message_id: self.message_id.clone(),
                error,
            },
            None => GenerationEvent::Done {
                generation_id,
                conversation_id: self.conversation_id.clone(),
                message_id: self.message_id.clone(),
                usage,
                context_window: self.context_window,
            },
        };
        self.events.generation(&event);
    }

    /// The answer failed: the text written so far is kept, marked failed with the reason.
    pub fn on_error(&mut self, generation_id: u64, error: EngineError) {
        let error = CommandError::from(&Error::from(error));
        let error = self.save_error.take().unwrap_or(error);
        if let Some(writer) = self.writer.take() {
            let _ = writer.finish(MessageStatus::Error, None, Some(&error.message));
        }
        self.finished();
        self.events.generation(&GenerationEvent::Error {
            generation_id,
            conversation_id: self.conversation_id.clone(),
            message_id: self.message_id.clone(),
            error,
        });
    }

    fn finished(&mut self) {
        if let Some(on_finished) = self.on_finished.take() {
            on_finished();
        }
    }
}

/// The engine's usage as the chats database stores it (`chats` knows nothing of the engine).
fn stored_usage(usage: &Usage, context_window: u32) -> chats::Usage {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    chats::Usage {
        prompt_tokens: count(usage.prompt_tokens),
        reused_tokens: count(usage.reused_tokens),
        generated_tokens: count(usage.generated_tokens),
        time_to_first_token_ms: usage.time_to_first_token_ms,
        prefill_tokens_per_second: usage.prefill_tokens_per_second,
        decode_tokens_per_second: usage.decode_tokens_per_second,
        stop_reason: stored_stop(usage.stop_reason),
        context_window: Some(context_window),
        tokens_per_round: usage
            .speculative
            .as_ref()
            .filter(|s| s.rounds > 0)
            .map(|s| s.tokens_per_round()),
    }
}

/// The engine's stop reason as the chats database stores it: the one conversion between the
/// two enums (docs/ARCHITECTURE.md, "One name, two enums"), exhaustive, so a variant the engine
/// adds does not compile until it is stored; the test `every_stop_reason_is_stored_as_itself`
/// holds the other direction.
fn stored_stop(stop: engine::generate::StopReason) -> chats::StopReason {
    use engine::generate::StopReason as Engine;
    match stop {
        Engine::EndOfTurn => chats::StopReason::EndOfTurn,
        Engine::MaxTokens => chats::StopReason::MaxTokens,
        Engine::ContextFull => chats::StopReason::ContextFull,
        Engine::Cancelled => chats::StopReason::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use chats::StopReason;
    use engine::error::GenerateError;
    use engine::generate::StopReason as EngineStop;
    use engine::worker::Engine;

    use super::*;
    use crate::events::recorded::{Recorded, Recorder};

    struct Setup {
        _dir: tempfile::TempDir,
        store: Arc<Store>,
        events: Arc<Recorder>,
        conversation: String,
        finished: Arc<AtomicBool>,
        recorder: AnswerRecorder,
        _engine: Engine,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let conversation = store.create_conversation("t").unwrap().id;
        let writer = StreamWriter::begin(store.clone(), &conversation).unwrap();
        let events = Arc::new(Recorder::default());
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        let engine = Engine::spawn();
        let recorder = AnswerRecorder::new(
            writer,
            &conversation,
            store.clone(),
            events.clone(),
            engine.canceller(),
            4096,
            move || flag.store(true, Ordering::SeqCst),
        );
        Setup {
            _dir: dir,
            store,
            events,
            conversation,
            finished,
            recorder,
            _engine: engine,
        }
    }

    fn usage(stop_reason: EngineStop) -> Usage {
        Usage {
            prompt_tokens: 10,
            reused_tokens: 0,
            generated_tokens: 2,
            time_to_first_token_ms: 1.0,
            prefill_tokens_per_second: 1.0,
            decode_tokens_per_second: 1.0,
            stop_reason,
            speculative: None,
        }
    }

    fn generation_events(events: &Recorder) -> Vec<GenerationEvent> {
        events
            .all()
            .into_iter()
            .filter_map(|e| match e {
                Recorded::Generation(g) => Some(g),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn deltas_are_shown_and_saved_and_done_completes_the_message() {
        let mut s = setup();
        s.recorder.on_delta(7, "Hel".into(), 1);
        s.recorder.on_delta(7, "lo".into(), 2);
        assert!(!s.finished.load(Ordering::SeqCst));
        s.recorder.on_done(7, &usage(EngineStop::EndOfTurn), &[]);
        assert!(s.finished.load(Ordering::SeqCst));
        let message = s.store.get_conversation(&s.conversation).unwrap().messages[0].clone();
        assert_eq!(
            (message.text.as_str(), message.status),
            ("Hello", MessageStatus::Complete)
        );
        let events = generation_events(&s.events);
        assert_eq!(events.len(), 3);
        let GenerationEvent::Done {
            usage,
            context_window,
            ..
        } = &events[2]
        else {
            panic!("{events:?}");
        };
        assert_eq!(
            (usage.stop_reason, *context_window),
            (StopReason::EndOfTurn, 4096)
        );
    }

    /// Every stop reason the engine reports is stored as the one of the same name, and every
    /// stored one comes from an engine one: a variant added to `chats::StopReason` alone does
    /// not compile here (the match is exhaustive), one added to the engine's alone does not
    /// compile in `stored_stop`. The names the UI reads (chats') and the API's log writes (the
    /// engine's) agree.
    #[test]
    fn every_stop_reason_is_stored_as_itself() {
        let engine_of = |stored: StopReason| match stored {
            StopReason::EndOfTurn => EngineStop::EndOfTurn,
            StopReason::MaxTokens => EngineStop::MaxTokens,
            StopReason::ContextFull => EngineStop::ContextFull,
            StopReason::Cancelled => EngineStop::Cancelled,
        };
        let every = [
            EngineStop::EndOfTurn,
            EngineStop::MaxTokens,
            EngineStop::ContextFull,
            EngineStop::Cancelled,
        ];
        for stop in every {
            let stored = stored_stop(stop);
            assert_eq!(engine_of(stored), stop);
            assert_eq!(
                serde_json::to_value(stored).unwrap(),
                serde_json::to_value(stop).unwrap()
            );
        }
    }

    #[test]
    fn a_stopped_answer_is_kept_marked_stopped() {
        let mut s = setup();
        s.recorder.on_delta(1, "part".into(), 1);
        s.recorder.on_done(1, &usage(EngineStop::Cancelled), &[]);
        let message = s.store.get_conversation(&s.conversation).unwrap().messages[0].clone();
        assert_eq!(
            (message.text.as_str(), message.status),
            ("part", MessageStatus::Stopped)
        );
    }

    #[test]
    fn a_prompt_too_long_fails_as_context_full_with_both_numbers_and_keeps_the_text() {
        let mut s = setup();
        s.recorder.on_delta(3, "so far".into(), 1);
        let error = EngineError::Generate(GenerateError::PromptTooLong {
            prompt: 9000,
            context: 8192,
        });
        s.recorder.on_error(3, error);
        assert!(s.finished.load(Ordering::SeqCst));
        let message = s.store.get_conversation(&s.conversation).unwrap().messages[0].clone();
        assert_eq!(
            (message.text.as_str(), message.status),
            ("so far", MessageStatus::Error)
        );
        let events = generation_events(&s.events);
        let Some(GenerationEvent::Error { error, .. }) = events.last() else {
            panic!("{events:?}");
        };
        assert_eq!(error.kind, ErrorKind::ContextFull);
        assert!(
            error.message.contains("9,000") && error.message.contains("8,192"),
            "{}",
            error.message
        );
        let need = error.context.unwrap();
        assert_eq!((need.needed, need.window, need.alone), (9000, 8192, false));
    }

    #[test]
    fn an_answer_whose_conversation_is_gone_ends_without_a_word() {
        let mut s = setup();
        s.recorder.on_delta(5, "a".into(), 1);
        s.store.delete_conversation(&s.conversation).unwrap();
        // Text now has nowhere to go; the deletion stopped the answer, so it says nothing more.
        for i in 0..200 {
            s.recorder.on_delta(5, "x".repeat(4096), i + 2);
        }
        s.recorder.on_done(5, &usage(EngineStop::Cancelled), &[]);
        let events = generation_events(&s.events);
        assert!(
            matches!(events.last(), Some(GenerationEvent::Done { .. })),
            "{events:?}"
        );
    }
}
