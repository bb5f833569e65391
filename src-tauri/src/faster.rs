//! "Faster answers": speculative decoding with Gemma 4's MTP drafter (docs/SPECULATIVE.md),
//! as the app offers it. On by default whenever a drafter that fits the model is found beside
//! it, in the models folder or in the Hugging Face cache; a damaged or mismatched one is
//! refused with the reason and the model answers without it.

use std::path::Path;

use engine::worker::Engine;
use model_store::{DownloadProgress, HfCache};
use serde::Serialize;
use ts_rs::TS;

/// Where faster answers stand, for Settings.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum FasterAnswers {
    /// No model is loaded.
    NoModel,
    /// Switched off in Settings.
    #[serde(rename_all = "camelCase")]
    Off {
        /// The drafter that would be used, if one was found.
        drafter: Option<String>,
    },
    /// Answers are drafted by `drafter` and checked by the model.
    #[serde(rename_all = "camelCase")]
    On {
        drafter: String,
        /// Tokens per check: the drafts plus one.
        block_size: u32,
        #[ts(type = "number")]
        parameters: u64,
    },
    /// On, but no drafter is on this computer: `repo` is the one to get (Settings offers to
    /// download it); `failed` says why the last download of it stopped.
    #[serde(rename_all = "camelCase")]
    Missing {
        repo: String,
        models_dir: String,
        failed: Option<String>,
    },
    /// The drafter is being downloaded into the models folder; the model answers alone
    /// meanwhile.
    #[serde(rename_all = "camelCase")]
    Downloading { progress: DownloadProgress },
    /// Every drafter found was refused; the first one and why.
    #[serde(rename_all = "camelCase")]
    Refused { drafter: String, reason: String },
}

/// Sets the engine's drafter for the model in `model_dir` as `on` says, and tells where that
/// leaves faster answers. Blocking (a drafter loads and warms up in about a second).
pub fn apply(
    engine: &Engine,
    on: bool,
    model_dir: &Path,
    models_dir: &Path,
    hf_cache: &HfCache,
) -> FasterAnswers {
    let found = model_store::find_drafters(model_dir, models_dir, hf_cache);
    let shown = |p: &Path| p.display().to_string();
    if !on {
        let _ = engine.set_drafter(None);
        return FasterAnswers::Off {
            drafter: found.first().map(|p| shown(p)),
        };
    }
    let mut refused = None;
    for dir in &found {
        match engine.set_drafter(Some(dir)) {
            Ok(Some(info)) => {
                return FasterAnswers::On {
                    drafter: shown(dir),
                    block_size: info.block_size as u32,
                    parameters: info.parameters as u64,
                }
            }
            Ok(None) => {}
            Err(err) => {
                refused.get_or_insert_with(|| FasterAnswers::Refused {
                    drafter: shown(dir),
                    reason: err.to_string(),
                });
            }
        }
    }
    refused.unwrap_or_else(|| FasterAnswers::Missing {
        repo: model_store::DRAFTER_REPO.to_string(),
        models_dir: shown(models_dir),
        failed: None,
    })
}
