//! What the backend tells the UI without being asked: model state, streamed answers, drops.
//! Logic emits through [`Events`]; the window implements it with Tauri events, tests record.

use serde::Serialize;
use tauri::{AppHandle, Emitter};

use crate::attachments::DropEvent;
use crate::chat::GenerationEvent;
use crate::faster::FasterAnswers;
use crate::model_setup::ModelState;

/// Event names the UI listens to.
pub const MODEL_STATE: &str = "model-state";
pub const GENERATION: &str = "generation";
pub const DROP: &str = "drop";
pub const FASTER_ANSWERS: &str = "faster-answers";

/// Where events go.
pub trait Events: Send + Sync + 'static {
    fn model_state(&self, state: &ModelState);
    fn generation(&self, event: &GenerationEvent);
    fn dropped(&self, event: &DropEvent);
    /// Where "Faster answers" stands, when it changes by itself (a drafter download).
    fn faster_answers(&self, state: &FasterAnswers);
}

impl Events for AppHandle {
    fn model_state(&self, state: &ModelState) {
        emit(self, MODEL_STATE, state);
    }

    fn generation(&self, event: &GenerationEvent) {
        emit(self, GENERATION, event);
    }

    fn dropped(&self, event: &DropEvent) {
        emit(self, DROP, event);
    }

    fn faster_answers(&self, state: &FasterAnswers) {
        emit(self, FASTER_ANSWERS, state);
    }
}

fn emit(app: &AppHandle, name: &str, payload: &impl Serialize) {
    if let Err(err) = app.emit(name, payload) {
        eprintln!("gemma-desk: could not send the {name} event: {err}");
    }
}

#[cfg(test)]
pub mod recorded {
    //! An [`Events`] that keeps everything, for tests.
    use std::sync::Mutex;

    use super::*;

    /// One emitted event.
    #[derive(Debug, Clone)]
    pub enum Recorded {
        ModelState(ModelState),
        Generation(GenerationEvent),
        FasterAnswers(FasterAnswers),
    }

    #[derive(Default)]
    pub struct Recorder(pub Mutex<Vec<Recorded>>);

    impl Recorder {
        pub fn all(&self) -> Vec<Recorded> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Events for Recorder {
        fn model_state(&self, state: &ModelState) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::ModelState(state.clone()));
        }
        fn generation(&self, event: &GenerationEvent) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::Generation(event.clone()));
        }
        /// Drops come from the window only; no logic under test emits them.
        fn dropped(&self, _: &DropEvent) {}
        fn faster_answers(&self, state: &FasterAnswers) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::FasterAnswers(state.clone()));
        }
    }
}
