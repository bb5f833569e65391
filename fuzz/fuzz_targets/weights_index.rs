//! `model.safetensors.index.json` of a folder holding two shards: every file it makes the
//! loader open lies inside the folder.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn folder() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let inner = dir.join("model");
        std::fs::create_dir_all(inner.join("sub")).unwrap();
        for name in ["model-00001-of-00002.safetensors", "sub/extra.safetensors"] {
            std::fs::write(inner.join(name), b"").unwrap();
        }
        // A file beside the folder, which the index must never reach.
        std::fs::write(dir.join("outside.safetensors"), b"").unwrap();
        inner.canonicalize().unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = folder();
    std::fs::write(dir.join("model.safetensors.index.json"), data).unwrap();
    if let Ok(files) = gemma::weights::checkpoint_files(dir) {
        for file in files {
            let real = file.canonicalize().unwrap();
            assert!(
                real.starts_with(dir),
                "{} is outside the folder",
                file.display()
            );
            assert!(real.is_file());
        }
    }
});
