//! Where the Hugging Face cache lives, and the model snapshots inside it.
//!
//! Layout: `models--{org}--{name}/snapshots/{commit}/…` (files are symlinks into `blobs/`),
//! with `refs/{branch}` holding the commit a branch points at.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

/// The Hugging Face hub cache folder (`…/huggingface/hub`), if one can be located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfCache {
    hub: Option<PathBuf>,
}

/// One cached model repository and its snapshots, the preferred one first.
#[derive(Debug)]
pub(crate) struct CachedRepo {
    /// `org/name`.
    pub id: String,
    pub snapshots: Vec<PathBuf>,
}

impl HfCache {
    /// Locates the cache by huggingface_hub's rule: `HF_HUB_CACHE` (or the older
    /// `HUGGINGFACE_HUB_CACHE`), else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
    /// else `~/.cache/huggingface/hub`. `env` looks a variable up; empty values count as unset.
    pub fn from_env(env: impl Fn(&str) -> Option<OsString>, home: Option<&Path>) -> Self {
        let var = |key: &str| {
            env(key)
                .filter(|v| !v.is_empty())
                .and_then(|v| expand_home(PathBuf::from(v), home))
        };
        let hub = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .or_else(|| var("HF_HOME").map(|d| d.join("hub")))
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("huggingface").join("hub")))
            .or_else(|| home.map(|h| h.join(".cache").join("huggingface").join("hub")));
        Self { hub }
    }

    /// The cache of this process's environment and home folder.
    pub fn from_process_env() -> Self {
        Self::from_env(|k| std::env::var_os(k), std::env::home_dir().as_deref())
    }

    /// A cache at a known folder.
    pub fn at(hub: impl Into<PathBuf>) -> Self {
        Self {
            hub: Some(hub.into()),
        }
    }

    /// No cache at all (discovery then only looks at the app's folder).
    pub fn none() -> Self {
        Self { hub: None }
    }

    /// The `hub` folder, if known (it may not exist).
    pub fn hub_dir(&self) -> Option<&Path> {
        self.hub.as_deref()
    }

    /// Every cached model repository, sorted by id. Unreadable entries are skipped.
    pub(crate) fn repos(&self) -> Vec<CachedRepo> {
        let Some(hub) = &self.hub else {
            return Vec::new();
        };
        let Ok(entries) = fs::read_dir(hub) else {
            return Vec::new();
        };
        let mut repos: Vec<CachedRepo> = entries
            .flatten()
            .filter_map(|entry| {
                let folder = entry.file_name().into_string().ok()?;
                let id = repo_id(&folder)?;
                let snapshots = snapshots(&entry.path());
                (!snapshots.is_empty()).then_some(CachedRepo { id, snapshots })
            })
            .collect();
        repos.sort_by(|a, b| a.id.cmp(&b.id));
        repos
    }
}

/// The cached repository a picked folder is: `models--org--name` itself, or its `snapshots/`.
/// Its snapshots come preferred first (see [`snapshots`]); `None` for any other folder.
pub(crate) fn repo_of_folder(dir: &Path) -> Option<CachedRepo> {
    let root = match dir.file_name()?.to_str()? {
        "snapshots" => dir.parent()?,
        _ => dir,
    };
    let id = repo_id(root.file_name()?.to_str()?)?;
    Some(CachedRepo {
        id,
        snapshots: snapshots(root),
    })
}

/// The repository id of a snapshot folder (`models--org--name/snapshots/<commit>`).
pub(crate) fn repo_of_snapshot(dir: &Path) -> Option<String> {
    let snapshots = dir.parent()?;
    if snapshots.file_name()? != "snapshots" {
        return None;
    }
    repo_id(snapshots.parent()?.file_name()?.to_str()?)
}

/// `models--org--name` → `org/name`.
fn repo_id(folder: &str) -> Option<String> {
    let rest = folder.strip_prefix("models--")?;
    let parts: Vec<&str> = rest.split("--").collect();
    if parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    Some(parts.join("/"))
}

/// The snapshot folders of one repository: the one `refs/main` names first, then the others,
/// newest first.
fn snapshots(repo: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(repo.join("snapshots")) else {
        return Vec::new();
    };
    let mut dated: Vec<(Option<std::time::SystemTime>, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.metadata().and_then(|m| m.modified()).ok(), e.path()))
        .collect();
    dated.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut list: Vec<PathBuf> = dated.into_iter().map(|(_, p)| p).collect();
    if let Some(main) = ref_commit(repo, "main") {
        if let Some(i) = list
            .iter()
            .position(|p| p.file_name() == Some(main.as_ref()))
        {
            let preferred = list.remove(i);
            list.insert(0, preferred);
        }
    }
    list
}

/// The commit a ref points at, if it is a plain name.
fn ref_commit(repo: &Path, name: &str) -> Option<String> {
    let text = fs::read_to_string(repo.join("refs").join(name)).ok()?;
    let commit = text.trim();
    let plain = !commit.is_empty() && commit.chars().all(|c| c.is_ascii_alphanumeric());
    plain.then(|| commit.to_string())
}

/// Expands a leading `~` as huggingface_hub does; `None` when it cannot be.
fn expand_home(path: PathBuf, home: Option<&Path>) -> Option<PathBuf> {
    match path.strip_prefix("~") {
        Ok(rest) => home.map(|h| h.join(rest)),
        Err(_) => Some(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_folder_names_become_repo_ids() {
        assert_eq!(
            repo_id("models--mlx-community--gemma-4-e4b-it-4bit").as_deref(),
            Some("mlx-community/gemma-4-e4b-it-4bit")
        );
        assert_eq!(repo_id("models--gpt2").as_deref(), Some("gpt2"));
        assert_eq!(repo_id("datasets--org--set"), None);
        assert_eq!(repo_id("models--"), None);
        assert_eq!(repo_id(".locks"), None);
    }
}
