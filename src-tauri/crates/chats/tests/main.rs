//! The integration tests of this crate as one test binary (`cargo test -p chats --test integration`):
//! each file is a module here, so the crate, MLX and the workspace are linked once, not once per
//! file. A file that must have a process of its own (it measures the process, sets global state,
//! or runs itself again by test name) is a `[[test]]` of its own in Cargo.toml instead.
//! `#[path]` makes a file's own `mod common;` find tests/common/, as in a binary of its own.
//! `.ci/check_tests.py` (in `make lint`) fails when a file in tests/ is in neither place.

#[path = "attachments.rs"]
mod attachments;
#[path = "damaged_database.rs"]
mod damaged_database;
#[path = "documents.rs"]
mod documents;
#[path = "export.rs"]
mod export;
#[path = "search.rs"]
mod search;
#[path = "store.rs"]
mod store;
#[path = "versions.rs"]
mod versions;
