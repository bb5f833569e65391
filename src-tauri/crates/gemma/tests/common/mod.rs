//! Helpers shared by the gemma crate's test files (not every file uses every helper).

use std::path::{Path, PathBuf};

use mlx_rs::{random, Array};

/// The fixture checkpoint `name` (`make fixtures`; `GEMMA_FIXTURES` names another folder).
#[allow(dead_code)]
pub fn fixture(name: &str) -> PathBuf {
    let root = std::env::var_os("GEMMA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/out/fixtures")
        });
    let dir = root.join(name);
    assert!(
        dir.join("config.json").exists(),
        "fixture {} missing: run `make fixtures`",
        dir.display()
    );
    dir
}

/// A writable copy of the fixture `name` (its files, not its subfolders).
#[allow(dead_code)]
pub fn copy_of(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    tmp
}

#[path = "../../../tensor_files.rs"]
mod tensor_files;
#[allow(unused_imports)]
pub use tensor_files::{read_tensors, write_tensors, Tensors};

/// A float32 array of `shape` drawn from the standard normal distribution with `seed`.
#[allow(dead_code)]
pub fn normal(shape: &[i32], seed: u64) -> Array {
    let key = random::key(seed).unwrap();
    random::normal::<f32>(shape, None, None, &key).unwrap()
}
