//! The app's state as the UI's first screen needs it.

use std::fs;

use serde::Serialize;
use ts_rs::TS;

use crate::data_dir::DataDir;
use crate::error::Error;

/// What the UI needs to choose between the first-run screen and the chat.
#[derive(Debug, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The model ready to chat with; `null` until one is installed.
    pub model: Option<InstalledModel>,
    /// Folder the user can put model folders into, shown on the first-run screen.
    pub models_dir: String,
    /// App version, from Cargo.toml.
    pub version: String,
}

/// A model found in the models folder.
#[derive(Debug, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct InstalledModel {
    /// Human-readable name, e.g. "Gemma 4 E4B (4-bit)".
    pub name: String,
    /// Folder holding config.json, the tokenizer and the weights.
    pub dir: String,
}

/// Reads the status, creating the models folder so the user can find it.
pub fn read(data_dir: &DataDir) -> Result<AppStatus, Error> {
    let models_dir = data_dir.models();
    fs::create_dir_all(&models_dir).map_err(|source| Error::CreateModelsDir {
        path: models_dir.clone(),
        source,
    })?;
    Ok(AppStatus {
        model: None,
        models_dir: models_dir.display().to_string(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_data_dir_has_no_model_and_gets_a_models_folder() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(temp.path().join("data"));

        let status = read(&data_dir).unwrap();

        assert!(status.model.is_none());
        assert_eq!(status.models_dir, data_dir.models().display().to_string());
        assert!(data_dir.models().is_dir());
    }

    #[test]
    fn unwritable_data_dir_is_an_io_error_naming_the_folder() {
        let temp = tempfile::tempdir().unwrap();
        let blocker = temp.path().join("not-a-folder");
        fs::write(&blocker, b"").unwrap();
        let data_dir = DataDir::new(blocker);

        let err = read(&data_dir).unwrap_err();

        assert_eq!(err.kind(), crate::error::ErrorKind::Io);
        assert!(err.to_string().contains("not-a-folder"), "{err}");
    }

    #[test]
    fn serializes_with_camel_case_fields_and_null_model() {
        let temp = tempfile::tempdir().unwrap();
        let status = read(&DataDir::new(temp.path().to_path_buf())).unwrap();

        let json = serde_json::to_value(&status).unwrap();

        assert!(json["model"].is_null());
        assert!(json["modelsDir"].as_str().unwrap().ends_with("models"));
        assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    }
}
