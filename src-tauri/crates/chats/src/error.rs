//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

/// Everything the chat store can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A conversation, message, attachment or file that the caller named does not exist.
    #[error("this {what} no longer exists")]
    NotFound {
        /// What was looked up, e.g. "conversation".
        what: &'static str,
        /// The id (or hash) that was looked up.
        id: String,
    },
    /// SQLite refused or failed an operation.
    #[error("the conversation history could not be read or written while {op}: {source}")]
    Sqlite {
        /// What the store was doing, e.g. "listing conversations".
        op: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    /// A file or folder could not be read or written.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// What the store was doing, e.g. "write attachment".
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The database was written by a newer Gemma Desk; it is left untouched rather than downgraded.
    #[error(
        "the conversation history {} was written by a newer Gemma Desk (format {found}; this \
         version reads up to {supported}); update the app to open it",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        /// `PRAGMA user_version` of the file.
        found: i64,
        /// The newest version this code can migrate to.
        supported: i64,
    },
    /// The caller passed something the store cannot accept (an empty attachment, a bad mime type...).
    #[error("{0}")]
    InvalidInput(String),
    /// A file to import is not a Gemma Desk export this version can read; nothing was changed.
    #[error("this file cannot be imported, nothing was changed: {0}")]
    BadExport(String),
    /// A setting could not be converted to or from JSON.
    #[error("the saved setting \"{key}\" could not be read: {source}")]
    Setting {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// SQLite errors bubble up with a generic operation; [`Error::during`] names the real one.
impl From<rusqlite::Error> for Error {
    fn from(source: rusqlite::Error) -> Self {
        Self::Sqlite {
            op: "accessing the database",
            source,
        }
    }
}

impl Error {
    /// Names the store operation a SQLite error happened in; other errors pass through.
    pub(crate) fn during(self, op: &'static str) -> Self {
        match self {
            Self::Sqlite { source, .. } => Self::Sqlite { op, source },
            other => other,
        }
    }

    /// Wraps an I/O error with what was being done to which path.
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn not_found(what: &'static str, id: impl Into<String>) -> Self {
        Self::NotFound {
            what,
            id: id.into(),
        }
    }
}
