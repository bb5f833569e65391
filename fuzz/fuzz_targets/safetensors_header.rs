//! A safetensors file as the loader reads it: length prefix, JSON header, data. Whatever the
//! header check accepts must also load in MLX and evaluate (its own reader trusts the header),
//! and the sizes it accepted must add up to exactly the data that is there.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap().keep())
}

fuzz_target!(|data: &[u8]| {
    let path = scratch().join("model.safetensors");
    std::fs::write(&path, data).unwrap();
    let Ok(tensors) = gemma::weights::read_header(&path) else {
        return;
    };
    let header_len = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
    let data_len = (data.len() - 8 - header_len) as u128;
    let total: u128 = tensors
        .values()
        .map(|t| {
            let bits = t.dtype.bitsize() as u128;
            t.shape.iter().fold(bits, |n, &d| n * d as u128) / 8
        })
        .sum();
    assert_eq!(total, data_len, "accepted sizes do not add up to the data");

    let arrays = mlx_rs::Array::load_safetensors(&path).expect("MLX refuses an accepted file");
    for (name, array) in arrays {
        array
            .eval()
            .unwrap_or_else(|e| panic!("{name} does not evaluate: {e}"));
        assert!(
            tensors.contains_key(&name),
            "MLX read {name}, which the check did not"
        );
    }
});
