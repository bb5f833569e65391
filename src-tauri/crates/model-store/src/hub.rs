//! The Hugging Face hub's HTTP layout: a repository's file list and each file's address.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Deserialize;

use super::error::DownloadError;
use super::http::Client;

/// The public hub.
const HUGGING_FACE: &str = "https://huggingface.co";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest file-list page accepted.
const LISTING_LIMIT: usize = 32 << 20;
/// Most file-list pages followed.
const LISTING_PAGES: usize = 100;

/// A hub to download from: its base URL and the network timeouts.
#[derive(Clone)]
pub struct Hub {
    base: String,
    connect: Duration,
    stall: Duration,
}

/// One file of a repository, as the hub lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Path inside the repository, `/`-separated.
    pub path: String,
    pub size: u64,
    /// SHA-256 (lowercase hex) of Git LFS files; other files are checked by size.
    pub sha256: Option<String>,
}

#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: EntryKind,
    path: String,
    #[serde(default)]
    size: u64,
    lfs: Option<LfsPointer>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum EntryKind {
    File,
    Directory,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct LfsPointer {
    oid: String,
    size: u64,
}

impl Default for Hub {
    fn default() -> Self {
        Self::new(HUGGING_FACE)
    }
}

impl Hub {
    /// A hub at `base` (e.g. `https://huggingface.co`), with 15 s to connect and 30 s of silence
    /// allowed before a transfer counts as stalled.
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_string(),
            connect: CONNECT_TIMEOUT,
            stall: STALL_TIMEOUT,
        }
    }

    /// Replaces the time a connection may stay silent before the download fails.
    pub fn stall_timeout(mut self, stall: Duration) -> Self {
        self.stall = stall;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub(crate) fn client(&self) -> Client {
        Client::new(self.connect, self.stall)
    }

    /// Every file of `repo` at `revision`, sorted by path.
    pub(crate) fn list_files(
        &self,
        client: &Client,
        repo: &str,
        revision: &str,
        cancel: &AtomicBool,
    ) -> Result<Vec<RepoFile>, DownloadError> {
        let mut url = format!(
            "{}/api/models/{repo}/tree/{}?recursive=true",
            self.base,
            encode_segment(revision)
        );
        let mut files = Vec::new();
        for _ in 0..LISTING_PAGES {
            let mut response = client.get(&url, 0, cancel)?;
            if response.status != 200 {
                return Err(response.status_error());
            }
            let body = response.read_all(LISTING_LIMIT, cancel)?;
            let entries: Vec<TreeEntry> =
                serde_json::from_slice(&body).map_err(|e| DownloadError::BadListing {
                    repo: repo.to_string(),
                    message: e.to_string(),
                })?;
            for entry in entries {
                if let Some(file) = repo_file(entry, repo)? {
                    files.push(file);
                }
            }
            match response.next_page.take() {
                Some(next) => url = next,
                None => {
                    files.sort_by(|a, b| a.path.cmp(&b.path));
                    files.dedup_by(|a, b| a.path == b.path);
                    return Ok(files);
                }
            }
        }
        Err(DownloadError::BadListing {
            repo: repo.to_string(),
            message: format!("it has more than {LISTING_PAGES} pages"),
        })
    }

    /// The address of one file (the hub redirects large files to its CDN).
    pub(crate) fn file_url(&self, repo: &str, revision: &str, path: &str) -> String {
        let path: Vec<String> = path.split('/').map(encode_segment).collect();
        format!(
            "{}/{repo}/resolve/{}/{}",
            self.base,
            encode_segment(revision),
            path.join("/")
        )
    }
}

/// A listed file, checked to stay inside the download folder; folders give `None`.
fn repo_file(entry: TreeEntry, repo: &str) -> Result<Option<RepoFile>, DownloadError> {
    match entry.kind {
        EntryKind::File => {}
        EntryKind::Directory | EntryKind::Other => return Ok(None),
    }
    let safe = !entry.path.is_empty()
        && !entry.path.contains('\\')
        && !entry.path.contains('\0')
        && entry
            .path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
    if !safe {
        return Err(DownloadError::BadListing {
            repo: repo.to_string(),
            message: format!("it names an unsafe path \"{}\"", entry.path),
        });
    }
    let (size, sha256) = match entry.lfs {
        Some(lfs) => {
            let oid = lfs.oid.to_ascii_lowercase();
            let hex = oid.len() == 64 && oid.bytes().all(|b| b.is_ascii_hexdigit());
            if !hex {
                return Err(DownloadError::BadListing {
                    repo: repo.to_string(),
                    message: format!("the checksum of {} is not a SHA-256", entry.path),
                });
            }
            (lfs.size, Some(oid))
        }
        None => (entry.size, None),
    };
    Ok(Some(RepoFile {
        path: entry.path,
        size,
        sha256,
    }))
}

/// Percent-encodes one path segment (everything but RFC 3986's unreserved characters).
fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_encoded_per_segment() {
        let hub = Hub::new("https://huggingface.co/");
        assert_eq!(
            hub.file_url("org/repo", "refs/pr/1", "sub dir/a+b.json"),
            "https://huggingface.co/org/repo/resolve/refs%2Fpr%2F1/sub%20dir/a%2Bb.json"
        );
    }

    #[test]
    fn listed_paths_must_stay_inside_the_folder() {
        let entry = |path: &str| TreeEntry {
            kind: EntryKind::File,
            path: path.into(),
            size: 1,
            lfs: None,
        };
        for bad in ["../x", "a/../../x", "/etc/passwd", "a//b", "a\\b", ""] {
            assert!(repo_file(entry(bad), "r").is_err(), "{bad}");
        }
        assert!(repo_file(entry("sub/config.json"), "r").is_ok_and(|f| f.is_some()));
    }
}
