//! Memory in use, for the status bar: the process's resident size and MLX's own accounting
//! (on Apple Silicon, GPU buffers are unified memory that the resident size counts too).

use serde::Serialize;
use ts_rs::TS;

/// Memory in use, in bytes.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct MemoryUsage {
    #[ts(type = "number")]
    pub resident_bytes: u64,
    /// Arrays MLX holds now (weights, caches, activations).
    #[ts(type = "number")]
    pub mlx_active_bytes: u64,
    /// The most MLX has held since start.
    #[ts(type = "number")]
    pub mlx_peak_bytes: u64,
}

/// Reads the current numbers; zero where the OS or MLX does not say.
pub fn read() -> MemoryUsage {
    let resident_bytes = memory_stats::memory_stats().map_or(0, |m| m.physical_mem as u64);
    let mut active: usize = 0;
    let mut peak: usize = 0;
    // SAFETY: plain out-parameter getters of MLX's allocator statistics.
    unsafe {
        mlx_sys::mlx_get_active_memory(&mut active);
        mlx_sys::mlx_get_peak_memory(&mut peak);
    }
    MemoryUsage {
        resident_bytes,
        mlx_active_bytes: active as u64,
        mlx_peak_bytes: peak as u64,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_process_uses_some_memory() {
        let usage = super::read();
        assert!(usage.resident_bytes > 1 << 20, "{usage:?}");
        assert!(usage.mlx_peak_bytes >= usage.mlx_active_bytes, "{usage:?}");
    }
}
