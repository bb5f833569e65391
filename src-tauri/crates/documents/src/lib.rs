//! Documents for the conversation: a file is recognized by its content (magic bytes, then UTF-8),
//! its text extracted with well-kept crates — PDF by page, DOCX paragraphs, HTML as text, Markdown,
//! code (by line), CSV, JSON and plain text — within limits checked before the work starts.
//! Nothing here panics on a file: third-party parsers run under `catch_unwind`. docs/DOCUMENTS.md.

mod chunk;
mod detect;
mod docx;
mod error;
mod extract;
mod pdf;
mod text;

pub use chunk::{chunks, Chunk};
pub use detect::{detect, Format};
pub use error::Error;
pub use extract::{
    extract, extract_file, Document, Limits, Location, Progress, Section, Skip, SkippedPage,
};
