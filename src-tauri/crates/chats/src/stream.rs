//! Batching streamed answer text into few writes.

use std::borrow::Borrow;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::store::Store;
use crate::types::{MessageStatus, Usage};

/// How long text may wait in memory before it is written, by default.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// How much text may wait in memory before it is written, by default.
pub const DEFAULT_MAX_PENDING_BYTES: usize = 4096;

/// Collects the deltas of one streaming answer and appends them to the store in batches: when
/// the oldest unwritten delta is [`DEFAULT_FLUSH_INTERVAL`] old or enough text is waiting
/// (checked on each [`push`](Self::push)), on [`flush`](Self::flush), and on drop. At most one
/// batch is lost if the app is killed; what was written is committed.
///
/// Dropping the writer without [`finish`](Self::finish) (the generation thread failed or
/// panicked) writes what is pending and marks the answer `stopped`, so it never stays
/// `streaming` while the app runs.
///
/// `S` is `&Store`, `Arc<Store>`, or anything else that borrows a [`Store`].
pub struct StreamWriter<S: Borrow<Store>> {
    store: S,
    message_id: String,
    pending: String,
    pending_since: Option<Instant>,
    flush_interval: Duration,
    max_pending_bytes: usize,
    finished: bool,
}

impl<S: Borrow<Store>> StreamWriter<S> {
    /// A writer for the streaming answer `message_id` (from `Store::begin_assistant_message`).
    pub fn new(store: S, message_id: impl Into<String>) -> Self {
        Self {
            store,
            message_id: message_id.into(),
            pending: String::new(),
            pending_since: None,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
            finished: false,
        }
    }

    /// Starts a streaming answer in `conversation_id` and returns its writer.
    pub fn begin(store: S, conversation_id: &str) -> Result<Self> {
        let message_id = store.borrow().begin_assistant_message(conversation_id)?;
        Ok(Self::new(store, message_id))
    }

    /// Starts a streaming answer to `message_id` of `conversation_id` (a new version when it
    /// already has answers) and returns its writer.
    pub fn begin_answer_to(store: S, conversation_id: &str, message_id: &str) -> Result<Self> {
        let answer_id = store
            .borrow()
            .begin_answer_to(conversation_id, message_id)?;
        Ok(Self::new(store, answer_id))
    }

    /// Changes when batches are written: after `interval`, or once `max_pending_bytes` wait.
    pub fn with_limits(mut self, interval: Duration, max_pending_bytes: usize) -> Self {
        self.flush_interval = interval;
        self.max_pending_bytes = max_pending_bytes;
        self
    }

    /// The answer being written.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// Adds a delta; writes the batch if it is due. On error the text stays pending.
    pub fn push(&mut self, delta: &str) -> Result<()> {
        if delta.is_empty() {
            return Ok(());
        }
        self.pending.push_str(delta);
        let since = *self.pending_since.get_or_insert_with(Instant::now);
        if self.pending.len() >= self.max_pending_bytes || since.elapsed() >= self.flush_interval {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes all pending text now.
    pub fn flush(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.store
                .borrow()
                .append_assistant_text(&self.message_id, &self.pending)?;
            self.pending.clear();
        }
        self.pending_since = None;
        Ok(())
    }

    /// Writes pending text and ends the answer (see `Store::finish_assistant_message`).
    pub fn finish(
        mut self,
        status: MessageStatus,
        usage: Option<&Usage>,
        error: Option<&str>,
    ) -> Result<()> {
        self.flush()?;
        self.finished = true;
        self.store
            .borrow()
            .finish_assistant_message(&self.message_id, status, usage, error)
    }
}

impl<S: Borrow<Store>> Drop for StreamWriter<S> {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; the text that could be written has been.
        let _ = self.flush();
        if !self.finished {
            let _ = self.store.borrow().finish_assistant_message(
                &self.message_id,
                MessageStatus::Stopped,
                None,
                None,
            );
        }
    }
}
