//! DOCX with `zip` and `quick-xml`: the archive's declared sizes are checked against the limits
//! before anything is unpacked, word/document.xml is unpacked through a counting reader (declared
//! sizes can lie), and its events become paragraphs. Entities are never expanded: a DOCTYPE that
//! declares any is refused, and a reference to an undeclared entity is an error of the file.

use std::io::{Cursor, Read};

use quick_xml::events::Event;
use quick_xml::Reader;

use crate::extract::{Document, Limits, Location, Section};
use crate::{Error, Format};

const BODY: &str = "word/document.xml";

pub(crate) fn extract(bytes: &[u8], limits: &Limits) -> Result<Document, Error> {
    let damaged = |e: zip::result::ZipError| Error::DamagedDocx {
        detail: e.to_string(),
    };
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(damaged)?;
    let limit = unpack_limit(bytes.len() as u64, limits);
    let mut declared = 0u64;
    let mut has_body = false;
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(damaged)?;
        declared = declared.saturating_add(entry.size());
        has_body |= entry.name().is_ok_and(|n| n == BODY);
    }
    if declared > limit {
        return Err(Error::ZipBomb {
            unpacked: declared,
            limit,
            ratio: limits.max_unpack_ratio,
        });
    }
    if !has_body {
        return Err(Error::Unsupported {
            what: "a ZIP archive that is not a Word document".into(),
        });
    }
    let entry = archive.by_name(BODY).map_err(damaged)?;
    let mut xml = Vec::new();
    entry
        .take(limit + 1)
        .read_to_end(&mut xml)
        .map_err(|e| Error::DamagedDocx {
            detail: e.to_string(),
        })?;
    if xml.len() as u64 > limit {
        return Err(Error::ZipBomb {
            unpacked: xml.len() as u64,
            limit,
            ratio: limits.max_unpack_ratio,
        });
    }
    let xml = std::str::from_utf8(&xml).map_err(|e| Error::DamagedDocx {
        detail: format!("{BODY} is not UTF-8 ({e})"),
    })?;
    let text = paragraphs(xml)?;
    Ok(Document {
        format: Format::Docx,
        sections: vec![Section {
            location: Location::Whole,
            text,
        }],
        pages: None,
        skipped: Vec::new(),
    })
}

/// The most a DOCX of `packed` bytes may unpack to.
fn unpack_limit(packed: u64, limits: &Limits) -> u64 {
    limits
        .max_unpacked_bytes
        .min(packed.saturating_mul(limits.max_unpack_ratio).max(1 << 20))
}

/// The body's text: one line per paragraph, headings marked as Markdown (`#` per level), tabs and
/// breaks kept, table cells separated by tabs.
fn paragraphs(xml: &str) -> Result<String, Error> {
    let bad = |e: quick_xml::Error| Error::DamagedDocx {
        detail: format!("{BODY}: {e}"),
    };
    let mut reader = Reader::from_str(xml);
    let mut out = String::new();
    let mut paragraph = String::new();
    let mut heading = 0usize;
    let mut in_text = false;
    loop {
        match reader.read_event().map_err(bad)? {
            Event::DocType(d) if d.xml10_content().contains("ENTITY") => {
                return Err(Error::XmlEntities)
            }
            Event::Start(e) => match e.local_name().as_ref() {
                "t" => in_text = true,
                "p" => {
                    paragraph.clear();
                    heading = 0;
                }
                _ => {}
            },
            Event::Empty(e) => match e.local_name().as_ref() {
                "tab" => paragraph.push('\t'),
                "br" | "cr" => paragraph.push('\n'),
                "pStyle" => {
                    if let Ok(Some(style)) = e.try_get_attribute("w:val") {
                        heading = heading_level(&style.value);
                    }
                }
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_text = false,
                "tc" => out.push('\t'),
                "p" => {
                    let line = paragraph.trim_end();
                    if !line.is_empty() {
                        if heading > 0 {
                            out.push_str(&"#".repeat(heading));
                            out.push(' ');
                        }
                        out.push_str(line);
                        out.push('\n');
                    }
                    paragraph.clear();
                }
                "tr" => out.push('\n'),
                _ => {}
            },
            Event::Text(t) if in_text => paragraph.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_text => {
                if let Some(c) = r.resolve_char_ref().map_err(bad)? {
                    paragraph.push(c);
                } else {
                    let name = r.xml10_content();
                    let resolved =
                        quick_xml::escape::resolve_predefined_entity(&name).ok_or_else(|| {
                            Error::DamagedDocx {
                                detail: format!("{BODY}: undeclared entity &{name};"),
                            }
                        })?;
                    paragraph.push_str(resolved);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(out.trim_end().to_string())
}

/// `Heading1` … `Heading9` (Word's built-in styles) → 1 … 9; `Title` → 1; anything else → 0.
fn heading_level(style: &str) -> usize {
    if style == "Title" {
        return 1;
    }
    style
        .strip_prefix("Heading")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| (1..=9).contains(n))
        .unwrap_or(0)
}
