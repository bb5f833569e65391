//! Tauri commands: one line each, delegating to plain modules.

use tauri::State;

use crate::data_dir::DataDir;
use crate::error::Error;
use crate::status::{self, AppStatus};

/// What the UI needs to pick its first screen.
#[tauri::command]
pub fn app_status(data_dir: State<'_, DataDir>) -> Result<AppStatus, Error> {
    status::read(&data_dir)
}
