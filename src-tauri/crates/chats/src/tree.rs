//! The tree of a conversation's messages: each message follows its parent, a regenerated
//! answer or an edited question is another child of the same parent (a version), and the
//! conversation shown walks from the first message through the version chosen last at each step.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::{Error, Result};
use crate::store::{new_id, now_ms, touch};
use crate::types::{Message, MessageStatus, Role};

/// `chosen_at` for a message chosen now: past every other of its conversation (`?1`).
pub(crate) const NEXT_CHOICE: &str =
    "(SELECT COALESCE(MAX(chosen_at), 0) + 1 FROM messages WHERE conversation_id = ?1)";

/// Where a new message goes in the tree of a conversation.
pub(crate) enum Place {
    /// After the last message shown.
    End,
    /// After this message, as the next version of whatever already follows it.
    After(String),
    /// As the next version of this message (after the message it follows).
    VersionOf(String),
}

/// Inserts a message into a conversation (shown from now on) and marks the activity.
pub(crate) fn insert_message(
    conn: &Connection,
    conversation_id: &str,
    place: Place,
    role: Role,
    text: &str,
    status: MessageStatus,
) -> Result<Message> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM conversations WHERE id = ?)",
        [conversation_id],
        |row| row.get(0),
    )?;
    if !exists {
        return Err(Error::not_found("conversation", conversation_id));
    }
    let parent_id = match place {
        Place::End => shown_path(conn, conversation_id)?.pop().map(|m| m.id),
        Place::After(id) => Some(node_of(conn, conversation_id, &id)?.id),
        Place::VersionOf(id) => node_of(conn, conversation_id, &id)?.parent_id,
    };
    let id = new_id();
    let created_at = now_ms();
    conn.prepare_cached(&format!(
        "INSERT INTO messages (id, conversation_id, position, role, text, status, created_at,
                               parent_id, chosen_at)
         VALUES (?2, ?1, (SELECT COALESCE(MAX(position), -1) + 1 FROM messages
                          WHERE conversation_id = ?1), ?3, ?4, ?5, ?6, ?7, {NEXT_CHOICE})"
    ))?
    .execute(params![
        conversation_id,
        id,
        role,
        text,
        status,
        created_at,
        parent_id
    ])?;
    touch(conn, conversation_id)?;
    shown_path(conn, conversation_id)?
        .into_iter()
        .find(|m| m.id == id)
        .ok_or_else(|| Error::not_found("message", id))
}

/// A message's place in its conversation's tree.
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) parent_id: Option<String>,
    pub(crate) role: Role,
}

/// Looks up `message_id` in `conversation_id`.
pub(crate) fn node_of(conn: &Connection, conversation_id: &str, message_id: &str) -> Result<Node> {
    conn.query_row(
        "SELECT id, parent_id, role FROM messages WHERE id = ? AND conversation_id = ?",
        [message_id, conversation_id],
        |row| {
            Ok(Node {
                id: row.get(0)?,
                parent_id: row.get(1)?,
                role: row.get(2)?,
            })
        },
    )
    .optional()?
    .ok_or_else(|| Error::not_found("message", message_id))
}

/// The messages shown of a conversation (without attachments): from its first message, at each
/// step the version chosen last, each numbered among its versions and placed from 0.
pub(crate) fn shown_path(conn: &Connection, conversation_id: &str) -> Result<Vec<Message>> {
    let mut stmt = conn.prepare_cached(&format!(
        "{MESSAGE_SELECT} WHERE conversation_id = ? ORDER BY position"
    ))?;
    let rows = stmt.query_map([conversation_id], |row| {
        Ok((
            message_from_row(row)?,
            row.get::<_, Option<String>>(10)?,
            row.get::<_, i64>(11)?,
        ))
    })?;
    let mut children: HashMap<Option<String>, Vec<(Message, i64)>> = HashMap::new();
    for row in rows {
        let (message, parent_id, chosen_at) = row?;
        children
            .entry(parent_id)
            .or_default()
            .push((message, chosen_at));
    }
    let mut path = Vec::new();
    let mut parent = None;
    while let Some(mut versions) = children.remove(&parent) {
        let count = u32::try_from(versions.len()).unwrap_or(u32::MAX);
        let Some(index) = (0..versions.len()).max_by_key(|&i| (versions[i].1, i)) else {
            break;
        };
        let (mut message, _) = versions.swap_remove(index);
        message.version = u32::try_from(index + 1).unwrap_or(u32::MAX);
        message.versions = count;
        message.position = u32::try_from(path.len()).unwrap_or(u32::MAX);
        parent = Some(message.id.clone());
        path.push(message);
    }
    Ok(path)
}

pub(crate) const MESSAGE_SELECT: &str =
    "SELECT id, conversation_id, position, role, text, status, error, usage,
        created_at, generated, parent_id, chosen_at, model FROM messages";

pub(crate) fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    let usage: Option<String> = row.get(7)?;
    Ok(Message {
        id: row.get(0)?,
        conversation_id: row.get(1)?,
        position: row.get(2)?,
        role: row.get(3)?,
        text: row.get(4)?,
        status: row.get(5)?,
        error: row.get(6)?,
        // Usage is informational: a row this version cannot read must not hide the message.
        usage: usage.and_then(|json| serde_json::from_str(&json).ok()),
        created_at: row.get(8)?,
        attachments: Vec::new(),
        version: 1,
        versions: 1,
        generated: row
            .get::<_, Option<Vec<u8>>>(9)?
            .and_then(|b| ids_from_bytes(&b)),
        model: row.get(12)?,
    })
}

/// Token ids as stored: little-endian u32s.
pub(crate) fn ids_to_bytes(ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|id| id.to_le_bytes()).collect()
}

/// Token ids from their stored bytes; `None` for bytes that cannot be ids (they are only ever
/// a speed-up: the answer's text is what counts).
fn ids_from_bytes(bytes: &[u8]) -> Option<Vec<u32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}
