//! What a caller asks a token stream for: one value instead of a constructor per combination
//! (reporting or not, constrained or not, drafting or not).

use crate::options::GenerateOptions;
use crate::prompt::Prompt;
use crate::speculative::{Proposer, SpeculativeOptions};

use super::{CancelFlag, PrefillProgress, SessionSlot};

/// Where a stream's drafts come from, when it speculates.
pub enum Drafting<'a> {
    /// The loaded model's drafter, when one is set (what the app and the CLI run).
    Loaded,
    /// None: plain decoding.
    Off,
    /// This proposer, with these options (tests and the bench bring their own).
    With(Box<dyn Proposer + 'a>, SpeculativeOptions),
}

/// One answer to stream: the session it continues, the prompt, limits and sampling, the flag
/// that stops it, who hears how far the prefill has come, and where drafts come from.
/// [`crate::loaded::LoadedModel::token_stream`] starts it; a grammar in
/// `options.constraint` is compiled there.
pub struct StreamRequest<'a, 'r> {
    pub session: SessionSlot<'a>,
    pub prompt: &'r Prompt,
    pub options: &'r GenerateOptions,
    pub cancel: CancelFlag<'a>,
    /// Told how far the prefill has come (see [`PrefillProgress`]); `None`: nobody.
    pub on_prefill: Option<&'r mut dyn FnMut(PrefillProgress)>,
    pub drafting: Drafting<'a>,
}

impl<'a, 'r> StreamRequest<'a, 'r> {
    /// `prompt` answered in `session` under `options`, stopped by `cancel`; no one told of the
    /// prefill; drafted by the loaded model's drafter, if any.
    pub fn new(
        session: impl Into<SessionSlot<'a>>,
        prompt: &'r Prompt,
        options: &'r GenerateOptions,
        cancel: impl Into<CancelFlag<'a>>,
    ) -> Self {
        Self {
            session: session.into(),
            prompt,
            options,
            cancel: cancel.into(),
            on_prefill: None,
            drafting: Drafting::Loaded,
        }
    }

    /// Tells `on_prefill` how far the prefill has come.
    pub fn on_prefill(mut self, on_prefill: &'r mut dyn FnMut(PrefillProgress)) -> Self {
        self.on_prefill = Some(on_prefill);
        self
    }

    /// Drafts from `drafting` instead of the loaded model's drafter.
    pub fn drafting(mut self, drafting: Drafting<'a>) -> Self {
        self.drafting = drafting;
        self
    }
}
