//! UTF-8 texts (Markdown, code, CSV, JSON, plain) kept as they are, with their line numbers;
//! HTML turned into text by `html2text` (scripts and styles dropped, links kept as references).

use crate::extract::{Document, Location, Section};
use crate::{Error, Format};

/// Wide enough that html2text never wraps a paragraph: lines stay as the page wrote them.
const HTML_WIDTH: usize = 10_000;

pub(crate) fn plain(bytes: &[u8], format: Format) -> Result<Document, Error> {
    let text = std::str::from_utf8(bytes).map_err(|e| Error::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines = u32::try_from(text.lines().count())
        .unwrap_or(u32::MAX)
        .max(1);
    Ok(Document {
        format,
        sections: vec![Section {
            location: Location::Lines {
                first: 1,
                last: lines,
            },
            text: text.to_string(),
        }],
        pages: None,
        skipped: Vec::new(),
    })
}

pub(crate) fn html(bytes: &[u8]) -> Result<Document, Error> {
    let outcome = std::panic::catch_unwind(|| html2text::from_read(bytes, HTML_WIDTH));
    let text = match outcome {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => {
            return Err(Error::Unsupported {
                what: format!("HTML that could not be read ({e})"),
            })
        }
        Err(_) => {
            return Err(Error::Unsupported {
                what: "HTML that could not be read".into(),
            })
        }
    };
    Ok(Document {
        format: Format::Html,
        sections: vec![Section {
            location: Location::Whole,
            text: text.trim_end().to_string(),
        }],
        pages: None,
        skipped: Vec::new(),
    })
}
