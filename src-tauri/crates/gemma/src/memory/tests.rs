//! The device info: the GPU generation read from MLX's names, the machine's memory.

use super::*;

#[test]
fn the_apple_gpu_generation_is_read_from_the_architecture_name() {
    assert_eq!(apple_gpu_generation("applegpu_g13g"), Some(13));
    assert_eq!(apple_gpu_generation("applegpu_g14s"), Some(14));
    assert_eq!(apple_gpu_generation("applegpu_g15s"), Some(15));
    assert_eq!(apple_gpu_generation("applegpu_g16p"), Some(16));
    assert_eq!(apple_gpu_generation("applegpu_g17"), Some(17));
    for unknown in [
        "x86_64",
        "arm64",
        "applegpu_g",
        "applegpu_gx15",
        "",
        "sm_90",
    ] {
        assert_eq!(apple_gpu_generation(unknown), None, "{unknown}");
    }
    let info = |architecture: Option<&str>| DeviceInfo {
        backend: "metal".into(),
        device_name: None,
        architecture: architecture.map(str::to_owned),
        memory_bytes: None,
        working_set_bytes: None,
    };
    assert_eq!(info(Some("applegpu_g15d")).gpu_generation(), Some(15));
    assert_eq!(info(None).gpu_generation(), None);
}

#[test]
fn meminfo_total_is_read_in_bytes() {
    let text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
    assert_eq!(meminfo_total(text), Some(24_576_000 * 1024));
    assert_eq!(meminfo_total("MemFree: 1 kB\n"), None);
    assert_eq!(meminfo_total("MemTotal: lots kB\n"), None);
}

#[test]
fn this_machine_reports_its_backend_and_some_memory() {
    let info = device_info();
    assert_eq!(info.backend, mlx_sys::FLAVOR);
    // MLX names the architecture on every backend (x86_64 on this CPU build).
    assert!(info.architecture.is_some(), "{info:?}");
    let memory = info.memory_bytes.expect("MLX or the system says");
    assert!(memory > 256 << 20, "{info:?}");
    let working_set = info.working_set_bytes.unwrap();
    assert!(working_set <= memory && working_set > 0, "{info:?}");
    if mlx_sys::FLAVOR == "cpu" {
        assert_eq!(
            Some(memory),
            system_memory(),
            "the CPU backend gives no figure"
        );
    }
}
