//! The bounded queue in front of the one engine: the answer being written plus a few waiting;
//! beyond that a request is refused at once (503 with `Retry-After`) instead of waiting
//! without end. The engine itself runs its requests first come, first served.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many requests are in the engine's hands (running or waiting), and how many may be.
#[derive(Debug)]
pub struct Admission {
    limit: usize,
    taken: AtomicUsize,
}

/// A place in the queue, given back when dropped (when the engine is done with the request).
#[derive(Debug)]
pub struct Permit(Arc<Admission>);

impl Admission {
    /// One running and `waiting` behind it.
    pub fn new(waiting: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: waiting + 1,
            taken: AtomicUsize::new(0),
        })
    }

    /// A place, or `None` when the queue is full.
    pub fn try_admit(self: &Arc<Self>) -> Option<Permit> {
        self.taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit(self.clone()))
    }

    /// Requests in the engine's hands now.
    pub fn in_flight(&self) -> usize {
        self.taken.load(Ordering::SeqCst)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_runs_the_waiting_fill_up_and_a_freed_place_is_reused() {
        let admission = Admission::new(1);
        let running = admission.try_admit().unwrap();
        let waiting = admission.try_admit().unwrap();
        assert!(admission.try_admit().is_none());
        drop(running);
        let next = admission.try_admit().unwrap();
        assert_eq!(admission.in_flight(), 2);
        drop((waiting, next));
        assert_eq!(admission.in_flight(), 0);
    }
}
