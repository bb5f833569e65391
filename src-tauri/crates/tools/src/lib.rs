//! The terminal tools built on the engine: `gemma-desk-cli` (generate, chat, teacher-forced
//! logits for the parity suites) and `gemma-desk-bench` (one repetition of the benchmark plan,
//! the local API's overhead over the engine, or several answers at once).
//! They live apart from the engine so that the app links no command-line parser.

pub mod api_overhead;
pub mod batch;
