//! The terminal tools built on the engine: `gemma-desk-cli` (generate, chat, teacher-forced
//! logits for the parity suites) and `gemma-desk-bench` (one repetition of the benchmark plan,
//! the local API's overhead over the engine, or several answers at once).
//! They live apart from the engine so that the app links no command-line parser.

pub mod api_overhead;
pub mod batch;
pub mod memory;
pub mod mlx_probe;
pub mod mtp;
pub mod serve_cli;

/// Names the step the bench is in, for `bench/cuda/apitrace.c` (which reads the file named by
/// `APITRACE_PHASES`); nothing happens when the variable is unset.
pub fn phase(name: &str) {
    use std::os::unix::fs::FileExt;
    let Some(path) = std::env::var_os("APITRACE_PHASES") else {
        return;
    };
    let mut record = [0u8; 64];
    let n = name.len().min(63);
    record[..n].copy_from_slice(&name.as_bytes()[..n]);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .and_then(|f| f.write_all_at(&record, 0));
    if let Err(e) = written {
        eprintln!("APITRACE_PHASES={}: {e}", path.to_string_lossy());
    }
}
