//! Reading and rewriting safetensors files in tests (the gemma and engine crates' tests include
//! this file): a test damages or edits a checkpoint's tensors through the real writer, so the
//! file stays valid and only its content is what the test wants.

use std::collections::BTreeMap;
use std::path::Path;

/// A safetensors file's tensors: name → (dtype, shape, bytes).
pub type Tensors = BTreeMap<String, (safetensors::Dtype, Vec<usize>, Vec<u8>)>;

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
