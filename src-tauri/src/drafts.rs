//! Unsent drafts and the chat open last, as the window reads them at start (kept by the chats
//! store: `Store::save_draft`, `Store::set_last_open`).

use std::collections::BTreeMap;

use serde::Serialize;
use ts_rs::TS;

/// What the window needs to come back as it was left.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct Drafts {
    /// Unsent text by conversation id; the new chat's under `""`.
    pub drafts: BTreeMap<String, String>,
    /// The conversation open last; `None` for the new chat (or one since deleted).
    pub last_open: Option<String>,
}
