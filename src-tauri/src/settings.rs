//! The user's generation settings: what they are, their defaults and limits, and where they live.

use chats::Store;
use engine::image::SoftTokenBudget;
use engine::options::GenerateOptions;
use engine::sampler::SamplerConfig;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::Error;

/// Key of the settings row in the chats database.
const KEY: &str = "generation";
/// Key of the model folder loaded last, loaded again on start.
const MODEL_KEY: &str = "model_dir";
/// Key of the "Faster answers" switch (speculative decoding; on unless switched off).
const FASTER_KEY: &str = "faster_answers";
/// Key of the model folders loaded lately, newest first (Settings → Model, the first-run screen).
const RECENT_KEY: &str = "recent_models";
/// How many model folders the recent list keeps.
pub const RECENT_MODELS: usize = 8;
/// Key of the context length the machine chose for the model loaded last ([`MachineContext`]).
const MACHINE_CONTEXT_KEY: &str = "machine_context";
/// Key of the towers' idle period the user chose, in seconds (unset: the machine's).
const TOWER_IDLE_KEY: &str = "tower_idle_secs";

/// The periods offered for "Release the image and audio encoders after", in seconds: right
/// after the question that used them, 30 seconds, 5 minutes, 30 minutes.
pub const TOWER_IDLE_CHOICES: [u32; 4] = [0, 30, 300, 1800];

/// The context length when neither the user nor the machine chose one.
pub const DEFAULT_CONTEXT: u32 = 16_384;

/// The largest context the model was trained for (Gemma 4 E4B: 128K positions).
pub const MAX_CONTEXT: u32 = 131_072;
/// The smallest context worth holding a conversation in.
const MIN_CONTEXT: u32 = 512;

/// The smallest and largest value a number setting may take, both included.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, TS)]
pub struct Bounds {
    pub min: f64,
    pub max: f64,
}

impl Bounds {
    const fn new(min: f64, max: f64) -> Self {
        Self { min, max }
    }

    /// Compared in `f32`, as the setting is held: the limit 0.01 then admits a stored 0.01.
    fn holds_f32(self, value: f32) -> bool {
        (self.min as f32..=self.max as f32).contains(&value)
    }

    fn holds_u32(self, value: u32) -> bool {
        (self.min..=self.max).contains(&f64::from(value))
    }
}

/// What each setting may be; sent to the UI (in `AppStatus`) so both sides check the same limits.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct SettingsLimits {
    pub temperature: Bounds,
    pub top_p: Bounds,
    /// 0 turns top-k off.
    pub top_k: Bounds,
    /// Also at most the context length.
    pub max_tokens: Bounds,
    pub context_length: Bounds,
    /// The soft-token budgets the vision tower was trained with, smallest first.
    pub image_token_budgets: Vec<u32>,
    /// The longest system prompt (the default here, or a chat's own), in characters.
    pub system_prompt_chars: u32,
    /// How much of a recording the model hears, in milliseconds: the rest of a longer one is
    /// left out, and its chip says so.
    pub audio_heard_ms: u32,
}

impl Default for SettingsLimits {
    fn default() -> Self {
        let max_context = f64::from(MAX_CONTEXT);
        Self {
            temperature: Bounds::new(0.0, 2.0),
            top_p: Bounds::new(0.01, 1.0),
            top_k: Bounds::new(0.0, 1000.0),
            max_tokens: Bounds::new(1.0, max_context),
            context_length: Bounds::new(f64::from(MIN_CONTEXT), max_context),
            image_token_budgets: SoftTokenBudget::ALL
                .iter()
                .map(|budget| budget.tokens() as u32)
                .collect(),
            system_prompt_chars: chats::SYSTEM_PROMPT_MAX_CHARS as u32,
            audio_heard_ms: crate::attachments::audio_heard_ms(),
        }
    }
}

/// Settings the user can change; persisted in the chats database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// Sent as the system turn of every conversation without a prompt of its own, when not empty.
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
    /// Whether `context_length` is the user's choice, kept whatever the machine; otherwise it
    /// follows the machine (`machine_context`).
    pub context_length_chosen: bool,
    /// The context length the machine chose for the model loaded last, and what for; `None`
    /// before a model has loaded. Read from the model's load, never stored with the settings
    /// (what `save` is given here is left out).
    pub machine_context: Option<MachineContext>,
}

/// The context length chosen from the machine (`engine::fit::MachineDefaults::context_length`)
/// for the model loaded last, and what it was chosen for, for the words Settings shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct MachineContext {
    /// Positions, within what the model supports.
    pub tokens: u32,
    /// The machine's memory in bytes, where known.
    #[ts(type = "number | null")]
    pub memory_bytes: Option<u64>,
    /// Whether the machine is a Mac (the words say "this Mac", else "this computer").
    pub mac: bool,
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
            context_length: DEFAULT_CONTEXT,
            thinking: false,
            image_token_budget: 280,
            context_length_chosen: false,
            machine_context: None,
        }
    }
}

impl Settings {
    /// Reads the stored settings (defaults when none are stored or the row is unreadable), with
    /// the machine's context length where the user has not chosen one.
    pub fn load(store: &Store) -> Self {
        /// Whether a stored row says whose its context length is.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Chosen {
            context_length_chosen: Option<bool>,
        }
        let mut settings: Self = store.get_setting(KEY).ok().flatten().unwrap_or_default();
        // A row stored before the choice was recorded: a length other than the default then
        // was the user's.
        if let Ok(Some(Chosen {
            context_length_chosen: None,
        })) = store.get_setting::<Chosen>(KEY)
        {
            settings.context_length_chosen = settings.context_length != DEFAULT_CONTEXT;
        }
        settings.machine_context = store.get_setting(MACHINE_CONTEXT_KEY).ok().flatten();
        if let (false, Some(machine)) = (settings.context_length_chosen, settings.machine_context) {
            settings.context_length = machine.tokens;
            // An answer no longer than the context.
            settings.max_tokens = settings.max_tokens.min(machine.tokens);
        }
        settings
    }

    /// Validates and stores `self`; returns the settings as they now apply ([`Settings::load`]).
    pub fn save(self, store: &Store) -> Result<Self, Error> {
        self.validate()?;
        store.set_setting(
            KEY,
            &Self {
                machine_context: None,
                ..self
            },
        )?;
        Ok(Self::load(store))
    }

    /// Records the context length the machine chose for the model just loaded: the context of
    /// every conversation while the user has not chosen one.
    pub fn remember_machine_context(store: &Store, machine: &MachineContext) -> Result<(), Error> {
        Ok(store.set_setting(MACHINE_CONTEXT_KEY, machine)?)
    }

    /// The towers' idle period the user chose, in seconds (one of [`TOWER_IDLE_CHOICES`]);
    /// `None`: the machine's.
    pub fn tower_idle_secs(store: &Store) -> Option<u32> {
        store
            .get_setting::<u32>(TOWER_IDLE_KEY)
            .ok()
            .flatten()
            .filter(|secs| TOWER_IDLE_CHOICES.contains(secs))
    }

    /// Stores the towers' idle period (`None`: back to the machine's); a period not offered is
    /// refused in words.
    pub fn set_tower_idle_secs(store: &Store, secs: Option<u32>) -> Result<(), Error> {
        match secs {
            Some(secs) if !TOWER_IDLE_CHOICES.contains(&secs) => Err(Error::Invalid(format!(
                "the encoders' idle period must be one of {TOWER_IDLE_CHOICES:?} seconds, not {secs}"
            ))),
            Some(secs) => Ok(store.set_setting(TOWER_IDLE_KEY, &secs)?),
            None => {
                store.remove_setting(TOWER_IDLE_KEY)?;
                Ok(())
            }
        }
    }

    /// Remembers the model folder to load on the next start (`None`: no model).
    pub fn remember_model(store: &Store, dir: Option<&str>) -> Result<(), Error> {
        Ok(store.set_setting(MODEL_KEY, &dir)?)
    }

    /// Whether answers are drafted and checked ("Faster answers"): as last switched, else
    /// `default` (the machine's: `engine::fit::MachineDefaults`).
    pub fn faster_answers_or(store: &Store, default: bool) -> bool {
        store
            .get_setting::<bool>(FASTER_KEY)
            .ok()
            .flatten()
            .unwrap_or(default)
    }

    /// Switches "Faster answers".
    pub fn set_faster_answers(store: &Store, on: bool) -> Result<(), Error> {
        Ok(store.set_setting(FASTER_KEY, &on)?)
    }

    /// The model folders loaded lately, newest first (at most [`RECENT_MODELS`]).
    pub fn recent_models(store: &Store) -> Vec<String> {
        store
            .get_setting::<Vec<String>>(RECENT_KEY)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Puts `dir` first in the recent list (once), dropping the oldest past [`RECENT_MODELS`].
    pub fn remember_recent(store: &Store, dir: &str) -> Result<(), Error> {
        let mut recent = Self::recent_models(store);
        recent.retain(|known| known != dir);
        recent.insert(0, dir.to_owned());
        recent.truncate(RECENT_MODELS);
        Ok(store.set_setting(RECENT_KEY, &recent)?)
    }

    /// The model folder loaded last, if any.
    pub fn remembered_model(store: &Store) -> Option<String> {
        store
            .get_setting::<Option<String>>(MODEL_KEY)
            .ok()
            .flatten()
            .flatten()
    }

    /// Refuses values the sampler or the model cannot use, naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        let limits = SettingsLimits::default();
        let invalid = |message: String| Err(Error::Invalid(message));
        let between = |bounds: Bounds| format!("between {} and {}", bounds.min, bounds.max);
        if !limits.temperature.holds_f32(self.temperature) {
            return invalid(format!(
                "temperature must be {}, not {}",
                between(limits.temperature),
                self.temperature
            ));
        }
        if !limits.top_p.holds_f32(self.top_p) {
            return invalid(format!(
                "top-p must be {}, not {}",
                between(limits.top_p),
                self.top_p
            ));
        }
        if !limits.top_k.holds_u32(self.top_k) {
            return invalid(format!(
                "top-k must be {} (0 turns it off), not {}",
                between(limits.top_k),
                self.top_k
            ));
        }
        if !limits.max_tokens.holds_u32(self.max_tokens) || self.max_tokens > self.context_length {
            return invalid(format!(
                "max tokens must be between {} and the context length ({}), not {}",
                limits.max_tokens.min, self.context_length, self.max_tokens
            ));
        }
        if !limits.context_length.holds_u32(self.context_length) {
            return invalid(format!(
                "context length must be {}, not {}",
                between(limits.context_length),
                self.context_length
            ));
        }
        self.image_budget()?;
        chats::check_system_prompt(&self.system_prompt)?;
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
            (
                Settings {
                    system_prompt: "x".repeat(limits_chars() + 1),
                    ..Settings::default()
                },
                "system prompt",
            ),
        ];
        for (settings, needle) in cases {
            let err = settings.save(&store).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        assert_eq!(Settings::load(&store), Settings::default());
    }

    fn limits_chars() -> usize {
        SettingsLimits::default().system_prompt_chars as usize
    }

    #[test]
    fn recent_models_are_newest_first_once_each_and_at_most_eight() {
        let (_dir, store) = store();
        assert!(Settings::recent_models(&store).is_empty());
        for n in 0..10 {
            Settings::remember_recent(&store, &format!("/models/{n}")).unwrap();
        }
        Settings::remember_recent(&store, "/models/5").unwrap();
        let recent = Settings::recent_models(&store);
        assert_eq!(recent.len(), RECENT_MODELS);
        assert_eq!(recent[0], "/models/5");
        assert_eq!(recent[1], "/models/9");
        assert_eq!(recent.iter().filter(|d| *d == "/models/5").count(), 1);
        assert!(!recent.contains(&"/models/0".to_owned()));
        // Forgetting the model in use keeps the list: it is how a user gets back to it.
        Settings::remember_model(&store, None).unwrap();
        assert_eq!(Settings::recent_models(&store), recent);
    }

    #[test]
    fn saving_settings_keeps_the_remembered_model_folder() {
        let (_dir, store) = store();
        Settings::remember_model(&store, Some("/models/gemma")).unwrap();
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
    fn the_limits_sent_to_the_ui_are_the_ones_enforced() {
        let (_dir, store) = store();
        let limits = SettingsLimits::default();
        /// Sets one setting to a value given as f64.
        type Change = fn(&mut Settings, f64);
        let at = |change: Change, value: f64| {
            let mut settings = Settings::default();
            change(&mut settings, value);
            settings
        };
        let fields: [(&str, Bounds, Change); 4] = [
            ("temperature", limits.temperature, |s, v| {
                s.temperature = v as f32
            }),
            ("top-p", limits.top_p, |s, v| s.top_p = v as f32),
            ("top-k", limits.top_k, |s, v| s.top_k = v as u32),
            ("context length", limits.context_length, |s, v| {
                s.context_length = v as u32;
                s.max_tokens = s.max_tokens.min(s.context_length);
            }),
        ];
        for (name, bounds, change) in fields {
            for edge in [bounds.min, bounds.max] {
                let result = at(change, edge).save(&store);
                assert!(result.is_ok(), "{name} = {edge}: {result:?}");
            }
            let step = if name == "top-p" { 0.005 } else { 1.0 };
            for outside in [bounds.min - step, bounds.max + step] {
                if name == "top-k" && outside < 0.0 {
                    continue; // a u32 cannot be below 0
                }
                let err = at(change, outside).save(&store).unwrap_err().to_string();
                assert!(err.contains(name), "{name} = {outside}: {err}");
            }
        }
        for budget in &limits.image_token_budgets {
            let settings = Settings {
                image_token_budget: *budget,
                ..Settings::default()
            };
            assert!(settings.save(&store).is_ok(), "budget {budget}");
        }
        assert_eq!(limits.image_token_budgets, [70, 140, 280, 560, 1120]);
        assert_eq!(limits.context_length.max, f64::from(MAX_CONTEXT));
    }

    #[test]
    fn the_machines_context_length_applies_until_the_user_chooses_one() {
        let (dir, store) = store();
        let eight_gb = MachineContext {
            tokens: 8192,
            memory_bytes: Some(8 << 30),
            mac: true,
        };
        Settings::remember_machine_context(&store, &eight_gb).unwrap();
        let settings = Settings::load(&store);
        assert_eq!(settings.context_length, 8192);
        assert!(!settings.context_length_chosen);
        assert_eq!(settings.machine_context, Some(eight_gb));

        // Saving other settings keeps following the machine, whatever length came with them.
        let saved = Settings {
            temperature: 0.3,
            ..settings.clone()
        }
        .save(&store)
        .unwrap();
        assert_eq!((saved.context_length, saved.temperature), (8192, 0.3));
        let four_k = MachineContext {
            tokens: 4096,
            ..eight_gb
        };
        Settings::remember_machine_context(&store, &four_k).unwrap();
        assert_eq!(Settings::load(&store).context_length, 4096);

        // A length the user chose wins over the machine's, and survives reopening.
        let chosen = Settings {
            context_length: 32_768,
            context_length_chosen: true,
            ..saved
        }
        .save(&store)
        .unwrap();
        assert_eq!(chosen.context_length, 32_768);
        drop(store);
        let reopened = Store::open(dir.path()).unwrap();
        let settings = Settings::load(&reopened);
        assert_eq!(settings.context_length, 32_768);
        assert!(settings.context_length_chosen);
        assert_eq!(settings.machine_context, Some(four_k));
    }

    #[test]
    fn a_row_stored_before_the_choice_was_recorded_keeps_a_length_the_user_set() {
        let (_dir, store) = store();
        Settings::remember_machine_context(
            &store,
            &MachineContext {
                tokens: 8192,
                memory_bytes: None,
                mac: false,
            },
        )
        .unwrap();
        let old_row = |context: u32| serde_json::json!({"temperature": 1.0, "maxTokens": 4096, "contextLength": context});
        store.set_setting(KEY, &old_row(32_768)).unwrap();
        assert_eq!(Settings::load(&store).context_length, 32_768);
        store.set_setting(KEY, &old_row(DEFAULT_CONTEXT)).unwrap();
        assert_eq!(Settings::load(&store).context_length, 8192);
    }

    #[test]
    fn an_answer_length_longer_than_the_machines_context_is_shortened_to_it() {
        let (_dir, store) = store();
        Settings {
            max_tokens: 12_000,
            ..Settings::default()
        }
        .save(&store)
        .unwrap();
        let small = MachineContext {
            tokens: 8192,
            memory_bytes: Some(8 << 30),
            mac: true,
        };
        Settings::remember_machine_context(&store, &small).unwrap();
        let settings = Settings::load(&store);
        assert_eq!((settings.context_length, settings.max_tokens), (8192, 8192));
        assert!(settings.validate().is_ok());
    }

    #[test]
    fn the_encoders_idle_period_is_one_of_those_offered_or_the_machines() {
        let (_dir, store) = store();
        assert_eq!(Settings::tower_idle_secs(&store), None);
        Settings::set_tower_idle_secs(&store, Some(1800)).unwrap();
        assert_eq!(Settings::tower_idle_secs(&store), Some(1800));
        let err = Settings::set_tower_idle_secs(&store, Some(45)).unwrap_err();
        assert!(err.to_string().contains("not 45"), "{err}");
        assert_eq!(Settings::tower_idle_secs(&store), Some(1800));
        Settings::set_tower_idle_secs(&store, None).unwrap();
        assert_eq!(Settings::tower_idle_secs(&store), None);
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
