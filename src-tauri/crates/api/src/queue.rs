//! The bounded queue in front of the one engine: the answers being written at once plus a few
//! waiting; beyond that a request is refused at once (503 with `Retry-After`) instead of
//! waiting without end. The engine itself starts its requests first come, first served.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many requests are in the engine's hands (running or waiting), and how many may be.
#[derive(Debug)]
pub struct Admission {
    /// Answers the engine writes at once (see `Engine::set_parallel`).
    running: AtomicUsize,
    waiting: usize,
    taken: AtomicUsize,
}

/// A place in the queue, given back when dropped (when the engine is done with the request).
#[derive(Debug)]
pub struct Permit(Arc<Admission>);

impl Admission {
    /// `running` at once (at least one) and `waiting` behind them.
    pub fn new(running: usize, waiting: usize) -> Arc<Self> {
        Arc::new(Self {
            running: AtomicUsize::new(running.max(1)),
            waiting,
            taken: AtomicUsize::new(0),
        })
    }

    /// The engine now writes `running` answers at once: that many more (or fewer) places.
    /// Requests already admitted keep theirs.
    pub fn set_running(&self, running: usize) {
        self.running.store(running.max(1), Ordering::SeqCst);
    }

    /// A place, or `None` when the queue is full.
    pub fn try_admit(self: &Arc<Self>) -> Option<Permit> {
        self.taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.running.load(Ordering::SeqCst) + self.waiting).then_some(n + 1)
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
        let admission = Admission::new(1, 1);
        let running = admission.try_admit().unwrap();
        let waiting = admission.try_admit().unwrap();
        assert!(admission.try_admit().is_none());
        drop(running);
        let next = admission.try_admit().unwrap();
        assert_eq!(admission.in_flight(), 2);
        drop((waiting, next));
        assert_eq!(admission.in_flight(), 0);
    }

    #[test]
    fn answers_written_at_once_add_places_and_can_be_changed() {
        let admission = Admission::new(3, 2);
        let held: Vec<Permit> = (0..5).map_while(|_| admission.try_admit()).collect();
        assert_eq!(held.len(), 5);
        assert!(admission.try_admit().is_none());
        admission.set_running(4);
        let one_more = admission.try_admit().expect("a place more");
        admission.set_running(1);
        drop(held);
        assert_eq!(admission.in_flight(), 1);
        let back: Vec<Permit> = (0..5).map_while(|_| admission.try_admit()).collect();
        assert_eq!(back.len(), 2, "1 running + 2 waiting, one of them held");
        drop((one_more, back));
    }
}
