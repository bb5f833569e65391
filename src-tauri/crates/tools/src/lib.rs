//! The terminal tools built on the engine: `gemma-desk-cli` (generate, chat, teacher-forced
//! logits for the parity suites) and `gemma-desk-bench` (one repetition of the benchmark plan).
//! They live apart from the engine so that the app links no command-line parser.
