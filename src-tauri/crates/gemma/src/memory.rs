//! MLX's memory: its counters (the same accounting on the CPU, CUDA and Metal backends) and
//! its buffer cache, bounded to a set size and emptied when the app idles.
//!
//! MLX keeps the buffers of freed arrays in a cache to reuse them; left alone the cache grows
//! to the largest transient a step ever made (a long prefill's activations) and stays there.
//! [`limit_cache`] bounds it; [`release_cache`] returns what it holds to the system (the
//! engine calls it when no answer runs). See `docs/BENCHMARK.md` ("Memory").

use crate::error::Result;

/// What MLX's cache may keep by default: enough for a decode step's transients and a
/// prefill chunk's largest buffers at E4B's size, small against the weights.
pub const DEFAULT_CACHE_LIMIT: usize = 512 << 20;

/// MLX's memory counters, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Held by live arrays now.
    pub active: usize,
    /// The most `active` has been since the last [`reset_peak`] (or the process start).
    pub peak: usize,
    /// Freed buffers MLX keeps for reuse.
    pub cache: usize,
}

/// MLX's counters now.
pub fn counters() -> Result<Counters> {
    Ok(Counters {
        active: mlx_rs::memory::active_memory()?,
        peak: mlx_rs::memory::peak_memory()?,
        cache: mlx_rs::memory::cache_memory()?,
    })
}

/// Starts a new peak from the active memory now.
pub fn reset_peak() -> Result<()> {
    Ok(mlx_rs::memory::reset_peak_memory()?)
}

/// Bounds MLX's buffer cache to `bytes` (it frees what is over at once); returns the previous
/// limit.
pub fn limit_cache(bytes: usize) -> Result<usize> {
    Ok(mlx_rs::memory::set_cache_limit(bytes)?)
}

/// Returns every buffer MLX's cache holds to the system (for when the app idles).
pub fn release_cache() -> Result<()> {
    Ok(mlx_rs::memory::clear_cache()?)
}

/// The resident set of this process in bytes (Linux: `VmRSS` of `/proc/self/status`); `None`
/// where it cannot be read (other systems).
pub fn process_rss() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
