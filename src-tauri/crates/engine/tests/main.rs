//! The integration tests of this crate as one test binary (`cargo test -p engine --test integration`):
//! each file is a module here, so the crate, MLX and the workspace are linked once, not once per
//! file. A file that must have a process of its own (it measures the process, sets global state,
//! or runs itself again by test name) is a `[[test]]` of its own in Cargo.toml instead.
//! `#[path]` makes a file's own `mod common;` find tests/common/, as in a binary of its own.
//! `.ci/check_tests.py` (in `make lint`) fails when a file in tests/ is in neither place.

// Each file declares its own `mod common;`, as a test binary of its own would: one copy of the
// helpers per file, and a file moves between here and a `[[test]]` of its own unchanged.
#![allow(clippy::duplicate_mod)]

#[path = "adapters.rs"]
mod adapters;
#[path = "audio.rs"]
mod audio;
#[path = "audio_input.rs"]
mod audio_input;
#[path = "bad_images.rs"]
mod bad_images;
#[path = "bad_model_folders.rs"]
mod bad_model_folders;
#[path = "batching.rs"]
mod batching;
#[path = "constraint.rs"]
mod constraint;
#[path = "detokenize.rs"]
mod detokenize;
#[path = "generation.rs"]
mod generation;
#[path = "image_preprocess.rs"]
mod image_preprocess;
#[path = "prompts.rs"]
mod prompts;
#[path = "sampler.rs"]
mod sampler;
#[path = "speculative.rs"]
mod speculative;
#[path = "template.rs"]
mod template;
#[path = "tools.rs"]
mod tools;
