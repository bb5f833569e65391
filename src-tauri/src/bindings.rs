//! TypeScript types for everything the UI receives, generated from the Rust types by ts-rs.
//! This test fails while `ui/src/bindings` is stale and rewrites it, so the fix is to commit it.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use ts_rs::{Config, TS};

use crate::attachments::{DropEvent, PendingAttachment};
use crate::chat::{GenerationEvent, SendRequest, Sent};
use crate::error::CommandError;
use crate::memory::MemoryUsage;
use crate::model_setup::ModelState;
use crate::settings::Settings;
use crate::status::AppStatus;
use crate::transfer::Imported;

/// Reads every `.ts` file in `dir` by name; a missing folder reads as empty.
fn read_ts_files(dir: &Path) -> BTreeMap<String, String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "ts"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read_to_string(&path).unwrap())
        })
        .collect()
}

#[test]
fn ui_bindings_are_current() {
    let committed_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src/bindings");
    let fresh_dir = tempfile::tempdir().unwrap();
    let config = Config::new().with_out_dir(fresh_dir.path());
    // `export_all` writes each type and every type it refers to (chats and engine types too).
    AppStatus::export_all(&config).unwrap();
    CommandError::export_all(&config).unwrap();
    ModelState::export_all(&config).unwrap();
    crate::model_setup::RecentModel::export_all(&config).unwrap();
    MemoryUsage::export_all(&config).unwrap();
    Settings::export_all(&config).unwrap();
    PendingAttachment::export_all(&config).unwrap();
    DropEvent::export_all(&config).unwrap();
    SendRequest::export_all(&config).unwrap();
    Sent::export_all(&config).unwrap();
    GenerationEvent::export_all(&config).unwrap();
    chats::Conversation::export_all(&config).unwrap();
    chats::ConversationSummary::export_all(&config).unwrap();
    chats::SearchHit::export_all(&config).unwrap();
    Imported::export_all(&config).unwrap();
    crate::drafts::Drafts::export_all(&config).unwrap();
    crate::faster::FasterAnswers::export_all(&config).unwrap();
    model_store::ModelCandidate::export_all(&config).unwrap();
    crate::local_api::LocalApiStatus::export_all(&config).unwrap();
    crate::local_api::LocalApiChange::export_all(&config).unwrap();
    crate::local_api::ApiLogEntry::export_all(&config).unwrap();
    crate::local_api::ApiActivity::export_all(&config).unwrap();
    crate::speech::SpeechEvent::export_all(&config).unwrap();
    crate::quick_ask::QuickAskShortcut::export_all(&config).unwrap();
    crate::mcp_servers::ServerView::export_all(&config).unwrap();
    crate::mcp_servers::ToolView::export_all(&config).unwrap();
    crate::mcp_servers::McpImported::export_all(&config).unwrap();

    let fresh = read_ts_files(fresh_dir.path());
    let committed = read_ts_files(&committed_dir);
    if fresh == committed {
        return;
    }

    fs::create_dir_all(&committed_dir).unwrap();
    for name in committed.keys().filter(|name| !fresh.contains_key(*name)) {
        fs::remove_file(committed_dir.join(name)).unwrap();
    }
    for (name, text) in &fresh {
        fs::write(committed_dir.join(name), text).unwrap();
    }
    panic!("ui/src/bindings was stale and has been regenerated; review and commit it");
}
