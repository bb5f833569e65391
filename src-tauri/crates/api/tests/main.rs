//! The integration tests of this crate as one test binary (`cargo test -p api --test integration`):
//! each file is a module here, so the crate, MLX and the workspace are linked once, not once per
//! file. A file that must have a process of its own (it measures the process, sets global state,
//! or runs itself again by test name) is a `[[test]]` of its own in Cargo.toml instead.
//! `#[path]` makes a file's own `mod common;` find tests/common/, as in a binary of its own.
//! `.ci/check_tests.py` (in `make lint`) fails when a file in tests/ is in neither place.

// Each file declares its own `mod common;`, as a test binary of its own would: one copy of the
// helpers per file, and a file moves between here and a `[[test]]` of its own unchanged.
#![allow(clippy::duplicate_mod)]

#[path = "files.rs"]
mod files;
#[path = "http.rs"]
mod http;
#[path = "request_log.rs"]
mod request_log;
