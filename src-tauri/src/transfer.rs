//! Exporting conversations (Markdown, JSON) and importing JSON exports, through the OS save and
//! open dialogs. The formats themselves live in the chats crate.

use std::fs;
use std::path::{Path, PathBuf};

use chats::{ImportReport, Store};
use engine::tokenizer::{CHANNEL_CLOSE, CHANNEL_OPEN};
use serde::Serialize;
use tauri::{AppHandle, Manager, Runtime};
use tauri_plugin_dialog::{DialogExt, FileDialogBuilder};
use ts_rs::TS;

use crate::error::Error;

/// Largest export file an import reads (attachments are base64 inside it).
const MAX_IMPORT_BYTES: u64 = 2 << 30;

/// What an import did, or that the person cancelled the dialog.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    /// `None` when no file was chosen.
    pub report: Option<ImportReport>,
}

/// Asks where to save and writes the conversation as Markdown (images in a folder next to
/// it). Returns the file written, `None` when cancelled.
pub fn export_markdown(app: &AppHandle, store: &Store, id: &str) -> Result<Option<String>, Error> {
    let title = store.get_conversation(id)?.title;
    let Some(path) = save_path(app, "Export chat as Markdown", &title, "Markdown", "md") else {
        return Ok(None);
    };
    store.export_markdown(id, &path, readable_answer)?;
    Ok(Some(path.display().to_string()))
}

/// Asks where to save and writes the conversation `id` (every conversation for `None`) as a
/// JSON export. Returns the file written, `None` when cancelled.
pub fn export_json(
    app: &AppHandle,
    store: &Store,
    id: Option<&str>,
) -> Result<Option<String>, Error> {
    let name = match id {
        Some(id) => store.get_conversation(id)?.title,
        None => "Gemma Desk chats".to_owned(),
    };
    let Some(path) = save_path(app, "Export as JSON", &name, "JSON", "json") else {
        return Ok(None);
    };
    let ids = id.map(|id| vec![id.to_owned()]);
    write_json(store, ids.as_deref(), &path)?;
    Ok(Some(path.display().to_string()))
}

/// Writes a JSON export of `ids` (all for `None`) to `path`.
pub fn write_json(store: &Store, ids: Option<&[String]>, path: &Path) -> Result<(), Error> {
    let json = store.export_json(ids)?;
    fs::write(path, json)
        .map_err(|e| Error::Invalid(format!("could not write {}: {e}", path.display())))
}

/// Asks for a JSON export and imports it.
pub fn import_json(app: &AppHandle, store: &Store) -> Result<Imported, Error> {
    let picked = in_start_folder(app, app.dialog().file())
        .set_title("Import chats")
        .add_filter("Gemma Desk export", &["json"])
        .blocking_pick_file()
        .and_then(|p| p.into_path().ok());
    let Some(path) = picked else {
        return Ok(Imported { report: None });
    };
    Ok(Imported {
        report: Some(read_and_import(store, &path)?),
    })
}

/// Imports the JSON export at `path`; a file too large or unreadable is refused in words.
pub fn read_and_import(store: &Store, path: &Path) -> Result<ImportReport, Error> {
    let too_large = fs::metadata(path).is_ok_and(|meta| meta.len() > MAX_IMPORT_BYTES);
    if too_large {
        return Err(Error::Invalid(format!(
            "{} is larger than any export this app writes",
            path.display()
        )));
    }
    let bytes = fs::read(path)
        .map_err(|e| Error::Invalid(format!("could not read {}: {e}", path.display())))?;
    Ok(store.import_json(&bytes)?)
}

fn save_path(
    app: &AppHandle,
    title: &str,
    name: &str,
    filter: &str,
    extension: &str,
) -> Option<PathBuf> {
    let picked = in_start_folder(app, app.dialog().file())
        .set_title(title)
        .set_file_name(format!("{}.{extension}", file_stem(name)))
        .add_filter(filter, &[extension])
        .blocking_save_file();
    picked.and_then(|p| p.into_path().ok())
}

/// A file dialog that opens in the person's home folder. GTK's opens in the app's working
/// folder when given none (wherever the app was started from); macOS and Windows remember the
/// folder used last, so they are left to it.
pub fn in_start_folder<R: Runtime>(
    app: &AppHandle<R>,
    dialog: FileDialogBuilder<R>,
) -> FileDialogBuilder<R> {
    if !cfg!(target_os = "linux") {
        return dialog;
    }
    match start_folder(app.path().home_dir().ok()) {
        Some(home) => dialog.set_directory(home),
        None => dialog,
    }
}

/// Where file dialogs start: the home folder, when it is one.
fn start_folder(home: Option<PathBuf>) -> Option<PathBuf> {
    home.filter(|home| home.is_dir())
}

/// An answer as Markdown to read: its thought channel (`<|channel>thought…<channel|>`, shown
/// collapsed in the app) becomes a quote headed "Thought process", before the answer.
pub fn readable_answer(text: &str) -> String {
    let opening = format!("{CHANNEL_OPEN}thought");
    let Some(start) = text.find(&opening) else {
        return text.to_owned();
    };
    let after = &text[start + opening.len()..];
    let (thought, rest) = match after.find(CHANNEL_CLOSE) {
        Some(end) => (&after[..end], &after[end + CHANNEL_CLOSE.len()..]),
        None => (after, ""),
    };
    let quoted: Vec<String> = thought
        .trim()
        .lines()
        .map(|line| format!("> {line}").trim_end().to_owned())
        .collect();
    let before = text[..start].trim();
    let answer = format!("{before}{}", rest.trim_start());
    format!("> *Thought process*\n>\n{}\n\n{answer}", quoted.join("\n"))
}

/// A file name suggested from a title: letters, digits, spaces, `-` and `_` only (never a
/// separator or a dot that could make it a path), at most 60 characters.
pub fn file_stem(title: &str) -> String {
    let cleaned: String = title
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                ' '
            }
        })
        .collect();
    let stem: String = cleaned
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(60)
        .collect();
    if stem.is_empty() {
        "chat".to_owned()
    } else {
        stem
    }
}

#[cfg(test)]
mod tests {
    use super::{file_stem, readable_answer, start_folder};

    #[test]
    fn dialogs_start_in_the_home_folder_when_there_is_one() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(
            start_folder(Some(home.path().to_path_buf())).as_deref(),
            Some(home.path())
        );
        let gone = home.path().join("no-such-folder");
        assert_eq!(start_folder(Some(gone)), None);
        assert_eq!(start_folder(None), None);
    }

    #[test]
    fn a_thought_reads_as_a_quote_before_the_answer() {
        let text = "<|channel>thought\nThe user greets.\nBe brief.<channel|>Hello!";
        assert_eq!(
            readable_answer(text),
            "> *Thought process*\n>\n> The user greets.\n> Be brief.\n\nHello!"
        );
        assert_eq!(readable_answer("Just **this**."), "Just **this**.");
    }

    #[test]
    fn suggested_names_are_never_paths() {
        assert_eq!(file_stem("../../etc/passwd"), "etc passwd");
        assert_eq!(file_stem("Plan: week 1 / draft"), "Plan week 1 draft");
        assert_eq!(file_stem("..."), "chat");
        assert_eq!(file_stem(&"x".repeat(200)).len(), 60);
    }
}
