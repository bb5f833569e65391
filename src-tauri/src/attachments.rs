//! Images and audio the user attaches: OS drops (paths from the window's DragDrop event), the
//! file picker, pastes and recordings (bytes). Each is checked (a regular file, a size limit,
//! an image or a recording the model can read), copied into app data under its content hash,
//! and kept as pending until sent. No command reads a path the UI names: paths only ever come
//! from the OS (drop, dialog).

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use chats::{Attachment, AttachmentInput, AttachmentKind, AttachmentRef, Store};
use engine::audio::{AudioError, AudioLimits, PreparedAudio};
use serde::Serialize;
use ts_rs::TS;

use crate::error::Error;
use crate::sync::lock;

/// Largest image accepted as an attachment.
pub const MAX_ATTACHMENT_BYTES: u64 = 50_000_000;
/// Longer side of the previews shown in the composer and in messages, in pixels.
const THUMBNAIL_SIDE: u32 = 256;
/// Previews of sent attachments kept in memory.
const THUMBNAIL_CACHE: usize = 256;
/// Longest side of an attachment shown full size (larger images are scaled down to it).
const VIEW_SIDE: u32 = 2048;
/// Recordings kept decoded for the next answers (each up to ~30 MB of features).
const AUDIO_CACHE: usize = 4;

/// What the app accepts of a recording: the engine's limits (200 MB, one hour, the first ten
/// minutes heard; docs/AUDIO.md).
fn audio_limits() -> AudioLimits {
    AudioLimits::default()
}

/// How much of a recording the model hears, in milliseconds (the first `max_clips` clips).
pub fn audio_heard_ms() -> u32 {
    let clips = audio_limits().max_clips.max(1) as u64;
    let ms =
        clips * engine::audio::CLIP_SAMPLES as u64 * 1000 / u64::from(engine::audio::SAMPLE_RATE);
    u32::try_from(ms).unwrap_or(u32::MAX)
}

/// An image or audio file ready to send with the next message.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct PendingAttachment {
    /// Pass it in `SendRequest::attachment_ids`.
    pub id: String,
    /// File name as the user knows it.
    pub name: String,
    pub kind: AttachmentKind,
    pub mime: String,
    /// An image's size in pixels.
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// An audio file's whole length in milliseconds.
    pub duration_ms: Option<u32>,
    #[ts(type = "number")]
    pub byte_size: u64,
    /// An image's `data:image/png;base64,…` preview.
    pub thumbnail: Option<String>,
    /// What the model will not hear of a long recording ("Only the first 10:00 of 14:05 will
    /// be heard."); `None` when it hears all of it.
    pub notice: Option<String>,
}

/// A document (PDF, DOCX, text, code…) read and ready to send whole with the next message
/// (docs/DOCUMENTS.md): its text goes into the user turn as data.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct PendingDocument {
    /// Pass it in `SendRequest::attachment_ids`.
    pub id: String,
    pub name: String,
    /// The format's short name ("PDF", "Markdown", …).
    pub format: String,
    /// A PDF's page count.
    pub pages: Option<u32>,
    /// Tokens its text takes in the prompt, by the loaded model's tokenizer.
    #[ts(type = "number")]
    pub tokens: usize,
    /// PDF pages without text (scans, slides as images), left out of the text.
    pub skipped_pages: Vec<u32>,
}

/// Characters per chunk of a stored document (docs/DOCUMENTS.md: measured on the gnuplot manual).
const CHUNK_CHARS: usize = 1200;

/// A document read and not sent yet.
#[derive(Clone)]
struct HeldDocument {
    shown: PendingDocument,
    stored: chats::NewDocument,
    prompt: String,
}

/// Files dragged over or dropped on the window.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DropEvent {
    /// Files are being dragged over the window (`true`) or left it (`false`).
    Hover { active: bool },
    /// Files were dropped: those that are usable images or audio, and a message for each one
    /// that is not.
    Added {
        attachments: Vec<PendingAttachment>,
        errors: Vec<String>,
    },
}

/// A file stored and not sent yet, with the name it was attached by.
struct Pending {
    stored: AttachmentRef,
    name: String,
}

/// Pending attachments, previews of stored images, and recordings decoded for the model.
pub struct Attachments {
    store: Arc<Store>,
    pending: Mutex<HashMap<String, Pending>>,
    previews: Mutex<HashMap<String, String>>,
    /// Decoded recordings by content hash.
    audio: Mutex<HashMap<String, Arc<PreparedAudio>>>,
    audio_limits: AudioLimits,
    documents: Mutex<HashMap<String, HeldDocument>>,
}

impl Attachments {
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            pending: Mutex::default(),
            previews: Mutex::default(),
            audio: Mutex::default(),
            audio_limits: audio_limits(),
            documents: Mutex::default(),
        }
    }

    /// The same, hearing recordings within `limits` (tests use short ones).
    #[cfg(test)]
    pub fn with_audio_limits(self, limits: AudioLimits) -> Self {
        Self {
            audio_limits: limits,
            ..self
        }
    }

    /// Adds a file the OS handed over (a drop or the file picker).
    pub fn add_file(&self, path: &Path) -> Result<PendingAttachment, Error> {
        let name = display_name(path);
        let refuse = |why: String| Error::Invalid(format!("{name}: {why}"));
        let metadata = fs::metadata(path).map_err(|e| refuse(format!("cannot be read ({e})")))?;
        if metadata.is_dir() {
            return Err(refuse("is a folder, not an image or audio file".into()));
        }
        if !metadata.is_file() {
            return Err(refuse("is not a regular file".into()));
        }
        let largest = max_file_bytes();
        if metadata.len() > largest {
            return Err(refuse(too_big(metadata.len())));
        }
        let mut bytes = Vec::with_capacity(metadata.len() as usize);
        fs::File::open(path)
            .and_then(|file| file.take(largest + 1).read_to_end(&mut bytes))
            .map_err(|e| refuse(format!("cannot be read ({e})")))?;
        self.add_bytes(&name, &bytes)
    }

    /// Adds an image or a recording (a paste, a recording from the microphone, or a file read
    /// by `add_file`); which one it is comes from the content, never the name.
    pub fn add_bytes(&self, name: &str, bytes: &[u8]) -> Result<PendingAttachment, Error> {
        let name = clean_name(name);
        let refuse = |why: String| Error::Invalid(format!("{name}: {why}"));
        if bytes.is_empty() {
            return Err(refuse("the file is empty".into()));
        }
        if bytes.len() as u64 > max_file_bytes() {
            return Err(refuse(too_big(bytes.len() as u64)));
        }
        match engine::audio::prepare_bytes(bytes, &self.audio_limits) {
            Ok(prepared) => return self.add_audio(name, bytes, prepared),
            Err(AudioError::Unrecognized) => {}
            Err(e) => return Err(refuse(e.to_string())),
        }
        if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
            return Err(refuse(too_big(bytes.len() as u64)));
        }
        let thumb = engine::image::thumbnail(bytes, THUMBNAIL_SIDE).map_err(|e| match e {
            engine::image::ImageError::Unrecognized => refuse(
                "is neither an image nor audio Gemma Desk can read (images: JPEG, PNG, WebP, \
                 GIF, BMP, TIFF; audio: WAV, MP3, FLAC, Ogg Vorbis, M4A, AIFF)"
                    .into(),
            ),
            e => refuse(e.to_string()),
        })?;
        let stored = self.store.store_attachment(
            bytes,
            thumb.mime,
            Some(thumb.width),
            Some(thumb.height),
        )?;
        let thumbnail = data_url(&thumb.png);
        let pending = PendingAttachment {
            id: stored.hash.clone(),
            name: name.clone(),
            kind: AttachmentKind::Image,
            mime: stored.mime.clone(),
            width: Some(thumb.width),
            height: Some(thumb.height),
            duration_ms: None,
            byte_size: bytes.len() as u64,
            thumbnail: Some(thumbnail.clone()),
            notice: None,
        };
        lock(&self.previews).insert(stored.hash.clone(), thumbnail);
        lock(&self.pending).insert(stored.hash.clone(), Pending { stored, name });
        Ok(pending)
    }

    /// Keeps a recording that decoded as `prepared`.
    fn add_audio(
        &self,
        name: String,
        bytes: &[u8],
        prepared: PreparedAudio,
    ) -> Result<PendingAttachment, Error> {
        let duration_ms = (prepared.seconds * 1000.0).round().min(u32::MAX as f64) as u32;
        let stored = self
            .store
            .store_audio(bytes, audio_mime(bytes), duration_ms)?;
        let notice = prepared.limit_reached.then(|| {
            format!(
                "Only the first {} of {} will be heard.",
                clock(prepared.kept_seconds),
                clock(prepared.seconds)
            )
        });
        self.keep_decoded(&stored.hash, Arc::new(prepared));
        let pending = PendingAttachment {
            id: stored.hash.clone(),
            name: name.clone(),
            kind: AttachmentKind::Audio,
            mime: stored.mime.clone(),
            width: None,
            height: None,
            duration_ms: Some(duration_ms),
            byte_size: bytes.len() as u64,
            thumbnail: None,
            notice,
        };
        lock(&self.pending).insert(stored.hash.clone(), Pending { stored, name });
        Ok(pending)
    }

    /// A saved recording decoded for the model: from memory when it was decoded lately.
    pub fn prepared_audio(&self, attachment: &Attachment) -> Result<Arc<PreparedAudio>, Error> {
        if let Some(prepared) = lock(&self.audio).get(&attachment.hash) {
            return Ok(prepared.clone());
        }
        let path = self.store.attachment_path(&attachment.id)?;
        let name = attachment.name.as_deref().unwrap_or("the attached audio");
        let prepared = engine::audio::prepare_path(&path, &self.audio_limits)
            .map_err(|e| Error::Invalid(format!("{name}: {e}")))?;
        let prepared = Arc::new(prepared);
        self.keep_decoded(&attachment.hash, prepared.clone());
        Ok(prepared)
    }

    fn keep_decoded(&self, hash: &str, prepared: Arc<PreparedAudio>) {
        let mut decoded = lock(&self.audio);
        if decoded.len() >= AUDIO_CACHE && !decoded.contains_key(hash) {
            decoded.clear();
        }
        decoded.insert(hash.to_owned(), prepared);
    }

    /// The soft tokens of each pending attachment of `ids`, in order: an image's under
    /// `budget` (from its size, not decoded again), each of a recording's clips'. An id no
    /// longer pending is left out.
    pub fn pending_soft_tokens(
        &self,
        ids: &[String],
        budget: engine::image::SoftTokenBudget,
    ) -> Result<Vec<(AttachmentKind, Vec<usize>)>, Error> {
        let stored: Vec<AttachmentRef> = {
            let pending = lock(&self.pending);
            ids.iter()
                .filter_map(|id| pending.get(id).map(|p| p.stored.clone()))
                .collect()
        };
        stored
            .into_iter()
            .map(|file| match file.kind {
                AttachmentKind::Image => {
                    let (width, height) = (file.width.unwrap_or(1), file.height.unwrap_or(1));
                    let n = engine::image::soft_tokens_for(height as usize, width as usize, budget);
                    Ok((AttachmentKind::Image, vec![n]))
                }
                AttachmentKind::Audio => {
                    let prepared = self.pending_prepared(&file)?;
                    let clips = prepared.clips.iter().map(|c| c.soft_tokens).collect();
                    Ok((AttachmentKind::Audio, clips))
                }
            })
            .collect()
    }

    /// A pending recording decoded for the model: from memory when it was decoded lately.
    fn pending_prepared(&self, file: &AttachmentRef) -> Result<Arc<PreparedAudio>, Error> {
        if let Some(prepared) = lock(&self.audio).get(&file.hash) {
            return Ok(prepared.clone());
        }
        let path = self.store.attachments_dir().join(&file.file_name);
        let prepared = engine::audio::prepare_path(&path, &self.audio_limits)
            .map_err(|e| Error::Invalid(format!("the attached audio: {e}")))?;
        let prepared = Arc::new(prepared);
        self.keep_decoded(&file.hash, prepared.clone());
        Ok(prepared)
    }

    /// The bytes of a pending recording, to play it.
    pub fn pending_audio(&self, id: &str) -> Result<Vec<u8>, Error> {
        let file_name = lock(&self.pending)
            .get(id)
            .filter(|p| p.stored.kind == AttachmentKind::Audio)
            .map(|p| p.stored.file_name.clone())
            .ok_or_else(|| Error::Invalid("that recording is no longer attached".into()))?;
        let path = self.store.attachments_dir().join(file_name);
        fs::read(&path)
            .map_err(|e| Error::Invalid(format!("the recording is missing from app data ({e})")))
    }

    /// The bytes of a saved message's recording, to play it.
    pub fn saved_audio(&self, attachment_id: &str) -> Result<Vec<u8>, Error> {
        let path = self.store.attachment_path(attachment_id)?;
        fs::read(&path)
            .map_err(|e| Error::Invalid(format!("the recording is missing from app data ({e})")))
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
        lock(&self.documents).remove(id);
    }

    /// The stored files behind pending ids, in order, ready for `Store::add_message`.
    pub fn resolve(&self, ids: &[String]) -> Result<Vec<AttachmentInput>, Error> {
        let pending = lock(&self.pending);
        ids.iter()
            .map(|id| {
                let file = pending.get(id).ok_or_else(|| {
                    Error::Invalid(
                        "an attached file is no longer available; attach it again".into(),
                    )
                })?;
                Ok(AttachmentInput::from(&file.stored).named(file.name.clone()))
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
    /// Reads a document's text (call it off the UI thread: a long PDF takes seconds; `cancel`
    /// stops it between pages) and keeps it pending; `count` gives its prompt text's tokens.
    /// Recognized by content: a file that is not a document is refused in words.
    pub fn add_document(
        &self,
        name: &str,
        bytes: &[u8],
        cancel: &AtomicBool,
        count: &dyn Fn(&str) -> Result<usize, Error>,
    ) -> Result<PendingDocument, Error> {
        let name = clean_name(name);
        let refuse = |why: String| Error::Invalid(format!("{name}: {why}"));
        if bytes.is_empty() {
            return Err(refuse("the file is empty".into()));
        }
        let document = documents::extract(
            bytes,
            &name,
            &documents::Limits::default(),
            cancel,
            &mut |_| {},
        )
        .map_err(|e| refuse(e.to_string()))?;
        let prompt = document.for_prompt(&name);
        let tokens = count(&prompt)?;
        let hash = {
            use sha2::Digest as _;
            format!("{:x}", sha2::Sha256::digest(bytes))
        };
        let chunks = documents::chunks(&document, CHUNK_CHARS)
            .into_iter()
            .map(|chunk| {
                let (page, lines) = match chunk.location {
                    documents::Location::Page(page) => (Some(page), None),
                    documents::Location::Lines { first, last } => (None, Some((first, last))),
                    documents::Location::Whole => (None, None),
                };
                chats::NewChunk {
                    page,
                    lines,
                    text: chunk.text,
                }
            })
            .collect();
        let shown = PendingDocument {
            id: hash.clone(),
            name: name.clone(),
            format: document.format.label().to_owned(),
            pages: document.pages,
            tokens,
            skipped_pages: document.skipped.iter().map(|s| s.page).collect(),
        };
        let held = HeldDocument {
            shown: shown.clone(),
            stored: chats::NewDocument {
                hash: hash.clone(),
                name,
                format: shown.format.clone(),
                pages: document.pages,
                text: document.text(),
                chunks,
            },
            prompt,
        };
        lock(&self.documents).insert(hash, held);
        Ok(shown)
    }

    /// Whether `id` is a pending document (not an image or recording).
    pub fn is_document(&self, id: &str) -> bool {
        lock(&self.documents).contains_key(id)
    }

    /// The prompt text of the pending documents of `ids`, in order (other ids left out), as it
    /// goes before the message's text.
    pub fn pending_document_text(&self, ids: &[String]) -> String {
        let held = lock(&self.documents);
        ids.iter()
            .filter_map(|id| held.get(id).map(|d| d.prompt.as_str()))
            .collect()
    }

    /// The pending documents of `ids`, in order, ready for `Store::add_message_documents`.
    pub fn resolve_documents(
        &self,
        ids: &[String],
    ) -> Vec<(chats::NewDocument, chats::MessageDocument)> {
        let held = lock(&self.documents);
        ids.iter()
            .filter_map(|id| held.get(id))
            .map(|d| {
                let sent = chats::MessageDocument {
                    hash: d.shown.id.clone(),
                    name: d.shown.name.clone(),
                    pages: d.shown.pages,
                    tokens: u32::try_from(d.shown.tokens).unwrap_or(u32::MAX),
                    prompt: d.prompt.clone(),
                };
                (d.stored.clone(), sent)
            })
            .collect()
    }

    /// Drops documents that were sent or removed.
    pub fn forget_documents(&self, ids: &[String]) {
        let mut held = lock(&self.documents);
        for id in ids {
            held.remove(id);
        }
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
        "pasted file".to_owned()
    } else {
        cleaned
    }
}

/// The largest file of either kind: recordings may be larger than images.
fn max_file_bytes() -> u64 {
    MAX_ATTACHMENT_BYTES.max(audio_limits().max_file_bytes)
}

fn too_big(bytes: u64) -> String {
    format!(
        "is {:.0} MB; images up to {} MB and audio up to {} MB can be attached",
        bytes as f64 / 1e6,
        MAX_ATTACHMENT_BYTES / 1_000_000,
        audio_limits().max_file_bytes / 1_000_000
    )
}

/// The type of a recording the engine decoded, from its first bytes (the engine reads the
/// content, so this only names the stored file).
fn audio_mime(bytes: &[u8]) -> &'static str {
    match bytes {
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'A', b'V', b'E', ..] => "audio/wav",
        [b'f', b'L', b'a', b'C', ..] => "audio/flac",
        [b'O', b'g', b'g', b'S', ..] => "audio/ogg",
        [b'F', b'O', b'R', b'M', _, _, _, _, b'A', b'I', b'F', ..] => "audio/aiff",
        [_, _, _, _, b'f', b't', b'y', b'p', ..] => "audio/mp4",
        [0xFF, 0xF0 | 0xF1 | 0xF8 | 0xF9, ..] => "audio/aac",
        [b'I', b'D', b'3', ..] | [0xFF, 0xE0..=0xFF, ..] => "audio/mpeg",
        _ => "audio/octet-stream",
    }
}

/// `m:ss` (`h:mm:ss` from an hour) of a length in seconds, rounded down.
fn clock(seconds: f64) -> String {
    let total = seconds.max(0.0) as u64;
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// `seconds` of a 440 Hz tone as a mono 16-bit WAV at `rate`.
#[cfg(test)]
pub(crate) fn tone_wav(seconds: f64, rate: u32) -> Vec<u8> {
    let samples = (seconds * rate as f64) as u32;
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + samples * 2).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    for field in [16u32, 1 | (1 << 16), rate, rate * 2, 2 | (16 << 16)] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(samples * 2).to_le_bytes());
    for i in 0..samples {
        let t = i as f64 / rate as f64;
        let sample = (0.3 * (2.0 * std::f64::consts::PI * 440.0 * t).sin() * 32767.0) as i16;
        out.extend_from_slice(&sample.to_le_bytes());
    }
    out
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
            ("cat.png", Some(640), Some(480))
        );
        assert_eq!(
            (added.kind, added.mime.as_str()),
            (AttachmentKind::Image, "image/png")
        );
        assert!(added
            .thumbnail
            .as_deref()
            .is_some_and(|t| t.starts_with("data:image/png;base64,")));
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
            errors[0].starts_with("notes.png: ")
                && errors[0].contains("neither an image nor audio"),
            "{errors:?}"
        );
        assert!(errors[1].contains("empty"), "{errors:?}");
        assert!(errors[2].contains("folder"), "{errors:?}");
        assert!(errors[3].contains("gone.png"), "{errors:?}");
    }

    #[test]
    fn oversized_files_are_refused_before_reading() {
        let (dir, attachments) = attachments();
        let big = dir.path().join("huge.wav");
        let file = fs::File::create(&big).unwrap();
        file.set_len(max_file_bytes() + 1).unwrap();

        let err = attachments.add_file(&big).unwrap_err().to_string();

        assert!(err.contains("huge.wav") && err.contains("200 MB"), "{err}");
        // An image has a lower limit than a recording.
        let mut image = png(4, 4);
        image.resize(MAX_ATTACHMENT_BYTES as usize + 1, 0);
        let err = attachments.add_bytes("big.png", &image).unwrap_err();
        assert!(err.to_string().contains("images up to 50 MB"), "{err}");
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
        assert_eq!(added.name, "pasted file");
    }

    #[test]
    fn a_recording_is_kept_as_audio_with_its_length_and_can_be_played_back() {
        let (_dir, attachments) = attachments();
        let bytes = tone_wav(2.5, 16_000);

        let added = attachments
            .add_bytes("Recording 10.30.wav", &bytes)
            .unwrap();

        assert_eq!(
            (added.kind, added.mime.as_str(), added.duration_ms),
            (AttachmentKind::Audio, "audio/wav", Some(2_500))
        );
        assert_eq!(
            (
                added.width,
                added.thumbnail.as_deref(),
                added.notice.as_deref()
            ),
            (None, None, None)
        );
        assert_eq!(attachments.pending_audio(&added.id).unwrap(), bytes);
        let input = &attachments
            .resolve(std::slice::from_ref(&added.id))
            .unwrap()[0];
        assert_eq!(
            (input.kind, input.duration_ms, input.name.as_deref()),
            (
                AttachmentKind::Audio,
                Some(2_500),
                Some("Recording 10.30.wav")
            )
        );
        attachments.remove(&added.id);
        assert!(attachments.pending_audio(&added.id).is_err());
    }

    #[test]
    fn a_recording_longer_than_what_is_heard_says_how_much_is() {
        let (_dir, attachments) = attachments();
        let attachments = attachments.with_audio_limits(AudioLimits {
            max_clips: 1,
            ..AudioLimits::default()
        });

        let added = attachments
            .add_bytes("talk.wav", &tone_wav(45.0, 8_000))
            .unwrap();

        assert_eq!(added.duration_ms, Some(45_000));
        assert_eq!(
            added.notice.as_deref(),
            Some("Only the first 0:30 of 0:45 will be heard.")
        );
    }

    #[test]
    fn broken_or_unusable_audio_is_refused_in_words() {
        let (dir, attachments) = attachments();
        let good = tone_wav(1.0, 16_000);
        let opus = b"OggS\0\x02\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\0\x00\x01\x13OpusHead";
        let cases: [(&str, &[u8], &str); 3] = [
            ("empty.wav", &[], "empty"),
            ("cut.wav", &good[..30], "cut.wav: "),
            ("voice.ogg", opus, "voice.ogg: "),
        ];
        for (name, bytes, expected) in cases {
            let err = attachments.add_bytes(name, bytes).unwrap_err().to_string();
            assert!(
                err.contains(expected) && err.contains(name),
                "{name}: {err}"
            );
        }
        let too_long = attachments.with_audio_limits(AudioLimits {
            max_seconds: 2.0,
            ..AudioLimits::default()
        });
        let err = too_long
            .add_bytes("speech.wav", &tone_wav(3.0, 16_000))
            .unwrap_err();
        assert!(err.to_string().contains("limit is 0:02"), "{err}");
        let data = dir.path().join("data").join(chats::ATTACHMENTS_DIR);
        assert!(walk(&data).is_empty(), "nothing refused is stored");
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
