//! Prompting, sampling, generation and the model store. Knows nothing of windows.

pub mod detokenize;
pub mod sampler;
pub mod template;
pub mod tokenizer;
pub mod generate;
pub mod worker;
