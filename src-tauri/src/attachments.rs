//! Images the user attaches: OS drops (paths from the window's DragDrop event), the file picker
//! and pastes (bytes). Each is checked (a regular file, a size limit, an image the model can
//! read), copied into app data under its content hash, and kept as pending until sent.
//! No command reads a path the UI names: paths only ever come from the OS (drop, dialog).

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use chats::{AttachmentInput, AttachmentRef, Store};
use serde::Serialize;
use ts_rs::TS;

use crate::error::Error;
use crate::sync::lock;

/// Largest file accepted as an attachment.
pub const MAX_ATTACHMENT_BYTES: u64 = 50_000_000;
/// Longer side of the previews shown in the composer and in messages, in pixels.
const THUMBNAIL_SIDE: u32 = 256;
/// Previews of sent attachments kept in memory.
const THUMBNAIL_CACHE: usize = 256;
/// Longest side of an attachment shown full size (larger images are scaled down to it).
const VIEW_SIDE: u32 = 2048;

/// An image ready to send with the next message.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct PendingAttachment {
    /// Pass it in `SendRequest::attachment_ids`.
    pub id: String,
    /// File name as the user knows it.
    pub name: String,
    pub mime: String,
    pub width: u32,
    pub height: u32,
    #[ts(type = "number")]
    pub byte_size: u64,
    /// A `data:image/png;base64,…` preview.
    pub thumbnail: String,
}

/// Files dragged over or dropped on the window.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DropEvent {
    /// Files are being dragged over the window (`true`) or left it (`false`).
    Hover { active: bool },
    /// Files were dropped: those that are usable images, and a message for each one that is not.
    Added {
        attachments: Vec<PendingAttachment>,
        errors: Vec<String>,
    },
}

/// Pending attachments and previews of stored ones.
pub struct Attachments {
    store: Arc<Store>,
    pending: Mutex<HashMap<String, AttachmentRef>>,
    previews: Mutex<HashMap<String, String>>,
}

impl Attachments {
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            pending: Mutex::default(),
            previews: Mutex::default(),
        }
    }

    /// Adds a file the OS handed over (a drop or the file picker).
    pub fn add_file(&self, path: &Path) -> Result<PendingAttachment, Error> {
        let name = display_name(path);
        let refuse = |why: String| Error::Invalid(format!("{name}: {why}"));
        let metadata = fs::metadata(path).map_err(|e| refuse(format!("cannot be read ({e})")))?;
        if metadata.is_dir() {
            return Err(refuse("is a folder, not an image".into()));
        }
        if !metadata.is_file() {
            return Err(refuse("is not a regular file".into()));
        }
        if metadata.len() > MAX_ATTACHMENT_BYTES {
            return Err(refuse(too_big(metadata.len())));
        }
        let mut bytes = Vec::with_capacity(metadata.len() as usize);
        fs::File::open(path)
            .and_then(|file| file.take(MAX_ATTACHMENT_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| refuse(format!("cannot be read ({e})")))?;
        self.add_bytes(&name, &bytes)
    }

    /// Adds image bytes (a paste, or a file read by `add_file`).
    pub fn add_bytes(&self, name: &str, bytes: &[u8]) -> Result<PendingAttachment, Error> {
        let name = clean_name(name);
        if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
            return Err(Error::Invalid(format!(
                "{name}: {}",
                too_big(bytes.len() as u64)
            )));
        }
        let thumb = engine::image::thumbnail(bytes, THUMBNAIL_SIDE)
            .map_err(|e| Error::Invalid(format!("{name}: {e}")))?;
        let stored = self.store.store_attachment(
            bytes,
            thumb.mime,
            Some(thumb.width),
            Some(thumb.height),
        )?;
        let pending = PendingAttachment {
            id: stored.hash.clone(),
            name,
            mime: stored.mime.clone(),
            width: thumb.width,
            height: thumb.height,
            byte_size: bytes.len() as u64,
            thumbnail: data_url(&thumb.png),
        };
        lock(&self.previews).insert(stored.hash.clone(), pending.thumbnail.clone());
        lock(&self.pending).insert(stored.hash.clone(), stored);
        Ok(pending)
    }

    /// Adds every dropped file it can; says why for each one it cannot.
    pub fn add_dropped(&self, paths: &[PathBuf]) -> DropEvent {
        let mut attachments = Vec::new();
        let mut errors = Vec::new();
        for path in paths {
            match self.add_file(path) {
                Ok(attachment) => attachments.push(attachment),
                Err(err) => errors.push(err.to_string()),
            }
        }
        DropEvent::Added {
            attachments,
            errors,
        }
    }

    /// Forgets a pending attachment (its file goes with the next cleanup if nothing uses it).
    pub fn remove(&self, id: &str) {
        lock(&self.pending).remove(id);
    }

    /// The stored files behind pending ids, in order, ready for `Store::add_message`.
    pub fn resolve(&self, ids: &[String]) -> Result<Vec<AttachmentInput>, Error> {
        let pending = lock(&self.pending);
        ids.iter()
            .map(|id| {
                pending.get(id).map(AttachmentInput::from).ok_or_else(|| {
                    Error::Invalid(
                        "an attached image is no longer available; attach it again".into(),
                    )
                })
            })
            .collect()
    }

    /// Drops ids that were sent.
    pub fn sent(&self, ids: &[String]) {
        let mut pending = lock(&self.pending);
        for id in ids {
            pending.remove(id);
        }
    }

    /// A preview of an attachment of a saved message, as a data URL.
    pub fn preview(&self, attachment_id: &str) -> Result<String, Error> {
        let path = self.store.attachment_path(attachment_id)?;
        let hash = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(url) = lock(&self.previews).get(&hash) {
            return Ok(url.clone());
        }
        let bytes = fs::read(&path).map_err(|e| {
            Error::Invalid(format!("the attached image is missing from app data ({e})"))
        })?;
        let url = data_url(&engine::image::thumbnail(&bytes, THUMBNAIL_SIDE)?.png);
        let mut previews = lock(&self.previews);
        if previews.len() >= THUMBNAIL_CACHE {
            previews.clear();
        }
        previews.insert(hash, url.clone());
        Ok(url)
    }
}

impl Attachments {
    /// An attachment of a saved message as a data URL, full size (up to [`VIEW_SIDE`]).
    pub fn full_view(&self, attachment_id: &str) -> Result<String, Error> {
        let path = self.store.attachment_path(attachment_id)?;
        let bytes = fs::read(&path).map_err(|e| {
            Error::Invalid(format!("the attached image is missing from app data ({e})"))
        })?;
        Ok(data_url(&engine::image::thumbnail(&bytes, VIEW_SIDE)?.png))
    }
}

fn data_url(png: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// A name from the UI is only ever shown: keep it short and printable.
fn clean_name(name: &str) -> String {
    let cleaned: String = name.chars().filter(|c| !c.is_control()).take(120).collect();
    if cleaned.trim().is_empty() {
        "pasted image".to_owned()
    } else {
        cleaned
    }
}

fn too_big(bytes: u64) -> String {
    format!(
        "is {:.0} MB; images up to {} MB can be attached",
        bytes as f64 / 1e6,
        MAX_ATTACHMENT_BYTES / 1_000_000
    )
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let image = image::RgbImage::from_pixel(width, height, image::Rgb([200, 10, 10]));
        let mut out = Vec::new();
        image
            .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
        out
    }

    fn attachments() -> (tempfile::TempDir, Attachments) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("data")).unwrap());
        (dir, Attachments::new(store))
    }

    #[test]
    fn a_dropped_image_is_copied_into_app_data_with_a_preview() {
        let (dir, attachments) = attachments();
        let source = dir.path().join("cat.png");
        fs::write(&source, png(640, 480)).unwrap();

        let added = attachments.add_file(&source).unwrap();

        assert_eq!(
            (added.name.as_str(), added.width, added.height),
            ("cat.png", 640, 480)
        );
        assert_eq!(added.mime, "image/png");
        assert!(added.thumbnail.starts_with("data:image/png;base64,"));
        fs::remove_file(&source).unwrap();
        let inputs = attachments
            .resolve(std::slice::from_ref(&added.id))
            .unwrap();
        assert_eq!(inputs[0].hash, added.id);
        let copies: Vec<_> = walk(&dir.path().join("data").join(chats::ATTACHMENTS_DIR));
        assert_eq!(copies.len(), 1, "{copies:?}");
    }

    #[test]
    fn drops_keep_the_good_files_and_explain_each_bad_one() {
        let (dir, attachments) = attachments();
        let good = dir.path().join("good.png");
        let text = dir.path().join("notes.png");
        let empty = dir.path().join("empty.jpg");
        let folder = dir.path().join("Photos");
        fs::write(&good, png(8, 8)).unwrap();
        fs::write(&text, "just text").unwrap();
        fs::write(&empty, "").unwrap();
        fs::create_dir(&folder).unwrap();
        let missing = dir.path().join("gone.png");

        let DropEvent::Added {
            attachments: ok,
            errors,
        } = attachments.add_dropped(&[good, text, empty, folder, missing])
        else {
            panic!("a drop adds");
        };

        assert_eq!(ok.len(), 1);
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors[0].starts_with("notes.png: ") && errors[0].contains("not an image"),
            "{errors:?}"
        );
        assert!(errors[1].contains("empty"), "{errors:?}");
        assert!(errors[2].contains("folder"), "{errors:?}");
        assert!(errors[3].contains("gone.png"), "{errors:?}");
    }

    #[test]
    fn oversized_files_are_refused_before_reading() {
        let (dir, attachments) = attachments();
        let big = dir.path().join("huge.png");
        let file = fs::File::create(&big).unwrap();
        file.set_len(MAX_ATTACHMENT_BYTES + 1).unwrap();

        let err = attachments.add_file(&big).unwrap_err().to_string();

        assert!(err.contains("huge.png") && err.contains("50 MB"), "{err}");
    }

    #[test]
    fn only_pending_ids_can_be_sent_and_removed_ones_are_gone() {
        let (_dir, attachments) = attachments();
        let added = attachments.add_bytes("a.png", &png(4, 4)).unwrap();
        assert!(attachments.resolve(&["../../etc/passwd".into()]).is_err());

        attachments.remove(&added.id);

        assert!(attachments.resolve(&[added.id]).is_err());
    }

    #[test]
    fn pasted_names_are_cleaned_for_display() {
        let (_dir, attachments) = attachments();
        let added = attachments.add_bytes("\u{7}\n", &png(4, 4)).unwrap();
        assert_eq!(added.name, "pasted image");
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else {
                files.push(path);
            }
        }
        files
    }
}
