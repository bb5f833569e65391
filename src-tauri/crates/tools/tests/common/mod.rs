//! Where the tests find the generated fixtures.

#[path = "../../../fixture_dir.rs"]
mod fixture_dir;
pub use fixture_dir::fixture;
