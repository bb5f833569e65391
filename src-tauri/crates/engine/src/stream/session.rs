//! A conversation's model state: the caches and exactly the tokens they hold, the snapshot an
//! answer can return to, and how a stream holds its session and its cancel flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use gemma::{KvCache, Model};

/// A conversation's model state: the caches and exactly the tokens they hold.
pub struct Session {
    pub(super) caches: Vec<KvCache>,
    pub(super) tokens: Vec<u32>,
    /// The sliding caches as they were when the last answer began (its prompt prefilled), so
    /// that the next turn can return there even when the answer outran their rewind slack.
    answer_start: Option<Mark>,
}

/// A point a session can return to: its token count, and a snapshot of each sliding cache
/// there (`None` for full caches, which can always be trimmed back).
struct Mark {
    tokens: usize,
    sliding: Vec<Option<KvCache>>,
}

impl Session {
    /// An empty session for `model`.
    pub fn new(model: &Model) -> Self {
        Self {
            caches: model.new_caches(),
            tokens: Vec::new(),
            answer_start: None,
        }
    }

    /// The tokens whose K/V the caches hold.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The caches, one per cache-owning layer.
    pub fn caches(&self) -> &[KvCache] {
        &self.caches
    }

    /// Rewinds to the longest prefix shared with `prompt` that the caches can return to,
    /// keeping at least one prompt token to prefill. Returns how many tokens are reused.
    ///
    /// A sliding cache keeps only a little of what left its window, so going back over a long
    /// answer (a thought the template drops from the history, an answer that re-tokenizes
    /// differently) is done from the snapshot taken where that answer began.
    pub fn rewind_for(&mut self, model: &Model, prompt: &[u32]) -> usize {
        let common = shared_prefix(&self.tokens, prompt);
        let reuse = common.min(prompt.len().saturating_sub(1));
        if self.trim_to(reuse) {
            return reuse;
        }
        if let Some(mark) = self.answer_start.take() {
            if mark.tokens <= self.tokens.len() {
                let back = self.tokens.len() - mark.tokens;
                let restored =
                    self.caches.iter_mut().zip(mark.sliding).all(
                        |(cache, snapshot)| match snapshot {
                            Some(snapshot) => {
                                *cache = snapshot;
                                true
                            }
                            None => cache.trim(back).is_ok(),
                        },
                    );
                if restored {
                    self.tokens.truncate(mark.tokens);
                    let reuse = reuse.min(mark.tokens);
                    if self.trim_to(reuse) {
                        return reuse;
                    }
                }
            }
        }
        *self = Session::new(model);
        0
    }

    /// Drops the tokens after the first `keep`, if every cache can; false if not (nothing is
    /// changed then).
    fn trim_to(&mut self, keep: usize) -> bool {
        let drop = self.tokens.len().saturating_sub(keep);
        if !self.caches.iter().all(|c| c.can_trim(drop)) {
            return false;
        }
        if !self.caches.iter_mut().all(|c| c.trim(drop).is_ok()) {
            return false;
        }
        self.tokens.truncate(keep);
        if self.answer_start.as_ref().is_some_and(|m| m.tokens > keep) {
            self.answer_start = None;
        }
        true
    }

    /// Remembers this point as where an answer begins (see [`Self::rewind_for`]).
    pub(super) fn mark_answer_start(&mut self) {
        let sliding = self
            .caches
            .iter()
            .map(|c| matches!(c, KvCache::Sliding { .. }).then(|| c.clone()))
            .collect();
        self.answer_start = Some(Mark {
            tokens: self.tokens.len(),
            sliding,
        });
    }
}

/// A stream's session: lent by the caller for the stream's life, or given to it (the engine
/// thread, which keeps several streams running, gives each its own and takes it back with
/// [`TokenStream::into_session`]).
pub enum SessionSlot<'a> {
    Lent(&'a mut Session),
    Given(Box<Session>),
}

impl<'a> From<&'a mut Session> for SessionSlot<'a> {
    fn from(session: &'a mut Session) -> Self {
        Self::Lent(session)
    }
}

impl From<Session> for SessionSlot<'_> {
    fn from(session: Session) -> Self {
        Self::Given(Box::new(session))
    }
}

impl std::ops::Deref for SessionSlot<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        match self {
            Self::Lent(s) => s,
            Self::Given(s) => s,
        }
    }
}

impl std::ops::DerefMut for SessionSlot<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        match self {
            Self::Lent(s) => s,
            Self::Given(s) => s,
        }
    }
}

/// A stream's cancel flag: lent by the caller, or shared with whoever may stop it.
pub enum CancelFlag<'a> {
    Lent(&'a AtomicBool),
    Shared(Arc<AtomicBool>),
}

impl<'a> From<&'a AtomicBool> for CancelFlag<'a> {
    fn from(flag: &'a AtomicBool) -> Self {
        Self::Lent(flag)
    }
}

impl<'a> From<&'a Arc<AtomicBool>> for CancelFlag<'a> {
    fn from(flag: &'a Arc<AtomicBool>) -> Self {
        Self::Lent(flag)
    }
}

impl From<Arc<AtomicBool>> for CancelFlag<'_> {
    fn from(flag: Arc<AtomicBool>) -> Self {
        Self::Shared(flag)
    }
}

impl CancelFlag<'_> {
    pub(super) fn is_set(&self) -> bool {
        match self {
            Self::Lent(f) => f.load(Ordering::Relaxed),
            Self::Shared(f) => f.load(Ordering::Relaxed),
        }
    }
}

/// How many ids `a` and `b` share from their start.
pub fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
