//! Raw bindings to mlx-c, compiled against the prebuilt MLX shipped in the official PyPI wheel.
//!
//! `build.rs` documents how MLX and mlx-c are located. Dependents read `DEP_MLX_LIB_DIR` (the
//! folder holding `libmlx`) to add an rpath to their own binaries.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    clippy::all
)]

/// IEEE half, as 16 raw bits (bindgen's shape for `__fp16`, which mlx-rs expects). On ARM
/// bindgen derives these three from mlx-c's own `half.h`; elsewhere the shim header supplies them.
#[cfg(not(target_arch = "aarch64"))]
#[repr(transparent)]
#[derive(Debug, Default, Copy, Clone, PartialEq, Eq, Hash)]
pub struct __BindgenFloat16(pub u16);

/// mlx-c's `float16_t`.
#[cfg(not(target_arch = "aarch64"))]
pub type float16_t = __BindgenFloat16;
/// mlx-c's `bfloat16_t`, as 16 raw bits.
#[cfg(not(target_arch = "aarch64"))]
pub type bfloat16_t = u16;

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// The MLX build linked: `cpu`, `metal` or `cuda-13` (the wheel's flavour, chosen at build
/// time).
pub const FLAVOR: &str = env!("MLX_FLAVOR");

/// mlx-rs seeds its implicit random state from `mach_approximate_time`, which exists only on
/// Apple platforms; elsewhere a monotonic clock in nanoseconds serves the same purpose.
#[cfg(not(target_vendor = "apple"))]
#[no_mangle]
pub extern "C" fn mach_approximate_time() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
