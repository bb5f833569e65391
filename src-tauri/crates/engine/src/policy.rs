//! The engine's policies: choices about how the engine drives a model (how much to warm up,
//! when drafting stops paying, when idle towers and MLX's buffer cache are let go), not about
//! how the model computes. One value per loaded model
//! ([`crate::loaded::LoadedModel::policy`]); [`Policy::for_flavor`] is the one place the
//! defaults are chosen. The measurements behind them are in `bench/results.md`.

use std::time::Duration;

/// How the engine drives the model on this MLX build.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Tokens of the warm-up's first message after a load (0: a one-word message), so that the
    /// first follow-ups over a long history find the backend's kernels loaded.
    pub warm_up_history: usize,
    /// Drafts accepted per round below which speculative decoding costs more than it saves on
    /// this backend: a round costs a draft block and a verify of several rows, plain decoding
    /// one step per token, so the break-even is `round time / step time − 1` accepted drafts
    /// (docs/SPECULATIVE.md).
    pub min_drafts_accepted: f32,
    /// How long a vision or audio tower stays in memory after it last ran; the engine thread
    /// then drops it, and the next question about an image or a clip reads it again
    /// (docs/ENGINE.md "Idle release").
    pub tower_idle: Duration,
    /// How long the engine thread waits with nothing to do before it hands MLX's buffer cache
    /// back to the system.
    pub cache_idle: Duration,
    /// What MLX's buffer cache may keep while answers run (set when a model is loaded).
    pub cache_limit: usize,
}

impl Policy {
    /// The defaults for the MLX build this crate is linked against (`mlx_sys::FLAVOR`).
    pub fn for_backend() -> Self {
        Self::for_flavor(mlx_sys::FLAVOR)
    }

    /// The defaults for an MLX build of `flavor` (`"cpu"`, `"metal"`, `"cuda…"`).
    pub fn for_flavor(flavor: &str) -> Self {
        let cuda = flavor.starts_with("cuda");
        Self {
            // GPU GEMM libraries load kernels per shape class on first use; the CPU has none to
            // load, and prefilling 2k tokens there would take minutes.
            warm_up_history: match flavor {
                "cpu" => 0,
                _ => 2048,
            },
            // Measured break-evens on CUDA and the CPU; Metal's is provisional until measured
            // on a Mac (docs/SPECULATIVE.md, bench/results.md).
            min_drafts_accepted: match flavor {
                "metal" => 1.0,
                _ if cuda => 2.2,
                _ => 2.4,
            },
            // A picture or a clip is usually followed by a few questions about it within
            // minutes; reading a tower again costs about a second (E4B's vision tower is
            // ~0.3 GB, its audio tower ~0.6 GB), small beside a chat's pause, so five minutes.
            tower_idle: Duration::from_secs(300),
            // Long enough that a client's back-to-back requests reuse the buffers, short
            // enough that memory goes back soon after an answer.
            cache_idle: Duration::from_secs(5),
            cache_limit: gemma::memory::DEFAULT_CACHE_LIMIT,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::for_backend()
    }
}
