//! What the bench reads from MLX: a graph's primitives by kind, MLX's memory counters, and the
//! median of repeated timings.

use std::path::Path;

use anyhow::Result;
use mlx_rs::Array;
use serde_json::json;

/// What evaluating a step means: its `outputs` and the caches it wrote.
pub fn with_caches<'a>(
    caches: &'a [gemma::KvCache],
    outputs: impl IntoIterator<Item = &'a Array>,
) -> Vec<&'a Array> {
    let mut all: Vec<&Array> = caches.iter().flat_map(|c| c.arrays()).collect();
    all.extend(outputs);
    all
}

/// The primitives MLX would evaluate for `outputs`, by kind, read from MLX's DOT export.
pub fn graph_kinds(outputs: &[&Array]) -> Result<serde_json::Value> {
    let dot = std::env::temp_dir().join(format!("gemma-bench-{}.dot", std::process::id()));
    export_to_dot(&dot, outputs)?;
    let text = std::fs::read_to_string(&dot)?;
    let _ = std::fs::remove_file(&dot);
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for line in text.lines().filter(|l| l.contains("shape=rectangle")) {
        if let Some(label) = line
            .split("label =\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        {
            *kinds.entry(label.to_string()).or_default() += 1;
        }
    }
    let total: usize = kinds.values().sum();
    Ok(json!({ "primitives": total, "kinds": kinds }))
}

fn export_to_dot(path: &Path, outputs: &[&Array]) -> Result<()> {
    extern "C" {
        fn fopen(
            path: *const std::ffi::c_char,
            mode: *const std::ffi::c_char,
        ) -> *mut mlx_sys::FILE;
        fn fclose(file: *mut mlx_sys::FILE) -> std::ffi::c_int;
    }
    let c_path = std::ffi::CString::new(path.to_string_lossy().as_bytes())?;
    let handles: Vec<mlx_sys::mlx_array> = outputs.iter().map(|a| a.as_ptr()).collect();
    // SAFETY: the file and vector are created, used and freed here; the arrays outlive the call.
    unsafe {
        let file = fopen(c_path.as_ptr(), c"w".as_ptr());
        anyhow::ensure!(!file.is_null(), "cannot write {}", path.display());
        let vector = mlx_sys::mlx_vector_array_new_data(handles.as_ptr(), handles.len());
        let namer = mlx_sys::mlx_node_namer_new();
        let status = mlx_sys::mlx_export_to_dot(file, namer, vector);
        mlx_sys::mlx_node_namer_free(namer);
        mlx_sys::mlx_vector_array_free(vector);
        fclose(file);
        anyhow::ensure!(status == 0, "MLX could not export the graph");
    }
    Ok(())
}

/// The median (the upper one of an even count; NaN when empty).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn mlx_peak_bytes() -> u64 {
    let mut bytes: usize = 0;
    // SAFETY: writes one size_t through a valid pointer.
    unsafe { mlx_sys::mlx_get_peak_memory(&mut bytes) };
    bytes as u64
}

pub fn mlx_clear_cache() {
    // SAFETY: no arguments; frees MLX's unused buffer cache.
    unsafe { mlx_sys::mlx_clear_cache() };
}

pub fn mlx_active_bytes() -> u64 {
    let mut bytes: usize = 0;
    // SAFETY: writes one size_t through a valid pointer.
    unsafe { mlx_sys::mlx_get_active_memory(&mut bytes) };
    bytes as u64
}

pub fn reset_peak() {
    // SAFETY: no arguments.
    unsafe { mlx_sys::mlx_reset_peak_memory() };
}
