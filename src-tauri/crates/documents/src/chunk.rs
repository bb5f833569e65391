//! Chunks for retrieval, cut by the document's structure: never across a PDF page, a new chunk at
//! each heading, whole paragraphs (blank-line separated blocks: in code, mostly whole functions)
//! packed up to a size, a block longer than that cut at lines. Each chunk keeps its page or lines.

use crate::extract::{Document, Location};

/// A piece of a document's text with its place in the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub location: Location,
    pub text: String,
}

/// The document's chunks of about `target_chars` characters each (at most that, unless a single
/// line is longer, which is cut at `target_chars`).
pub fn chunks(doc: &Document, target_chars: usize) -> Vec<Chunk> {
    let target = target_chars.max(64);
    let mut out = Vec::new();
    for section in &doc.sections {
        let first_line = match section.location {
            Location::Lines { first, .. } => Some(first),
            _ => None,
        };
        let place = |from: usize, to: usize| match (section.location, first_line) {
            (_, Some(first)) => Location::Lines {
                first: first + from as u32,
                last: first + to as u32,
            },
            (other, None) => other,
        };
        let mut current = String::new();
        let mut start = 0usize; // first line of `current`, counted from 0 within the section
        let mut end = 0usize;
        let flush = |current: &mut String, start: usize, end: usize, out: &mut Vec<Chunk>| {
            if !current.trim().is_empty() {
                out.push(Chunk {
                    location: place(start, end),
                    text: current.trim_end().to_string(),
                });
            }
            current.clear();
        };
        for (block_start, block) in blocks(&section.text) {
            let block_end = block_start + block.lines().count().saturating_sub(1);
            let heading = block.starts_with('#');
            if !current.is_empty() && (heading || current.len() + block.len() + 2 > target) {
                flush(&mut current, start, end, &mut out);
            }
            if block.len() > target {
                for (offset, piece) in split_long(block, target) {
                    let piece_end = block_start + offset + piece.lines().count().saturating_sub(1);
                    out.push(Chunk {
                        location: place(block_start + offset, piece_end),
                        text: piece,
                    });
                }
                continue;
            }
            if current.is_empty() {
                start = block_start;
            } else {
                current.push_str("\n\n");
            }
            current.push_str(block);
            end = block_end;
        }
        flush(&mut current, start, end, &mut out);
    }
    out
}

/// The text's blank-line separated blocks, each with the number (from 0) of its first line.
fn blocks(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut begin: Option<(usize, usize)> = None; // (line number, byte offset)
    let mut offset = 0;
    let mut last_end = 0;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if line.trim().is_empty() {
            if let Some((first, from)) = begin.take() {
                out.push((first, text[from..last_end].trim_end()));
            }
        } else {
            begin.get_or_insert((n, offset));
            last_end = offset + line.len();
        }
        offset += line.len();
    }
    if let Some((first, from)) = begin {
        out.push((first, text[from..last_end].trim_end()));
    }
    out
}

/// A block longer than `target` in pieces of whole lines (a line longer than `target` in pieces
/// cut at character boundaries), each with the number of its first line within the block.
fn split_long(block: &str, target: usize) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut first = 0;
    for (n, line) in block.lines().enumerate() {
        if !current.is_empty() && current.len() + line.len() + 1 > target {
            out.push((first, std::mem::take(&mut current)));
        }
        if current.is_empty() {
            first = n;
        }
        if line.len() > target {
            let mut rest = line;
            while !rest.is_empty() {
                let mut cut = rest.len().min(target);
                while !rest.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push((n, rest[..cut].to_string()));
                rest = &rest[cut..];
            }
            continue;
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        out.push((first, current));
    }
    out
}
