//! The store: one SQLite connection behind a mutex, and the conversation and message operations.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::attachments::{self, ATTACHMENTS_DIR};
use crate::error::{Error, Result};
use crate::schema;
use crate::tree::{ids_to_bytes, insert_message, node_of, shown_path, Place, NEXT_CHOICE};
use crate::types::{
    AttachmentInput, Conversation, ConversationSummary, Message, MessageStatus, Role, Usage,
};

/// Name of the database file inside the data folder.
pub const DATABASE_FILE: &str = "chats.sqlite3";

/// The longest system prompt a conversation may have, in characters: room for detailed
/// instructions, while a prompt of its own never crowds a small context window out.
pub const SYSTEM_PROMPT_MAX_CHARS: usize = 8_000;

/// Characters of the last message shown under a conversation's title.
const PREVIEW_CHARS: usize = 120;

/// Conversations, messages, attachments and settings of one data folder.
///
/// Every method takes `&self` and holds an internal lock only for its own statements, so a
/// `Store` can be shared across threads (for example in an `Arc`) and a streaming answer does
/// not block the rest of the app.
pub struct Store {
    pub(crate) inner: Mutex<Inner>,
    pub(crate) attachments_dir: PathBuf,
}

pub(crate) struct Inner {
    pub(crate) conn: Connection,
    /// Files stored by `store_attachment` in this session and not yet attached to a message:
    /// deleting a conversation or pruning must not take them from under a draft.
    pub(crate) unsent_files: HashSet<String>,
}

/// Current time in unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A new time-ordered id.
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// `updated_at` for new activity: now, but always past every other conversation's, so the list
/// order follows activity even within one millisecond or after the clock moves back.
pub(crate) const NEXT_ACTIVITY: &str =
    "MAX(?, (SELECT COALESCE(MAX(updated_at), 0) + 1 FROM conversations))";

impl Store {
    /// Opens the store in `data_dir`, creating `chats.sqlite3` and the attachments folder.
    ///
    /// Answers left `streaming` by a crash or a kill are marked `stopped`, their text kept.
    pub fn open(data_dir: &Path) -> Result<Self> {
        let attachments_dir = data_dir.join(ATTACHMENTS_DIR);
        fs::create_dir_all(&attachments_dir)
            .map_err(|e| Error::io("create folder", &attachments_dir, e))?;
        let db_path = data_dir.join(DATABASE_FILE);
        let conn = schema::open(&db_path).map_err(|e| e.during("opening"))?;
        conn.execute(
            "UPDATE messages SET status = 'stopped' WHERE status = 'streaming'",
            [],
        )
        .map_err(|e| Error::from(e).during("recovering interrupted answers"))?;
        Ok(Self {
            inner: Mutex::new(Inner {
                conn,
                unsent_files: HashSet::new(),
            }),
            attachments_dir,
        })
    }

    /// Moves a database that cannot be opened (and its attachments) out of the way, into a new
    /// folder `damaged-<unix seconds>` of `data_dir`, so that the next [`Store::open`] starts an
    /// empty history while nothing of the old one is deleted. Returns that folder.
    pub fn set_aside(data_dir: &Path) -> Result<PathBuf> {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut folder = data_dir.join(format!("damaged-{stamp}"));
        let mut n = 1;
        while folder.exists() {
            n += 1;
            folder = data_dir.join(format!("damaged-{stamp}-{n}"));
        }
        fs::create_dir_all(&folder).map_err(|e| Error::io("create folder", &folder, e))?;
        let names = [
            DATABASE_FILE.to_owned(),
            format!("{DATABASE_FILE}-wal"),
            format!("{DATABASE_FILE}-shm"),
            ATTACHMENTS_DIR.to_owned(),
        ];
        for name in names {
            let from = data_dir.join(&name);
            if from.exists() {
                fs::rename(&from, folder.join(&name))
                    .map_err(|e| Error::io("move aside", &from, e))?;
            }
        }
        Ok(folder)
    }

    /// Folder holding attachment files.
    pub fn attachments_dir(&self) -> &Path {
        &self.attachments_dir
    }

    /// Runs `f` with the connection locked; SQLite errors are labelled with `op`.
    pub(crate) fn with<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Inner) -> Result<T>,
    ) -> Result<T> {
        // A panic elsewhere cannot leave the connection half-written: open transactions roll back
        // when dropped. So a poisoned lock is still safe to use.
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut inner).map_err(|e| e.during(op))
    }

    /// Starts an empty conversation and returns it.
    pub fn create_conversation(&self, title: &str) -> Result<ConversationSummary> {
        self.with("creating a conversation", |inner| {
            let id = new_id();
            let now = now_ms();
            inner.conn.execute(
                &format!(
                    "INSERT INTO conversations (id, title, created_at, updated_at)
                     VALUES (?, ?, ?, {NEXT_ACTIVITY})"
                ),
                params![id, title, now, now],
            )?;
            summary(&inner.conn, &id)
        })
    }

    /// All conversations: pinned first, then most recent activity first.
    pub fn list_conversations(&self) -> Result<Vec<ConversationSummary>> {
        self.with("listing conversations", |inner| {
            let mut stmt = inner.conn.prepare_cached(&format!(
                "{SUMMARY_SELECT} ORDER BY c.pinned DESC, c.updated_at DESC"
            ))?;
            let rows = stmt.query_map([], summary_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// A conversation with its messages (oldest first) and their attachments.
    pub fn get_conversation(&self, id: &str) -> Result<Conversation> {
        self.with("reading a conversation", |inner| {
            let tx = inner.conn.transaction()?;
            let mut conversation = tx
                .query_row(
                    "SELECT id, title, model, pinned, created_at, updated_at, system_prompt
                     FROM conversations WHERE id = ?",
                    [id],
                    |row| {
                        Ok(Conversation {
                            id: row.get(0)?,
                            title: row.get(1)?,
                            model: row.get(2)?,
                            pinned: row.get(3)?,
                            created_at: row.get(4)?,
                            updated_at: row.get(5)?,
                            system_prompt: row.get(6)?,
                            messages: Vec::new(),
                        })
                    },
                )
                .optional()?
                .ok_or_else(|| Error::not_found("conversation", id))?;

            let mut by_message = attachments::by_message(&tx, id)?;
            for mut message in shown_path(&tx, id)? {
                message.attachments = by_message.remove(&message.id).unwrap_or_default();
                conversation.messages.push(message);
            }
            Ok(conversation)
        })
    }

    /// Changes a conversation's title. Does not count as activity: the list order stays.
    pub fn rename_conversation(&self, id: &str, title: &str) -> Result<()> {
        self.update_conversation("renaming a conversation", id, "title = ?2", &title)
    }

    /// Pins or unpins a conversation; pinned ones lead the list.
    pub fn set_pinned(&self, id: &str, pinned: bool) -> Result<()> {
        self.update_conversation("pinning a conversation", id, "pinned = ?2", &pinned)
    }

    /// Records which model the conversation is held with.
    pub fn set_conversation_model(&self, id: &str, model: Option<&str>) -> Result<()> {
        self.update_conversation("setting a conversation's model", id, "model = ?2", &model)
    }

    /// Records that `model` writes the answer `message_id`, and that the conversation is held
    /// with it from now on (what an export says under "model"). Not activity: the list order
    /// stays.
    pub fn set_answer_model(&self, message_id: &str, model: &str) -> Result<()> {
        self.with("recording an answer's model", |inner| {
            let tx = inner.conn.transaction()?;
            let conversation: Option<String> = tx
                .query_row(
                    "SELECT conversation_id FROM messages WHERE id = ?1 AND role = 'assistant'",
                    [message_id],
                    |row| row.get(0),
                )
                .optional()?;
            let conversation =
                conversation.ok_or_else(|| Error::not_found("answer", message_id))?;
            tx.execute(
                "UPDATE messages SET model = ?2 WHERE id = ?1",
                params![message_id, model],
            )?;
            tx.execute(
                "UPDATE conversations SET model = ?2 WHERE id = ?1",
                params![conversation, model],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Gives a conversation its own system prompt, used from its next answer on: `None`
    /// follows the app's default, `Some("")` sends none. Does not count as activity.
    /// Longer than [`SYSTEM_PROMPT_MAX_CHARS`] is refused.
    pub fn set_system_prompt(&self, id: &str, prompt: Option<&str>) -> Result<()> {
        if let Some(prompt) = prompt {
            check_system_prompt(prompt)?;
        }
        self.update_conversation(
            "setting a conversation's system prompt",
            id,
            "system_prompt = ?2",
            &prompt,
        )
    }

    fn update_conversation(
        &self,
        op: &'static str,
        id: &str,
        set: &str,
        value: &dyn rusqlite::ToSql,
    ) -> Result<()> {
        self.with(op, |inner| {
            let sql = format!("UPDATE conversations SET {set} WHERE id = ?1");
            match inner.conn.execute(&sql, params![id, value])? {
                0 => Err(Error::not_found("conversation", id)),
                _ => Ok(()),
            }
        })
    }

    /// Deletes a conversation, its messages and attachment rows, and every attachment file no
    /// other message still uses.
    pub fn delete_conversation(&self, id: &str) -> Result<()> {
        self.with("deleting a conversation", |inner| {
            let tx = inner.conn.transaction()?;
            let files: Vec<String> = {
                let mut stmt = tx.prepare_cached(
                    "SELECT DISTINCT a.file_name FROM attachments a
                     JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = ?",
                )?;
                let rows = stmt.query_map([id], |row| row.get(0))?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            if tx.execute("DELETE FROM conversations WHERE id = ?", [id])? == 0 {
                return Err(Error::not_found("conversation", id));
            }
            let mut unused = Vec::new();
            for file in files {
                if !attachments::is_referenced(&tx, &file)? && !inner.unsent_files.contains(&file) {
                    unused.push(file);
                }
            }
            tx.commit()?;
            // After the commit, best effort: a crash or a failure here leaves orphan files for
            // `prune_orphan_files`, never rows pointing at missing files.
            for file in unused {
                let _ = attachments::remove_file(&self.attachments_dir, &file);
            }
            Ok(())
        })
    }

    /// Saves a finished message (typically the user's) with its attachments, committed before
    /// this returns. Each attachment must have been stored with `store_attachment`.
    pub fn add_message(
        &self,
        conversation_id: &str,
        role: Role,
        text: &str,
        attachments: &[AttachmentInput],
    ) -> Result<Message> {
        self.insert_complete(conversation_id, Place::End, role, text, attachments)
    }

    /// Saves `text` (with `attachments`) as a new version of `message_id`'s turn, for an edited
    /// question: it follows the same message as the original and is shown from now on, while
    /// the original and every message after it stay, one version back.
    pub fn add_message_version(
        &self,
        conversation_id: &str,
        message_id: &str,
        text: &str,
        attachments: &[AttachmentInput],
    ) -> Result<Message> {
        let role = self.with("adding a version of a message", |inner| {
            Ok(node_of(&inner.conn, conversation_id, message_id)?.role)
        })?;
        let place = Place::VersionOf(message_id.to_owned());
        self.insert_complete(conversation_id, place, role, text, attachments)
    }

    fn insert_complete(
        &self,
        conversation_id: &str,
        place: Place,
        role: Role,
        text: &str,
        attachments: &[AttachmentInput],
    ) -> Result<Message> {
        self.with("adding a message", |inner| {
            let tx = inner.conn.transaction()?;
            let mut message = insert_message(
                &tx,
                conversation_id,
                place,
                role,
                text,
                MessageStatus::Complete,
            )?;
            let mut attached_files = Vec::with_capacity(attachments.len());
            for (position, input) in attachments.iter().enumerate() {
                let attachment =
                    attachments::attach(&tx, &self.attachments_dir, &message.id, position, input)?;
                attached_files.push(attachment.file_name.clone());
                message.attachments.push(attachment);
            }
            tx.commit()?;
            for file in attached_files {
                inner.unsent_files.remove(&file);
            }
            Ok(message)
        })
    }

    /// Starts an empty assistant answer with status `streaming` at the end of the conversation
    /// shown; returns its id.
    pub fn begin_assistant_message(&self, conversation_id: &str) -> Result<String> {
        self.begin_answer(conversation_id, Place::End)
    }

    /// Starts an empty assistant answer (status `streaming`) to `message_id`: if that message
    /// already has answers, the new one is their next version and the others are kept.
    pub fn begin_answer_to(&self, conversation_id: &str, message_id: &str) -> Result<String> {
        self.begin_answer(conversation_id, Place::After(message_id.to_owned()))
    }

    fn begin_answer(&self, conversation_id: &str, place: Place) -> Result<String> {
        self.with("starting an answer", |inner| {
            let tx = inner.conn.transaction()?;
            let message = insert_message(
                &tx,
                conversation_id,
                place,
                Role::Assistant,
                "",
                MessageStatus::Streaming,
            )?;
            tx.commit()?;
            Ok(message.id)
        })
    }

    /// Shows the branch that holds `message_id` (a search hit in a version not shown): it and
    /// each message before it become the versions shown. Nothing changes when it is shown.
    pub fn show_message(&self, conversation_id: &str, message_id: &str) -> Result<()> {
        self.with("showing a message", |inner| {
            let tx = inner.conn.transaction()?;
            let mut chain = vec![node_of(&tx, conversation_id, message_id)?];
            while let Some(parent) = chain.last().and_then(|node| node.parent_id.clone()) {
                if chain.len() > 1_000_000 {
                    return Err(Error::InvalidInput(format!(
                        "message {message_id} has no first message"
                    )));
                }
                chain.push(node_of(&tx, conversation_id, &parent)?);
            }
            if shown_path(&tx, conversation_id)?
                .iter()
                .any(|m| m.id == message_id)
            {
                return Ok(());
            }
            for node in chain.iter().rev() {
                tx.execute(
                    &format!("UPDATE messages SET chosen_at = {NEXT_CHOICE} WHERE id = ?2"),
                    params![conversation_id, node.id],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// Shows version `version` (from 1) of `message_id`'s turn, with the messages that followed
    /// it when it was last shown.
    pub fn select_version(
        &self,
        conversation_id: &str,
        message_id: &str,
        version: u32,
    ) -> Result<()> {
        self.with("showing another version", |inner| {
            let tx = inner.conn.transaction()?;
            let node = node_of(&tx, conversation_id, message_id)?;
            let siblings: Vec<String> = {
                let mut stmt = tx.prepare_cached(
                    "SELECT id FROM messages WHERE conversation_id = ?1 AND parent_id IS ?2
                     ORDER BY position",
                )?;
                let rows =
                    stmt.query_map(params![conversation_id, node.parent_id], |r| r.get(0))?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            let chosen = usize::try_from(version)
                .ok()
                .and_then(|v| v.checked_sub(1))
                .and_then(|i| siblings.get(i))
                .ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "this message has {} versions, not a version {version}",
                        siblings.len()
                    ))
                })?;
            tx.execute(
                &format!("UPDATE messages SET chosen_at = {NEXT_CHOICE} WHERE id = ?2"),
                params![conversation_id, chosen],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Appends streamed text to an answer; one `UPDATE`, committed on return.
    pub fn append_assistant_text(&self, message_id: &str, delta: &str) -> Result<()> {
        if delta.is_empty() {
            return Ok(());
        }
        self.update_streaming(
            "saving streamed text",
            "text = text || ?2",
            message_id,
            delta,
        )
    }

    /// Keeps the token ids the model generated for a streaming answer (before it is
    /// finished), so that the next turn can give the model exactly those ids again.
    pub fn set_generated_ids(&self, message_id: &str, ids: &[u32]) -> Result<()> {
        let bytes = ids_to_bytes(ids);
        self.update_streaming(
            "saving an answer's token ids",
            "generated = ?2",
            message_id,
            bytes,
        )
    }

    /// One `UPDATE messages SET {set}` of a streaming answer (`?2` is `value`); an answer that
    /// is not streaming (finished, deleted) is an error saying which.
    fn update_streaming(
        &self,
        what: &'static str,
        set: &str,
        message_id: &str,
        value: impl rusqlite::ToSql,
    ) -> Result<()> {
        self.with(what, |inner| {
            let updated = inner
                .conn
                .prepare_cached(&format!(
                    "UPDATE messages SET {set} WHERE id = ?1 AND status = 'streaming'"
                ))?
                .execute(params![message_id, value])?;
            match updated {
                0 => Err(not_streaming(&inner.conn, message_id)?),
                _ => Ok(()),
            }
        })
    }

    /// Ends a streaming answer with `status` (anything but `Streaming`), its usage and, for
    /// `Error`, what went wrong. Counts as activity in the conversation.
    pub fn finish_assistant_message(
        &self,
        message_id: &str,
        status: MessageStatus,
        usage: Option<&Usage>,
        error: Option<&str>,
    ) -> Result<()> {
        if status == MessageStatus::Streaming {
            return Err(Error::InvalidInput(
                "an answer cannot finish as 'streaming'".into(),
            ));
        }
        let usage = usage.map(usage_json).transpose()?;
        self.with("finishing an answer", |inner| {
            let tx = inner.conn.transaction()?;
            let conversation_id: Option<String> = tx
                .query_row(
                    "UPDATE messages SET status = ?2, usage = ?3, error = ?4
                     WHERE id = ?1 AND status = 'streaming' RETURNING conversation_id",
                    params![message_id, status, usage, error],
                    |row| row.get(0),
                )
                .optional()?;
            let Some(conversation_id) = conversation_id else {
                return Err(not_streaming(&tx, message_id)?);
            };
            touch(&tx, &conversation_id)?;
            tx.commit()?;
            Ok(())
        })
    }
}

/// Refuses a system prompt longer than [`SYSTEM_PROMPT_MAX_CHARS`], saying by how much.
pub fn check_system_prompt(prompt: &str) -> Result<()> {
    let chars = prompt.chars().count();
    if chars > SYSTEM_PROMPT_MAX_CHARS {
        return Err(Error::InvalidInput(format!(
            "the system prompt is {chars} characters long; it can be at most \
             {SYSTEM_PROMPT_MAX_CHARS}"
        )));
    }
    Ok(())
}

/// Why an update of a streaming answer matched nothing.
fn not_streaming(conn: &Connection, message_id: &str) -> Result<Error> {
    let status: Option<MessageStatus> = conn
        .query_row(
            "SELECT status FROM messages WHERE id = ?",
            [message_id],
            |row| row.get(0),
        )
        .optional()?;
    Ok(match status {
        None => Error::not_found("message", message_id),
        Some(status) => Error::InvalidInput(format!(
            "message {message_id} is {}, not streaming",
            status.as_str()
        )),
    })
}

/// Serializes usage; non-finite rates (nothing was timed) are stored as 0 so they read back.
pub(crate) fn usage_json(usage: &Usage) -> Result<String> {
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    let usage = Usage {
        time_to_first_token_ms: finite(usage.time_to_first_token_ms),
        prefill_tokens_per_second: finite(usage.prefill_tokens_per_second),
        decode_tokens_per_second: finite(usage.decode_tokens_per_second),
        tokens_per_round: usage.tokens_per_round.map(finite),
        ..usage.clone()
    };
    serde_json::to_string(&usage).map_err(|e| Error::InvalidInput(format!("usage: {e}")))
}

/// Marks new activity in a conversation.
pub(crate) fn touch(conn: &Connection, conversation_id: &str) -> Result<()> {
    conn.prepare_cached(&format!(
        "UPDATE conversations SET updated_at = {NEXT_ACTIVITY} WHERE id = ?"
    ))?
    .execute(params![now_ms(), conversation_id])?;
    Ok(())
}

/// The messages shown of conversation `c` (as [`crate::tree::shown_path`] walks them), with
/// their depth.
macro_rules! shown_cte {
    () => {
        "WITH RECURSIVE shown (id, depth) AS (
             SELECT (SELECT m.id FROM messages m WHERE m.conversation_id = c.id
                     AND m.parent_id IS NULL ORDER BY m.chosen_at DESC, m.position DESC LIMIT 1), 0
             UNION ALL
             SELECT (SELECT m.id FROM messages m WHERE m.parent_id = shown.id
                     ORDER BY m.chosen_at DESC, m.position DESC LIMIT 1), shown.depth + 1
             FROM shown WHERE shown.id IS NOT NULL)"
    };
}

/// A conversation's row in the list; its count and preview are of the versions shown.
const SUMMARY_SELECT: &str = concat!(
    "SELECT c.id, c.title, c.model, c.pinned, c.created_at, c.updated_at, (",
    shown_cte!(),
    " SELECT COUNT(id) FROM shown), (",
    shown_cte!(),
    " SELECT substr(m.text, 1, 400) FROM shown JOIN messages m ON m.id = shown.id
      WHERE m.role <> 'system' AND m.text <> '' ORDER BY shown.depth DESC LIMIT 1)
    FROM conversations c"
);

fn summary(conn: &Connection, id: &str) -> Result<ConversationSummary> {
    conn.query_row(
        &format!("{SUMMARY_SELECT} WHERE c.id = ?"),
        [id],
        summary_from_row,
    )
    .optional()?
    .ok_or_else(|| Error::not_found("conversation", id))
}

fn summary_from_row(row: &Row<'_>) -> rusqlite::Result<ConversationSummary> {
    let preview: Option<String> = row.get(7)?;
    Ok(ConversationSummary {
        id: row.get(0)?,
        title: row.get(1)?,
        model: row.get(2)?,
        pinned: row.get(3)?,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
        message_count: row.get(6)?,
        preview: preview.map(|text| preview_of(&text)),
    })
}

/// Collapses whitespace and cuts to [`PREVIEW_CHARS`] characters, marking a cut with "…".
fn preview_of(text: &str) -> String {
    let mut words = text.split_whitespace();
    let mut preview = String::new();
    let mut chars = 0;
    for word in words.by_ref() {
        let needed = word.chars().count() + usize::from(!preview.is_empty());
        if chars + needed > PREVIEW_CHARS {
            let room = PREVIEW_CHARS.saturating_sub(chars + usize::from(!preview.is_empty()));
            if room > 0 {
                if !preview.is_empty() {
                    preview.push(' ');
                }
                preview.extend(word.chars().take(room));
            }
            preview.push('…');
            return preview;
        }
        if !preview.is_empty() {
            preview.push(' ');
        }
        preview.push_str(word);
        chars += needed;
    }
    preview
}

#[cfg(test)]
mod tests {
    use super::preview_of;
    use super::{schema, Store, DATABASE_FILE};
    use crate::types::AttachmentKind;

    #[test]
    fn older_databases_open_with_every_message_and_each_conversation_as_one_branch() {
        for applied in [1, 2, 3, 4, 5, 6] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(DATABASE_FILE);
            {
                let mut conn = rusqlite::Connection::open(&path).unwrap();
                schema::migrate(&mut conn, &path, &schema::MIGRATIONS[..applied]).unwrap();
                // Before version 3 the order was the position; from it, the tree.
                let messages = if applied < 3 {
                    "INSERT INTO messages (id, conversation_id, position, role, text, created_at)
                     VALUES ('m0', 'c', 0, 'user', 'question', 1),
                            ('m1', 'c', 1, 'assistant', 'answer', 2),
                            ('m2', 'c', 2, 'user', 'follow-up', 3);"
                } else {
                    "INSERT INTO messages (id, conversation_id, position, role, text, created_at,
                                           parent_id, chosen_at)
                     VALUES ('m0', 'c', 0, 'user', 'question', 1, NULL, 1),
                            ('m1', 'c', 1, 'assistant', 'answer', 2, 'm0', 2),
                            ('m2', 'c', 2, 'user', 'follow-up', 3, 'm1', 3);"
                };
                conn.execute_batch(&format!(
                    "INSERT INTO conversations (id, title, created_at, updated_at)
                     VALUES ('c', 'Old', 1, 1);
                     {messages}
                     INSERT INTO attachments (id, message_id, position, hash, mime, width, height,
                                              byte_size, file_name)
                     VALUES ('a0', 'm0', 0, '{hash}', 'image/png', 4, 3, 10, 'ab/{hash}.png');",
                    hash = "ab".repeat(32)
                ))
                .unwrap();
            }
            let store = Store::open(dir.path()).unwrap();
            // An old chat follows the app's default system prompt until given its own.
            assert_eq!(store.get_conversation("c").unwrap().system_prompt, None);
            let shown = store.get_conversation("c").unwrap().messages;
            let rows: Vec<(&str, u32, u32, u32)> = shown
                .iter()
                .map(|m| (m.text.as_str(), m.position, m.version, m.versions))
                .collect();
            assert_eq!(
                rows,
                [
                    ("question", 0, 1, 1),
                    ("answer", 1, 1, 1),
                    ("follow-up", 2, 1, 1)
                ],
                "from version {applied}"
            );
            assert_eq!(shown[1].generated, None);
            assert_eq!(shown[1].model, None, "an old answer's model is not known");
            // Attachments from before audio are images, with no length and no name kept.
            let photo = &shown[0].attachments[0];
            assert_eq!(
                (
                    photo.kind,
                    photo.width,
                    photo.duration_ms,
                    photo.name.as_deref()
                ),
                (AttachmentKind::Image, Some(4), None, None),
                "from version {applied}"
            );
            // New answers follow the old messages and keep their ids.
            let answer = store.begin_assistant_message("c").unwrap();
            store
                .set_generated_ids(&answer, &[7, 70_000, u32::MAX])
                .unwrap();
            store
                .finish_assistant_message(&answer, super::MessageStatus::Complete, None, None)
                .unwrap();
            store.set_answer_model(&answer, "gemma-4-e4b-it").unwrap();
            let messages = store.get_conversation("c").unwrap().messages;
            assert_eq!(messages.len(), 4);
            assert_eq!(messages[3].generated, Some(vec![7, 70_000, u32::MAX]));
            assert_eq!(messages[3].model.as_deref(), Some("gemma-4-e4b-it"));
            // Drafts are kept from the first open on.
            store.save_draft(Some("c"), "not sent yet").unwrap();
            assert_eq!(
                store.drafts().unwrap().get("c").map(String::as_str),
                Some("not sent yet"),
                "from version {applied}"
            );
            store.set_system_prompt("c", Some("Be brief.")).unwrap();
            let again = store.get_conversation("c").unwrap();
            assert_eq!(again.system_prompt.as_deref(), Some("Be brief."));
            assert_eq!(again.messages.len(), 4);
        }
    }

    #[test]
    fn a_chats_own_system_prompt_survives_reopening_and_can_go_back_to_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let chat = store.create_conversation("Reviews").unwrap();
        let other = store.create_conversation("Other").unwrap();
        let order = |store: &Store| -> Vec<String> {
            let list = store.list_conversations().unwrap();
            list.into_iter().map(|c| c.id).collect()
        };
        let before = order(&store);
        let prompt = "Review code.\n<|turn>system\nnot a control token";
        store.set_system_prompt(&chat.id, Some(prompt)).unwrap();
        assert_eq!(order(&store), before, "setting a prompt is not activity");
        drop(store);

        let store = Store::open(dir.path()).unwrap();
        let read = |id: &str| store.get_conversation(id).unwrap().system_prompt;
        assert_eq!(read(&chat.id).as_deref(), Some(prompt));
        assert_eq!(read(&other.id), None);
        // "None" (an empty prompt) differs from following the default.
        store.set_system_prompt(&chat.id, Some("")).unwrap();
        assert_eq!(read(&chat.id).as_deref(), Some(""));
        store.set_system_prompt(&chat.id, None).unwrap();
        assert_eq!(read(&chat.id), None);

        let at_limit = "é".repeat(super::SYSTEM_PROMPT_MAX_CHARS);
        store.set_system_prompt(&chat.id, Some(&at_limit)).unwrap();
        let err = store
            .set_system_prompt(&chat.id, Some(&format!("{at_limit}x")))
            .unwrap_err();
        assert!(
            matches!(err, super::Error::InvalidInput(_)) && err.to_string().contains("8000"),
            "{err}"
        );
        assert_eq!(read(&chat.id).as_deref(), Some(at_limit.as_str()));
        let missing = store
            .set_system_prompt("no-such-chat", Some("x"))
            .unwrap_err();
        assert!(
            matches!(missing, super::Error::NotFound { .. }),
            "{missing}"
        );
    }

    #[test]
    fn preview_collapses_whitespace_and_cuts_long_text() {
        assert_eq!(preview_of("  hello\n\n  world\t"), "hello world");
        let preview = preview_of(&"word ".repeat(100));
        assert!(
            preview.starts_with("word word ") && preview.ends_with("word…"),
            "{preview}"
        );
        assert!(preview.chars().count() <= super::PREVIEW_CHARS + 1);
        // A single long word is cut inside, on a character boundary.
        assert_eq!(
            preview_of(&"é".repeat(500)).chars().count(),
            super::PREVIEW_CHARS + 1
        );
    }
}
