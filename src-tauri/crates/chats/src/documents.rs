//! Documents in conversations: stored once per content hash with their extracted text and chunks,
//! linked to the conversations that use them, and retrieved by FTS5's BM25 over the chunks of one
//! conversation's documents. Deleting a conversation deletes the documents only it used (triggers
//! of migration 8). The text comes from the app (the `documents` crate); this module knows nothing
//! of formats.

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
use crate::store::{now_ms, Store};

/// A document to store: its text and chunks as extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDocument {
    /// SHA-256 of the file's bytes, lowercase hex.
    pub hash: String,
    pub name: String,
    /// The format's short name ("PDF", "Markdown", …).
    pub format: String,
    pub pages: Option<u32>,
    pub text: String,
    pub chunks: Vec<NewChunk>,
}

/// A chunk to store: its text and where it sits in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChunk {
    pub page: Option<u32>,
    /// First and last line (from 1) for text files.
    pub lines: Option<(u32, u32)>,
    pub text: String,
}

/// A retrieved chunk, with its document, for the prompt and the answer's Sources.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentChunk {
    pub hash: String,
    pub name: String,
    /// The chunk's place among its document's chunks, from 0.
    pub ordinal: u32,
    pub page: Option<u32>,
    pub lines: Option<(u32, u32)>,
    pub text: String,
}

/// A document attached whole to a message: shown as a chip, its prompt text put into the turn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct MessageDocument {
    /// SHA-256 of the file's bytes, lowercase hex.
    pub hash: String,
    pub name: String,
    pub pages: Option<u32>,
    /// Tokens its prompt text takes, counted when it was attached.
    pub tokens: u32,
    /// The text as it goes into the user turn (`documents::Document::for_prompt`).
    #[serde(skip)]
    pub prompt: String,
}

/// Most words of a question used for retrieval.
const MAX_TERMS: usize = 32;

/// Words too common to tell chunks apart; a question's other words are matched.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "if", "in", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "what",
    "when", "where", "which", "who", "why", "will", "with", "you", "your", "there", "into",
    "about", "should", "would", "could", "was", "were", "has", "have", "not", "than", "then",
    "them", "they", "we", "my",
];

impl Store {
    /// Stores `document` (once per hash: a second conversation using the same file shares it)
    /// and links it to the conversation.
    pub fn add_document(&self, conversation_id: &str, document: &NewDocument) -> Result<()> {
        self.with("storing a document", |inner| {
            let tx = inner.conn.transaction()?;
            let stored: Option<i64> = tx
                .query_row("SELECT 1 FROM documents WHERE hash = ?", [&document.hash], |row| row.get(0))
                .optional()?;
            if stored.is_none() {
                tx.execute(
                    "INSERT INTO documents (hash, name, format, pages, text, created_at)
                     VALUES (?, ?, ?, ?, ?, ?)",
                    params![document.hash, document.name, document.format, document.pages, document.text, now_ms()],
                )?;
                let mut insert = tx.prepare_cached(
                    "INSERT INTO document_chunks (hash, ordinal, page, first_line, last_line, text)
                     VALUES (?, ?, ?, ?, ?, ?)",
                )?;
                for (ordinal, chunk) in document.chunks.iter().enumerate() {
                    let (first, last) = chunk.lines.unzip();
                    insert.execute(params![document.hash, ordinal as i64, chunk.page, first, last, chunk.text])?;
                }
            }
            tx.execute(
                "INSERT OR IGNORE INTO conversation_documents (conversation_id, hash, added_at) VALUES (?, ?, ?)",
                params![conversation_id, document.hash, now_ms()],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Stores `documents` (as [`Store::add_document`]) and links each, in order, to the message
    /// `message_id` of the conversation, with the name, tokens and prompt text it was sent with.
    pub fn add_message_documents(
        &self,
        conversation_id: &str,
        message_id: &str,
        documents: &[(NewDocument, MessageDocument)],
    ) -> Result<()> {
        for (document, _) in documents {
            self.add_document(conversation_id, document)?;
        }
        self.with("linking documents to a message", |inner| {
            let tx = inner.conn.transaction()?;
            for (ordinal, (_, sent)) in documents.iter().enumerate() {
                tx.execute(
                    "INSERT INTO message_documents (message_id, ordinal, hash, name, pages, tokens, prompt)
                     VALUES (?, ?, ?, ?, ?, ?, ?)",
                    params![message_id, ordinal as i64, sent.hash, sent.name, sent.pages, sent.tokens, sent.prompt],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// The documents attached whole to a message, in the order they were attached.
    pub fn message_documents(&self, message_id: &str) -> Result<Vec<MessageDocument>> {
        self.with("listing a message's documents", |inner| {
            let mut stmt = inner.conn.prepare_cached(
                "SELECT hash, name, pages, tokens, prompt FROM message_documents
                 WHERE message_id = ? ORDER BY ordinal",
            )?;
            let rows = stmt.query_map([message_id], |row| {
                Ok(MessageDocument {
                    hash: row.get(0)?,
                    name: row.get(1)?,
                    pages: row.get(2)?,
                    tokens: row.get(3)?,
                    prompt: row.get(4)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The hashes of the documents a conversation uses, in the order they were added.
    pub fn conversation_documents(&self, conversation_id: &str) -> Result<Vec<String>> {
        self.with("listing a conversation's documents", |inner| {
            let mut stmt = inner.conn.prepare_cached(
                "SELECT hash FROM conversation_documents WHERE conversation_id = ? ORDER BY added_at, hash",
            )?;
            let rows = stmt.query_map([conversation_id], |row| row.get(0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// A stored document's extracted text, if it is stored.
    pub fn document_text(&self, hash: &str) -> Result<Option<String>> {
        self.with("reading a document", |inner| {
            Ok(inner
                .conn
                .query_row("SELECT text FROM documents WHERE hash = ?", [hash], |row| {
                    row.get(0)
                })
                .optional()?)
        })
    }

    /// The `k` chunks of the conversation's documents that best match `question` (BM25 over any
    /// of its words, Porter stems, common words left out), best first.
    pub fn retrieve(
        &self,
        conversation_id: &str,
        question: &str,
        k: usize,
    ) -> Result<Vec<DocumentChunk>> {
        let Some(expression) = question_expression(question) else {
            return Ok(Vec::new());
        };
        self.with("retrieving from documents", |inner| {
            let mut stmt = inner.conn.prepare_cached(
                "SELECT c.hash, d.name, c.ordinal, c.page, c.first_line, c.last_line, c.text
                 FROM document_chunk_fts
                 JOIN document_chunks c ON c.id = document_chunk_fts.rowid
                 JOIN documents d ON d.hash = c.hash
                 JOIN conversation_documents cd ON cd.hash = c.hash AND cd.conversation_id = ?1
                 WHERE document_chunk_fts MATCH ?2
                 ORDER BY bm25(document_chunk_fts) LIMIT ?3",
            )?;
            let limit = i64::try_from(k).unwrap_or(i64::MAX);
            let rows = stmt.query_map(params![conversation_id, expression, limit], |row| {
                let first: Option<u32> = row.get(4)?;
                let last: Option<u32> = row.get(5)?;
                Ok(DocumentChunk {
                    hash: row.get(0)?,
                    name: row.get(1)?,
                    ordinal: row.get(2)?,
                    page: row.get(3)?,
                    lines: first.zip(last),
                    text: row.get(6)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

/// A question as an FTS5 expression that cannot be a syntax error: each distinct word that is
/// not a common one, quoted, joined by OR (BM25 ranks chunks with more and rarer words first).
fn question_expression(question: &str) -> Option<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in question.split(|c: char| !c.is_alphanumeric() && c != '_') {
        let word = word.to_lowercase();
        if word.is_empty() || STOPWORDS.contains(&word.as_str()) || terms.contains(&word) {
            continue;
        }
        terms.push(word);
        if terms.len() == MAX_TERMS {
            break;
        }
    }
    (!terms.is_empty()).then(|| {
        terms
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" OR ")
    })
}
