//! What the app and the engine thread say to each other about a generation: the request, the
//! events streamed back, and what a loaded model (and its drafter) can do.

use std::sync::Arc;

use crate::audio::AudioClip;
use crate::error::EngineError;
use crate::generate::Usage;
use crate::image::Preprocessed;
use crate::options::GenerateOptions;
use crate::output::Marker;
use crate::template::Message;

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

/// A drafter the loaded model speculates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrafterInfo {
    /// Parameters of its checkpoint.
    pub parameters: usize,
    /// Tokens per verify (drafts + 1).
    pub block_size: usize,
}
