//! Helpers the engine's test files share: the generated fixtures and the usual options.
#![allow(dead_code)] // each test file uses its own subset

pub mod png;

use std::path::{Path, PathBuf};

use engine::generate::GenerateOptions;
use engine::sampler::SamplerConfig;
use engine::worker::LoadedModel;
use gemma::LoadOptions;

/// The tiny random-weight checkpoint `make fixtures` writes (`GEMMA_FIXTURES` overrides where).
pub fn fixture() -> PathBuf {
    let root = std::env::var_os("GEMMA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/out/fixtures")
        });
    let dir = root.join("tiny");
    assert!(
        dir.join("config.json").exists(),
        "fixture {} missing: run `make fixtures`",
        dir.display()
    );
    dir
}

/// The tiny fixture in float32: several times faster than bfloat16 on MLX's CPU backend.
pub fn load_f32() -> LoadedModel {
    let options = LoadOptions {
        dtype: Some(mlx_rs::Dtype::Float32),
        ..LoadOptions::default()
    };
    LoadedModel::load(&fixture(), &options).unwrap()
}

/// Greedy sampling of at most `max_tokens`.
pub fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampler: SamplerConfig::greedy(),
        max_tokens,
        ..GenerateOptions::default()
    }
}
