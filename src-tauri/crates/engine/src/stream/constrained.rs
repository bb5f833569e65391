//! Constrained decoding: every draw masked by what the grammar allows. The forward of the
//! pending id is dispatched, then the id is read and fed to the grammar while the device works,
//! and the next draw is made from the logits masked by what the grammar allows after it.

use std::time::{Duration, Instant};

use mlx_rs::transforms::async_eval;

use crate::error::Result;

use super::{read_id, Mode, StepTimes, TokenStream};

impl TokenStream<'_> {
    /// The next id of a constrained stream (see the module doc).
    pub(super) fn next_constrained(&mut self) -> Result<Option<u32>> {
        let Some(y) = self.pending.take() else {
            self.finish(self.limit_end());
            return Ok(None);
        };
        let last = self.last_allowed();
        let built = Instant::now();
        let logits = if last {
            None
        } else {
            let logits = self.model.decode(&y, &mut self.session.caches)?;
            async_eval([&logits])?;
            Some(logits)
        };
        let dispatched = Instant::now();
        let token = read_id(&y)?;
        let waiting = Instant::now();
        if let Mode::Constrained(constraint) = &mut self.mode {
            constraint.consume(token)?;
        }
        if let Some(logits) = logits {
            self.remember(&y)?;
            let masked = match &mut self.mode {
                Mode::Constrained(constraint) => constraint.mask(&logits)?,
                _ => logits,
            };
            let next = self.sampler.sample(&masked, &self.history())?;
            async_eval([&next])?;
            self.pending = Some(next);
        }
        self.last_step = StepTimes {
            build: dispatched - built,
            dispatch: Duration::ZERO,
            wait: waiting - dispatched,
        };
        self.hand_out(token, !last);
        Ok(Some(token))
    }
}
