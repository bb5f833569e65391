//! What became of the last requests' generations, kept in memory: the start of the request log
//! the app will show, and how tests see that a client that left stopped its answer.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use engine::generate::StopReason;

/// Entries kept; older ones are dropped.
const KEPT: usize = 200;

/// How a generation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ended(StopReason),
    Failed(String),
}

/// One generation that has ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub generation_id: u64,
    pub outcome: Outcome,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    /// Whether the client had gone before the end (disconnected).
    pub client_left: bool,
    /// Tokens generated after the client left: how quickly its leaving stopped the engine.
    pub tokens_after_client_left: usize,
}

/// The last [`KEPT`] generations, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<VecDeque<Finished>>>);

impl Log {
    pub fn record(&self, entry: Finished) {
        if let Ok(mut entries) = self.0.lock() {
            if entries.len() == KEPT {
                entries.pop_front();
            }
            entries.push_back(entry);
        }
    }

    pub fn entries(&self) -> Vec<Finished> {
        self.0
            .lock()
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default()
    }
}
