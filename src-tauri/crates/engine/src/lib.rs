//! Prompting (chat template, tokenizer, image input), sampling and generation (the token
//! stream under the generator, the engine thread). Knows nothing of windows or of where models
//! come from (`model-store`).

pub mod audio;
pub mod batch;
pub mod checkpoint;
pub mod constraint;
pub mod detokenize;
pub mod error;
pub mod events;
pub mod fit;
pub mod generate;
pub mod image;
pub mod loaded;
pub mod media;
pub mod options;
pub mod output;
pub mod policy;
pub mod prompt;
pub mod sampler;
pub mod speculative;
pub mod stream;
pub mod template;
pub mod tokenizer;
pub mod worker;
