//! PDF text by page with `pdf-extract` (on `lopdf`): the page count is checked before any page is
//! read, an encrypted PDF is opened with the empty password or refused, each page runs under
//! `catch_unwind` (the crate indexes and unwraps on malformed input), and a page that fails or has
//! no text layer is listed as skipped rather than failing the document.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use lopdf::Document as Pdf;

use crate::extract::{Document, Limits, Location, Progress, Section, Skip, SkippedPage};
use crate::{Error, Format};

pub(crate) fn extract(
    bytes: &[u8],
    limits: &Limits,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Document, Error> {
    let pdf = open(bytes)?;
    let pages: Vec<u32> = pdf.get_pages().keys().copied().collect();
    let count = u32::try_from(pages.len()).unwrap_or(u32::MAX);
    if count > limits.max_pages {
        return Err(Error::TooManyPages {
            pages: count,
            limit: limits.max_pages,
        });
    }
    let mut sections = Vec::new();
    let mut skipped = Vec::new();
    let mut chars = 0usize;
    for (done, &page) in pages.iter().enumerate() {
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::Cancelled);
        }
        match page_text(&pdf, page) {
            Ok(text) if text.trim().is_empty() => skipped.push(SkippedPage {
                page,
                why: Skip::NoText,
            }),
            Ok(text) => {
                chars += text.len();
                if chars > limits.max_chars.saturating_mul(4) {
                    return Err(Error::TooMuchText {
                        chars,
                        limit: limits.max_chars,
                    });
                }
                sections.push(Section {
                    location: Location::Page(page),
                    text: tidy(&text),
                });
            }
            Err(why) => skipped.push(SkippedPage {
                page,
                why: Skip::Unreadable(why),
            }),
        }
        progress(Progress {
            done: done as u64 + 1,
            total: pages.len() as u64,
        });
    }
    Ok(Document {
        format: Format::Pdf,
        sections,
        pages: Some(count),
        skipped,
    })
}

/// The parsed file, decrypted with the empty password where it is encrypted without one.
fn open(bytes: &[u8]) -> Result<Pdf, Error> {
    let loaded = catch_unwind(|| Pdf::load_mem(bytes)).map_err(|p| Error::DamagedPdf {
        detail: panic_words(&p),
    })?;
    let mut pdf = loaded.map_err(|e| match e {
        lopdf::Error::Decryption(_) | lopdf::Error::InvalidPassword => Error::Encrypted,
        e => Error::DamagedPdf {
            detail: e.to_string(),
        },
    })?;
    if pdf.is_encrypted() {
        let decrypted =
            catch_unwind(AssertUnwindSafe(|| pdf.decrypt(""))).map_err(|p| Error::DamagedPdf {
                detail: panic_words(&p),
            })?;
        decrypted.map_err(|_| Error::Encrypted)?;
    }
    Ok(pdf)
}

fn page_text(pdf: &Pdf, page: u32) -> Result<String, String> {
    let mut text = String::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut output = pdf_extract::PlainTextOutput::new(&mut text);
        pdf_extract::output_doc_page(pdf, &mut output, page)
    }));
    match outcome {
        Ok(Ok(())) => Ok(text),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(panic_words(&p)),
    }
}

/// Trailing spaces off each line, runs of blank lines down to one.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.trim().lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out
}

fn panic_words(payload: &Box<dyn std::any::Any + Send>) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into());
    format!("the PDF reader failed on malformed content ({what})")
}
