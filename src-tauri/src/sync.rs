//! Locks that survive a panic elsewhere: the data behind them stays usable.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking the data over from a thread that panicked while holding it (every
/// value the app keeps behind a lock is whole between statements).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
