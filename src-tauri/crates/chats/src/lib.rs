//! Conversations, messages and attachments on disk. Knows nothing of the model.
//!
//! [`Store`] keeps everything in one SQLite file (`<data_dir>/chats.sqlite3`, WAL mode) and
//! attachment files under `<data_dir>/attachments/`, stored once per content hash. A user's
//! message is committed before `add_message` returns; a streaming answer is appended to as it
//! arrives (batched by [`StreamWriter`]), and one left `streaming` by a crash is marked
//! `stopped` on the next open, its text kept.
//!
//! Messages form a tree (`parent_id`): a regenerated answer or an edited question is another
//! version of its turn, and a conversation reads as the versions chosen last. Nothing is
//! deleted by regenerating or editing. [`Store::export`] writes everything as JSON that
//! [`Store::import`] takes back, by the same ids (never twice).

mod attachments;
mod documents;
mod drafts;
mod error;
mod export;
mod schema;
mod search;
mod settings;
mod store;
mod stream;
mod tree;
mod types;

pub use attachments::ATTACHMENTS_DIR;
pub use documents::{DocumentChunk, MessageDocument, NewChunk, NewDocument};
pub use drafts::DRAFT_MAX_BYTES;
pub use error::{Error, Result};
pub use export::{
    clip_length, demote_headings, describe, markdown, Export, ExportedAttachment,
    ExportedConversation, ExportedFile, ExportedMessage, ImportReport, EXPORT_FORMAT,
    EXPORT_VERSION,
};
pub use store::{check_system_prompt, Store, DATABASE_FILE, SYSTEM_PROMPT_MAX_CHARS};
pub use stream::{StreamWriter, DEFAULT_FLUSH_INTERVAL, DEFAULT_MAX_PENDING_BYTES};
pub use types::{
    Attachment, AttachmentInput, AttachmentKind, AttachmentRef, Conversation, ConversationSummary,
    Message, MessageStatus, Role, SearchHit, SnippetPart, StopReason, Usage,
    ATTACHMENT_NAME_MAX_CHARS,
};
