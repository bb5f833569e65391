//! Finding Gemma 4 MLX checkpoints on disk, and a quick check of a folder the user picked.
//!
//! These checks are shallow (config, tokenizer, weight files present); `gemma::Model::load`
//! validates every tensor later.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::details;
use super::hf_cache::{self, HfCache};

/// Where a model folder was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum ModelSource {
    /// A subfolder of the app's own models folder (downloaded by the app or put there).
    AppFolder,
    /// A snapshot in the Hugging Face cache (e.g. from `huggingface-cli download`).
    HuggingFaceCache,
    /// A folder the user chose.
    UserFolder,
}

/// A folder that looks like a loadable Gemma 4 checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelCandidate {
    /// The folder to load.
    #[cfg_attr(feature = "ts", ts(type = "string"))]
    pub dir: PathBuf,
    /// A name to show: the repository id for the Hugging Face cache, else the folder's name.
    pub name: String,
    pub source: ModelSource,
    /// Total size of the weight files.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub size_bytes: u64,
    /// Bits of the default weight quantization, if the weights are quantized.
    pub quantization_bits: Option<u32>,
    /// How the weights are quantized (`affine`, `mxfp4`, …), if they are.
    pub quantization_mode: Option<String>,
    /// The type of the unquantized weights, as the config says (`bfloat16`, …).
    pub dtype: Option<String>,
    /// Parameters in the weight files (quantized matrices counted unpacked), if their headers
    /// can be read.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub parameters: Option<u64>,
    /// The most positions the model supports, as its config says.
    pub context_length: Option<u32>,
    /// The checkpoint has a vision tower.
    pub vision: bool,
    /// The checkpoint has an audio tower (the model can hear audio clips).
    pub audio: bool,
}

/// Why a folder is not a Gemma 4 checkpoint, in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("this folder does not exist")]
    NotFound,
    #[error("this is a file, not a folder")]
    NotAFolder,
    #[error("this folder has no config.json")]
    NoConfig,
    #[error("config.json cannot be read: {0}")]
    UnreadableConfig(#[source] io::Error),
    #[error("config.json is not valid JSON: {0}")]
    InvalidConfig(String),
    #[error("config.json does not say which model this is (it has no model_type)")]
    NoModelType,
    #[error("{}", other_architecture(.0))]
    NotGemma4(String),
    #[error("This is Gemma 4 {size} ({reason}); Gemma Desk runs Gemma 4 E4B")]
    OtherGemma4Size {
        size: &'static str,
        reason: &'static str,
    },
    #[error("this Hugging Face cache folder holds no downloaded snapshot")]
    NoSnapshot,
    #[error("this folder has no tokenizer.json")]
    NoTokenizer,
    #[error("this folder has no .safetensors weights")]
    NoWeights,
    #[error("the weights are incomplete: {0} is missing")]
    MissingWeights(String),
}

/// The `model_type` of Gemma 4 checkpoints (text and vision).
const GEMMA4: &str = "gemma4";

/// Gemma 4 checkpoints in `models_dir` (each subfolder) and in the Hugging Face cache (the
/// snapshot `refs/main` names, else the newest complete one). The app's folder comes first,
/// and within each source E4B instruction-tuned 4-bit first. Anything unreadable is skipped.
pub fn discover(models_dir: &Path, hf_cache: &HfCache) -> Vec<ModelCandidate> {
    let mut found = app_folder_models(models_dir);
    found.extend(hf_cache.repos().into_iter().filter_map(|repo| {
        repo.snapshots
            .iter()
            .find_map(|dir| inspect(dir, repo.id.clone(), ModelSource::HuggingFaceCache).ok())
    }));
    // Stable: keeps the name order within each group.
    found.sort_by_key(|c| (c.source, !is_preferred(c)));
    found
}

/// Checks a folder the user picked; the error says what is missing. A Hugging Face cache
/// folder (`models--org--name`, or its `snapshots/`) stands for its snapshot: the one
/// `refs/main` names, else the newest usable one.
pub fn check_folder(dir: &Path) -> Result<ModelCandidate, FolderError> {
    if let Some(repo) = hf_cache::repo_of_folder(dir) {
        let mut first_error = None;
        for snapshot in repo.snapshots {
            match inspect(&snapshot, repo.id.clone(), ModelSource::UserFolder) {
                Ok(candidate) => return Ok(candidate),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        return Err(first_error.unwrap_or(FolderError::NoSnapshot));
    }
    inspect(dir, display_name(dir), ModelSource::UserFolder)
}

/// The name to show for a model folder: the repository id for a snapshot of the Hugging Face
/// cache, else the folder's own name.
pub fn display_name(dir: &Path) -> String {
    if let Some(id) = hf_cache::repo_of_snapshot(dir) {
        return id;
    }
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

/// Subfolders of the app's models folder, by name; hidden ones (e.g. `.downloads`) are skipped.
fn app_folder_models(models_dir: &Path) -> Vec<ModelCandidate> {
    let Ok(entries) = fs::read_dir(models_dir) else {
        return Vec::new();
    };
    let mut found: Vec<ModelCandidate> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if name.starts_with('.') {
                return None;
            }
            inspect(&entry.path(), name, ModelSource::AppFolder).ok()
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The default download, E4B instruction-tuned in 4 bits, goes first.
fn is_preferred(candidate: &ModelCandidate) -> bool {
    let name = candidate.name.to_ascii_lowercase();
    name.contains("e4b-it") && candidate.quantization_bits == Some(4)
}

fn inspect(dir: &Path, name: String, source: ModelSource) -> Result<ModelCandidate, FolderError> {
    match fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => return Err(FolderError::NotAFolder),
        Ok(_) => {}
        Err(_) => return Err(FolderError::NotFound),
    }
    let config_path = dir.join("config.json");
    let text = match fs::read_to_string(&config_path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(FolderError::NoConfig),
        Err(e) => return Err(FolderError::UnreadableConfig(e)),
    };
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| FolderError::InvalidConfig(e.to_string()))?;
    match config.get("model_type").and_then(|t| t.as_str()) {
        Some(GEMMA4) => {}
        Some(other) => return Err(FolderError::NotGemma4(details::short_text(other))),
        None => return Err(FolderError::NoModelType),
    }
    check_size(&config)?;
    if !dir.join("tokenizer.json").is_file() {
        return Err(FolderError::NoTokenizer);
    }
    let weights = weight_files(dir)?;
    let size_bytes = weights
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    Ok(ModelCandidate {
        dir: dir.to_path_buf(),
        name,
        source,
        size_bytes,
        quantization_bits: quantization_bits(&config),
        quantization_mode: details::quantization_mode(&config),
        dtype: details::dtype(&config),
        parameters: details::parameter_count(&weights, &config),
        context_length: details::context_length(&config),
        vision: details::has_tower(&config, "vision_config"),
        audio: details::has_tower(&config, "audio_config"),
    })
}

/// Refuses the Gemma 4 sizes whose config marks them as not E4B: the mixture-of-experts 26B A4B
/// and the 31B (keys shared with values in full attention); E2B and E4B share one layout.
fn check_size(config: &serde_json::Value) -> Result<(), FolderError> {
    let text = config.get("text_config");
    let flag = |key: &str| {
        text.and_then(|t| t.get(key))
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    if flag("enable_moe_block") {
        return Err(FolderError::OtherGemma4Size {
            size: "26B A4B",
            reason: "a mixture of experts",
        });
    }
    if flag("attention_k_eq_v") {
        return Err(FolderError::OtherGemma4Size {
            size: "31B",
            reason: "its attention shares keys and values",
        });
    }
    Ok(())
}

/// "This is a Llama model (model_type "llama"); …", naming the families people know.
fn other_architecture(model_type: &str) -> String {
    let family = match model_type {
        "llama" | "llama4" => "Llama",
        "mistral" | "mistral3" => "Mistral",
        "mixtral" => "Mixtral",
        "qwen2" | "qwen2_vl" | "qwen2_5_vl" | "qwen3" | "qwen3_moe" => "Qwen",
        "phi" | "phi3" | "phi4" => "Phi",
        "gemma" => "Gemma 1",
        "gemma2" => "Gemma 2",
        "gemma3" | "gemma3_text" => "Gemma 3",
        "gemma3n" => "Gemma 3n",
        "gemma4_text" => "text-only Gemma 4",
        "deepseek_v2" | "deepseek_v3" => "DeepSeek",
        "gpt2" => "GPT-2",
        "gpt_oss" => "gpt-oss",
        "olmo" | "olmo2" => "OLMo",
        _ => "",
    };
    let what = if family.is_empty() {
        "another kind of".to_string()
    } else {
        let article = if family.starts_with(['A', 'E', 'I', 'O', 'U']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {family}")
    };
    format!("This is {what} model (model_type {model_type:?}); Gemma Desk runs Gemma 4 E4B")
}

/// The weight files: those `model.safetensors.index.json` lists (all must exist), or else every
/// `*.safetensors` in the folder. Symlinks are followed, so a dangling one counts as missing.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, FolderError> {
    let mut files = Vec::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "safetensors") && path.is_file() {
                files.push(path);
            }
        }
    }
    if files.is_empty() {
        return Err(FolderError::NoWeights);
    }
    for listed in indexed_files(dir) {
        if !dir.join(&listed).is_file() {
            return Err(FolderError::MissingWeights(listed));
        }
    }
    files.sort();
    Ok(files)
}

/// Files named by `model.safetensors.index.json`, if there is a readable one.
fn indexed_files(dir: &Path) -> Vec<String> {
    let Ok(text) = fs::read_to_string(dir.join("model.safetensors.index.json")) else {
        return Vec::new();
    };
    let Ok(index) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    let Some(map) = index.get("weight_map").and_then(|m| m.as_object()) else {
        return Vec::new();
    };
    let mut files: Vec<String> = map
        .values()
        .filter_map(|v| v.as_str())
        .filter(|f| !f.contains("..") && !Path::new(f).is_absolute())
        .map(str::to_string)
        .collect();
    files.sort();
    files.dedup();
    files
}

/// The default `bits` of `quantization` (mlx-lm) or `quantization_config`.
fn quantization_bits(config: &serde_json::Value) -> Option<u32> {
    ["quantization", "quantization_config"]
        .iter()
        .find_map(|key| config.get(key)?.get("bits")?.as_u64())
        .and_then(|bits| u32::try_from(bits).ok())
}
