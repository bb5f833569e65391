//! What the store takes and returns: conversations, messages, attachments, search hits.
//! Timestamps are unix milliseconds; ids are UUIDv7 strings.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// Where an answer stands. Only assistant messages are ever anything but `Complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum MessageStatus {
    /// Written in full.
    Complete,
    /// Tokens are still arriving.
    Streaming,
    /// Cut short: the user stopped it, or the app quit or crashed mid-answer. The text is kept.
    Stopped,
    /// Generation failed; `error` says why. Any text produced before the failure is kept.
    Error,
}

/// Why generation ended, as the engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The model ended its turn.
    EndOfTurn,
    /// The answer reached the token limit.
    MaxTokens,
    /// The context window is full.
    ContextFull,
    /// The user stopped it.
    Cancelled,
}

/// What one answer cost; stored as JSON next to the message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: u32,
    /// Prompt tokens whose state was reused from the previous turn.
    pub reused_tokens: u32,
    pub generated_tokens: u32,
    pub time_to_first_token_ms: f64,
    pub prefill_tokens_per_second: f64,
    pub decode_tokens_per_second: f64,
    pub stop_reason: StopReason,
    /// The context window the answer was written in (absent in answers saved before it was
    /// kept), so its stats keep their meaning after the setting changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub context_window: Option<u32>,
    /// Tokens each speculative round gave on average (drafts accepted + the model's own), when
    /// the answer was drafted (docs/SPECULATIVE.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub tokens_per_round: Option<f64>,
}

/// One row of the conversation list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ConversationSummary {
    pub id: String,
    pub title: String,
    /// The model the conversation was held with, if the app recorded one.
    pub model: Option<String>,
    pub pinned: bool,
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub created_at: i64,
    /// Last activity (a message added or finished); strictly increasing across the store.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub updated_at: i64,
    pub message_count: u32,
    /// Start of the last non-empty user or assistant message, whitespace collapsed.
    pub preview: Option<String>,
}

/// A conversation with all its messages, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    pub id: String,
    pub title: String,
    pub model: Option<String>,
    pub pinned: bool,
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub created_at: i64,
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub updated_at: i64,
    /// Its own system prompt: `None` follows the app's default, `Some("")` is none at all.
    pub system_prompt: Option<String>,
    pub messages: Vec<Message>,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: String,
    pub conversation_id: String,
    /// 0-based place in the conversation.
    pub position: u32,
    pub role: Role,
    pub text: String,
    pub status: MessageStatus,
    /// Why generation failed, for `MessageStatus::Error`.
    pub error: Option<String>,
    /// Absent for user messages, unfinished answers, and usage rows this version cannot read.
    pub usage: Option<Usage>,
    /// For an answer: the model that wrote it, by the name the app showed; `None` for answers
    /// saved before models were recorded.
    pub model: Option<String>,
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub created_at: i64,
    pub attachments: Vec<Attachment>,
    /// Which version of its turn this is, from 1 (a regenerated answer, an edited question).
    pub version: u32,
    /// How many versions its turn has; 1 when it was never regenerated or edited.
    pub versions: u32,
    /// For an answer: the token ids the model generated for it, when kept (the engine's
    /// `Message::generated`). Not sent to the UI.
    #[serde(skip)]
    #[cfg_attr(feature = "ts", ts(skip))]
    pub generated: Option<Vec<u32>>,
}

/// What an attached file holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum AttachmentKind {
    /// A picture; `width` and `height` say its size.
    #[default]
    Image,
    /// A sound recording or speech; `duration_ms` says its length.
    Audio,
}

/// A file attached to a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub id: String,
    /// SHA-256 of the content, lowercase hex.
    pub hash: String,
    pub kind: AttachmentKind,
    pub mime: String,
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// For audio: its whole length in milliseconds.
    pub duration_ms: Option<u32>,
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub byte_size: i64,
    /// Path inside the attachments folder, `<hash[..2]>/<hash>.<ext>`.
    pub file_name: String,
    /// The file's name as the person knew it (shown, never used as a path); `None` for
    /// attachments saved before names were kept.
    pub name: Option<String>,
}

/// A file stored in the attachments folder, not yet (or not only) attached to a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AttachmentRef {
    /// SHA-256 of the content, lowercase hex.
    pub hash: String,
    pub kind: AttachmentKind,
    pub mime: String,
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// For audio: its whole length in milliseconds.
    pub duration_ms: Option<u32>,
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub byte_size: i64,
    /// Path inside the attachments folder, `<hash[..2]>/<hash>.<ext>`.
    pub file_name: String,
}

/// An already stored file (see `Store::store_attachment`) to attach to a new message.
/// The store derives the file's name and size itself, so input can never point outside its folder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AttachmentInput {
    pub hash: String,
    pub kind: AttachmentKind,
    pub mime: String,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub duration_ms: Option<u32>,
    /// The name to show it by; cut to [`ATTACHMENT_NAME_MAX_CHARS`] printable characters.
    pub name: Option<String>,
}

/// Longest attachment name kept, in characters.
pub const ATTACHMENT_NAME_MAX_CHARS: usize = 255;

impl AttachmentInput {
    /// The same input, shown as `name`.
    pub fn named(self, name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..self
        }
    }
}

impl From<&AttachmentRef> for AttachmentInput {
    fn from(stored: &AttachmentRef) -> Self {
        stored.clone().into()
    }
}

impl From<AttachmentRef> for AttachmentInput {
    fn from(stored: AttachmentRef) -> Self {
        Self {
            hash: stored.hash,
            kind: stored.kind,
            mime: stored.mime,
            width: stored.width,
            height: stored.height,
            duration_ms: stored.duration_ms,
            name: None,
        }
    }
}

impl From<&Attachment> for AttachmentInput {
    /// A saved attachment attached again (an edited question keeps its files and names).
    fn from(saved: &Attachment) -> Self {
        Self {
            hash: saved.hash.clone(),
            kind: saved.kind,
            mime: saved.mime.clone(),
            width: saved.width,
            height: saved.height,
            duration_ms: saved.duration_ms,
            name: saved.name.clone(),
        }
    }
}

/// A conversation or message that matches a search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    pub conversation_id: String,
    pub title: String,
    /// The matching message; `None` when the title matched.
    pub message_id: Option<String>,
    /// The matching passage, split into plain and matched runs (render as text, never as HTML).
    pub snippet: Vec<SnippetPart>,
}

/// A run of a search snippet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SnippetPart {
    pub text: String,
    /// Whether this run matched the query (to highlight).
    pub matched: bool,
}

impl Role {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

impl AttachmentKind {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Audio => "audio",
        }
    }
}

impl MessageStatus {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Streaming => "streaming",
            Self::Stopped => "stopped",
            Self::Error => "error",
        }
    }
}

/// Reads a closed set stored as text; anything else is a conversion error, not a panic.
fn parse_name<T: Copy>(
    value: ValueRef<'_>,
    all: &[T],
    name: fn(T) -> &'static str,
) -> FromSqlResult<T> {
    let text = value.as_str()?;
    all.iter()
        .copied()
        .find(|&item| name(item) == text)
        .ok_or_else(|| FromSqlError::Other(format!("unknown value {text:?}").into()))
}

impl ToSql for Role {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for Role {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        parse_name(
            value,
            &[Self::System, Self::User, Self::Assistant],
            Self::as_str,
        )
    }
}

impl ToSql for MessageStatus {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for MessageStatus {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let all = [Self::Complete, Self::Streaming, Self::Stopped, Self::Error];
        parse_name(value, &all, Self::as_str)
    }
}

impl ToSql for AttachmentKind {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for AttachmentKind {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        parse_name(value, &[Self::Image, Self::Audio], Self::as_str)
    }
}
