//! Helpers shared by the gemma crate's test files.

use mlx_rs::{random, Array};

/// A float32 array of `shape` drawn from the standard normal distribution with `seed`.
pub fn normal(shape: &[i32], seed: u64) -> Array {
    let key = random::key(seed).unwrap();
    random::normal::<f32>(shape, None, None, &key).unwrap()
}
