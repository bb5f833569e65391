//! The user's generation settings: what they are, their defaults and limits, and where they live.

use chats::Store;
use engine::generate::GenerateOptions;
use engine::image::SoftTokenBudget;
use engine::sampler::SamplerConfig;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::Error;

/// Key of the settings row in the chats database.
const KEY: &str = "generation";
/// Key of the model folder loaded last, loaded again on start.
const MODEL_KEY: &str = "model_dir";

/// The largest context the model was trained for (Gemma 4 E4B: 128K positions).
pub const MAX_CONTEXT: u32 = 131_072;

/// Settings the user can change; persisted in the chats database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// Sent as the system turn of every conversation when not empty.
    pub system_prompt: String,
    /// 0 picks the most likely token every time.
    pub temperature: f32,
    pub top_p: f32,
    /// 0 turns top-k off.
    pub top_k: u32,
    /// Longest answer, in tokens.
    pub max_tokens: u32,
    /// Positions a conversation may use (prompt and answer together).
    pub context_length: u32,
    /// Let the model think before answering (Gemma 4's thinking mode).
    pub thinking: bool,
    /// Soft tokens per image: 70, 140, 280, 560 or 1120. More sees finer detail, costs more.
    pub image_token_budget: u32,
}

impl Default for Settings {
    /// Google's recommended sampling for Gemma 4, a context that fits comfortably in 16 GB.
    fn default() -> Self {
        Self {
            system_prompt: String::new(),
            temperature: 1.0,
            top_p: 0.95,
            top_k: 64,
            max_tokens: 4096,
            context_length: 16_384,
            thinking: false,
            image_token_budget: 280,
        }
    }
}

impl Settings {
    /// Reads the stored settings; defaults when none are stored or the row is unreadable.
    pub fn load(store: &Store) -> Self {
        store.get_setting(KEY).ok().flatten().unwrap_or_default()
    }

    /// Validates and stores `self`; returns what was stored.
    pub fn save(self, store: &Store) -> Result<Self, Error> {
        self.validate()?;
        store.set_setting(KEY, &self)?;
        Ok(self)
    }

    /// Remembers the model folder to load on the next start.
    pub fn remember_model(store: &Store, dir: &str) -> Result<(), Error> {
        Ok(store.set_setting(MODEL_KEY, dir)?)
    }

    /// The model folder loaded last, if any.
    pub fn remembered_model(store: &Store) -> Option<String> {
        store.get_setting(MODEL_KEY).ok().flatten()
    }

    /// Refuses values the sampler or the model cannot use, naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |message: String| Err(Error::Invalid(message));
        if !(0.0..=2.0).contains(&self.temperature) {
            return invalid(format!(
                "temperature must be between 0 and 2, not {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return invalid(format!(
                "top-p must be above 0 and at most 1, not {}",
                self.top_p
            ));
        }
        if self.top_k > 1000 {
            return invalid(format!(
                "top-k must be at most 1000 (0 turns it off), not {}",
                self.top_k
            ));
        }
        if !(1..=self.context_length).contains(&self.max_tokens) {
            return invalid(format!(
                "max tokens must be between 1 and the context length ({}), not {}",
                self.context_length, self.max_tokens
            ));
        }
        if !(512..=MAX_CONTEXT).contains(&self.context_length) {
            return invalid(format!(
                "context length must be between 512 and {MAX_CONTEXT}, not {}",
                self.context_length
            ));
        }
        self.image_budget()?;
        Ok(())
    }

    /// The image budget as the preprocessor takes it.
    pub fn image_budget(&self) -> Result<SoftTokenBudget, Error> {
        SoftTokenBudget::try_from(self.image_token_budget as usize)
            .map_err(|err| Error::Invalid(err.to_string()))
    }

    /// Sampling and limits for one generation.
    pub fn generate_options(&self) -> GenerateOptions {
        GenerateOptions {
            sampler: SamplerConfig {
                temperature: self.temperature,
                top_k: (self.top_k > 0).then_some(self.top_k as usize),
                top_p: (self.top_p < 1.0).then_some(self.top_p),
                seed: seed(),
                ..SamplerConfig::default()
            },
            max_tokens: self.max_tokens as usize,
            context_window: self.context_length as usize,
            ..GenerateOptions::default()
        }
    }
}

/// A fresh sampler seed per answer, so regenerating gives a different one.
fn seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn defaults_until_saved_then_what_was_saved_survives_reopening() {
        let (dir, store) = store();
        assert_eq!(Settings::load(&store), Settings::default());
        let changed = Settings {
            system_prompt: "Answer in French.".into(),
            temperature: 0.2,
            thinking: true,
            image_token_budget: 560,
            ..Settings::default()
        };
        changed.clone().save(&store).unwrap();
        drop(store);

        let reopened = Store::open(dir.path()).unwrap();
        assert_eq!(Settings::load(&reopened), changed);
    }

    #[test]
    fn out_of_range_values_are_refused_by_name_and_nothing_is_stored() {
        let (_dir, store) = store();
        let cases = [
            (
                Settings {
                    temperature: 3.0,
                    ..Settings::default()
                },
                "temperature",
            ),
            (
                Settings {
                    top_p: 0.0,
                    ..Settings::default()
                },
                "top-p",
            ),
            (
                Settings {
                    max_tokens: 0,
                    ..Settings::default()
                },
                "max tokens",
            ),
            (
                Settings {
                    context_length: 100,
                    ..Settings::default()
                },
                "context length",
            ),
            (
                Settings {
                    image_token_budget: 300,
                    ..Settings::default()
                },
                "70, 140, 280",
            ),
        ];
        for (settings, needle) in cases {
            let err = settings.save(&store).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        assert_eq!(Settings::load(&store), Settings::default());
    }

    #[test]
    fn saving_settings_keeps_the_remembered_model_folder() {
        let (_dir, store) = store();
        Settings::remember_model(&store, "/models/gemma").unwrap();
        Settings {
            temperature: 0.5,
            ..Settings::default()
        }
        .save(&store)
        .unwrap();
        assert_eq!(
            Settings::remembered_model(&store).as_deref(),
            Some("/models/gemma")
        );
    }

    #[test]
    fn options_follow_the_settings() {
        let options = Settings {
            top_k: 0,
            top_p: 1.0,
            max_tokens: 7,
            ..Settings::default()
        }
        .generate_options();
        assert_eq!(options.sampler.top_k, None);
        assert_eq!(options.sampler.top_p, None);
        assert_eq!(options.max_tokens, 7);
        assert_eq!(options.context_window, 16_384);
    }
}
