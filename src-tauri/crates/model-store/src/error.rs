//! Why a download stopped: the one error every step of a download (listing, HTTP, writing)
//! reports, in words a user can act on.

use std::io;
use std::path::PathBuf;

use super::disk::human_size;

/// Why a download stopped, in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("\"{repo}\" is not a Hugging Face repository id (like org/name)")]
    BadRepo { repo: String },
    #[error("cannot reach {host}; check the internet connection")]
    Unreachable { host: String },
    #[error("{host} sent nothing for {seconds} seconds; the download can resume where it stopped")]
    Stalled { host: String, seconds: u64 },
    #[error("the connection to {host} was interrupted; the download can resume where it stopped")]
    Interrupted { host: String },
    #[error("network error with {host}: {message}")]
    Network { host: String, message: String },
    #[error("HTTP {status} from {url}{}", status_hint(*status))]
    Http { status: u16, url: String },
    #[error("the file list of {repo} is unusable: {message}")]
    BadListing { repo: String, message: String },
    #[error("{file} arrived damaged twice (its SHA-256 checksum does not match)")]
    ChecksumMismatch { file: String },
    #[error("{file} arrived with the wrong size twice")]
    SizeMismatch { file: String },
    #[error("not enough disk space: need {} more", human_size(*need_bytes))]
    DiskFull { need_bytes: u64 },
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} already exists and is not a complete Gemma 4 model; move it away and try again", path.display())]
    DestinationExists { path: PathBuf },
    #[error("{name} is already being downloaded")]
    AlreadyRunning { name: String },
    #[error("the download was cancelled")]
    Cancelled,
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " (the repository is private or gated)",
        404 => " (not found)",
        429 => " (too many requests; try again later)",
        500..=599 => " (a problem on the server; try again later)",
        _ => "",
    }
}
