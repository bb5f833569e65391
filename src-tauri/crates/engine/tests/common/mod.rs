//! Helpers the engine's test files share: the generated fixtures and the usual options.
#![allow(dead_code)] // each test file uses its own subset

pub mod png;

use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::sampler::SamplerConfig;
use gemma::LoadOptions;

#[path = "../../../fixture_dir.rs"]
mod fixture_dir;
pub use fixture_dir::fixture;

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

/// A request as the local API sends it (every API request names the same conversation).
pub fn api_request(text: &str, options: GenerateOptions) -> engine::events::ChatRequest {
    engine::events::ChatRequest {
        conversation: "local-api".into(),
        messages: vec![engine::template::Message::text(
            engine::template::Role::User,
            text,
        )],
        images: Vec::new(),
        audio: Vec::new(),
        thinking: false,
        tools: Vec::new(),
        options,
    }
}

/// A 200×130 gradient picture, preprocessed at the 70-soft-token budget.
pub fn test_image() -> std::sync::Arc<engine::image::Preprocessed> {
    let img = image::RgbImage::from_fn(200, 130, |x, y| {
        image::Rgb([(x % 256) as u8, (y * 2 % 256) as u8, ((x + y) % 256) as u8])
    });
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let budget = engine::image::SoftTokenBudget::T70;
    std::sync::Arc::new(engine::image::preprocess_bytes(&png, budget).unwrap())
}
