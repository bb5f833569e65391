//! Plain decoding: the forward of the pending id is built and dispatched before that id is
//! read, so the host builds step n + 1 while the device computes step n.

use std::time::Instant;

use mlx_rs::transforms::async_eval;

use crate::error::Result;

use super::{read_id, StepTimes, TokenStream};

impl TokenStream<'_> {
    /// The next id of a plain stream (see the module doc).
    pub(super) fn next_plain(&mut self) -> Result<Option<u32>> {
        let Some(y) = self.pending.take() else {
            self.finish(self.limit_end());
            return Ok(None);
        };
        let last = self.last_allowed();
        let built = Instant::now();
        let mut dispatched = built;
        if !last {
            let logits = self.model.decode(&y, &mut self.session.caches)?;
            self.remember(&y)?;
            let next = self.sampler.sample(&logits, &self.history())?;
            dispatched = Instant::now();
            async_eval([&next])?;
            self.pending = Some(next);
        }
        let waiting = Instant::now();
        let token = read_id(&y)?;
        self.last_step = StepTimes {
            build: dispatched - built,
            dispatch: waiting - dispatched,
            wait: waiting.elapsed(),
        };
        self.hand_out(token, !last);
        Ok(Some(token))
    }

    /// Whether the next id comes from a plain decode step that other streams can share: no
    /// id is waiting, none is speculated or constrained, and the step is not the last.
    pub(super) fn shares_next_step(&self) -> bool {
        self.end.is_none()
            && self.ready.is_empty()
            && matches!(self.mode, super::Mode::Plain)
            && self.pending.is_some()
            && !self.last_allowed()
            && !self.cancel.is_set()
    }
}
