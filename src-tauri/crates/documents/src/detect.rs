//! Recognizing a document by its content: magic bytes first (PDF, ZIP, images, archives), then
//! whether the bytes are UTF-8 text. The file name only refines text (Markdown, code, CSV, JSON).

use crate::Error;

/// The kinds of document the app reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pdf,
    Docx,
    Html,
    Markdown,
    /// Source code: its sections keep line numbers.
    Code,
    Csv,
    Json,
    Text,
}

impl Format {
    /// A short name for chips and errors.
    pub fn label(self) -> &'static str {
        match self {
            Format::Pdf => "PDF",
            Format::Docx => "Word document",
            Format::Html => "HTML",
            Format::Markdown => "Markdown",
            Format::Code => "code",
            Format::Csv => "CSV",
            Format::Json => "JSON",
            Format::Text => "text",
        }
    }
}

/// File name endings read as source code (their text is UTF-8 either way; this only decides that
/// sections keep line numbers).
const CODE_EXTENSIONS: &[&str] = &[
    "rs",
    "py",
    "js",
    "mjs",
    "cjs",
    "ts",
    "tsx",
    "jsx",
    "c",
    "h",
    "cc",
    "cpp",
    "cxx",
    "hpp",
    "hh",
    "m",
    "mm",
    "swift",
    "go",
    "java",
    "kt",
    "kts",
    "scala",
    "rb",
    "php",
    "pl",
    "pm",
    "lua",
    "sh",
    "bash",
    "zsh",
    "fish",
    "ps1",
    "r",
    "jl",
    "hs",
    "ml",
    "mli",
    "ex",
    "exs",
    "erl",
    "clj",
    "cs",
    "fs",
    "dart",
    "zig",
    "nim",
    "sql",
    "css",
    "scss",
    "vue",
    "svelte",
    "toml",
    "yaml",
    "yml",
    "ini",
    "cfg",
    "xml",
    "cmake",
    "mk",
    "dockerfile",
    "gradle",
    "proto",
    "tex",
];

/// The format of `bytes`, by content; `filename` only tells Markdown, code, CSV and JSON apart
/// among UTF-8 texts. A ZIP that is not a Word document, an image or any other binary is refused.
pub fn detect(bytes: &[u8], filename: &str) -> Result<Format, Error> {
    if infer::archive::is_pdf(bytes) {
        return Ok(Format::Pdf);
    }
    if infer::archive::is_zip(bytes) {
        return Ok(Format::Docx); // the container is opened by docx.rs, which refuses other ZIPs
    }
    if let Some(kind) = infer::get(bytes) {
        if kind.matcher_type() != infer::MatcherType::Text {
            return Err(Error::Unsupported {
                what: format!("a file of type {}", kind.mime_type()),
            });
        }
    }
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return Err(Error::Unsupported {
            what: "a binary file".into(),
        });
    }
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(Error::NotUtf8 {
            offset: e.valid_up_to(),
        });
    }
    if infer::text::is_html(bytes) {
        return Ok(Format::Html);
    }
    let extension = filename
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    Ok(match extension.as_str() {
        "md" | "markdown" | "mdown" => Format::Markdown,
        "csv" | "tsv" => Format::Csv,
        "json" | "jsonl" | "ndjson" => Format::Json,
        "html" | "htm" | "xhtml" => Format::Html,
        e if CODE_EXTENSIONS.contains(&e) => Format::Code,
        _ => Format::Text,
    })
}
