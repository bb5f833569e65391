//! What can go wrong reading a document, in words a user can act on.

/// Why a document could not be read. Every variant says what was wrong and, where it helps, the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("the file is {bytes} bytes; documents are limited to {limit} bytes")]
    TooLarge { bytes: u64, limit: u64 },
    #[error("the PDF has {pages} pages; documents are limited to {limit} pages")]
    TooManyPages { pages: u32, limit: u32 },
    #[error("{what} is not a document this app reads (PDF, DOCX, HTML, Markdown, code, CSV, JSON or UTF-8 text)")]
    Unsupported { what: String },
    #[error("the file is not UTF-8 text (invalid byte at offset {offset}); save it as UTF-8 and attach it again")]
    NotUtf8 { offset: usize },
    #[error("the PDF is encrypted with a password; open it in a PDF viewer, save an unprotected copy and attach that")]
    Encrypted,
    #[error("the PDF could not be read: {detail}")]
    DamagedPdf { detail: String },
    #[error("the Word document could not be read: {detail}")]
    DamagedDocx { detail: String },
    #[error("the Word document unpacks to {unpacked} bytes, more than the limit of {limit} bytes (or {ratio}× its packed size); it is refused as a possible ZIP bomb")]
    ZipBomb {
        unpacked: u64,
        limit: u64,
        ratio: u64,
    },
    #[error("the Word document declares XML entities; such files are refused (entity expansion can exhaust memory)")]
    XmlEntities,
    #[error(
        "the document's text is {chars} characters; documents are limited to {limit} characters"
    )]
    TooMuchText { chars: usize, limit: usize },
    #[error("reading the document was cancelled")]
    Cancelled,
    #[error("the file changed while it was being read; attach it again once it is saved")]
    Changed,
    #[error("the file could not be read: {detail}")]
    Io { detail: String },
}
