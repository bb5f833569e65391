//! Everything the commands reach, built once at start.

use std::sync::Arc;

use chats::Store;
use engine::worker::Engine;
use model_store::HfCache;

use crate::attachments::Attachments;
use crate::chat::Chat;
use crate::data_dir::DataDir;
use crate::events::{Events, FollowModel};
use crate::local_api::LocalApi;
use crate::mcp_servers::McpServers;
use crate::model_setup::Models;

/// The hub the default model is downloaded from.
pub const HUB_URL: &str = "https://huggingface.co";

/// The app's state, shared by every command.
pub struct AppState {
    pub data_dir: DataDir,
    pub store: Arc<Store>,
    pub models: Arc<Models>,
    pub chat: Arc<Chat>,
    pub attachments: Arc<Attachments>,
    pub local_api: Arc<LocalApi>,
    /// Settings → Tools: the MCP servers the user added.
    pub mcp: Arc<McpServers>,
}

impl AppState {
    /// Opens the chats database and starts the engine thread (no model loaded yet).
    pub fn open(
        data_dir: DataDir,
        hf_cache: HfCache,
        hub_url: String,
        events: Arc<dyn Events>,
    ) -> anyhow::Result<Self> {
        crate::status::ensure_models_dir(&data_dir)?;
        let store = Arc::new(Store::open(&data_dir.chats())?);
        // Files left by attachments that were never sent, or by a crash mid-delete.
        let _ = store.prune_orphan_files();
        let engine = Arc::new(Engine::spawn());
        // Started now when it was on; it serves the model the window loads, once loaded.
        let local_api = Arc::new(LocalApi::open(
            engine.clone(),
            store.clone(),
            events.clone(),
        )?);
        let events: Arc<dyn Events> = Arc::new(FollowModel {
            inner: events,
            api: local_api.clone(),
        });
        let mcp = McpServers::open(store.clone(), events.clone())?;
        let models = Arc::new(Models::new(
            engine.clone(),
            store.clone(),
            data_dir.models(),
            hf_cache,
            hub_url,
            events.clone(),
        ));
        let attachments = Arc::new(Attachments::new(store.clone()));
        let chat = Arc::new(Chat::new(
            store.clone(),
            engine,
            models.clone(),
            attachments.clone(),
            events,
        ));
        Ok(Self {
            data_dir,
            store,
            models,
            chat,
            attachments,
            local_api,
            mcp,
        })
    }
}
