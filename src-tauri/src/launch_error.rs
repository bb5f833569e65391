//! When the app cannot start: the error in a native dialog (opened from Finder or a launcher,
//! nobody reads stderr), and for conversations that cannot be opened (a damaged database) the
//! offer to set them aside and start with an empty history, nothing deleted.

use std::path::PathBuf;

use tauri::AppHandle;
use tauri_plugin_dialog::{DialogExt, MessageDialogButtons, MessageDialogKind};

use crate::state::AppState;

const SET_ASIDE: &str = "Move Aside and Start Fresh";

/// Shows `error`; if the conversations (in `chats_dir`) failed to open, offers to set them aside and then
/// `start`s the app with a fresh `open()`. Otherwise, or if that fails too, the app exits.
pub fn recover<O, S>(app: &AppHandle, error: anyhow::Error, chats_dir: PathBuf, open: O, start: S)
where
    O: FnOnce() -> anyhow::Result<AppState> + Send + 'static,
    S: FnOnce(&AppHandle, AppState) -> anyhow::Result<()> + Send + 'static,
{
    let Some(damaged) = error.downcast_ref::<chats::Error>().map(|e| e.to_string()) else {
        fail(app, error);
        return;
    };
    let handle = app.clone();
    app.dialog()
        .message(format!(
            "{damaged}\n\nThe conversations file may be damaged. Gemma Desk can move it and its \
             attachments into a folder next to it and start with an empty history. Nothing is \
             deleted."
        ))
        .title("Gemma Desk cannot open your conversations")
        .kind(MessageDialogKind::Error)
        .buttons(MessageDialogButtons::OkCancelCustom(
            SET_ASIDE.into(),
            "Quit".into(),
        ))
        .show(move |set_aside| {
            if !set_aside {
                handle.exit(1);
                return;
            }
            let started = chats::Store::set_aside(&chats_dir)
                .map_err(anyhow::Error::from)
                .and_then(|aside| {
                    eprintln!("gemma-desk: conversations moved to {}", aside.display());
                    open()
                })
                .and_then(|state| start(&handle, state));
            if let Err(err) = started {
                fail(&handle, err);
            }
        });
}

/// Shows why the app could not start, then quits.
fn fail(app: &AppHandle, error: anyhow::Error) {
    eprintln!("gemma-desk: {error:#}");
    let handle = app.clone();
    app.dialog()
        .message(format!("{error:#}"))
        .title("Gemma Desk could not start")
        .kind(MessageDialogKind::Error)
        .show(move |_| handle.exit(1));
}
