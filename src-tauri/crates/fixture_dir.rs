//! Where the tests of the engine, api and tools crates find the generated fixtures (each
//! crate's `tests/common` includes this file; all three sit at `src-tauri/crates/<name>`).

use std::path::{Path, PathBuf};

/// The tiny random-weight checkpoint `make fixtures` writes (`GEMMA_FIXTURES` overrides where).
pub fn fixture() -> PathBuf {
    let root = std::env::var_os("GEMMA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/out/fixtures")
        });
    let dir = root.join("tiny");
    assert!(
        dir.join("config.json").exists(),
        "fixture {} missing: run `make fixtures`",
        dir.display()
    );
    dir
}
