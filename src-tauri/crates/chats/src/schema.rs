//! Opening the database: connection settings and versioned migrations.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

/// How long a statement waits for a lock held by another connection before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Migrations in order; the database's `PRAGMA user_version` counts how many have been applied.
/// Append new steps, never edit shipped ones.
pub(crate) const MIGRATIONS: &[&str] = &[
    V1_INITIAL,
    V2_GENERATED_IDS,
    V3_VERSIONS,
    V4_SYSTEM_PROMPT,
    V5_AUDIO_ATTACHMENTS,
    V6_ANSWER_MODEL,
    V7_DRAFTS,
    V8_DOCUMENTS,
];

/// Documents attached to conversations (docs/DOCUMENTS.md): stored once per content hash with
/// their extracted text and chunks; the chunks indexed by FTS5 (BM25, Porter stems) for retrieval.
/// A conversation's link goes with it, and a document goes with its last link. A message's
/// documents (attached whole) keep the name and the prompt text they were sent with, in order.
const V8_DOCUMENTS: &str = r#"
CREATE TABLE documents (
    hash       TEXT PRIMARY KEY NOT NULL CHECK (length(hash) = 64),
    name       TEXT NOT NULL,
    format     TEXT NOT NULL,
    pages      INTEGER CHECK (pages IS NULL OR pages >= 0),
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE document_chunks (
    id         INTEGER PRIMARY KEY,
    hash       TEXT NOT NULL REFERENCES documents (hash) ON DELETE CASCADE,
    ordinal    INTEGER NOT NULL CHECK (ordinal >= 0),
    page       INTEGER,
    first_line INTEGER,
    last_line  INTEGER,
    text       TEXT NOT NULL,
    UNIQUE (hash, ordinal)
) STRICT;
CREATE VIRTUAL TABLE document_chunk_fts USING fts5 (
    text, content = 'document_chunks', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER document_chunks_insert AFTER INSERT ON document_chunks BEGIN
    INSERT INTO document_chunk_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER document_chunks_delete AFTER DELETE ON document_chunks BEGIN
    INSERT INTO document_chunk_fts (document_chunk_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TABLE conversation_documents (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    hash            TEXT NOT NULL REFERENCES documents (hash),
    added_at        INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, hash)
) STRICT;
CREATE INDEX conversation_documents_by_hash ON conversation_documents (hash);
CREATE TRIGGER conversation_documents_delete AFTER DELETE ON conversation_documents
WHEN NOT EXISTS (SELECT 1 FROM conversation_documents WHERE hash = old.hash) BEGIN
    DELETE FROM documents WHERE hash = old.hash;
END;
CREATE TABLE message_documents (
    message_id TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    ordinal    INTEGER NOT NULL CHECK (ordinal >= 0),
    hash       TEXT NOT NULL,
    name       TEXT NOT NULL,
    pages      INTEGER CHECK (pages IS NULL OR pages >= 0),
    tokens     INTEGER NOT NULL CHECK (tokens >= 0),
    prompt     TEXT NOT NULL,
    PRIMARY KEY (message_id, ordinal)
) STRICT;
"#;

/// Unsent drafts, one per conversation (`''`: the new chat not saved yet), kept as typed so a
/// restart loses none; a conversation's draft goes with it.
const V7_DRAFTS: &str = r#"
CREATE TABLE drafts (
    conversation_id TEXT PRIMARY KEY NOT NULL,
    text            TEXT NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE TRIGGER conversations_drafts_delete AFTER DELETE ON conversations BEGIN
    DELETE FROM drafts WHERE conversation_id = old.id;
END;
"#;

/// Which model wrote each answer (the name the app knows it by); NULL for answers written
/// before, and for messages a person wrote.
const V6_ANSWER_MODEL: &str = "ALTER TABLE messages ADD COLUMN model TEXT;";

/// Audio attachments beside images: what each file holds (every earlier one is an image), an
/// audio file's length, and the name the person knew a file by (NULL for earlier ones).
const V5_AUDIO_ATTACHMENTS: &str = r#"
ALTER TABLE attachments ADD COLUMN kind TEXT NOT NULL DEFAULT 'image'
    CHECK (kind IN ('image', 'audio'));
ALTER TABLE attachments ADD COLUMN duration_ms INTEGER
    CHECK (duration_ms IS NULL OR duration_ms >= 0);
ALTER TABLE attachments ADD COLUMN name TEXT;
"#;

/// A conversation's own system prompt: NULL follows the app's default (Settings), '' is none.
const V4_SYSTEM_PROMPT: &str = "ALTER TABLE conversations ADD COLUMN system_prompt TEXT;";

/// Answer versions and branches: messages form a tree through `parent_id` (the message they
/// follow; NULL for a conversation's first). Siblings are versions of one turn (a regenerated
/// answer, an edited question); the conversation shown walks from the root to the child chosen
/// last (`chosen_at`, a per-conversation counter). `position` stays unique per conversation and
/// now orders messages by when they were written. Existing conversations become one branch.
const V3_VERSIONS: &str = r#"
ALTER TABLE messages ADD COLUMN parent_id TEXT REFERENCES messages (id) ON DELETE CASCADE;
ALTER TABLE messages ADD COLUMN chosen_at INTEGER NOT NULL DEFAULT 0;
UPDATE messages SET
    parent_id = (SELECT p.id FROM messages p
                 WHERE p.conversation_id = messages.conversation_id
                   AND p.position < messages.position
                 ORDER BY p.position DESC LIMIT 1),
    chosen_at = position;
CREATE INDEX messages_by_parent ON messages (parent_id);
"#;

/// An answer's generated token ids (little-endian u32s), so that a follow-up reuses the cache
/// over it; NULL for messages written before, by a person, or whose ids were not kept.
const V2_GENERATED_IDS: &str = "ALTER TABLE messages ADD COLUMN generated BLOB;";

const V1_INITIAL: &str = r#"
CREATE TABLE conversations (
    id         TEXT PRIMARY KEY NOT NULL,
    title      TEXT NOT NULL,
    model      TEXT,
    pinned     INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX conversations_by_activity ON conversations (updated_at);

CREATE TABLE messages (
    id              TEXT PRIMARY KEY NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position        INTEGER NOT NULL CHECK (position >= 0),
    role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    text            TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL DEFAULT 'complete'
                    CHECK (status IN ('complete', 'streaming', 'stopped', 'error')),
    error           TEXT,
    usage           TEXT CHECK (usage IS NULL OR json_valid(usage)),
    created_at      INTEGER NOT NULL,
    UNIQUE (conversation_id, position),
    CHECK (role = 'assistant' OR status = 'complete')
) STRICT;
-- Crash recovery looks for answers left 'streaming'.
CREATE INDEX messages_streaming ON messages (status) WHERE status = 'streaming';

CREATE TABLE attachments (
    id         TEXT PRIMARY KEY NOT NULL,
    message_id TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL CHECK (position >= 0),
    hash       TEXT NOT NULL CHECK (length(hash) = 64),
    mime       TEXT NOT NULL,
    width      INTEGER CHECK (width IS NULL OR width >= 0),
    height     INTEGER CHECK (height IS NULL OR height >= 0),
    byte_size  INTEGER NOT NULL CHECK (byte_size >= 0),
    file_name  TEXT NOT NULL,
    UNIQUE (message_id, position)
) STRICT;
-- A file's reference count is a lookup by name.
CREATE INDEX attachments_by_file ON attachments (file_name);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL CHECK (json_valid(value))
) STRICT;

-- Full-text search. Rowids follow the indexed row's rowid. Answers are indexed once they stop
-- streaming, so appending a token never rewrites the index.
CREATE VIRTUAL TABLE message_fts USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE title_fts USING fts5 (title, tokenize = 'unicode61 remove_diacritics 2');

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN new.status <> 'streaming' BEGIN
    INSERT INTO message_fts (rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF text, status ON messages
WHEN old.status <> 'streaming' OR new.status <> 'streaming' BEGIN
    DELETE FROM message_fts WHERE rowid = old.rowid;
    INSERT INTO message_fts (rowid, text) SELECT new.rowid, new.text WHERE new.status <> 'streaming';
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM message_fts WHERE rowid = old.rowid;
END;

CREATE TRIGGER conversations_fts_insert AFTER INSERT ON conversations BEGIN
    INSERT INTO title_fts (rowid, title) VALUES (new.rowid, new.title);
END;
CREATE TRIGGER conversations_fts_update AFTER UPDATE OF title ON conversations BEGIN
    UPDATE title_fts SET title = new.title WHERE rowid = old.rowid;
END;
CREATE TRIGGER conversations_fts_delete AFTER DELETE ON conversations BEGIN
    DELETE FROM title_fts WHERE rowid = old.rowid;
END;
"#;

/// Opens (creating if needed) the database at `path`, configured and migrated to [`MIGRATIONS`].
pub(crate) fn open(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Refuse a newer file before changing anything in it.
    check_not_newer(&conn, path, MIGRATIONS.len())?;

    // WAL: readers never block the writer, and a commit is one append to the log.
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))?;
    // In WAL mode, NORMAL syncs the log only at checkpoints. A committed transaction is in the
    // log (the OS page cache) the moment COMMIT returns, so killing or crashing the app never
    // loses it; a power cut or OS crash may roll back the last few commits but never corrupts
    // the file. Streaming appends commit several times a second, and an fsync each is not worth
    // a lost quarter-second of an answer after a power cut. Without WAL (a file system that
    // cannot do it), NORMAL is not corruption-safe, so that case gets FULL.
    let synchronous = if mode.eq_ignore_ascii_case("wal") {
        "NORMAL"
    } else {
        "FULL"
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    let foreign_keys: bool = conn.pragma_query_value(None, "foreign_keys", |row| row.get(0))?;
    if !foreign_keys {
        return Err(Error::InvalidInput(
            "this SQLite build cannot enforce foreign keys".into(),
        ));
    }

    migrate(&mut conn, path, MIGRATIONS)?;
    Ok(conn)
}

/// Reads `PRAGMA user_version`.
pub(crate) fn user_version(conn: &Connection) -> Result<i64> {
    Ok(conn.pragma_query_value(None, "user_version", |row| row.get(0))?)
}

/// Errors if the file is at a schema version past the `known` number of migrations.
fn check_not_newer(conn: &Connection, path: &Path, known: usize) -> Result<usize> {
    let found = user_version(conn)?;
    let supported = i64::try_from(known).unwrap_or(i64::MAX);
    match usize::try_from(found) {
        Ok(applied) if applied <= known => Ok(applied),
        _ => Err(Error::NewerSchema {
            path: path.to_owned(),
            found,
            supported,
        }),
    }
}

/// Applies the steps of `migrations` the file has not seen yet, all in one transaction that
/// takes the write lock first, so two processes opening at once cannot both migrate.
pub(crate) fn migrate(conn: &mut Connection, path: &Path, migrations: &[&str]) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let applied = check_not_newer(&tx, path, migrations.len())?;
    for (index, step) in migrations.iter().enumerate().skip(applied) {
        tx.execute_batch(step)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(index + 1).unwrap_or(i64::MAX),
        )?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP_1: &str = "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);";
    const STEP_2: &str = "ALTER TABLE notes ADD COLUMN starred INTEGER NOT NULL DEFAULT 0;";

    #[test]
    fn upgrades_a_version_1_file_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, &path, &[STEP_1]).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 1);
        conn.execute("INSERT INTO notes (body) VALUES ('kept')", [])
            .unwrap();

        migrate(&mut conn, &path, &[STEP_1, STEP_2]).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 2);
        let (body, starred): (String, i64) = conn
            .query_row("SELECT body, starred FROM notes", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((body.as_str(), starred), ("kept", 0));
    }

    #[test]
    fn a_failing_step_leaves_the_file_at_its_old_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, &path, &[STEP_1]).unwrap();

        let broken = "ALTER TABLE notes ADD COLUMN a INTEGER; THIS IS NOT SQL;";
        assert!(migrate(&mut conn, &path, &[STEP_1, STEP_2, broken]).is_err());
        assert_eq!(user_version(&conn).unwrap(), 1);
        // Step 2 ran inside the failed transaction, so its column is gone too.
        assert!(conn.prepare("SELECT starred FROM notes").is_err());
    }

    #[test]
    fn refuses_a_file_from_a_newer_app() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, &path, &[STEP_1, STEP_2]).unwrap();

        let err = migrate(&mut conn, &path, &[STEP_1]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::NewerSchema {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(user_version(&conn).unwrap(), 2);
    }
}
