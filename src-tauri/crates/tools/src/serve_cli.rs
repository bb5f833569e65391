//! What `gemma-desk-cli serve` adds around the local API: the key it keeps between starts and
//! the line it prints per request.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Prints one line per request that ended, on stderr: method, path, status, tokens, duration.
pub struct PrintRequests;

impl api::Watcher for PrintRequests {
    fn started(&self, _open: usize) {}

    fn ended(&self, request: &api::Request, _open: usize) {
        // A closed stderr loses the log, never the server.
        let _ = writeln!(std::io::stderr(), "{}", request_line(request));
    }
}

/// `POST /v1/chat/completions 200, 12 prompt + 3 answer tokens, 845 ms`.
fn request_line(request: &api::Request) -> String {
    let status = match request.status {
        0 => "no response (the client left)".to_owned(),
        status => status.to_string(),
    };
    let tokens = match (request.prompt_tokens, request.completion_tokens) {
        (Some(prompt), Some(answer)) => format!(", {prompt} prompt + {answer} answer tokens"),
        _ => String::new(),
    };
    format!(
        "{} {} {status}{tokens}, {} ms",
        request.method, request.path, request.ms
    )
}

/// The file `serve` keeps its key in: `cli-api-key` in the app's data folder (the one the
/// README names: `~/Library/Application Support/app.gemmadesk.desktop` on macOS,
/// `$XDG_DATA_HOME/app.gemmadesk.desktop`, else `~/.local/share/app.gemmadesk.desktop`, on
/// Linux). The app keeps its own key in its settings; this one is the CLI's.
pub fn kept_key_path() -> Result<PathBuf> {
    const APP: &str = "app.gemmadesk.desktop";
    let home = std::env::home_dir().filter(|h| h.is_absolute());
    let base = if cfg!(target_os = "macos") {
        home.map(|h| h.join("Library").join("Application Support"))
    } else {
        std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute())
            .or_else(|| home.map(|h| h.join(".local").join("share")))
    };
    let base = base.context(
        "no home folder to keep the API key in: give one with --api-key-file (or --api-key)",
    )?;
    Ok(base.join(APP).join("cli-api-key"))
}

/// The key kept at `path`, made (and written, readable by its owner only) when there is none or
/// `new` asks for another; `true` when it was made now. A kept key others could read is made
/// private; a damaged one is an error naming the file (it is left as it is).
pub fn kept_key(path: &Path, new: bool) -> Result<(api::ApiKey, bool)> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

    if !new {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let key = api::ApiKey::new(&text).with_context(|| {
                    format!(
                        "the API key kept in {} (--new-key replaces it)",
                        path.display()
                    )
                })?;
                let mode = std::fs::metadata(path)?.permissions().mode();
                if mode & 0o077 != 0 {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                        .with_context(|| format!("making {} private", path.display()))?;
                    eprintln!(
                        "note: {} could be read by other users; now only by you",
                        path.display()
                    );
                }
                return Ok((key, false));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("reading the API key {}", path.display()))
            }
        }
    }
    let key = api::ApiKey::generate()?;
    let folder = path.parent().context("the key file has no folder")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(folder)
        .with_context(|| format!("making the folder {}", folder.display()))?;
    // Written beside it and renamed over it: a reader sees the old key or the new one, whole.
    let partial = path.with_extension("new");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(key.reveal().as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&partial, path)
    };
    write().with_context(|| format!("keeping the API key in {}", path.display()))?;
    Ok((key, true))
}
