//! Attachment files: stored once per content under `<data_dir>/attachments/<hash[..2]>/<hash>.<ext>`,
//! referenced by attachment rows, removed when the last reference goes.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::{new_id, Store};
use crate::types::{
    Attachment, AttachmentInput, AttachmentKind, AttachmentRef, ATTACHMENT_NAME_MAX_CHARS,
};

/// Name of the attachments folder inside the data folder.
pub const ATTACHMENTS_DIR: &str = "attachments";

/// Length of a SHA-256 in hex.
const HASH_LEN: usize = 64;

impl Store {
    /// Copies an image's `bytes` into the attachments folder (once per distinct content) and
    /// returns the reference to pass to `add_message`. `mime` picks the file extension;
    /// parameters after `;` are dropped.
    pub fn store_attachment(
        &self,
        bytes: &[u8],
        mime: &str,
        width: Option<u32>,
        height: Option<u32>,
    ) -> Result<AttachmentRef> {
        self.store_file(bytes, mime, AttachmentKind::Image, (width, height), None)
    }

    /// Copies an audio file's `bytes` (`duration_ms` long) into the attachments folder, as
    /// [`Store::store_attachment`] does an image's.
    pub fn store_audio(&self, bytes: &[u8], mime: &str, duration_ms: u32) -> Result<AttachmentRef> {
        self.store_file(
            bytes,
            mime,
            AttachmentKind::Audio,
            (None, None),
            Some(duration_ms),
        )
    }

    fn store_file(
        &self,
        bytes: &[u8],
        mime: &str,
        kind: AttachmentKind,
        (width, height): (Option<u32>, Option<u32>),
        duration_ms: Option<u32>,
    ) -> Result<AttachmentRef> {
        if bytes.is_empty() {
            return Err(Error::InvalidInput("an attachment cannot be empty".into()));
        }
        let mime = normalize_mime(mime)?;
        check_kind(kind, &mime)?;
        let hash = format!("{:x}", Sha256::digest(bytes));
        let file_name = file_name_for(&hash, &mime);
        let byte_size = i64::try_from(bytes.len())
            .map_err(|_| Error::InvalidInput("the attachment is too large".into()))?;
        // The lock is held while writing so a concurrent delete cannot remove the file between
        // the write and its registration as unsent.
        let path = resolve(&self.attachments_dir, &file_name)
            .ok_or_else(|| Error::InvalidInput(format!("cannot store {file_name:?}")))?;
        self.with("storing an attachment", |inner| {
            write_once(&path, bytes)?;
            inner.unsent_files.insert(file_name.clone());
            Ok(AttachmentRef {
                hash,
                kind,
                mime,
                width,
                height,
                duration_ms,
                byte_size,
                file_name,
            })
        })
    }

    /// Absolute path of an attachment's file. Only ever a path inside the attachments folder:
    /// a row naming anything else is refused.
    pub fn attachment_path(&self, attachment_id: &str) -> Result<PathBuf> {
        let file_name: String = self.with("looking up an attachment", |inner| {
            inner
                .conn
                .query_row(
                    "SELECT file_name FROM attachments WHERE id = ?",
                    [attachment_id],
                    |row| row.get(0),
                )
                .optional()?
                .ok_or_else(|| Error::not_found("attachment", attachment_id))
        })?;
        let path = resolve(&self.attachments_dir, &file_name).ok_or_else(|| {
            Error::InvalidInput(format!(
                "attachment {attachment_id} names {file_name:?}, which is not an attachment file"
            ))
        })?;
        if !path.is_file() {
            return Err(Error::not_found("attachment file", file_name));
        }
        Ok(path)
    }

    /// Deletes attachment files no message uses (left by a crash during a delete, or drafts
    /// stored but never sent in an earlier session) and unfinished temporary files. Returns how
    /// many files were removed. Cheap enough to call once at startup, off the UI thread.
    pub fn prune_orphan_files(&self) -> Result<usize> {
        self.with("pruning attachment files", |inner| {
            let dir = &self.attachments_dir;
            let mut removed = 0;
            for prefix in read_dir(dir)? {
                if !is_prefix(&prefix) || !dir.join(&prefix).is_dir() {
                    continue;
                }
                for name in read_dir(&dir.join(&prefix))? {
                    let file_name = format!("{prefix}/{name}");
                    let orphan = if is_temp_name(&name) {
                        true
                    } else if resolve(dir, &file_name).is_some() {
                        !inner.unsent_files.contains(&file_name)
                            && !is_referenced(&inner.conn, &file_name)?
                    } else {
                        false // not ours: leave it alone
                    };
                    if orphan {
                        remove_file(dir, &file_name)?;
                        removed += 1;
                    }
                }
            }
            Ok(removed)
        })
    }
}

/// Inserts the attachment row for `input` on a message; the file must already be stored.
pub(crate) fn attach(
    conn: &Connection,
    dir: &Path,
    message_id: &str,
    position: usize,
    input: &AttachmentInput,
) -> Result<Attachment> {
    if input.hash.len() != HASH_LEN || !input.hash.bytes().all(is_lower_hex) {
        return Err(Error::InvalidInput(format!(
            "{:?} is not a SHA-256 in lowercase hex",
            input.hash
        )));
    }
    let mime = normalize_mime(&input.mime)?;
    check_kind(input.kind, &mime)?;
    let file_name = file_name_for(&input.hash, &mime);
    let path = resolve(dir, &file_name)
        .ok_or_else(|| Error::InvalidInput(format!("cannot attach {file_name:?}")))?;
    let byte_size = match fs::metadata(&path) {
        Ok(meta) if meta.is_file() => i64::try_from(meta.len()).unwrap_or(i64::MAX),
        Ok(_) => return Err(Error::not_found("attachment file", &input.hash)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::not_found("attachment file", &input.hash))
        }
        Err(e) => return Err(Error::io("read", path, e)),
    };
    let attachment = Attachment {
        id: new_id(),
        hash: input.hash.clone(),
        kind: input.kind,
        mime,
        width: input.width,
        height: input.height,
        duration_ms: input.duration_ms,
        byte_size,
        file_name,
        name: input.name.as_deref().and_then(clean_name),
    };
    conn.prepare_cached(
        "INSERT INTO attachments
             (id, message_id, position, hash, kind, mime, width, height, duration_ms, byte_size,
              file_name, name)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        attachment.id,
        message_id,
        i64::try_from(position).unwrap_or(i64::MAX),
        attachment.hash,
        attachment.kind,
        attachment.mime,
        attachment.width,
        attachment.height,
        attachment.duration_ms,
        attachment.byte_size,
        attachment.file_name,
        attachment.name,
    ])?;
    Ok(attachment)
}

/// The attachments of a conversation's messages, by message id, each list in attach order.
pub(crate) fn by_message(
    conn: &Connection,
    conversation_id: &str,
) -> Result<HashMap<String, Vec<Attachment>>> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.message_id, a.id, a.hash, a.kind, a.mime, a.width, a.height, a.duration_ms,
                a.byte_size, a.file_name, a.name
         FROM attachments a JOIN messages m ON m.id = a.message_id
         WHERE m.conversation_id = ? ORDER BY a.position",
    )?;
    let mut rows = stmt.query([conversation_id])?;
    let mut by_message: HashMap<String, Vec<Attachment>> = HashMap::new();
    while let Some(row) = rows.next()? {
        let attachment = Attachment {
            id: row.get(1)?,
            hash: row.get(2)?,
            kind: row.get(3)?,
            mime: row.get(4)?,
            width: row.get(5)?,
            height: row.get(6)?,
            duration_ms: row.get(7)?,
            byte_size: row.get(8)?,
            file_name: row.get(9)?,
            name: row.get(10)?,
        };
        by_message.entry(row.get(0)?).or_default().push(attachment);
    }
    Ok(by_message)
}

/// Whether any attachment row uses `file_name`.
pub(crate) fn is_referenced(conn: &Connection, file_name: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM attachments WHERE file_name = ?)")?
        .query_row([file_name], |row| row.get(0))?)
}

/// Removes a stored file; one already gone is fine.
pub(crate) fn remove_file(dir: &Path, file_name: &str) -> Result<()> {
    let Some(path) = resolve(dir, file_name).or_else(|| temp_path(dir, file_name)) else {
        return Ok(());
    };
    match fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io("delete", path, e)),
        _ => Ok(()),
    }
}

/// `<hash[..2]>/<hash>.<ext>` for content `hash` of type `mime`.
pub(crate) fn file_name_for(hash: &str, mime: &str) -> String {
    let prefix = hash.get(..2).unwrap_or_default();
    format!("{prefix}/{hash}.{}", extension_for(mime))
}

/// The absolute path of `file_name` if it has exactly the shape this module writes.
pub(crate) fn resolve(dir: &Path, file_name: &str) -> Option<PathBuf> {
    let (prefix, name) = file_name.split_once('/')?;
    let (hash, ext) = name.split_once('.')?;
    let ours = is_prefix(prefix)
        && hash.len() == HASH_LEN
        && hash.bytes().all(is_lower_hex)
        && hash.starts_with(prefix)
        && (1..=8).contains(&ext.len())
        && ext
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    ours.then(|| dir.join(prefix).join(name))
}

/// The absolute path of a leftover temporary file `<prefix>/.<id>.tmp`.
fn temp_path(dir: &Path, file_name: &str) -> Option<PathBuf> {
    let (prefix, name) = file_name.split_once('/')?;
    (is_prefix(prefix) && is_temp_name(name)).then(|| dir.join(prefix).join(name))
}

fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && !name.contains(['/', '\\'])
}

fn is_prefix(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(is_lower_hex)
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// Writes `bytes` to `path` unless an equally long file is already there (same hash, so same
/// content). Written to a temporary file, synced, then renamed: a crash never leaves a
/// half-written file under the final name.
pub(crate) fn write_once(path: &Path, bytes: &[u8]) -> Result<()> {
    let folder = path.parent().unwrap_or(Path::new("."));
    if fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.len() == bytes.len() as u64) {
        return Ok(());
    }
    fs::create_dir_all(folder).map_err(|e| Error::io("create folder", folder, e))?;
    let temp = folder.join(format!(".{}.tmp", new_id()));
    let written = File::create(&temp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(Error::io("write attachment", path, e));
    }
    Ok(())
}

/// Names in `dir`, skipping those that are not UTF-8 (never ours).
fn read_dir(dir: &Path) -> Result<Vec<String>> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io("list folder", dir, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list folder", dir, e))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// Lowercases `mime` and drops parameters; refuses anything but `type/subtype` tokens.
pub(crate) fn normalize_mime(mime: &str) -> Result<String> {
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    // RFC 6838 names: a letter or digit, then letters, digits and `!#$&^_.+-`.
    let token = |part: &str| {
        part.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    match essence.split_once('/') {
        Some((kind, sub)) if essence.len() <= 127 && token(kind) && token(sub) => Ok(essence),
        _ => Err(Error::InvalidInput(format!("{mime:?} is not a mime type"))),
    }
}

/// Refuses a file whose type says it is not what `kind` claims (an "image" of type audio/mpeg).
pub(crate) fn check_kind(kind: AttachmentKind, mime: &str) -> Result<()> {
    let top = mime.split('/').next().unwrap_or_default();
    let fits = match kind {
        AttachmentKind::Image => top != "audio",
        AttachmentKind::Audio => top == "audio",
    };
    if fits {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "a file of type {mime} cannot be attached as {}",
            kind.as_str()
        )))
    }
}

/// A name to show: control characters dropped, whitespace trimmed, at most
/// [`ATTACHMENT_NAME_MAX_CHARS`] characters; `None` when nothing is left.
pub(crate) fn clean_name(name: &str) -> Option<String> {
    let cleaned: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(ATTACHMENT_NAME_MAX_CHARS)
        .collect();
    let cleaned = cleaned.trim();
    (!cleaned.is_empty()).then(|| cleaned.to_owned())
}

/// File extension for a (normalized) mime type; unknown types are stored as `.bin`.
fn extension_for(mime: &str) -> &'static str {
    match mime {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/heic" => "heic",
        "image/heif" => "heif",
        "image/avif" => "avif",
        "image/bmp" => "bmp",
        "image/tiff" => "tiff",
        "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => "wav",
        "audio/mpeg" | "audio/mp3" => "mp3",
        "audio/mp4" | "audio/x-m4a" | "audio/m4a" => "m4a",
        "audio/aac" => "aac",
        "audio/aiff" | "audio/x-aiff" => "aiff",
        "audio/ogg" | "audio/vorbis" => "ogg",
        "audio/flac" | "audio/x-flac" => "flac",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        "text/markdown" => "md",
        _ => "bin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "ab01234567890123456789012345678901234567890123456789012345678901";

    #[test]
    fn resolves_only_names_of_the_shape_it_writes() {
        let dir = Path::new("/data/attachments");
        let good = format!("ab/{HASH}.png");
        assert_eq!(
            resolve(dir, &good),
            Some(dir.join("ab").join(format!("{HASH}.png")))
        );
        for bad in [
            "../../etc/passwd".to_owned(),
            format!("ab/../{HASH}.png"),
            format!("cd/{HASH}.png"),
            format!("ab/{HASH}.png/x"),
            format!("ab/{HASH}"),
            format!("ab/{HASH}.PNG"),
            format!("/ab/{HASH}.png"),
            format!("ab/{}.png", HASH.to_uppercase()),
            "ab/.x.tmp".to_owned(),
        ] {
            assert_eq!(resolve(dir, &bad), None, "{bad}");
        }
    }

    #[test]
    fn normalizes_mime_types_and_refuses_garbage() {
        assert_eq!(normalize_mime("Image/PNG; q=1").unwrap(), "image/png");
        for bad in [
            "",
            "png",
            "image/",
            "/png",
            "image/png/x",
            "image/p ng",
            "../x",
        ] {
            assert!(normalize_mime(bad).is_err(), "{bad}");
        }
        assert_eq!(file_name_for(HASH, "image/jpeg"), format!("ab/{HASH}.jpg"));
        assert_eq!(
            file_name_for(HASH, "application/x-thing"),
            format!("ab/{HASH}.bin")
        );
    }
}
