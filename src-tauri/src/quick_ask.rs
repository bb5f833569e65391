//! Quick ask: a global shortcut (⌥Space by default) opens a small always-on-top window from
//! anywhere; a question typed there is answered through the same engine as the main window's
//! (it starts a chat like any other) and "Open in Gemma Desk" continues it in the main window.
//! docs/QUICK_ASK.md.

use std::str::FromStr;
use std::sync::Mutex;

use chats::Store;
use serde::Serialize;
use tauri::{AppHandle, Emitter, Manager, WebviewUrl, WebviewWindowBuilder};
use tauri_plugin_global_shortcut::{GlobalShortcutExt, Shortcut, ShortcutEvent, ShortcutState};
use ts_rs::TS;

use crate::error::Error;

/// The quick-ask window's label (its page is `ui/quick.html`).
pub const WINDOW: &str = "quick";
/// The shortcut until the user picks another (Space with Option on a Mac, Alt elsewhere).
pub const DEFAULT_SHORTCUT: &str = "Alt+Space";
/// Where the chosen shortcut is stored (the chats database's settings).
pub(crate) const KEY: &str = "quickAskShortcut";
/// Sent to the main window with a conversation id: show that chat.
pub const OPEN_EVENT: &str = "open-conversation";
/// Sent to the quick-ask window each time the shortcut opens it: focus the question.
pub const SHOWN_EVENT: &str = "quick-ask-shown";

/// The quick-ask shortcut and whether the system gave it to the app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct QuickAskShortcut {
    /// As the user wrote it, e.g. "Alt+Space".
    pub shortcut: String,
    /// Pressing it anywhere opens the quick-ask window.
    pub registered: bool,
    /// Why it is not registered, in words.
    pub error: Option<String>,
}

/// The shortcut in use; managed by the app.
pub struct QuickAsk {
    current: Mutex<Option<Shortcut>>,
    /// Why global shortcuts cannot work here at all (the plugin could not start).
    unavailable: Option<String>,
}

/// Starts global shortcuts for `app` and manages [`QuickAsk`]. A desktop without them (the
/// plugin fails to start) leaves the app running; the Settings panel says why.
pub fn install(app: &AppHandle) {
    let unavailable = app
        .plugin(tauri_plugin_global_shortcut::Builder::new().build())
        .err()
        .map(|e| format!("This desktop does not let apps listen for shortcuts ({e})."));
    app.manage(QuickAsk {
        current: Mutex::new(None),
        unavailable,
    });
}

/// Registers the stored shortcut; run off the event loop's thread once it runs (the plugin
/// hands registration to that thread and waits for it).
pub fn register_stored(app: &AppHandle, store: &Store) {
    let state = apply(app, store, &stored(store));
    if let Some(error) = state.error {
        eprintln!("gemma-desk: quick ask: {error}");
    }
}

/// The stored shortcut, or the default.
pub fn stored(store: &Store) -> String {
    store
        .get_setting::<String>(KEY)
        .ok()
        .flatten()
        .filter(|text| parse(text).is_ok())
        .unwrap_or_else(|| DEFAULT_SHORTCUT.to_owned())
}

/// Reads a shortcut as people write it ("Alt+Space", "Ctrl+Shift+K", "Cmd+Shift+G"); refuses,
/// in words, one without a modifier (it would swallow a key everywhere) or with an unknown key.
pub fn parse(text: &str) -> Result<Shortcut, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("Type a shortcut, for example Alt+Space.".into());
    }
    let parts: Vec<&str> = text.split('+').map(str::trim).collect();
    if parts.len() < 2 || parts.iter().any(|part| part.is_empty()) {
        return Err(format!(
            "\"{text}\" needs a modifier and a key, for example Alt+Space or Ctrl+Shift+K: a key alone would be taken from every program."
        ));
    }
    Shortcut::from_str(text).map_err(|e| format!("\"{text}\" is not a shortcut: {e}."))
}

/// Registers `text` as the quick-ask shortcut in place of the one in use, and remembers it when
/// the system accepted it. The previous one is kept when the new one is refused.
pub fn apply(app: &AppHandle, store: &Store, text: &str) -> QuickAskShortcut {
    let refused = |error: String| QuickAskShortcut {
        shortcut: text.trim().to_owned(),
        registered: false,
        error: Some(error),
    };
    let shortcut = match parse(text) {
        Ok(shortcut) => shortcut,
        Err(error) => return refused(error),
    };
    let Some(quick) = app.try_state::<QuickAsk>() else {
        return refused("Quick ask is not set up in this window.".into());
    };
    if let Some(error) = &quick.unavailable {
        return refused(error.clone());
    }
    let mut current = quick.current.lock().unwrap_or_else(|e| e.into_inner());
    let shortcuts = app.global_shortcut();
    if *current == Some(shortcut) {
        return QuickAskShortcut {
            shortcut: text.trim().to_owned(),
            registered: true,
            error: None,
        };
    }
    if let Err(e) = shortcuts.on_shortcut(shortcut, on_key) {
        return refused(format!(
            "{} could not be used: another program or the system already uses it, or this desktop does not let apps listen for shortcuts ({e}). Choose another one.",
            text.trim()
        ));
    }
    if let Some(old) = current.replace(shortcut) {
        let _ = shortcuts.unregister(old);
    }
    if let Err(e) = store.set_setting(KEY, text.trim()) {
        return QuickAskShortcut {
            shortcut: text.trim().to_owned(),
            registered: true,
            error: Some(format!(
                "It works until the app quits, but could not be saved: {e}"
            )),
        };
    }
    QuickAskShortcut {
        shortcut: text.trim().to_owned(),
        registered: true,
        error: None,
    }
}

/// Where the shortcut stands now.
pub fn status(app: &AppHandle, store: &Store) -> QuickAskShortcut {
    let shortcut = stored(store);
    let Some(quick) = app.try_state::<QuickAsk>() else {
        return QuickAskShortcut {
            shortcut,
            registered: false,
            error: Some("Quick ask is not set up in this window.".into()),
        };
    };
    let registered = quick
        .current
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_some_and(|current| parse(&shortcut).ok() == Some(current));
    let error = match &quick.unavailable {
        Some(error) => Some(error.clone()),
        None => (!registered).then(|| {
            format!("{shortcut} is not active: another program or the system uses it. Choose another one.")
        }),
    };
    QuickAskShortcut {
        error,
        shortcut,
        registered,
    }
}

fn on_key(app: &AppHandle, _shortcut: &Shortcut, event: ShortcutEvent) {
    if event.state() != ShortcutState::Pressed {
        return;
    }
    // The handler may run on the event loop's thread (macOS); making a window there waits on
    // that same loop, so it is made from a thread of its own.
    let app = app.clone();
    let _ = std::thread::Builder::new()
        .name("quick-ask".into())
        .spawn(move || {
            if let Err(e) = show(&app) {
                eprintln!("gemma-desk: could not open the quick-ask window: {e}");
            }
        });
}

/// Shows the quick-ask window (made on first use), in front of everything, focused.
pub fn show(app: &AppHandle) -> Result<(), Error> {
    let window = match app.get_webview_window(WINDOW) {
        Some(window) => window,
        None => {
            let mut builder =
                WebviewWindowBuilder::new(app, WINDOW, WebviewUrl::App("quick.html".into()))
                    .title("Quick ask — Gemma Desk")
                    .inner_size(560.0, 380.0)
                    .min_inner_size(380.0, 220.0)
                    .always_on_top(true)
                    .skip_taskbar(true)
                    .center();
            if let Some(state) = app.try_state::<crate::state::AppState>() {
                builder = builder.data_directory(state.data_dir.webview());
            }
            let window = builder.build().map_err(|e| {
                Error::Internal(format!("could not open the quick-ask window: {e}"))
            })?;
            // Hold to talk records in this window: the e2e suite's mock microphone here too.
            crate::mock_microphone::install(&window).map_err(|e| {
                Error::Internal(format!("could not set up the e2e microphone: {e}"))
            })?;
            window
        }
    };
    let _ = window.unminimize();
    let _ = window.show();
    let _ = window.set_focus();
    let _ = window.emit_to(WINDOW, SHOWN_EVENT, ());
    Ok(())
}

/// Hides the quick-ask window (Esc); what it showed stays for the next time.
pub fn hide(app: &AppHandle) {
    if let Some(window) = app.get_webview_window(WINDOW) {
        let _ = window.hide();
    }
}

/// Continues conversation `id` in the main window: the quick-ask window hides, the main window
/// comes forward and opens the chat. A chat that no longer exists is refused in words.
pub fn hand_over(app: &AppHandle, store: &Store, id: &str) -> Result<(), Error> {
    check_hand_over(store, id)?;
    hide(app);
    if let Some(main) = app.get_webview_window("main") {
        let _ = main.unminimize();
        let _ = main.show();
        let _ = main.set_focus();
    }
    app.emit_to("main", OPEN_EVENT, id)
        .map_err(|e| Error::Internal(format!("could not reach the main window: {e}")))
}

/// The conversation a hand-over opens, which must still exist.
pub fn check_hand_over(store: &Store, id: &str) -> Result<chats::Conversation, Error> {
    store.get_conversation(id).map_err(|e| match e {
        chats::Error::NotFound { .. } => Error::Invalid(
            "This chat was deleted in the main window; ask again to start a new one.".into(),
        ),
        other => other.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortcuts_are_read_as_people_write_them() {
        assert!(parse("Alt+Space").is_ok());
        assert!(parse(" Ctrl+Shift+K ").is_ok());
        assert!(parse("CmdOrCtrl+Shift+G").is_ok());
        assert_eq!(parse("Alt+Space"), parse("alt+space"));
    }

    #[test]
    fn a_shortcut_that_cannot_work_is_refused_in_words() {
        let empty = parse("  ").unwrap_err();
        assert!(empty.contains("Type a shortcut"), "{empty}");
        let alone = parse("Space").unwrap_err();
        assert!(alone.contains("needs a modifier and a key"), "{alone}");
        let dangling = parse("Alt+").unwrap_err();
        assert!(
            dangling.contains("needs a modifier and a key"),
            "{dangling}"
        );
        let unknown = parse("Alt+Banana").unwrap_err();
        assert!(
            unknown.starts_with("\"Alt+Banana\" is not a shortcut"),
            "{unknown}"
        );
    }
}
