//! One entry point: limits checked first, the format recognized, the text extracted by the format's
//! reader with progress and a cancel flag, the result counted against the text limit.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{detect, docx, pdf, text, Error, Format};

/// Limits checked before (and while) extracting: a file past any of them is refused in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The file's size in bytes, checked before it is read.
    pub max_bytes: u64,
    /// A PDF's page count, checked after its cross-reference table is read and before any page is.
    pub max_pages: u32,
    /// What a DOCX may unpack to, in bytes, counted while it is unpacked (declared sizes can lie).
    pub max_unpacked_bytes: u64,
    /// What a DOCX may unpack to, as a multiple of its packed size (ZIP bombs pack ~1000×).
    pub max_unpack_ratio: u64,
    /// The extracted text, in characters.
    pub max_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 64 << 20,
            max_pages: 2000,
            max_unpacked_bytes: 256 << 20,
            max_unpack_ratio: 200,
            max_chars: 16 << 20,
        }
    }
}

/// Where a section's text sits in the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// A PDF page, counted from 1.
    Page(u32),
    /// Lines of a text file, counted from 1, both ends included.
    Lines { first: u32, last: u32 },
    /// The whole document (DOCX, HTML: no pages or lines of the original to point at).
    Whole,
}

/// A run of the document's text with its place in the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub location: Location,
    pub text: String,
}

/// Why a PDF page gave no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The page has no text layer (a scan, a slide as an image).
    NoText,
    /// The page could not be read; the words say why.
    Unreadable(String),
}

/// A PDF page left out of the text, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedPage {
    pub page: u32,
    pub why: Skip,
}

/// A document's extracted text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub format: Format,
    /// PDF: one per page with text, in page order. Other formats: one section.
    pub sections: Vec<Section>,
    /// A PDF's page count (pages with and without text).
    pub pages: Option<u32>,
    /// PDF pages without text, or that could not be read.
    pub skipped: Vec<SkippedPage>,
}

impl Document {
    /// The text of every section in order, sections separated by a blank line.
    pub fn text(&self) -> String {
        let parts: Vec<&str> = self.sections.iter().map(|s| s.text.as_str()).collect();
        parts.join("\n\n")
    }

    /// The text as it goes into a prompt: a header naming the file (and pages without text),
    /// then each PDF page after a `[page N]` line. The text is data: the prompt path keeps any
    /// control-token text in it as text.
    pub fn for_prompt(&self, name: &str) -> String {
        let mut out = format!("Attached document: {name} ({}", self.format.label());
        if let Some(pages) = self.pages {
            out.push_str(&format!(", {pages} pages"));
        }
        if !self.skipped.is_empty() {
            let list: Vec<String> = self.skipped.iter().map(|s| s.page.to_string()).collect();
            out.push_str(&format!(
                "; pages without text, skipped: {}",
                list.join(", ")
            ));
        }
        out.push_str(")\n");
        for section in &self.sections {
            if let Location::Page(page) = section.location {
                out.push_str(&format!("\n[page {page}]\n"));
            }
            out.push_str(&section.text);
            out.push('\n');
        }
        out
    }

    /// The number of characters of text.
    pub fn chars(&self) -> usize {
        self.sections.iter().map(|s| s.text.chars().count()).sum()
    }
}

/// How far extraction has come: pages of a PDF, bytes of other files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

/// The text of `bytes`, recognized by content (`filename` refines text formats only).
/// `cancel` is read between pages; `progress` hears of each page of a PDF.
pub fn extract(
    bytes: &[u8],
    filename: &str,
    limits: &Limits,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Document, Error> {
    if bytes.len() as u64 > limits.max_bytes {
        return Err(Error::TooLarge {
            bytes: bytes.len() as u64,
            limit: limits.max_bytes,
        });
    }
    let format = detect(bytes, filename)?;
    let document = match format {
        Format::Pdf => pdf::extract(bytes, limits, cancel, progress)?,
        Format::Docx => docx::extract(bytes, limits)?,
        Format::Html => text::html(bytes)?,
        other => text::plain(bytes, other)?,
    };
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::Cancelled);
    }
    let chars = document.chars();
    if chars > limits.max_chars {
        return Err(Error::TooMuchText {
            chars,
            limit: limits.max_chars,
        });
    }
    let total = bytes.len() as u64;
    if format != Format::Pdf {
        progress(Progress { done: total, total });
    }
    Ok(document)
}

/// [`extract`] on a file: its size is checked before it is read, and a file whose size or
/// modification time changed while it was read is refused (it was being written).
pub fn extract_file(
    path: &Path,
    limits: &Limits,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Document, Error> {
    let io = |e: std::io::Error| Error::Io {
        detail: e.to_string(),
    };
    let before = std::fs::metadata(path).map_err(io)?;
    if before.len() > limits.max_bytes {
        return Err(Error::TooLarge {
            bytes: before.len(),
            limit: limits.max_bytes,
        });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let after = std::fs::metadata(path).map_err(io)?;
    if after.len() != bytes.len() as u64 || before.modified().ok() != after.modified().ok() {
        return Err(Error::Changed);
    }
    let filename = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    extract(&bytes, &filename, limits, cancel, progress)
}
