//! Which model the app runs: found on disk at start, chosen by the user, or downloaded; loaded
//! on the engine thread. Every change of state is sent to the UI as a `model-state` event.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chats::Store;
use engine::worker::Engine;
use gemma::LoadOptions;
use model_store::{self as models, DownloadProgress, HfCache, ModelCandidate};
use serde::Serialize;
use ts_rs::TS;

use crate::error::Error;
use crate::events::Events;
use crate::settings::{Settings, MAX_CONTEXT};

/// Where the model stands, as the UI shows it.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum ModelState {
    /// No model yet: the first-run screen.
    None,
    /// The default model is being downloaded.
    Downloading { progress: DownloadProgress },
    /// A model folder is being loaded; `stage` says what is happening, in words.
    Loading {
        name: String,
        dir: String,
        stage: String,
    },
    /// Ready to chat.
    #[serde(rename_all = "camelCase")]
    Ready {
        name: String,
        dir: String,
        /// The most positions the model supports.
        context_window: u32,
        /// Whether it can see images.
        vision: bool,
    },
    /// Loading or downloading failed; `message` says why in words.
    Failed {
        dir: Option<String>,
        message: String,
    },
}

/// The app's model: its state, the engine that runs it, and a download in progress.
pub struct Models {
    engine: Arc<Engine>,
    store: Arc<Store>,
    models_dir: PathBuf,
    hf_cache: HfCache,
    hub_url: String,
    state: Mutex<ModelState>,
    download: Mutex<Option<Arc<AtomicBool>>>,
    events: Arc<dyn Events>,
}

impl Models {
    pub fn new(
        engine: Arc<Engine>,
        store: Arc<Store>,
        models_dir: PathBuf,
        hf_cache: HfCache,
        hub_url: String,
        events: Arc<dyn Events>,
    ) -> Self {
        Self {
            engine,
            store,
            models_dir,
            hf_cache,
            hub_url,
            state: Mutex::new(ModelState::None),
            download: Mutex::new(None),
            events,
        }
    }

    pub fn state(&self) -> ModelState {
        lock(&self.state).clone()
    }

    fn set(&self, state: ModelState) {
        *lock(&self.state) = state.clone();
        self.events.model_state(&state);
    }

    /// What to load at start: the folder used last if it still checks out, else the first
    /// model found in the models folder or the Hugging Face cache.
    pub fn startup_candidate(&self) -> Option<ModelCandidate> {
        Settings::remembered_model(&self.store)
            .and_then(|dir| models::check_folder(Path::new(&dir)).ok())
            .or_else(|| {
                models::discover(&self.models_dir, &self.hf_cache)
                    .into_iter()
                    .next()
            })
    }

    /// Loads the startup candidate, if any (blocking: run it off the UI thread).
    pub fn load_at_startup(&self) {
        if let Some(candidate) = self.startup_candidate() {
            // A failure is in the state the UI shows; nothing else to do with it here.
            let _ = self.load(&candidate);
        }
    }

    /// Checks and loads a folder the user picked (blocking). An unusable folder is an error in
    /// words and leaves the current model as it was.
    pub fn choose(&self, dir: &Path) -> Result<ModelState, Error> {
        let candidate = models::check_folder(dir)
            .map_err(|err| Error::ModelInvalid(format!("{}: {err}", dir.display())))?;
        self.load(&candidate)
    }

    /// Loads a checked folder (blocking), remembering it for the next start.
    pub fn load(&self, candidate: &ModelCandidate) -> Result<ModelState, Error> {
        let dir = candidate.dir.display().to_string();
        self.set(ModelState::Loading {
            name: candidate.name.clone(),
            dir: dir.clone(),
            stage: format!(
                "Loading {} ({:.1} GB)",
                candidate.name,
                gigabytes(candidate.size_bytes)
            ),
        });
        match self.engine.load(&candidate.dir, LoadOptions::default()) {
            Ok(info) => {
                let ready = ModelState::Ready {
                    name: candidate.name.clone(),
                    dir: dir.clone(),
                    context_window: MAX_CONTEXT,
                    vision: info.vision,
                };
                let _ = Settings::remember_model(&self.store, &dir);
                self.set(ready.clone());
                Ok(ready)
            }
            Err(err) => {
                let message = format!("{} could not be loaded: {err}", candidate.name);
                // The engine let go of any previous model before loading this one.
                self.set(ModelState::Failed {
                    dir: Some(dir),
                    message: message.clone(),
                });
                Err(Error::ModelInvalid(message))
            }
        }
    }

    /// Starts downloading the default model on a background thread, then loads it. Does nothing
    /// when a download is already running.
    pub fn start_download(self: &Arc<Self>) -> Result<(), Error> {
        let cancel = {
            let mut download = lock(&self.download);
            if download.is_some() {
                return Ok(());
            }
            let cancel = Arc::new(AtomicBool::new(false));
            *download = Some(cancel.clone());
            cancel
        };
        let this = self.clone();
        std::thread::Builder::new()
            .name("model-download".into())
            .spawn(move || {
                this.download(&cancel);
                *lock(&this.download) = None;
            })
            .map_err(|e| Error::Internal(format!("could not start the download: {e}")))?;
        Ok(())
    }

    fn download(&self, cancel: &AtomicBool) {
        let download =
            models::Download::new(&self.models_dir).hub(models::Hub::new(self.hub_url.clone()));
        let result = download.run(
            &mut |progress: &DownloadProgress| {
                self.set(ModelState::Downloading {
                    progress: progress.clone(),
                })
            },
            cancel,
        );
        match result {
            Ok(dir) => match models::check_folder(&dir) {
                Ok(mut candidate) => {
                    candidate.name = models::DEFAULT_REPO.to_owned();
                    let _ = self.load(&candidate);
                }
                Err(err) => self.set(ModelState::Failed {
                    dir: Some(dir.display().to_string()),
                    message: format!("the downloaded model is not usable: {err}"),
                }),
            },
            Err(_) if cancel.load(Ordering::Relaxed) => self.set(ModelState::None),
            Err(err) => self.set(ModelState::Failed {
                dir: None,
                message: format!("The download stopped: {err}. Try again to resume it."),
            }),
        }
    }

    /// Stops a running download; what was fetched is kept for the next try.
    pub fn cancel_download(&self) {
        if let Some(cancel) = lock(&self.download).as_ref() {
            cancel.store(true, Ordering::Relaxed);
        }
    }
}

fn gigabytes(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
