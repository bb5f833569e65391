//! Conversations out and back in: one JSON document with everything (every version of every
//! message, generated token ids, stats, attachment bytes) that [`Store::import`] takes back, and
//! Markdown to read.
//!
//! Conversations and messages keep their ids (UUIDv7, unique across machines), so importing a
//! file whose messages are already here adds nothing and says so, and importing after a delete
//! brings the same conversation back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::attachments::{self, check_kind, file_name_for, normalize_mime, resolve, write_once};
use crate::error::{Error, Result};
use crate::store::{check_system_prompt, touch, usage_json, Store};
use crate::tree::{ids_to_bytes, message_from_row, MESSAGE_SELECT};
use crate::types::{
    Attachment, AttachmentInput, AttachmentKind, Conversation, MessageStatus, Role, Usage,
};

/// `format` of an export file: what tells ours from any other JSON.
pub const EXPORT_FORMAT: &str = "gemma-desk-chats";
/// The newest `version` of the export format this code writes and reads.
pub const EXPORT_VERSION: u32 = 1;

/// A JSON export: conversations with every message, and the attachment files they use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Export {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// [`EXPORT_VERSION`] when written.
    pub version: u32,
    pub exported_at: i64,
    pub conversations: Vec<ExportedConversation>,
    /// Attachment contents by SHA-256 (lowercase hex), each file once.
    pub files: BTreeMap<String, ExportedFile>,
}

/// A conversation in an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedConversation {
    pub id: String,
    pub title: String,
    pub model: Option<String>,
    pub pinned: bool,
    pub created_at: i64,
    pub updated_at: i64,
    /// Its own system prompt (`None`: the app's default; `Some("")`: none). Absent from exports
    /// written before chats had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Every message, every version, in the order they were written (a message's parent comes
    /// before it).
    pub messages: Vec<ExportedMessage>,
}

/// A message in an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedMessage {
    pub id: String,
    /// The message this one follows; `None` for a first message.
    pub parent_id: Option<String>,
    pub role: Role,
    pub text: String,
    pub status: MessageStatus,
    pub error: Option<String>,
    /// The answer's stats.
    pub usage: Option<Usage>,
    /// The model that wrote an answer, when recorded. Absent from exports written before
    /// answers recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub created_at: i64,
    /// Among versions of one turn, the one chosen last is shown.
    pub chosen_at: i64,
    /// The token ids the model generated for an answer, when kept.
    pub generated: Option<Vec<u32>>,
    pub attachments: Vec<ExportedAttachment>,
}

/// An attachment of a message; its bytes are in [`Export::files`] under `hash`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedAttachment {
    pub hash: String,
    /// Absent from exports written before audio (all images then).
    #[serde(default)]
    pub kind: AttachmentKind,
    pub mime: String,
    pub width: Option<u32>,
    pub height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u32>,
    /// The name the person knew the file by, when kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An attachment file's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedFile {
    pub mime: String,
    /// The bytes, base64 (standard alphabet, padded).
    pub data: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// Conversations that were not here and now are.
    pub conversations_added: u32,
    /// Conversations already here that got messages they lacked.
    pub conversations_updated: u32,
    /// Conversations already here with every message: skipped whole.
    pub conversations_unchanged: u32,
    pub messages_added: u32,
    /// Messages already here (same id), left as they are.
    pub messages_skipped: u32,
}

impl Store {
    /// Everything about the conversations `ids` (all of them for `None`), attachment bytes
    /// included, ready to write as JSON.
    pub fn export(&self, ids: Option<&[String]>) -> Result<Export> {
        self.with("exporting conversations", |inner| {
            let tx = inner.conn.transaction()?;
            let ids: Vec<String> = match ids {
                Some(ids) => ids.to_vec(),
                None => {
                    let mut stmt = tx.prepare_cached(
                        "SELECT id FROM conversations ORDER BY pinned DESC, updated_at DESC",
                    )?;
                    let rows = stmt.query_map([], |row| row.get(0))?;
                    rows.collect::<rusqlite::Result<_>>()?
                }
            };
            let mut export = Export {
                format: EXPORT_FORMAT.to_owned(),
                version: EXPORT_VERSION,
                exported_at: crate::store::now_ms(),
                conversations: Vec::with_capacity(ids.len()),
                files: BTreeMap::new(),
            };
            for id in &ids {
                let conversation =
                    export_conversation(&tx, &self.attachments_dir, id, &mut export.files)?;
                export.conversations.push(conversation);
            }
            Ok(export)
        })
    }

    /// [`Store::export`] as pretty JSON.
    pub fn export_json(&self, ids: Option<&[String]>) -> Result<Vec<u8>> {
        let export = self.export(ids)?;
        serde_json::to_vec_pretty(&export).map_err(|e| Error::InvalidInput(format!("export: {e}")))
    }

    /// Reads an export written by [`Store::export_json`] and imports it (see [`Store::import`]).
    /// Anything that is not such a file is refused and changes nothing.
    pub fn import_json(&self, json: &[u8]) -> Result<ImportReport> {
        let format = serde_json::from_slice::<FormatOnly>(json)
            .map_err(|e| Error::BadExport(format!("it is not JSON ({e})")))?;
        if format.format.as_deref() != Some(EXPORT_FORMAT) {
            return Err(Error::BadExport(
                "it is not a Gemma Desk chats export".into(),
            ));
        }
        let export: Export =
            serde_json::from_slice(json).map_err(|e| Error::BadExport(e.to_string()))?;
        self.import(&export)
    }

    /// Adds the conversations and messages of `export` that are not here yet, with their
    /// attachments; messages already here (same id) are skipped. All or nothing: a damaged
    /// export is refused before anything is written, and a failure part-way rolls back.
    pub fn import(&self, export: &Export) -> Result<ImportReport> {
        if export.format != EXPORT_FORMAT {
            return Err(Error::BadExport(
                "it is not a Gemma Desk chats export".into(),
            ));
        }
        if export.version > EXPORT_VERSION {
            return Err(Error::BadExport(format!(
                "it was written by a newer Gemma Desk (format version {}, this one reads up to \
                 {EXPORT_VERSION}); update the app to import it",
                export.version
            )));
        }
        let files = check(export)?;
        self.with("importing conversations", |inner| {
            let mut written = Vec::new();
            let result = (|| {
                for (file_name, bytes) in &files {
                    let path = resolve(&self.attachments_dir, file_name)
                        .ok_or_else(|| Error::BadExport(format!("cannot store {file_name:?}")))?;
                    if !path.is_file() {
                        written.push(file_name.clone());
                    }
                    write_once(&path, bytes)?;
                }
                let tx = inner.conn.transaction()?;
                let report = import_into(&tx, &self.attachments_dir, export)?;
                tx.commit()?;
                Ok(report)
            })();
            if result.is_err() {
                // Nothing refers to files written for a rolled-back import.
                for file in written {
                    if !inner.unsent_files.contains(&file) {
                        let _ = attachments::remove_file(&self.attachments_dir, &file);
                    }
                }
            }
            result
        })
    }

    /// Writes the conversation shown as Markdown to `path`, its images and audio as files in a
    /// folder next to it (`<name>_files/`), linked from the text. `answer` gives an answer's
    /// Markdown from its stored text (the caller knows the model's markers; this crate does not).
    pub fn export_markdown(
        &self,
        conversation_id: &str,
        path: &Path,
        answer: impl Fn(&str) -> String,
    ) -> Result<()> {
        let conversation = self.get_conversation(conversation_id)?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "conversation".into());
        let folder_name = format!("{stem}_files");
        let folder = path.with_file_name(&folder_name);
        let has_files = conversation
            .messages
            .iter()
            .any(|m| !m.attachments.is_empty());
        if has_files {
            fs::create_dir_all(&folder).map_err(|e| Error::io("create folder", &folder, e))?;
        }
        for message in &conversation.messages {
            for attachment in &message.attachments {
                let from = self.attachment_path(&attachment.id)?;
                let to = folder.join(image_file_name(attachment));
                fs::copy(&from, &to).map_err(|e| Error::io("write", &to, e))?;
            }
        }
        let link = |n, attachment: &Attachment| {
            let target = format!(
                "{}/{}",
                link_path(&folder_name),
                image_file_name(attachment)
            );
            match attachment.kind {
                AttachmentKind::Image => format!("![image {n}]({target})"),
                AttachmentKind::Audio => format!("[{}]({target})", describe(n, attachment)),
            }
        };
        let text = markdown(&conversation, link, answer);
        fs::write(path, text).map_err(|e| Error::io("write", path, e))
    }
}

/// Just the field that says whether a JSON document is ours.
#[derive(Deserialize)]
struct FormatOnly {
    format: Option<String>,
}

/// An attachment's file name in a Markdown export: its hash and extension, never a name a
/// person or a file chose.
fn image_file_name(attachment: &Attachment) -> String {
    attachment
        .file_name
        .rsplit('/')
        .next()
        .unwrap_or(&attachment.hash)
        .to_owned()
}

/// A folder name as a Markdown link target (spaces and brackets escaped).
fn link_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            ' ' => out.push_str("%20"),
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '[' => out.push_str("%5B"),
            ']' => out.push_str("%5D"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            c => out.push(c),
        }
    }
    out
}

/// "image 2", "audio 1 (1:05)" or "audio 2 (1.1 s)": attachment `n` of its kind, in words,
/// its length as the app's chips write it.
pub fn describe(n: usize, attachment: &Attachment) -> String {
    match (attachment.kind, attachment.duration_ms) {
        (AttachmentKind::Image, _) => format!("image {n}"),
        (AttachmentKind::Audio, Some(ms)) => format!("audio {n} ({})", clip_length(ms)),
        (AttachmentKind::Audio, None) => format!("audio {n}"),
    }
}

/// A clip's length: under ten seconds in tenths of a second ("1.1 s"), else as a clock to the
/// nearest second ("1:05", "1:02:05").
pub fn clip_length(ms: u32) -> String {
    if ms < 9_950 {
        let tenths = ((ms + 50) / 100).max(1);
        return format!("{}.{} s", tenths / 10, tenths % 10);
    }
    let seconds = (u64::from(ms) + 500) / 1000;
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// The Markdown of a conversation: title, then each message under who wrote it (`## You`,
/// `## Gemma`). A message's own headings are demoted two levels (`## Plan` reads `#### Plan`), so
/// the outline stays the conversation's. `attached` gives each attachment's Markdown (a link to
/// where it was written, or a description) from its number among those of its kind (images and
/// audio counted apart, from 1), `answer` an answer's Markdown from its stored text. Ends with
/// one newline.
pub fn markdown(
    conversation: &Conversation,
    attached: impl Fn(usize, &Attachment) -> String,
    answer: impl Fn(&str) -> String,
) -> String {
    let title: String = conversation
        .title
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = format!("# {title}\n");
    // The models that wrote the answers shown, in order; else the conversation's.
    let mut models: Vec<&str> = Vec::new();
    for model in conversation
        .messages
        .iter()
        .filter_map(|m| m.model.as_deref())
    {
        if !models.contains(&model) {
            models.push(model);
        }
    }
    if models.is_empty() {
        models.extend(conversation.model.as_deref());
    }
    if !models.is_empty() {
        let label = if models.len() == 1 { "Model" } else { "Models" };
        out.push_str(&format!("\n*{label}: {}*\n", models.join(", ")));
    }
    if let Some(prompt) = conversation.system_prompt.as_deref().map(str::trim_end) {
        if !prompt.is_empty() {
            out.push_str(&format!("\n## System prompt\n\n{prompt}\n"));
        }
    }
    let (mut images, mut recordings) = (0, 0);
    for message in &conversation.messages {
        let who = match message.role {
            Role::System => "System",
            Role::User => "You",
            Role::Assistant => "Gemma",
        };
        out.push_str(&format!("\n## {who}\n\n"));
        for attachment in &message.attachments {
            let counter = match attachment.kind {
                AttachmentKind::Image => &mut images,
                AttachmentKind::Audio => &mut recordings,
            };
            *counter += 1;
            out.push_str(&attached(*counter, attachment));
            out.push_str("\n\n");
        }
        let text = match message.role {
            Role::Assistant => answer(&message.text),
            Role::User | Role::System => message.text.clone(),
        };
        let text = demote_headings(&text, 2);
        let text = text.trim_end();
        if !text.is_empty() {
            out.push_str(text);
            out.push('\n');
        }
        match message.status {
            MessageStatus::Stopped => out.push_str("\n*(stopped)*\n"),
            MessageStatus::Error => {
                let why = message.error.as_deref().unwrap_or("unknown error");
                out.push_str(&format!("\n*(failed: {why})*\n"));
            }
            MessageStatus::Complete | MessageStatus::Streaming => {}
        }
    }
    let end = out.trim_end().len();
    out.truncate(end);
    out.push('\n');
    out
}

/// `text` with each Markdown heading `by` levels deeper (at most level 6): ATX headings (`## x`)
/// and setext ones (a line underlined with `===` or `---`), outside fenced code blocks.
pub fn demote_headings(text: &str, by: usize) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    // The fence that opened the code block we are in: its character and length.
    let mut fence: Option<(char, usize)> = None;
    // Where the paragraph that a setext underline would make a heading starts in `out`.
    let mut paragraph: Option<usize> = None;
    for line in lines {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = &line[indent..];
        if let Some((mark, length)) = fence {
            let run = body.chars().take_while(|&c| c == mark).count();
            if indent < 4 && run >= length && body[run..].trim().is_empty() {
                fence = None;
            }
            out.push(line.to_owned());
            continue;
        }
        if indent < 4 {
            let mark = body.chars().next().filter(|c| *c == '`' || *c == '~');
            if let Some(mark) = mark {
                let run = body.chars().take_while(|&c| c == mark).count();
                if run >= 3 && !(mark == '`' && body[run..].contains('`')) {
                    fence = Some((mark, run));
                    paragraph = None;
                    out.push(line.to_owned());
                    continue;
                }
            }
            let hashes = body.chars().take_while(|&c| c == '#').count();
            let after = &body[hashes..];
            if (1..=6).contains(&hashes) && (after.is_empty() || after.starts_with([' ', '\t'])) {
                let level = (hashes + by).min(6);
                out.push(format!("{}{}{after}", &line[..indent], "#".repeat(level)));
                paragraph = None;
                continue;
            }
            let underline = body.trim_end();
            let setext = !underline.is_empty()
                && (underline.chars().all(|c| c == '=') || underline.chars().all(|c| c == '-'));
            if let (Some(start), true) = (paragraph, setext) {
                let level = if underline.starts_with('=') { 1 } else { 2 };
                let words: Vec<String> = out.drain(start..).map(|l| l.trim().to_owned()).collect();
                out.push(format!(
                    "{} {}",
                    "#".repeat((level + by).min(6)),
                    words.join(" ")
                ));
                paragraph = None;
                continue;
            }
        }
        // A line of a paragraph (not a list item or a quote, whose underline is a rule).
        let starts_block = body.starts_with(['>', '-', '*', '+', '|'])
            || body
                .split_once(['.', ')'])
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        paragraph = match (line.trim().is_empty(), paragraph) {
            (true, _) => None,
            (false, Some(start)) => Some(start),
            (false, None) if indent < 4 && !starts_block => Some(out.len()),
            (false, None) => None,
        };
        out.push(line.to_owned());
    }
    out.join("\n")
}

fn export_conversation(
    conn: &Connection,
    attachments_dir: &Path,
    id: &str,
    files: &mut BTreeMap<String, ExportedFile>,
) -> Result<ExportedConversation> {
    let mut conversation = conn
        .query_row(
            "SELECT id, title, model, pinned, created_at, updated_at, system_prompt
             FROM conversations WHERE id = ?",
            [id],
            |row| {
                Ok(ExportedConversation {
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
    let mut by_message = attachments::by_message(conn, id)?;
    let mut stmt = conn.prepare_cached(&format!(
        "{MESSAGE_SELECT} WHERE conversation_id = ? ORDER BY position"
    ))?;
    let rows = stmt.query_map([id], |row| {
        Ok((
            message_from_row(row)?,
            row.get::<_, Option<String>>(10)?,
            row.get::<_, i64>(11)?,
        ))
    })?;
    for row in rows {
        let (message, parent_id, chosen_at) = row?;
        let mut exported_attachments = Vec::new();
        for attachment in by_message.remove(&message.id).unwrap_or_default() {
            if !files.contains_key(&attachment.hash) {
                let path = resolve(attachments_dir, &attachment.file_name).ok_or_else(|| {
                    Error::not_found("attachment file", attachment.file_name.clone())
                })?;
                let bytes = fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
                files.insert(
                    attachment.hash.clone(),
                    ExportedFile {
                        mime: attachment.mime.clone(),
                        data: BASE64.encode(bytes),
                    },
                );
            }
            exported_attachments.push(ExportedAttachment {
                hash: attachment.hash,
                kind: attachment.kind,
                mime: attachment.mime,
                width: attachment.width,
                height: attachment.height,
                duration_ms: attachment.duration_ms,
                name: attachment.name,
            });
        }
        conversation.messages.push(ExportedMessage {
            id: message.id,
            parent_id,
            role: message.role,
            text: message.text,
            status: message.status,
            error: message.error,
            usage: message.usage,
            model: message.model,
            created_at: message.created_at,
            chosen_at,
            generated: message.generated,
            attachments: exported_attachments,
        });
    }
    Ok(conversation)
}

/// Checks everything that can be checked without the database: ids, the tree of each
/// conversation, and that every file decodes to bytes with its hash. Returns the files to
/// store, by their name in the attachments folder.
fn check(export: &Export) -> Result<Vec<(String, Vec<u8>)>> {
    let bad = |what: String| Error::BadExport(what);
    let mut files = Vec::new();
    let mut mimes = HashMap::new();
    for (hash, file) in &export.files {
        let bytes = BASE64.decode(file.data.as_bytes()).map_err(|e| {
            bad(format!(
                "the attached file {hash:.12}… is not valid base64 ({e})"
            ))
        })?;
        if bytes.is_empty() {
            return Err(bad(format!("the attached file {hash:.12}… is empty")));
        }
        if format!("{:x}", Sha256::digest(&bytes)) != *hash {
            return Err(bad(format!(
                "the attached file {hash:.12}… does not match its checksum (the file is damaged)"
            )));
        }
        let mime = normalize_mime(&file.mime).map_err(|e| bad(e.to_string()))?;
        files.push((file_name_for(hash, &mime), bytes));
        mimes.insert(hash.as_str(), mime);
    }
    let mut conversation_ids = HashSet::new();
    let mut message_ids = HashSet::new();
    for conversation in &export.conversations {
        if !is_id(&conversation.id) || !conversation_ids.insert(conversation.id.as_str()) {
            return Err(bad(format!(
                "the conversation id {:?} is not valid or appears twice",
                conversation.id
            )));
        }
        if let Some(prompt) = &conversation.system_prompt {
            check_system_prompt(prompt).map_err(|e| bad(e.to_string()))?;
        }
        let mut earlier = HashSet::new();
        for message in &conversation.messages {
            if !is_id(&message.id) || !message_ids.insert(message.id.as_str()) {
                return Err(bad(format!(
                    "the message id {:?} is not valid or appears twice",
                    message.id
                )));
            }
            if let Some(parent) = &message.parent_id {
                if !earlier.contains(parent.as_str()) {
                    return Err(bad(format!(
                        "message {} follows {parent}, which is not before it in its conversation",
                        message.id
                    )));
                }
            }
            if message.role != Role::Assistant && message.status != MessageStatus::Complete {
                return Err(bad(format!(
                    "message {} is from the user but not complete",
                    message.id
                )));
            }
            for attachment in &message.attachments {
                let Some(stored_mime) = mimes.get(attachment.hash.as_str()) else {
                    return Err(bad(format!(
                        "message {} has an attachment that is not in the file",
                        message.id
                    )));
                };
                let mime = normalize_mime(&attachment.mime).map_err(|e| bad(e.to_string()))?;
                check_kind(attachment.kind, &mime).map_err(|e| bad(e.to_string()))?;
                if &mime != stored_mime {
                    return Err(bad(format!(
                        "message {} names its attachment {mime}, the file says {stored_mime}",
                        message.id
                    )));
                }
            }
            earlier.insert(message.id.as_str());
        }
    }
    Ok(files)
}

/// An id as this app writes them (a UUID), nothing else.
fn is_id(id: &str) -> bool {
    id.len() == 36 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Inserts what `export` has and the database lacks; the files are already stored.
fn import_into(conn: &Connection, attachments_dir: &Path, export: &Export) -> Result<ImportReport> {
    let mut report = ImportReport::default();
    for conversation in &export.conversations {
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM conversations WHERE id = ?)",
            [&conversation.id],
            |row| row.get(0),
        )?;
        if !exists {
            conn.execute(
                "INSERT INTO conversations (id, title, model, pinned, created_at, updated_at,
                                            system_prompt)
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
                params![
                    conversation.id,
                    conversation.title,
                    conversation.model,
                    conversation.pinned,
                    conversation.created_at,
                    conversation.updated_at,
                    conversation.system_prompt
                ],
            )?;
        }
        let mut added = 0;
        for message in &conversation.messages {
            let here: Option<String> = conn
                .query_row(
                    "SELECT conversation_id FROM messages WHERE id = ?",
                    [&message.id],
                    |row| row.get(0),
                )
                .optional()?;
            match here {
                Some(owner) if owner == conversation.id => {
                    report.messages_skipped += 1;
                    continue;
                }
                Some(_) => {
                    return Err(Error::BadExport(format!(
                        "message {} belongs to another conversation here",
                        message.id
                    )))
                }
                None => {}
            }
            let status = match message.status {
                MessageStatus::Streaming => MessageStatus::Stopped,
                status => status,
            };
            let usage = message.usage.as_ref().map(usage_json).transpose()?;
            let generated = message.generated.as_deref().map(ids_to_bytes);
            conn.prepare_cached(
                "INSERT INTO messages (id, conversation_id, position, role, text, status, error,
                                       usage, created_at, generated, parent_id, chosen_at, model)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(position), -1) + 1 FROM messages
                                  WHERE conversation_id = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
                         ?11, ?12)",
            )?
            .execute(params![
                message.id,
                conversation.id,
                message.role,
                message.text,
                status,
                message.error,
                usage,
                message.created_at,
                generated,
                message.parent_id,
                message.chosen_at,
                message.model
            ])?;
            for (position, attachment) in message.attachments.iter().enumerate() {
                let input = AttachmentInput {
                    hash: attachment.hash.clone(),
                    kind: attachment.kind,
                    mime: attachment.mime.clone(),
                    width: attachment.width,
                    height: attachment.height,
                    duration_ms: attachment.duration_ms,
                    name: attachment.name.clone(),
                };
                attachments::attach(conn, attachments_dir, &message.id, position, &input)?;
            }
            added += 1;
        }
        report.messages_added += added;
        match (exists, added) {
            (false, _) => report.conversations_added += 1,
            (true, 0) => report.conversations_unchanged += 1,
            (true, _) => {
                report.conversations_updated += 1;
                touch(conn, &conversation.id)?;
            }
        }
    }
    Ok(report)
}
