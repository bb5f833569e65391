//! Finding Gemma 4's MTP "assistant" drafter (speculative decoding, docs/SPECULATIVE.md) on disk.
//! Whether one fits the loaded model is the engine's to say; this only finds candidates.

use std::fs;
use std::path::{Path, PathBuf};

use crate::hf_cache::HfCache;

/// The drafter the app offers to download for E4B (bf16, about 159 MB).
pub const DRAFTER_REPO: &str = "mlx-community/gemma-4-E4B-it-assistant-bf16";

/// `model_type` of the drafter's config.json.
const ASSISTANT: &str = "gemma4_assistant";

/// True when `dir` holds a Gemma 4 assistant drafter's config.json.
pub fn is_drafter(dir: &Path) -> bool {
    let Ok(text) = fs::read_to_string(dir.join("config.json")) else {
        return false;
    };
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("model_type")?.as_str().map(|t| t == ASSISTANT))
        .unwrap_or(false)
}

/// Drafters for the model in `model_dir`, most likely first: folders beside the model (the
/// way people keep the two together), then the app's models folder, then the Hugging Face cache
/// (the snapshot `refs/main` names, else the newest). Each list is in name order; nothing is
/// listed twice.
pub fn find_drafters(model_dir: &Path, models_dir: &Path, hf_cache: &HfCache) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut push = |dir: PathBuf| {
        if !found.contains(&dir) {
            found.push(dir);
        }
    };
    if let Some(parent) = model_dir.parent() {
        subfolders(parent).into_iter().for_each(&mut push);
    }
    subfolders(models_dir).into_iter().for_each(&mut push);
    for repo in hf_cache.repos() {
        if let Some(dir) = repo.snapshots.into_iter().find(|d| is_drafter(d)) {
            push(dir);
        }
    }
    found
}

/// The drafter subfolders of `dir`, by name (hidden ones skipped).
fn subfolders(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir() && is_drafter(p))
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, model_type: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(
            dir.join("config.json"),
            format!(r#"{{"model_type": "{model_type}"}}"#),
        )
        .unwrap();
    }

    #[test]
    fn drafters_are_found_beside_the_model_then_in_the_app_folder_then_in_the_cache() {
        let root = tempfile::tempdir().unwrap();
        let models = root.path().join("models");
        let model = models.join("gemma-4-e4b-it-4bit");
        write(&model, "gemma4");
        write(&root.path().join("elsewhere/a-assistant"), ASSISTANT);
        write(&models.join("gemma-4-E4B-it-assistant-bf16"), ASSISTANT);
        write(&models.join("not-a-drafter"), "llama");
        let hub = root.path().join("hub");
        let snapshot = hub.join("models--google--gemma-4-E4B-it-assistant/snapshots/abc");
        write(&snapshot, ASSISTANT);
        fs::create_dir_all(hub.join("models--google--gemma-4-E4B-it-assistant/refs")).unwrap();
        fs::write(
            hub.join("models--google--gemma-4-E4B-it-assistant/refs/main"),
            "abc",
        )
        .unwrap();
        let found = find_drafters(&model, &models, &HfCache::at(&hub));
        assert_eq!(
            found,
            vec![models.join("gemma-4-E4B-it-assistant-bf16"), snapshot]
        );
        // A model kept elsewhere finds the drafter beside it first.
        let other = root.path().join("elsewhere/model");
        let found = find_drafters(&other, &models, &HfCache::none());
        assert_eq!(
            found,
            vec![
                root.path().join("elsewhere/a-assistant"),
                models.join("gemma-4-E4B-it-assistant-bf16")
            ]
        );
        assert!(!is_drafter(&models.join("not-a-drafter")));
        assert!(!is_drafter(&root.path().join("missing")));
    }
}
