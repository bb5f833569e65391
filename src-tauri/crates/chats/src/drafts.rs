//! Unsent drafts: what was typed in each conversation's composer (and in the new chat's), saved
//! as it is typed so that a restart loses none, and the conversation open last.

use std::collections::BTreeMap;

use rusqlite::params;

use crate::error::{Error, Result};
use crate::store::{now_ms, Store};

/// Longest draft kept, in bytes; a longer one is refused in words and the one saved before stays.
pub const DRAFT_MAX_BYTES: usize = 4_000_000;
/// The settings key of the conversation open last (absent: the new chat).
const LAST_OPEN_KEY: &str = "last_open_conversation";

impl Store {
    /// Keeps `text` as the unsent draft of `conversation_id` (`None`: the new chat); an empty
    /// (or all-whitespace) text forgets it. A conversation that is not here is refused.
    pub fn save_draft(&self, conversation_id: Option<&str>, text: &str) -> Result<()> {
        if text.len() > DRAFT_MAX_BYTES {
            return Err(Error::InvalidInput(format!(
                "a draft can hold up to {} MB of text; this one was not saved",
                DRAFT_MAX_BYTES / 1_000_000
            )));
        }
        let key = conversation_id.unwrap_or("");
        self.with("saving a draft", |inner| {
            if let Some(id) = conversation_id {
                let exists: bool = inner.conn.query_row(
                    "SELECT EXISTS (SELECT 1 FROM conversations WHERE id = ?)",
                    [id],
                    |row| row.get(0),
                )?;
                if !exists {
                    return Err(Error::not_found("conversation", id));
                }
            }
            if text.trim().is_empty() {
                inner
                    .conn
                    .execute("DELETE FROM drafts WHERE conversation_id = ?", [key])?;
            } else {
                inner.conn.execute(
                    "INSERT INTO drafts (conversation_id, text, updated_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (conversation_id) DO UPDATE
                     SET text = excluded.text, updated_at = excluded.updated_at",
                    params![key, text, now_ms()],
                )?;
            }
            Ok(())
        })
    }

    /// Every unsent draft by conversation id; the new chat's under `""`.
    pub fn drafts(&self) -> Result<BTreeMap<String, String>> {
        self.with("reading drafts", |inner| {
            let mut stmt = inner
                .conn
                .prepare_cached("SELECT conversation_id, text FROM drafts")?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Remembers which conversation is open (`None`: the new chat), to open it again next time.
    pub fn set_last_open(&self, conversation_id: Option<&str>) -> Result<()> {
        match conversation_id {
            Some(id) => self.set_setting(LAST_OPEN_KEY, id),
            None => self.remove_setting(LAST_OPEN_KEY).map(|_| ()),
        }
    }

    /// The conversation open last, if it is still here; `None` for the new chat (or one since
    /// deleted).
    pub fn last_open(&self) -> Result<Option<String>> {
        let Some(id) = self.get_setting::<String>(LAST_OPEN_KEY).ok().flatten() else {
            return Ok(None);
        };
        self.with("reading the conversation open last", |inner| {
            let exists: bool = inner.conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM conversations WHERE id = ?)",
                [&id],
                |row| row.get(0),
            )?;
            Ok(exists.then_some(id))
        })
    }
}
