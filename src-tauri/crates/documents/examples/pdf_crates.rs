//! The PDF crates side by side on a corpus: for each PDF, what `documents` (pdf-extract on lopdf),
//! lopdf's own `extract_text` and pdf_oxide get — pages, characters, milliseconds, and the share
//! of the words `pdftotext` (poppler, where installed) finds that each one finds too.
//!
//! cargo run -p documents --features compare --example pdf_crates -- DIR... > table.md
//! (docs/DOCUMENTS.md has the table and the choice it made.)

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

struct Outcome {
    pages: usize,
    chars: usize,
    ms: f64,
    words: Option<f64>,
    error: Option<String>,
}

fn main() -> anyhow::Result<()> {
    std::panic::set_hook(Box::new(|_| {}));
    let mut files = Vec::new();
    for dir in std::env::args().skip(1) {
        collect(Path::new(&dir), &mut files);
    }
    files.sort();
    let crates = ["pdf-extract", "lopdf", "pdf_oxide"];
    let mut totals: Vec<(usize, usize, usize, f64, f64, usize)> = vec![(0, 0, 0, 0.0, 0.0, 0); 3];
    println!(
        "| file | producer | pdftotext words | {} |",
        crates
            .map(|c| format!("{c}: pages / chars / ms / words found"))
            .join(" | ")
    );
    println!("|---|---|---|---|---|---|");
    for file in &files {
        let bytes = std::fs::read(file)?;
        let reference = pdftotext(file);
        REFERENCE.with(|r| *r.borrow_mut() = reference.clone());
        let outcomes = [
            with_documents(&bytes),
            with_lopdf(&bytes),
            with_oxide(&bytes),
        ];
        let mut cells = Vec::new();
        for (i, mut o) in outcomes.into_iter().enumerate() {
            let t = &mut totals[i];
            if let Some(e) = &o.error {
                t.1 += 1;
                cells.push(format!(
                    "fails: {}",
                    e.chars().take(60).collect::<String>().replace('|', "/")
                ));
                continue;
            }
            t.0 += 1;
            t.2 += o.chars;
            t.3 += o.ms;
            if let (Some(reference), Some(found)) = (&reference, o.words.take()) {
                let share = found_share(reference, found);
                t.4 += share;
                t.5 += 1;
                o.words = Some(share);
            }
            let words = o
                .words
                .map(|w| format!("{:.0} %", w * 100.0))
                .unwrap_or_else(|| "–".into());
            cells.push(format!("{} / {} / {:.0} / {words}", o.pages, o.chars, o.ms));
        }
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let words = reference
            .as_ref()
            .map(|r| r.values().sum::<usize>().to_string())
            .unwrap_or_else(|| "–".into());
        println!(
            "| {name} | {} | {words} | {} |",
            producer(&bytes),
            cells.join(" | ")
        );
    }
    println!();
    println!("| crate | PDFs read | failed | chars | ms | mean share of pdftotext's words |");
    println!("|---|---|---|---|---|---|");
    for (c, t) in crates.iter().zip(&totals) {
        let mean = if t.5 > 0 {
            format!("{:.1} % of {}", 100.0 * t.4 / t.5 as f64, t.5)
        } else {
            "–".into()
        };
        println!(
            "| {c} | {} | {} | {} | {:.0} | {mean} |",
            t.0, t.1, t.2, t.3
        );
    }
    Ok(())
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pdf"))
        {
            files.push(path);
        }
    }
}

type Words = HashMap<String, usize>;

fn words(text: &str) -> Words {
    let mut w = Words::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 1)
    {
        *w.entry(word.to_lowercase()).or_default() += 1;
    }
    w
}

/// The share of `reference`'s words (with multiplicity) that `found` has too.
fn found_share(reference: &Words, found: f64) -> f64 {
    let total: usize = reference.values().sum();
    if total == 0 {
        1.0
    } else {
        found / total as f64
    }
}

fn overlap(reference: &Option<Words>, text: &str) -> Option<f64> {
    let reference = reference.as_ref()?;
    let got = words(text);
    Some(
        reference
            .iter()
            .map(|(w, n)| (*n).min(got.get(w).copied().unwrap_or(0)))
            .sum::<usize>() as f64,
    )
}

fn pdftotext(file: &Path) -> Option<Words> {
    let out = Command::new("pdftotext")
        .arg("-q")
        .arg(file)
        .arg("-")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| words(&String::from_utf8_lossy(&out.stdout)))
}

fn timed(
    f: impl FnOnce() -> Result<(usize, String), String>,
    reference: &Option<Words>,
) -> Outcome {
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err("panicked".into()));
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok((pages, text)) => Outcome {
            pages,
            chars: text.chars().count(),
            ms,
            words: overlap(reference, &text),
            error: None,
        },
        Err(e) => Outcome {
            pages: 0,
            chars: 0,
            ms,
            words: None,
            error: Some(e),
        },
    }
}

thread_local! {
    static REFERENCE: std::cell::RefCell<Option<Words>> = const { std::cell::RefCell::new(None) };
}

fn with_documents(bytes: &[u8]) -> Outcome {
    let reference = REFERENCE.with(|r| r.borrow().clone());
    timed(
        || {
            let cancel = AtomicBool::new(false);
            let doc = documents::extract(
                bytes,
                "x.pdf",
                &documents::Limits::default(),
                &cancel,
                &mut |_| {},
            )
            .map_err(|e| e.to_string())?;
            Ok((doc.pages.unwrap_or(0) as usize, doc.text()))
        },
        &reference,
    )
}

fn with_lopdf(bytes: &[u8]) -> Outcome {
    let reference = REFERENCE.with(|r| r.borrow().clone());
    timed(
        || {
            let doc = lopdf::Document::load_mem(bytes).map_err(|e| e.to_string())?;
            let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
            let text = pages
                .iter()
                .filter_map(|p| doc.extract_text(&[*p]).ok())
                .collect::<Vec<_>>()
                .join("\n");
            Ok((pages.len(), text))
        },
        &reference,
    )
}

fn with_oxide(bytes: &[u8]) -> Outcome {
    let reference = REFERENCE.with(|r| r.borrow().clone());
    timed(
        || {
            let doc =
                pdf_oxide::PdfDocument::from_bytes(bytes.to_vec()).map_err(|e| e.to_string())?;
            let pages = doc.page_count().map_err(|e| e.to_string())?;
            let text = (0..pages)
                .filter_map(|p| doc.extract_text(p).ok())
                .collect::<Vec<_>>()
                .join("\n");
            Ok((pages, text))
        },
        &reference,
    )
}

fn producer(bytes: &[u8]) -> String {
    let Ok(Ok(doc)) = catch_unwind(|| lopdf::Document::load_mem(bytes)) else {
        return "?".into();
    };
    let info = doc
        .trailer
        .get(b"Info")
        .ok()
        .and_then(|i| i.as_reference().ok())
        .and_then(|r| doc.get_dictionary(r).ok());
    let Some(info) = info else {
        return "–".into();
    };
    let p = info
        .get(b"Producer")
        .ok()
        .and_then(|p| p.as_str().ok())
        .map(text_string);
    p.unwrap_or_else(|| "–".into())
        .chars()
        .filter(|c| !c.is_control() && *c != '|')
        .take(40)
        .collect()
}

/// A PDF text string: UTF-16BE after a byte-order mark, else one byte a character.
fn text_string(bytes: &[u8]) -> String {
    match bytes.strip_prefix(&[0xfe, 0xff]) {
        Some(utf16) => {
            let units: Vec<u16> = utf16
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        None => bytes.iter().map(|&b| b as char).collect(),
    }
}
