//! The model store: finding Gemma 4 checkpoints already on disk, checking a folder the user
//! picked, and downloading the default checkpoint from the Hugging Face hub.
//!
//! Everything here is blocking; the app runs it on a background thread, reports progress through
//! a callback and cancels with an `AtomicBool`.

mod details;
mod discovery;
mod disk;
mod download;
mod drafter;
mod error;
mod hf_cache;
mod http;
mod hub;
mod progress;

pub use discovery::{
    check_folder, discover, display_name, FolderError, ModelCandidate, ModelSource,
};
pub use download::{Download, DEFAULT_REPO};
pub use drafter::{find_drafters, is_drafter, DRAFTER_REPO};
pub use error::DownloadError;
pub use hf_cache::HfCache;
pub use hub::{Hub, RepoFile};
pub use progress::DownloadProgress;
