//! Tauri commands: one line each (blocking work moved off the UI thread), delegating to modules.

use std::path::PathBuf;

use chats::{Conversation, ConversationSummary, SearchHit};
use tauri::ipc::{InvokeBody, Request, Response};
use tauri::{AppHandle, State};
use tauri_plugin_dialog::DialogExt;
use tauri_plugin_opener::OpenerExt;

use crate::attachments::{DropEvent, PendingAttachment};
use crate::chat::{SendRequest, Sent};
use crate::clipboard::TextClipboard;
use crate::drafts::Drafts;
use crate::error::Error;
use crate::events::Events;
use crate::faster::FasterAnswers;
use crate::local_api::{ApiLogEntry, LocalApiChange, LocalApiStatus};
use crate::mcp_servers::{McpImported, ServerView, ToolView};
use crate::memory::{self, MemoryUsage};
use crate::model_setup::{ModelState, RecentModel};
use crate::quick_ask::{self, QuickAskShortcut};
use crate::settings::Settings;
use crate::speech::Speaker;
use crate::state::AppState;
use crate::status::{self, AppStatus};
use crate::transfer::{self, Imported};

type Shared<'a> = State<'a, AppState>;

/// Runs blocking work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tauri::async_runtime::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("background task failed: {e}")))?
}

/// What the UI needs to pick its first screen.
#[tauri::command]
pub fn app_status(state: Shared<'_>) -> Result<AppStatus, Error> {
    status::read(&state.data_dir, state.models.state())
}

/// Asks for a model folder with the OS dialog, checks and loads it in place of the model in
/// use (an answer being written is stopped first and kept).
#[tauri::command]
pub async fn choose_model_folder(app: AppHandle, state: Shared<'_>) -> Result<ModelState, Error> {
    let models = state.models.clone();
    blocking(move || match pick_folder(&app) {
        Some(dir) => models.choose(&dir),
        None => Ok(models.state()),
    })
    .await
}

fn pick_folder(app: &AppHandle) -> Option<PathBuf> {
    let picked = app
        .dialog()
        .file()
        .set_title("Choose a Gemma 4 model folder")
        .blocking_pick_folder();
    picked.and_then(|p| p.into_path().ok())
}

/// Starts downloading `repo` (one the app offers; `None`: the default model); progress comes
/// as `model-state` events.
#[tauri::command]
pub fn download_model(state: Shared<'_>, repo: Option<String>) -> Result<(), Error> {
    state.models.start_download(repo.as_deref())
}

/// Unloads the model and forgets it: back to the model picker.
#[tauri::command]
pub async fn forget_model(state: Shared<'_>) -> Result<ModelState, Error> {
    let models = state.models.clone();
    blocking(move || models.forget()).await
}

/// The model folders loaded lately that are still here, newest first.
#[tauri::command]
pub fn recent_models(state: Shared<'_>) -> Vec<RecentModel> {
    state.models.recent()
}

/// Loads a folder of the recent list in place of the model in use.
#[tauri::command]
pub async fn open_recent_model(state: Shared<'_>, dir: String) -> Result<ModelState, Error> {
    let models = state.models.clone();
    blocking(move || models.open_recent(&dir)).await
}

#[tauri::command]
pub fn cancel_download(state: Shared<'_>) {
    state.models.cancel_download();
}

/// Where "Faster answers" (speculative decoding with the MTP drafter) stands.
#[tauri::command]
pub fn faster_answers(state: Shared<'_>) -> FasterAnswers {
    state.models.faster_answers()
}

/// Switches "Faster answers" on or off (kept for the next start); blocking while a drafter
/// loads.
#[tauri::command]
pub async fn set_faster_answers(state: Shared<'_>, on: bool) -> Result<FasterAnswers, Error> {
    let models = state.models.clone();
    blocking(move || models.set_faster_answers(on)).await
}

/// Sets how long the image and audio encoders stay after their last use (seconds; `None`: the
/// machine's), applied at once; the model's state says the period now.
#[tauri::command]
pub async fn set_tower_idle(state: Shared<'_>, secs: Option<u32>) -> Result<ModelState, Error> {
    let models = state.models.clone();
    blocking(move || models.set_tower_idle(secs)).await
}

/// Starts downloading the assistant drafter for faster answers; progress comes as
/// `faster-answers` events.
#[tauri::command]
pub fn download_drafter(state: Shared<'_>) -> Result<FasterAnswers, Error> {
    state.models.start_drafter_download()
}

#[tauri::command]
pub fn cancel_drafter_download(state: Shared<'_>) {
    state.models.cancel_drafter_download();
}

#[tauri::command]
pub fn memory_usage() -> MemoryUsage {
    memory::read()
}

#[tauri::command]
pub fn list_conversations(state: Shared<'_>) -> Result<Vec<ConversationSummary>, Error> {
    Ok(state.store.list_conversations()?)
}

#[tauri::command]
pub fn get_conversation(state: Shared<'_>, id: String) -> Result<Conversation, Error> {
    Ok(state.store.get_conversation(&id)?)
}

/// A conversation opened at a message (a search hit), showing the versions that hold it.
#[tauri::command]
pub fn open_message(
    state: Shared<'_>,
    conversation_id: String,
    message_id: String,
) -> Result<Conversation, Error> {
    state.chat.open_at(&conversation_id, &message_id)
}

#[tauri::command]
pub fn rename_conversation(state: Shared<'_>, id: String, title: String) -> Result<(), Error> {
    Ok(state.store.rename_conversation(&id, title.trim())?)
}

/// Pins or unpins a chat; pinned chats lead the list.
#[tauri::command]
pub fn set_pinned(state: Shared<'_>, conversation_id: String, pinned: bool) -> Result<(), Error> {
    Ok(state.store.set_pinned(&conversation_id, pinned)?)
}

/// Gives a chat its own system prompt from its next answer on (`null`: the default; `""`: none).
#[tauri::command]
pub fn set_system_prompt(
    state: Shared<'_>,
    conversation_id: String,
    prompt: Option<String>,
) -> Result<(), Error> {
    Ok(state
        .store
        .set_system_prompt(&conversation_id, prompt.as_deref())?)
}

/// Tokens a draft takes as a message: its text by the loaded model's tokenizer, and the pending
/// attachments `attachment_ids` (images, recordings) as the prompt holds them. Never queued
/// behind an answer.
#[tauri::command]
pub async fn count_tokens(
    state: Shared<'_>,
    text: String,
    attachment_ids: Option<Vec<String>>,
) -> Result<usize, Error> {
    let (chat, settings) = (state.chat.clone(), Settings::load(&state.store));
    let ids = attachment_ids.unwrap_or_default();
    blocking(move || chat.count_draft(&text, &ids, &settings)).await
}

/// Every unsent draft by conversation id (the new chat's under `""`), and the conversation open
/// last (`None`: the new chat, or one since deleted).
#[tauri::command]
pub fn drafts(state: Shared<'_>) -> Result<Drafts, Error> {
    Ok(Drafts {
        drafts: state.store.drafts()?,
        last_open: state.store.last_open()?,
    })
}

/// Keeps what is typed in a chat's composer (`conversation_id` `None`: the new chat); empty
/// text forgets it.
#[tauri::command]
pub fn save_draft(
    state: Shared<'_>,
    conversation_id: Option<String>,
    text: String,
) -> Result<(), Error> {
    Ok(state.store.save_draft(conversation_id.as_deref(), &text)?)
}

/// Remembers the conversation open now (`None`: the new chat), to open it again next launch.
#[tauri::command]
pub fn set_last_open(state: Shared<'_>, conversation_id: Option<String>) -> Result<(), Error> {
    Ok(state.store.set_last_open(conversation_id.as_deref())?)
}

/// Quits the app (Ctrl+Q on Linux and Windows; macOS has ⌘Q in its app menu). An answer being
/// written is stopped and saved first (`RunEvent::Exit`).
#[tauri::command]
pub fn quit(app: AppHandle) {
    app.exit(0);
}

#[tauri::command]
pub fn delete_conversation(state: Shared<'_>, id: String) -> Result<(), Error> {
    state.chat.delete_conversation(&id)
}

#[tauri::command]
pub fn search_conversations(state: Shared<'_>, query: String) -> Result<Vec<SearchHit>, Error> {
    Ok(state.store.search(&query)?)
}

#[tauri::command]
pub async fn send_message(state: Shared<'_>, request: SendRequest) -> Result<Sent, Error> {
    let (chat, settings) = (state.chat.clone(), Settings::load(&state.store));
    blocking(move || chat.send(request, &settings)).await
}

#[tauri::command]
pub async fn regenerate(state: Shared<'_>, conversation_id: String) -> Result<Sent, Error> {
    let (chat, settings) = (state.chat.clone(), Settings::load(&state.store));
    blocking(move || chat.regenerate(&conversation_id, &settings)).await
}

#[tauri::command]
pub async fn edit_message(
    state: Shared<'_>,
    conversation_id: String,
    message_id: String,
    text: String,
) -> Result<Sent, Error> {
    let (chat, settings) = (state.chat.clone(), Settings::load(&state.store));
    blocking(move || chat.edit(&conversation_id, &message_id, &text, &settings)).await
}

#[tauri::command]
pub fn stop_generation(state: Shared<'_>, generation_id: u64) -> bool {
    state.chat.stop(generation_id)
}

#[tauri::command]
pub fn get_settings(state: Shared<'_>) -> Settings {
    Settings::load(&state.store)
}

#[tauri::command]
pub fn save_settings(state: Shared<'_>, settings: Settings) -> Result<Settings, Error> {
    settings.save(&state.store)
}

/// Asks for images and audio with the OS dialog; files that are not usable are reported as a
/// drop event.
#[tauri::command]
pub async fn pick_files(
    app: AppHandle,
    state: Shared<'_>,
) -> Result<Vec<PendingAttachment>, Error> {
    let attachments = state.attachments.clone();
    blocking(move || {
        let picked = transfer::in_start_folder(&app, app.dialog().file())
            .set_title("Attach images or audio")
            .add_filter(
                "Images and audio",
                &[IMAGE_EXTENSIONS, AUDIO_EXTENSIONS].concat(),
            )
            .add_filter("Images", IMAGE_EXTENSIONS)
            .add_filter("Audio", AUDIO_EXTENSIONS)
            .blocking_pick_files()
            .unwrap_or_default();
        let paths: Vec<PathBuf> = picked
            .into_iter()
            .filter_map(|p| p.into_path().ok())
            .collect();
        let DropEvent::Added {
            attachments: added,
            errors,
        } = attachments.add_dropped(&paths)
        else {
            return Ok(Vec::new());
        };
        if !errors.is_empty() {
            app.dropped(&DropEvent::Added {
                attachments: Vec::new(),
                errors,
            });
        }
        Ok(added)
    })
    .await
}

/// What the file picker offers; a file is attached by what it holds, not by its extension.
const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "webp", "gif", "bmp", "tif", "tiff"];
const AUDIO_EXTENSIONS: &[&str] = &[
    "wav", "wave", "mp3", "flac", "ogg", "oga", "m4a", "aac", "aif", "aiff",
];

/// A pasted image or audio file, or a recording from the microphone: the raw bytes as the
/// request body, its name in `x-file-name`.
#[tauri::command]
pub async fn add_pasted_file(
    state: Shared<'_>,
    request: Request<'_>,
) -> Result<PendingAttachment, Error> {
    let InvokeBody::Raw(bytes) = request.body() else {
        return Err(Error::Invalid(
            "a pasted file must be sent as raw bytes".into(),
        ));
    };
    let name = request
        .headers()
        .get("x-file-name")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("pasted file")
        .to_owned();
    let (attachments, bytes) = (state.attachments.clone(), bytes.clone());
    blocking(move || attachments.add_bytes(&name, &bytes)).await
}

/// A document to attach whole (docs/DOCUMENTS.md): the raw bytes as the request body, its name
/// in `x-file-name`; read on the blocking pool, off the UI thread.
#[tauri::command]
pub async fn add_document(
    state: Shared<'_>,
    request: Request<'_>,
) -> Result<crate::attachments::PendingDocument, Error> {
    let InvokeBody::Raw(bytes) = request.body() else {
        return Err(Error::Invalid(
            "a document must be sent as raw bytes".into(),
        ));
    };
    let name = request
        .headers()
        .get("x-file-name")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("document")
        .to_owned();
    let (chat, bytes) = (state.chat.clone(), bytes.clone());
    let cancel = std::sync::atomic::AtomicBool::new(false);
    blocking(move || chat.add_document(&name, &bytes, &cancel)).await
}

/// The documents sent whole with a saved message, for its chips.
#[tauri::command]
pub async fn message_documents(
    state: Shared<'_>,
    message_id: String,
) -> Result<Vec<chats::MessageDocument>, Error> {
    let store = state.store.clone();
    blocking(move || Ok(store.message_documents(&message_id)?)).await
}

/// A pending recording's bytes, to play it in the composer.
#[tauri::command]
pub async fn pending_audio(state: Shared<'_>, id: String) -> Result<Response, Error> {
    let attachments = state.attachments.clone();
    blocking(move || attachments.pending_audio(&id).map(Response::new)).await
}

/// A saved message's recording, to play it.
#[tauri::command]
pub async fn attachment_audio(state: Shared<'_>, attachment_id: String) -> Result<Response, Error> {
    let attachments = state.attachments.clone();
    blocking(move || attachments.saved_audio(&attachment_id).map(Response::new)).await
}

/// The OS clipboard's image, for a paste the webview gave the page no file for (WebKitGTK);
/// `None` when the clipboard holds no image.
#[tauri::command]
pub async fn paste_clipboard_image(state: Shared<'_>) -> Result<Option<PendingAttachment>, Error> {
    let attachments = state.attachments.clone();
    blocking(move || match crate::clipboard::read_image()? {
        Some(image) => crate::clipboard::attach(&attachments, image).map(Some),
        None => Ok(None),
    })
    .await
}

#[tauri::command]
pub fn remove_pending_attachment(state: Shared<'_>, id: String) {
    state.attachments.remove(&id);
}

#[tauri::command]
pub async fn attachment_thumbnail(
    state: Shared<'_>,
    attachment_id: String,
) -> Result<String, Error> {
    let attachments = state.attachments.clone();
    blocking(move || attachments.preview(&attachment_id)).await
}

/// An attachment of a saved message, full size, as a data URL.
#[tauri::command]
pub async fn attachment_view(state: Shared<'_>, attachment_id: String) -> Result<String, Error> {
    let attachments = state.attachments.clone();
    blocking(move || attachments.full_view(&attachment_id)).await
}

/// Opens an http(s) link in the system browser; the UI asks the user first.
#[tauri::command]
pub fn open_link(app: AppHandle, url: String) -> Result<(), Error> {
    let url = crate::links::checked(&url)?;
    app.opener()
        .open_url(url, None::<&str>)
        .map_err(|e| Error::Internal(format!("could not open the link: {e}")))
}

/// Shows version `version` (from 1) of a message's turn; returns the conversation as shown.
#[tauri::command]
pub fn select_version(
    state: Shared<'_>,
    conversation_id: String,
    message_id: String,
    version: u32,
) -> Result<Conversation, Error> {
    state
        .chat
        .select_version(&conversation_id, &message_id, version)
}

/// The conversation shown, as Markdown (for the clipboard); images and audio are described,
/// not linked.
#[tauri::command]
pub fn conversation_markdown(state: Shared<'_>, id: String) -> Result<String, Error> {
    let conversation = state.store.get_conversation(&id)?;
    Ok(chats::markdown(
        &conversation,
        |n, file| format!("[{}: {}]", chats::describe(n, file), file.mime),
        transfer::readable_answer,
    ))
}

/// Saves a chat as Markdown where the person picks; `None` when the dialog was cancelled.
#[tauri::command]
pub async fn export_markdown(
    app: AppHandle,
    state: Shared<'_>,
    id: String,
) -> Result<Option<String>, Error> {
    let store = state.store.clone();
    blocking(move || transfer::export_markdown(&app, &store, &id)).await
}

/// Saves one chat (`id`) or all of them (`null`) as JSON; `None` when cancelled.
#[tauri::command]
pub async fn export_json(
    app: AppHandle,
    state: Shared<'_>,
    id: Option<String>,
) -> Result<Option<String>, Error> {
    let store = state.store.clone();
    blocking(move || transfer::export_json(&app, &store, id.as_deref())).await
}

/// Imports a JSON export the person picks.
#[tauri::command]
pub async fn import_json(app: AppHandle, state: Shared<'_>) -> Result<Imported, Error> {
    let store = state.store.clone();
    blocking(move || transfer::import_json(&app, &store)).await
}

/// Where Settings → Local API stands.
#[tauri::command]
pub fn local_api(state: Shared<'_>) -> LocalApiStatus {
    state.local_api.status()
}

/// Switches the local API, or changes its port, origins or verbosity (restarting it as needed).
#[tauri::command]
pub async fn set_local_api(
    state: Shared<'_>,
    change: LocalApiChange,
) -> Result<LocalApiStatus, Error> {
    let api = state.local_api.clone();
    blocking(move || api.change(change)).await
}

/// A new API key; the old one stops working at once.
#[tauri::command]
pub async fn regenerate_api_key(state: Shared<'_>) -> Result<LocalApiStatus, Error> {
    let api = state.local_api.clone();
    blocking(move || api.regenerate_key()).await
}

/// Puts text on the OS clipboard: every copy in the window (see `clipboard`).
#[tauri::command]
pub async fn copy_text(clipboard: State<'_, TextClipboard>, text: String) -> Result<(), Error> {
    let clipboard = clipboard.inner().clone();
    blocking(move || clipboard.write(text)).await
}

/// The local API's request log, oldest first.
#[tauri::command]
pub fn api_log(state: Shared<'_>) -> Vec<ApiLogEntry> {
    state.local_api.log()
}

/// Reads `text` (an answer, as a person reads it) aloud as answer `id`, stopping any other.
#[tauri::command]
pub fn speak(speaker: State<'_, Speaker>, id: String, text: String) -> Result<(), Error> {
    speaker.speak(id, &text)
}

/// Stops reading aloud; the answer that was being read, if any.
#[tauri::command]
pub fn stop_speaking(speaker: State<'_, Speaker>) -> Option<String> {
    speaker.stop()
}

/// The quick-ask shortcut and whether the system gave it to the app.
#[tauri::command]
pub fn quick_ask_shortcut(app: AppHandle, state: Shared<'_>) -> QuickAskShortcut {
    quick_ask::status(&app, &state.store)
}

/// Uses `shortcut` for quick ask from now on, when the system accepts it (said in the answer).
#[tauri::command]
pub async fn set_quick_ask_shortcut(
    app: AppHandle,
    state: Shared<'_>,
    shortcut: String,
) -> Result<QuickAskShortcut, Error> {
    let store = state.store.clone();
    blocking(move || Ok(quick_ask::apply(&app, &store, &shortcut))).await
}

/// Opens the quick-ask window, as the shortcut does.
#[tauri::command]
pub async fn show_quick_ask(app: AppHandle) -> Result<(), Error> {
    quick_ask::show(&app)
}

/// Hides the quick-ask window (Esc there).
#[tauri::command]
pub fn hide_quick_ask(app: AppHandle) {
    quick_ask::hide(&app);
}

/// Continues a quick-ask conversation in the main window.
#[tauri::command]
pub fn quick_ask_hand_over(
    app: AppHandle,
    state: Shared<'_>,
    conversation_id: String,
) -> Result<(), Error> {
    quick_ask::hand_over(&app, &state.store, &conversation_id)
}

/// Settings → Tools: every MCP server with its state.
#[tauri::command]
pub fn mcp_servers(state: Shared<'_>) -> Vec<ServerView> {
    state.mcp.list()
}

/// Adds a server, or edits the one named `previous`.
#[tauri::command]
pub async fn mcp_save_server(
    state: Shared<'_>,
    config: mcp::ServerConfig,
    previous: Option<String>,
) -> Result<ServerView, Error> {
    let mcp = state.mcp.clone();
    blocking(move || mcp.save_server(config, previous.as_deref())).await
}

#[tauri::command]
pub async fn mcp_remove_server(state: Shared<'_>, name: String) -> Result<(), Error> {
    let mcp = state.mcp.clone();
    blocking(move || mcp.remove(&name)).await
}

/// Switches a server on or off; the first start needs the command line the user confirmed.
#[tauri::command]
pub async fn mcp_set_enabled(
    state: Shared<'_>,
    name: String,
    enabled: bool,
    confirmed_command_line: Option<String>,
) -> Result<ServerView, Error> {
    let mcp = state.mcp.clone();
    blocking(move || mcp.set_enabled(&name, enabled, confirmed_command_line.as_deref())).await
}

#[tauri::command]
pub fn mcp_tools(state: Shared<'_>, name: String) -> Vec<ToolView> {
    state.mcp.tools(&name)
}

#[tauri::command]
pub fn mcp_set_tool_enabled(
    state: Shared<'_>,
    server: String,
    tool: String,
    enabled: bool,
) -> Result<(), Error> {
    state.mcp.set_tool_enabled(&server, &tool, enabled)
}

/// Imports the `mcpServers` of a file the user picks (Claude Desktop's
/// `claude_desktop_config.json`, LM Studio's `mcp.json`, Cursor's); `None` when cancelled.
#[tauri::command]
pub async fn mcp_import_file(
    app: AppHandle,
    state: Shared<'_>,
) -> Result<Option<McpImported>, Error> {
    let mcp = state.mcp.clone();
    blocking(move || {
        let Some(picked) = transfer::in_start_folder(&app, app.dialog().file())
            .set_title("Import MCP servers")
            .add_filter("MCP configuration", &["json"])
            .blocking_pick_file()
        else {
            return Ok(None);
        };
        let path = picked
            .into_path()
            .map_err(|e| Error::Invalid(format!("not a file on this computer: {e}")))?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Invalid(format!("could not read {}: {e}", path.display())))?;
        mcp.import(&text).map(Some)
    })
    .await
}
