//! The folder that holds everything the app writes: models, chats, attachments.

use std::path::PathBuf;

/// Root of the app's own data; tests point it at a temporary folder with `--data-dir`.
#[derive(Debug, Clone)]
pub struct DataDir(PathBuf);

impl DataDir {
    pub fn new(root: PathBuf) -> Self {
        Self(root)
    }

    /// Where the chats database and attachment files live.
    pub fn chats(&self) -> PathBuf {
        self.0.clone()
    }

    /// Where model folders live, one folder per model.
    pub fn models(&self) -> PathBuf {
        self.0.join("models")
    }

    /// The webview's own storage (caches, local storage). WKWebView on macOS ignores it.
    pub fn webview(&self) -> PathBuf {
        self.0.join("webview")
    }
}
