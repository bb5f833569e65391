//! MLX's memory: its counters (the same accounting on the CPU, CUDA and Metal backends) and
//! its buffer cache, bounded to a set size and emptied when the app idles.
//!
//! MLX keeps the buffers of freed arrays in a cache to reuse them; left alone the cache grows
//! to the largest transient a step ever made (a long prefill's activations) and stays there.
//! [`limit_cache`] bounds it; [`release_cache`] returns what it holds to the system (the
//! engine calls it when no answer runs). See `docs/BENCHMARK.md` ("Memory").
//!
//! [`device_info`] says what the machine has: MLX's device info (on Metal the unified memory,
//! the recommended working set and the GPU's architecture), else the machine's RAM. The engine
//! chooses defaults from it and checks that a model fits before loading it (`docs/MODEL.md`,
//! "Knowing the machine").

use crate::error::Result;

/// What MLX's cache may keep by default: enough for a decode step's transients and a
/// prefill chunk's largest buffers at E4B's size, small against the weights.
pub const DEFAULT_CACHE_LIMIT: usize = 512 << 20;

/// MLX's memory counters, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Held by live arrays now.
    pub active: usize,
    /// The most `active` has been since the last [`reset_peak`] (or the process start).
    pub peak: usize,
    /// Freed buffers MLX keeps for reuse.
    pub cache: usize,
}

/// MLX's counters now.
pub fn counters() -> Result<Counters> {
    Ok(Counters {
        active: mlx_rs::memory::active_memory()?,
        peak: mlx_rs::memory::peak_memory()?,
        cache: mlx_rs::memory::cache_memory()?,
    })
}

/// Starts a new peak from the active memory now.
pub fn reset_peak() -> Result<()> {
    Ok(mlx_rs::memory::reset_peak_memory()?)
}

/// Bounds MLX's buffer cache to `bytes` (it frees what is over at once); returns the previous
/// limit.
pub fn limit_cache(bytes: usize) -> Result<usize> {
    Ok(mlx_rs::memory::set_cache_limit(bytes)?)
}

/// Returns every buffer MLX's cache holds to the system (for when the app idles).
pub fn release_cache() -> Result<()> {
    Ok(mlx_rs::memory::clear_cache()?)
}

/// What the machine offers the model, as MLX and the system report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The MLX build: `cpu`, `metal` or `cuda-13` (`mlx_sys::FLAVOR`).
    pub backend: String,
    /// MLX's `device_name` ("Apple M3 Pro", "AMD EPYC"), when it says.
    pub device_name: Option<String>,
    /// MLX's `architecture`: `applegpu_g15s` on Metal, `x86_64` or `arm64` on the CPU.
    pub architecture: Option<String>,
    /// Memory of the device in bytes: Metal's `memory_size` (the unified memory), CUDA's
    /// `total_memory`; elsewhere the machine's RAM. `None` where neither says.
    pub memory_bytes: Option<u64>,
    /// What one process may hold without the system paging: Metal's
    /// `max_recommended_working_set_size`; elsewhere `memory_bytes`.
    pub working_set_bytes: Option<u64>,
}

impl DeviceInfo {
    /// The Apple GPU generation (13: M1, 14: M2, 15: M3, 16: M4, 17: M5), from the
    /// architecture name; `None` off Metal or for a name not of that form.
    pub fn gpu_generation(&self) -> Option<u32> {
        self.architecture.as_deref().and_then(apple_gpu_generation)
    }
}

/// The generation in an Apple GPU architecture name: `applegpu_g13g` → 13, `applegpu_g15s`
/// → 15 (the letter after it is the variant: `g`, `s`, `c`, `d`, `p`); anything else → `None`.
pub fn apple_gpu_generation(architecture: &str) -> Option<u32> {
    let rest = architecture.strip_prefix("applegpu_g")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[..digits].parse().ok()
}

/// The default device's info from MLX, with the machine's RAM where MLX gives no memory
/// figure (its CPU backend reports only `device_name` and `architecture`).
pub fn device_info() -> DeviceInfo {
    let keys = mlx_device_info();
    let size = |key: &str| match keys.get(key) {
        Some(Value::Size(n)) => Some(*n as u64),
        _ => None,
    };
    let string = |key: &str| match keys.get(key) {
        Some(Value::Text(s)) => Some(s.clone()),
        _ => None,
    };
    let memory_bytes = size("memory_size")
        .or_else(|| size("total_memory"))
        .or_else(system_memory);
    DeviceInfo {
        backend: mlx_sys::FLAVOR.to_owned(),
        device_name: string("device_name"),
        architecture: string("architecture"),
        memory_bytes,
        working_set_bytes: size("max_recommended_working_set_size").or(memory_bytes),
    }
}

/// One value of MLX's device info.
enum Value {
    Text(String),
    Size(usize),
}

/// Every key of MLX's info about the default device; empty where MLX cannot say.
fn mlx_device_info() -> std::collections::HashMap<String, Value> {
    use std::ffi::{CStr, CString};
    let mut found = std::collections::HashMap::new();
    const KEYS: [&str; 5] = [
        "device_name",
        "architecture",
        "memory_size",
        "total_memory",
        "max_recommended_working_set_size",
    ];
    // SAFETY: mlx-c's handles are created, read and freed here only; the strings MLX returns
    // live in the info object (a static map of MLX's) and are copied before it is freed.
    unsafe {
        let mut device = mlx_sys::mlx_device_new();
        if mlx_sys::mlx_get_default_device(&mut device) != 0 {
            mlx_sys::mlx_device_free(device);
            return found;
        }
        let mut info = mlx_sys::mlx_device_info_new();
        if mlx_sys::mlx_device_info_get(&mut info, device) == 0 {
            for key in KEYS {
                let Ok(c_key) = CString::new(key) else {
                    continue;
                };
                let mut exists = false;
                if mlx_sys::mlx_device_info_has_key(&mut exists, info, c_key.as_ptr()) != 0
                    || !exists
                {
                    continue;
                }
                let mut is_string = false;
                if mlx_sys::mlx_device_info_is_string(&mut is_string, info, c_key.as_ptr()) != 0 {
                    continue;
                }
                if is_string {
                    let mut value: *const std::os::raw::c_char = std::ptr::null();
                    if mlx_sys::mlx_device_info_get_string(&mut value, info, c_key.as_ptr()) == 0
                        && !value.is_null()
                    {
                        let text = CStr::from_ptr(value).to_string_lossy().into_owned();
                        found.insert(key.to_owned(), Value::Text(text));
                    }
                } else {
                    let mut value: usize = 0;
                    if mlx_sys::mlx_device_info_get_size(&mut value, info, c_key.as_ptr()) == 0 {
                        found.insert(key.to_owned(), Value::Size(value));
                    }
                }
            }
        }
        mlx_sys::mlx_device_info_free(info);
        mlx_sys::mlx_device_free(device);
    }
    found
}

/// The machine's RAM in bytes: `MemTotal` of `/proc/meminfo` on Linux, `sysctl hw.memsize` on
/// macOS; `None` elsewhere or where it cannot be read.
pub fn system_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        meminfo_total(&meminfo)
    }
    #[cfg(target_os = "macos")]
    {
        // `hw.memsize` is a 64-bit count of bytes (sysctl(3)); the call fills `bytes` and sets
        // `len` to its size.
        let mut bytes: u64 = 0;
        let mut len = std::mem::size_of::<u64>();
        // SAFETY: a NUL-terminated name and an out-parameter of the size given in `len`.
        let rc = unsafe {
            libc::sysctlbyname(
                c"hw.memsize".as_ptr(),
                (&mut bytes as *mut u64).cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0 && len == std::mem::size_of::<u64>()).then_some(bytes)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        None
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes (the file counts kibibytes).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// The tests of the device info (memory/tests.rs).
#[cfg(test)]
mod tests;

/// The resident set of this process in bytes (Linux: `VmRSS` of `/proc/self/status`); `None`
/// where it cannot be read (other systems).
pub fn process_rss() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
