//! Prompting, sampling, generation and the model store. Knows nothing of windows.

pub mod detokenize;
pub mod generate;
pub mod image;
pub mod media;
pub mod models;
pub mod sampler;
pub mod template;
pub mod tokenizer;
pub mod worker;
