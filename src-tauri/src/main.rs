//! Gemma Desk: the Tauri shell. It wires state, commands and window events; the logic lives in
//! plain modules (and in the `engine` and `chats` crates) so tests reach it without a window.

mod answer;
mod attachments;
mod chat;
mod clipboard;
mod commands;
mod data_dir;
mod drafts;
mod error;
mod events;
mod faster;
mod instance;
mod launch;
mod launch_error;
mod links;
mod local_api;
mod mcp_servers;
mod memory;
mod mock_microphone;
mod model_setup;
mod quick_ask;
mod settings;
mod speech;
mod state;
mod status;
mod sync;
mod transfer;

#[cfg(test)]
mod bindings;
#[cfg(test)]
mod local_api_tests;
#[cfg(test)]
mod tests;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use model_store::HfCache;
use tauri::webview::NewWindowResponse;
use tauri::{
    AppHandle, DragDropEvent, Emitter, Manager, RunEvent, WebviewWindowBuilder, WindowEvent,
};

use crate::attachments::DropEvent;
use crate::data_dir::DataDir;
use crate::events::Events;
use crate::instance::Instance;
use crate::launch::LaunchOptions;
use crate::state::{AppState, HUB_URL};

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
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_opener::init())
        .manage(clipboard::TextClipboard::start())
        .invoke_handler(tauri::generate_handler![
            commands::app_status,
            commands::choose_model_folder,
            commands::download_model,
            commands::cancel_download,
            commands::forget_model,
            commands::recent_models,
            commands::open_recent_model,
            commands::memory_usage,
            commands::list_conversations,
            commands::get_conversation,
            commands::rename_conversation,
            commands::set_pinned,
            commands::delete_conversation,
            commands::search_conversations,
            commands::send_message,
            commands::regenerate,
            commands::edit_message,
            commands::stop_generation,
            commands::get_settings,
            commands::save_settings,
            commands::pick_files,
            commands::add_pasted_file,
            commands::add_document,
            commands::message_documents,
            commands::pending_audio,
            commands::attachment_audio,
            commands::paste_clipboard_image,
            commands::remove_pending_attachment,
            commands::attachment_thumbnail,
            commands::attachment_view,
            commands::open_link,
            commands::select_version,
            commands::open_message,
            commands::conversation_markdown,
            commands::export_markdown,
            commands::export_json,
            commands::import_json,
            commands::faster_answers,
            commands::set_faster_answers,
            commands::set_tower_idle,
            commands::download_drafter,
            commands::cancel_drafter_download,
            commands::set_system_prompt,
            commands::count_tokens,
            commands::drafts,
            commands::save_draft,
            commands::set_last_open,
            commands::quit,
            commands::local_api,
            commands::mcp_servers,
            commands::mcp_save_server,
            commands::mcp_remove_server,
            commands::mcp_set_enabled,
            commands::mcp_tools,
            commands::mcp_set_tool_enabled,
            commands::mcp_import_file,
            commands::set_local_api,
            commands::regenerate_api_key,
            commands::api_log,
            commands::copy_text,
            commands::speak,
            commands::stop_speaking,
            commands::quick_ask_shortcut,
            commands::set_quick_ask_shortcut,
            commands::show_quick_ask,
            commands::hide_quick_ask,
            commands::quick_ask_hand_over,
        ])
        .build(tauri::generate_context!())
        .context("could not start the app")?;
    quick_ask::install(app.handle());
    let speech_events = app.handle().clone();
    app.manage(speech::Speaker::new(
        speech::Output::from_env(),
        move |event| {
            let _ = speech_events.emit(speech::EVENT, event);
        },
    ));
    let data_dir = match options.data_dir {
        Some(dir) => dir,
        None => app
            .path()
            .app_data_dir()
            .context("could not find the app data folder")?,
    };
    // A second launch on the same folder brings the running window forward and leaves.
    let handle = app.handle().clone();
    let instance = instance::claim(&data_dir, move || show_main_window(&handle))
        .with_context(|| format!("could not use the data folder {}", data_dir.display()))?;
    let guard = match instance {
        Instance::First(guard) => guard,
        Instance::Second { shown } => {
            let what = if shown {
                "showing its window"
            } else {
                "it did not answer"
            };
            eprintln!(
                "gemma-desk: already running on {}; {what}",
                data_dir.display()
            );
            return Ok(());
        }
    };
    let data_dir = DataDir::new(data_dir);
    let events: Arc<dyn Events> = Arc::new(app.handle().clone());
    let chats_dir = data_dir.chats();
    let open = move || {
        AppState::open(
            data_dir.clone(),
            HfCache::from_process_env(),
            HUB_URL.to_owned(),
            events.clone(),
        )
    };
    // A failure here is shown in a native dialog once the event loop runs: opened from Finder,
    // nobody reads stderr.
    let mut failed = match open() {
        Ok(state) => {
            start(app.handle(), state)?;
            None
        }
        Err(err) => Some(err),
    };
    app.run(move |handle, event| {
        // Held for as long as the app runs: the folder stays claimed.
        let _ = &guard;
        match event {
            RunEvent::Ready => {
                if let Some(err) = failed.take() {
                    eprintln!("gemma-desk: {err:#}");
                    launch_error::recover(handle, err, chats_dir.clone(), open.clone(), start);
                }
            }
            RunEvent::Exit => {
                // Ends a running answer cleanly so it is saved as stopped, not left mid-write.
                if let Some(state) = handle.try_state::<AppState>() {
                    state.chat.shutdown();
                    state.local_api.shutdown();
                    // Every MCP server's process group ends with the app.
                    state.mcp.shutdown();
                }
                // The speech command is a process of its own: it would go on talking.
                if let Some(speaker) = handle.try_state::<speech::Speaker>() {
                    speaker.stop();
                }
            }
            _ => {}
        }
    });
    Ok(())
}

/// Hands the state to the app, opens the window and starts loading the model.
fn start(app: &AppHandle, state: AppState) -> anyhow::Result<()> {
    let models = state.models.clone();
    let data_dir = state.data_dir.clone();
    let store = state.store.clone();
    app.manage(state);
    open_main_window(app, &data_dir)?;
    std::thread::Builder::new()
        .name("model-startup".into())
        .spawn(move || models.load_at_startup())
        .context("could not start loading the model")?;
    // The plugin registers on the event loop's thread and waits for it: not from this one.
    let handle = app.clone();
    std::thread::Builder::new()
        .name("quick-ask-shortcut".into())
        .spawn(move || quick_ask::register_stored(&handle, &store))
        .context("could not start registering the quick-ask shortcut")?;
    Ok(())
}

/// Opens the window described in tauri.conf.json (`"create": false` there), keeping the
/// webview's storage inside the data folder, never navigating away from the bundled UI, and
/// handling OS file drops in Rust.
fn open_main_window(app: &AppHandle, data_dir: &DataDir) -> anyhow::Result<()> {
    let config = app
        .config()
        .app
        .windows
        .iter()
        .find(|window| window.label == "main")
        .context("tauri.conf.json has no window labelled \"main\"")?;
    let window = WebviewWindowBuilder::from_config(app, config)?
        .data_directory(data_dir.webview())
        .on_navigation(is_bundled)
        // No popups: links open in the system browser through `open_link`, after confirmation.
        .on_new_window(|_, _| NewWindowResponse::Deny)
        .build()
        .context("could not open the main window")?;
    mock_microphone::install(&window).context("could not set up the e2e microphone")?;
    let handle = app.clone();
    window.on_window_event(move |event| {
        let WindowEvent::DragDrop(drop) = event else {
            return;
        };
        match drop {
            DragDropEvent::Enter { .. } => handle.dropped(&DropEvent::Hover { active: true }),
            DragDropEvent::Leave => handle.dropped(&DropEvent::Hover { active: false }),
            DragDropEvent::Drop { paths, .. } => {
                handle.dropped(&DropEvent::Hover { active: false });
                let (handle, paths) = (handle.clone(), paths.clone());
                // Reading and checking files is off the event loop.
                std::thread::spawn(move || {
                    let state = handle.state::<AppState>();
                    let added = state.attachments.add_dropped(&paths);
                    handle.dropped(&added);
                });
            }
            _ => {}
        }
    });
    Ok(())
}

/// Brings the main window forward (a second launch asked for it).
fn show_main_window(app: &AppHandle) {
    if let Some(window) = app.get_webview_window("main") {
        let _ = window.unminimize();
        let _ = window.show();
        let _ = window.set_focus();
    }
}

/// The only pages the webview may show: the bundled UI (and the dev server in `tauri dev`).
fn is_bundled(url: &tauri::Url) -> bool {
    match url.scheme() {
        "tauri" => true,
        "http" | "https" => url.host_str() == Some("tauri.localhost"),
        _ => false,
    }
}
