//! The app's state as the UI's first screen needs it.

use std::fs;

use serde::Serialize;
use ts_rs::TS;

use crate::data_dir::DataDir;
use crate::error::Error;
use crate::model_setup::{download_options, DownloadOption, ModelState};
use crate::settings::SettingsLimits;

/// What the UI needs to choose between the first-run screen and the chat.
#[derive(Debug, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The model, loaded, loading, downloading or missing.
    pub model: ModelState,
    /// Folder the user can put model folders into, shown on the first-run screen.
    pub models_dir: String,
    /// App version, from Cargo.toml.
    pub version: String,
    /// "macos", "linux" or "windows": wording such as "this Mac" depends on it.
    pub platform: String,
    /// What each setting may be, so the settings form checks what the backend enforces.
    pub settings_limits: SettingsLimits,
    /// The checkpoints the app can download, the default first.
    pub downloads: Vec<DownloadOption>,
}

/// Creates the models folder so the user can find it.
pub fn ensure_models_dir(data_dir: &DataDir) -> Result<(), Error> {
    let models_dir = data_dir.models();
    fs::create_dir_all(&models_dir).map_err(|source| Error::CreateModelsDir {
        path: models_dir.clone(),
        source,
    })
}

/// The status with `model` as it stands.
pub fn read(data_dir: &DataDir, model: ModelState) -> Result<AppStatus, Error> {
    ensure_models_dir(data_dir)?;
    Ok(AppStatus {
        model,
        models_dir: data_dir.models().display().to_string(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        platform: std::env::consts::OS.to_owned(),
        settings_limits: SettingsLimits::default(),
        downloads: download_options(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_data_dir_has_no_model_and_gets_a_models_folder() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(temp.path().join("data"));

        let status = read(&data_dir, ModelState::None).unwrap();

        assert_eq!(status.model, ModelState::None);
        assert_eq!(status.models_dir, data_dir.models().display().to_string());
        assert!(data_dir.models().is_dir());
    }

    #[test]
    fn unwritable_data_dir_is_an_io_error_naming_the_folder() {
        let temp = tempfile::tempdir().unwrap();
        let blocker = temp.path().join("not-a-folder");
        fs::write(&blocker, b"").unwrap();
        let data_dir = DataDir::new(blocker);

        let err = read(&data_dir, ModelState::None).unwrap_err();

        assert_eq!(err.kind(), crate::error::ErrorKind::Io);
        assert!(err.to_string().contains("not-a-folder"), "{err}");
    }

    #[test]
    fn serializes_with_camel_case_fields_and_a_tagged_model_state() {
        let temp = tempfile::tempdir().unwrap();
        let status = read(&DataDir::new(temp.path().to_path_buf()), ModelState::None).unwrap();

        let json = serde_json::to_value(&status).unwrap();

        assert_eq!(json["model"]["state"], "none");
        assert!(json["modelsDir"].as_str().unwrap().ends_with("models"));
        assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(json["platform"], std::env::consts::OS);
        assert_eq!(json["settingsLimits"]["contextLength"]["max"], 131_072.0);
        assert_eq!(json["settingsLimits"]["topP"]["min"], 0.01);
    }
}
