//! Downloading a model repository from the hub into the app's models folder.
//!
//! Files land in `<models>/.downloads/<name>/` as `<file>.part`, appended to across runs and
//! resumed with `Range` requests; each is checked (SHA-256 for LFS files, size for the rest)
//! and renamed to its own name. When all are there the folder moves to `<models>/<name>` in one
//! rename, so a model folder is never half-written.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use super::discovery::check_folder;
use super::disk::{available_space, is_disk_full};
use super::drafter::is_drafter;
use super::error::DownloadError;
use super::http::{host_of, Client};
use super::hub::{Hub, RepoFile};
use super::progress::{DownloadProgress, Meter};

/// The checkpoint the app downloads by default.
pub const DEFAULT_REPO: &str = "mlx-community/gemma-4-e4b-it-4bit";

/// Staging folder inside the models folder (hidden, so discovery skips it).
const STAGING: &str = ".downloads";

/// A download of one repository at one revision into a models folder. Running it again after
/// a failure or a cancel resumes where the last run stopped.
#[derive(Clone)]
pub struct Download {
    hub: Hub,
    repo: String,
    revision: String,
    models_dir: PathBuf,
}

impl Download {
    /// Downloads [`DEFAULT_REPO`] at `main` from huggingface.co into `models_dir`.
    pub fn new(models_dir: impl Into<PathBuf>) -> Self {
        Self {
            hub: Hub::default(),
            repo: DEFAULT_REPO.to_string(),
            revision: "main".to_string(),
            models_dir: models_dir.into(),
        }
    }

    /// Another repository, as `org/name`.
    pub fn repo(mut self, repo: impl Into<String>) -> Self {
        self.repo = repo.into();
        self
    }

    /// A branch, tag or commit.
    pub fn revision(mut self, revision: impl Into<String>) -> Self {
        self.revision = revision.into();
        self
    }

    /// Another hub (a mirror, or a local server in tests).
    pub fn hub(mut self, hub: Hub) -> Self {
        self.hub = hub;
        self
    }

    /// The model's folder name: the repository's name without its owner.
    pub fn name(&self) -> &str {
        self.repo.rsplit('/').next().unwrap_or(&self.repo)
    }

    /// Where the finished model goes.
    pub fn destination(&self) -> PathBuf {
        self.models_dir.join(self.name())
    }

    /// Where files collect until all are there.
    pub fn staging_dir(&self) -> PathBuf {
        self.models_dir.join(STAGING).join(self.name())
    }

    /// Downloads every file of the repository, verifies it and moves the folder into place;
    /// returns the model folder. If that folder already holds a complete model, returns it at
    /// once. `progress` is called at most about ten times a second, from this thread. Setting
    /// `cancel` stops the download within ~100 ms with [`DownloadError::Cancelled`]; what
    /// arrived so far is kept for the next run.
    pub fn run(
        &self,
        mut progress: impl FnMut(&DownloadProgress),
        cancel: &AtomicBool,
    ) -> Result<PathBuf, DownloadError> {
        if !is_repo_id(&self.repo) {
            return Err(DownloadError::BadRepo {
                repo: self.repo.clone(),
            });
        }
        let destination = self.destination();
        if destination.exists() {
            // A model, or Gemma 4's assistant drafter (a repository of its own, docs/SPECULATIVE.md).
            return if check_folder(&destination).is_ok() || is_drafter(&destination) {
                Ok(destination)
            } else {
                Err(DownloadError::DestinationExists { path: destination })
            };
        }
        let staging = self.staging_dir();
        fs::create_dir_all(&staging).map_err(|e| io_error(&staging, e))?;
        let lock_path = self
            .models_dir
            .join(STAGING)
            .join(format!("{}.lock", self.name()));
        let lock = self.lock(&lock_path)?;

        let client = self.hub.client();
        let files = self
            .hub
            .list_files(&client, &self.repo, &self.revision, cancel)?;
        let total: u64 = files.iter().map(|f| f.size).sum();
        let on_disk: u64 = files.iter().map(|f| bytes_on_disk(&staging, f)).sum();
        if let Some(available) = available_space(&staging) {
            let need = total - on_disk;
            if available < need {
                return Err(DownloadError::DiskFull {
                    need_bytes: need - available,
                });
            }
        }

        let files_total = u32::try_from(files.len()).unwrap_or(u32::MAX);
        let mut meter = Meter::new(&mut progress, files_total, total);
        meter.already_on_disk(on_disk);
        let mut transfer = Transfer {
            download: self,
            client,
            staging: &staging,
            cancel,
            meter,
            completed: 0,
        };
        for file in &files {
            transfer.fetch_file(file)?;
        }
        remove_unlisted(&staging, &files)?;
        if let Err(e) = fs::rename(&staging, &destination) {
            return Err(if destination.exists() {
                DownloadError::DestinationExists { path: destination }
            } else {
                io_error(&destination, e)
            });
        }
        let _ = fs::remove_file(&lock_path);
        drop(lock);
        let _ = fs::remove_dir(self.models_dir.join(STAGING));
        transfer.meter.finish();
        Ok(destination)
    }

    /// Holds a lock on the staging folder so that two runs never write the same files. File
    /// systems without locks are let through.
    fn lock(&self, path: &Path) -> Result<File, DownloadError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| io_error(path, e))?;
        match file.try_lock() {
            Ok(()) | Err(fs::TryLockError::Error(_)) => Ok(file),
            Err(fs::TryLockError::WouldBlock) => Err(DownloadError::AlreadyRunning {
                name: self.name().to_string(),
            }),
        }
    }
}

/// The state of one run while it goes through the files.
struct Transfer<'a> {
    download: &'a Download,
    client: Client,
    staging: &'a Path,
    cancel: &'a AtomicBool,
    meter: Meter<'a>,
    /// Bytes of the files already finished.
    completed: u64,
}

/// What a finished `.part` turned out to be.
enum Check {
    Good,
    WrongSize,
    WrongChecksum,
}

impl Transfer<'_> {
    /// Brings one file into the staging folder, verified. A damaged file is fetched once more.
    fn fetch_file(&mut self, file: &RepoFile) -> Result<(), DownloadError> {
        self.meter.file(&file.path);
        let target = self.staging.join(&file.path);
        if fs::metadata(&target).is_ok_and(|m| m.is_file() && m.len() == file.size) {
            self.finished(file);
            return Ok(());
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
        }
        let part = part_path(&target);
        let mut retried = false;
        loop {
            let check = self.fetch_part(file, &part)?;
            if let Check::Good = check {
                fs::rename(&part, &target).map_err(|e| io_error(&target, e))?;
                self.finished(file);
                return Ok(());
            }
            fs::remove_file(&part).map_err(|e| io_error(&part, e))?;
            if retried {
                let file = file.path.clone();
                return Err(match check {
                    Check::WrongSize => DownloadError::SizeMismatch { file },
                    _ => DownloadError::ChecksumMismatch { file },
                });
            }
            retried = true;
        }
    }

    fn finished(&mut self, file: &RepoFile) {
        self.completed += file.size;
        self.meter.received(0, self.completed);
        self.meter.file_done();
    }

    /// Completes `part` from where it stands (resuming with `Range`) and checks it.
    fn fetch_part(&mut self, file: &RepoFile, part: &Path) -> Result<Check, DownloadError> {
        let mut out = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(part)
            .map_err(|e| io_error(part, e))?;
        let mut have = out.metadata().map_err(|e| io_error(part, e))?.len();
        if have > file.size {
            have = restart(&mut out, part)?;
        }
        let mut hasher = file.sha256.as_ref().map(|_| Sha256::new());
        if let Some(hasher) = hasher.as_mut() {
            hash_prefix(&mut out, part, have, hasher, self.cancel)?;
        }
        out.seek(SeekFrom::Start(have))
            .map_err(|e| io_error(part, e))?;

        let url =
            self.download
                .hub
                .file_url(&self.download.repo, &self.download.revision, &file.path);
        while have < file.size {
            let mut response = self.client.get(&url, have, self.cancel)?;
            match response.status {
                206 if response.range_start == Some(have) => {}
                200 if have > 0 => {
                    have = restart(&mut out, part)?;
                    hasher = file.sha256.as_ref().map(|_| Sha256::new());
                }
                200 => {}
                // The server cannot continue from here: start the file over.
                206 | 416 if have > 0 => {
                    have = restart(&mut out, part)?;
                    hasher = file.sha256.as_ref().map(|_| Sha256::new());
                    continue;
                }
                _ => return Err(response.status_error()),
            }
            loop {
                let chunk = {
                    let meter = &mut self.meter;
                    response.next_chunk(self.cancel, &mut || meter.tick())?
                };
                let Some(chunk) = chunk else { break };
                let len = chunk.len() as u64;
                if have + len > file.size {
                    return Ok(Check::WrongSize);
                }
                if let Some(hasher) = hasher.as_mut() {
                    hasher.update(&chunk);
                }
                if let Err(e) = out.write_all(&chunk) {
                    return Err(write_error(part, e, self.download_left(have)));
                }
                have += len;
                self.meter.received(len, self.completed + have);
            }
            if have < file.size {
                return Err(DownloadError::Interrupted {
                    host: host_of(&url).to_string(),
                });
            }
        }
        out.sync_all()
            .map_err(|e| write_error(part, e, self.download_left(have)))?;
        let matches = match (hasher, &file.sha256) {
            (Some(hasher), Some(expected)) => hex(&hasher.finalize()) == *expected,
            _ => true,
        };
        Ok(if matches {
            Check::Good
        } else {
            Check::WrongChecksum
        })
    }

    /// Bytes still to write, counting from `have` bytes into the current file.
    fn download_left(&self, have: u64) -> u64 {
        let progress = self.completed + have;
        self.meter.total().saturating_sub(progress)
    }
}

/// Empties a `.part` to start it over; returns its new length, 0.
fn restart(out: &mut File, part: &Path) -> Result<u64, DownloadError> {
    out.set_len(0).map_err(|e| io_error(part, e))?;
    out.seek(SeekFrom::Start(0))
        .map_err(|e| io_error(part, e))?;
    Ok(0)
}

/// Feeds the first `len` bytes of a `.part` to the hasher, so a resumed file is checked whole.
fn hash_prefix(
    out: &mut File,
    part: &Path,
    len: u64,
    hasher: &mut Sha256,
    cancel: &AtomicBool,
) -> Result<(), DownloadError> {
    out.seek(SeekFrom::Start(0))
        .map_err(|e| io_error(part, e))?;
    let mut buffer = vec![0; 1 << 20];
    let mut left = len;
    while left > 0 {
        if cancel.load(Ordering::Relaxed) {
            return Err(DownloadError::Cancelled);
        }
        let want = buffer
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = out
            .read(&mut buffer[..want])
            .map_err(|e| io_error(part, e))?;
        if n == 0 {
            let error = io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank");
            return Err(io_error(part, error));
        }
        hasher.update(&buffer[..n]);
        left -= n as u64;
    }
    Ok(())
}

/// Bytes of `file` already in the staging folder, finished or partial.
fn bytes_on_disk(staging: &Path, file: &RepoFile) -> u64 {
    let target = staging.join(&file.path);
    let len = |path: &Path| fs::metadata(path).map(|m| m.len()).ok();
    match len(&target) {
        Some(n) if n == file.size => n,
        _ => len(&part_path(&target))
            .filter(|&n| n <= file.size)
            .unwrap_or(0),
    }
}

/// Deletes whatever the staging folder holds besides the listed files (leftovers of another
/// revision), so that the model folder is exactly the repository.
fn remove_unlisted(staging: &Path, files: &[RepoFile]) -> Result<(), DownloadError> {
    let listed: std::collections::HashSet<PathBuf> =
        files.iter().map(|f| staging.join(&f.path)).collect();
    let mut folders = vec![staging.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = fs::read_dir(&folder).map_err(|e| io_error(&folder, e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                folders.push(path);
            } else if !listed.contains(&path) {
                fs::remove_file(&path).map_err(|e| io_error(&path, e))?;
            }
        }
    }
    Ok(())
}

fn part_path(target: &Path) -> PathBuf {
    let mut name = target.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

/// `org/name` (or a bare `name`) with the hub's characters only.
fn is_repo_id(repo: &str) -> bool {
    let parts: Vec<&str> = repo.split('/').collect();
    parts.len() <= 2
        && parts.iter().all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && !part.contains("..")
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        })
}

fn io_error(path: &Path, source: io::Error) -> DownloadError {
    DownloadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A failed write; a full disk says how much more space the rest of the download needs.
fn write_error(path: &Path, error: io::Error, bytes_left: u64) -> DownloadError {
    if is_disk_full(&error) {
        let available = available_space(path.parent().unwrap_or(path)).unwrap_or(0);
        return DownloadError::DiskFull {
            need_bytes: bytes_left.saturating_sub(available).max(1),
        };
    }
    io_error(path, error)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_are_checked() {
        for good in [DEFAULT_REPO, "gpt2", "org/model.v1_2"] {
            assert!(is_repo_id(good), "{good}");
        }
        for bad in [
            "",
            "a/b/c",
            "../x",
            "org/..",
            "org/.hidden",
            "a b/c",
            "org/",
        ] {
            assert!(!is_repo_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_default_download_is_named_after_the_repository() {
        let download = Download::new("/models");
        assert_eq!(download.name(), "gemma-4-e4b-it-4bit");
        assert_eq!(
            download.destination(),
            Path::new("/models/gemma-4-e4b-it-4bit")
        );
        assert_eq!(
            download.staging_dir(),
            Path::new("/models/.downloads/gemma-4-e4b-it-4bit")
        );
    }

    #[test]
    fn errors_read_as_sentences() {
        let disk = DownloadError::DiskFull {
            need_bytes: 2_300_000_000,
        };
        assert_eq!(disk.to_string(), "not enough disk space: need 2.3 GB more");
        let http = DownloadError::Http {
            status: 404,
            url: "https://huggingface.co/x".into(),
        };
        assert_eq!(
            http.to_string(),
            "HTTP 404 from https://huggingface.co/x (not found)"
        );
    }
}
