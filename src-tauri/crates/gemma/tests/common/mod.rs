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

/// A safetensors file's tensors: name → (dtype, shape, bytes).
#[allow(dead_code)]
pub type Tensors = std::collections::BTreeMap<String, (safetensors::Dtype, Vec<usize>, Vec<u8>)>;

/// Every tensor of the safetensors file at `path`.
#[allow(dead_code)]
pub fn read_tensors(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, t)| (n, (t.dtype(), t.shape().to_vec(), t.data().to_vec())))
        .collect()
}

/// Writes `tensors` to `path` as mlx-vlm does (metadata `format: mlx`).
#[allow(dead_code)]
pub fn write_tensors(path: &Path, tensors: &Tensors) {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, (d, s, b))| {
            let view = safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap();
            (n.clone(), view)
        })
        .collect();
    let metadata = Some([("format".to_string(), "mlx".to_string())].into());
    safetensors::serialize_to_file(views, metadata, path).unwrap();
}

/// A float32 array of `shape` drawn from the standard normal distribution with `seed`.
#[allow(dead_code)]
pub fn normal(shape: &[i32], seed: u64) -> Array {
    let key = random::key(seed).unwrap();
    random::normal::<f32>(shape, None, None, &key).unwrap()
}
