//! Gemma Desk: the Tauri shell. It wires state and commands; the logic lives in plain modules
//! (and, later, in the `engine` and `chats` crates) so tests can reach it without a window.

mod commands;
mod data_dir;
mod error;
mod launch;
mod status;

#[cfg(test)]
mod bindings;

use std::process::ExitCode;

use anyhow::Context;
use tauri::{App, Manager, WebviewWindowBuilder};

use crate::data_dir::DataDir;
use crate::launch::LaunchOptions;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gemma-desk: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let options = LaunchOptions::parse(std::env::args_os().skip(1))?;
    let app = tauri::Builder::default()
        .invoke_handler(tauri::generate_handler![commands::app_status])
        .build(tauri::generate_context!())
        .context("could not start the app")?;
    let data_dir = match options.data_dir {
        Some(dir) => dir,
        None => app
            .path()
            .app_data_dir()
            .context("could not find the app data folder")?,
    };
    let data_dir = DataDir::new(data_dir);
    app.manage(data_dir.clone());
    open_main_window(&app, &data_dir)?;
    app.run(|_, _| {});
    Ok(())
}

/// Opens the window described in tauri.conf.json (`"create": false` there), keeping the
/// webview's storage inside the data folder too.
fn open_main_window(app: &App, data_dir: &DataDir) -> anyhow::Result<()> {
    let config = app
        .config()
        .app
        .windows
        .iter()
        .find(|window| window.label == "main")
        .context("tauri.conf.json has no window labelled \"main\"")?;
    WebviewWindowBuilder::from_config(app, config)?
        .data_directory(data_dir.webview())
        .build()
        .context("could not open the main window")?;
    Ok(())
}
