//! Which model the app runs: found on disk at start, chosen by the user, or downloaded; loaded
//! on the engine thread. Every change of state is sent to the UI as a `model-state` event.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chats::Store;
use engine::fit::{self, MachineDefaults, Needs, Room};
use engine::policy::Policy;
use engine::worker::Engine;
use gemma::memory::DeviceInfo;
use gemma::LoadOptions;
use model_store::{self as models, DownloadProgress, FolderError, HfCache, ModelCandidate};
use serde::Serialize;
use ts_rs::TS;

use crate::error::Error;
use crate::events::Events;
use crate::faster::{self, FasterAnswers};
use crate::settings::{MachineContext, Settings, MAX_CONTEXT};
use crate::sync::lock;

/// The towers' idle period on a machine without room to keep them beside the model.
const TIGHT_TOWER_IDLE: Duration = Duration::from_secs(30);

/// The towers' idle period for a machine's defaults (see `Models::apply_tower_idle`).
pub(crate) fn tower_idle(defaults: &MachineDefaults) -> Duration {
    if defaults.towers_warm {
        Policy::default().tower_idle
    } else {
        TIGHT_TOWER_IDLE
    }
}

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
        /// Whether it can hear audio (it has an audio tower).
        audio: bool,
        /// What the checkpoint is: size on disk, quantization, parameters, towers.
        checkpoint: ModelCandidate,
        /// How long the image and audio encoders stay after their last use.
        tower_idle: TowerIdle,
        /// Another checkpoint downloading (Settings → Model) while this one keeps answering.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        download: Option<Box<SideDownload>>,
    },
    /// Loading or downloading failed; `message` says why in words.
    Failed {
        dir: Option<String>,
        message: String,
    },
}

/// How long the vision and audio towers ("the image and audio encoders") stay in memory after
/// the question that used them (Settings → Model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct TowerIdle {
    /// Seconds, as applied now (0: released right after the question).
    pub secs: u32,
    /// The machine's period for this model ([`tower_idle`]), in seconds.
    pub machine_secs: u32,
    /// Whether `secs` is the user's choice (`Settings::tower_idle_secs`) rather than the machine's.
    pub chosen: bool,
}

/// A model folder loaded lately, offered to load again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct RecentModel {
    /// The name it goes by (as when it is loaded).
    pub name: String,
    /// Its folder.
    pub dir: String,
}

/// A download of another checkpoint beside the model in use: it answers until the new one is
/// there and loads in its place.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct SideDownload {
    pub repo: String,
    /// How far it is; `None` before the first report and once it has stopped.
    pub progress: Option<DownloadProgress>,
    /// Why it stopped, when it failed (trying again resumes it).
    pub failed: Option<String>,
}

/// The checkpoints the app offers to download: (repository, label). The first is the default.
pub const DOWNLOADS: [(&str, &str); 2] = [
    (models::DEFAULT_REPO, "Gemma 4 E4B, 4-bit (~5 GB)"),
    (
        "mlx-community/gemma-4-e4b-it-8bit",
        "Gemma 4 E4B, 8-bit (~9 GB; slower, closer to the original)",
    ),
];

/// A checkpoint the app offers to download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct DownloadOption {
    /// Hugging Face repository id.
    pub repo: String,
    /// What the user reads.
    pub label: String,
}

/// The downloads offered, the default first.
pub fn download_options() -> Vec<DownloadOption> {
    DOWNLOADS
        .iter()
        .map(|(repo, label)| DownloadOption {
            repo: (*repo).to_owned(),
            label: (*label).to_owned(),
        })
        .collect()
}

/// What the app does about the model at start.
#[derive(Debug)]
pub enum Startup {
    Load(ModelCandidate),
    /// Nothing remembered, nothing found: the first-run screen.
    FirstRun,
    /// The model used last is gone or broken; `message` names it.
    Unusable {
        dir: String,
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
    /// A download of the drafter (Settings → Faster answers), running beside the model.
    drafter_download: Mutex<Option<Arc<AtomicBool>>>,
    /// Held while a model is loaded or forgotten, so that one change of model ends (state
    /// and engine agreeing) before the next begins.
    switching: Mutex<()>,
    events: Arc<dyn Events>,
    /// Where "Faster answers" stands for the model loaded.
    faster: Mutex<FasterAnswers>,
    /// What the machine offers (read once at start): a model that does not fit is not loaded.
    machine: Mutex<DeviceInfo>,
    /// The machine's defaults for the model loaded (`None`: no model).
    defaults: Mutex<Option<MachineDefaults>>,
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
            drafter_download: Mutex::new(None),
            switching: Mutex::new(()),
            events,
            faster: Mutex::new(FasterAnswers::NoModel),
            machine: Mutex::new(gemma::memory::device_info()),
            defaults: Mutex::new(None),
        }
    }

    /// Stands in for the machine's figures (tests: a machine too small, whatever this one is).
    #[cfg(test)]
    pub fn set_machine(&self, machine: DeviceInfo) {
        *lock(&self.machine) = machine;
    }

    /// The defaults the machine suggests for the model loaded (in `dir`): those chosen at its
    /// load, else read again (`engine::fit`).
    fn defaults(&self, dir: &Path) -> MachineDefaults {
        if let Some(defaults) = *lock(&self.defaults) {
            return defaults;
        }
        let needs = Needs::of(dir, &LoadOptions::default()).unwrap_or_default();
        MachineDefaults::choose(&lock(&self.machine), &needs)
    }

    /// Refuses, in words, a model of `needs` that cannot fit the machine with the context it
    /// would get (the user's, else the machine's `defaults`; `engine::fit`): what it needs, what
    /// the machine has, what to change. A checkpoint whose headers could not be read (`None`)
    /// is left to the load, which says what is wrong with it.
    fn check_fit(
        &self,
        candidate: &ModelCandidate,
        needs: Option<&Needs>,
        defaults: &MachineDefaults,
    ) -> Result<(), Error> {
        let Some(room) = Room::of(&lock(&self.machine)) else {
            return Ok(());
        };
        let Some(needs) = needs else {
            return Ok(());
        };
        let settings = Settings::load(&self.store);
        let context = if settings.context_length_chosen {
            settings.context_length
        } else {
            defaults.context_length as u32
        };
        // Within what the model supports.
        let context = window_of(candidate).min(context) as usize;
        fit::check(needs, context, room, candidate.quantization_bits).map_err(|no_fit| {
            Error::ModelInvalid(format!("{} was not loaded: {no_fit}", candidate.name))
        })
    }

    pub fn state(&self) -> ModelState {
        lock(&self.state).clone()
    }

    fn set(&self, state: ModelState) {
        *lock(&self.state) = state.clone();
        self.events.model_state(&state);
    }

    /// What to do at start: load the folder used last, else the first model found in the
    /// models folder or the Hugging Face cache. A folder used last that is gone or no longer
    /// usable is not replaced by another: it is named, and the user chooses.
    pub fn startup(&self) -> Startup {
        let Some(dir) = Settings::remembered_model(&self.store) else {
            return match models::discover(&self.models_dir, &self.hf_cache)
                .into_iter()
                .next()
            {
                Some(candidate) => Startup::Load(candidate),
                None => Startup::FirstRun,
            };
        };
        let path = Path::new(&dir);
        match models::check_folder(path) {
            Ok(candidate) => Startup::Load(candidate),
            Err(err) => {
                let name = models::display_name(path);
                let message = match err {
                    FolderError::NotFound => format!("{name} at {dir} is gone: choose another"),
                    other => {
                        format!("{name} at {dir} can no longer be used ({other}): choose another")
                    }
                };
                Startup::Unusable { dir, message }
            }
        }
    }

    /// Loads the model of [`Models::startup`], if any (blocking: run it off the UI thread).
    pub fn load_at_startup(&self) {
        match self.startup() {
            // A failure is in the state the UI shows; nothing else to do with it here.
            Startup::Load(candidate) => {
                let _ = self.load(&candidate);
            }
            Startup::FirstRun => {}
            Startup::Unusable { dir, message } => self.set(ModelState::Failed {
                dir: Some(dir),
                message,
            }),
        }
    }

    /// Checks and loads a folder the user picked (blocking). An unusable folder is an error in
    /// words and leaves the current model as it was; a usable one replaces it, stopping an
    /// answer being written first (it is kept, marked stopped).
    pub fn choose(&self, dir: &Path) -> Result<ModelState, Error> {
        if lock(&self.download).is_some() {
            return Err(Error::Invalid(
                "a model is downloading: cancel the download before choosing another".into(),
            ));
        }
        let candidate = models::check_folder(dir)
            .map_err(|err| Error::ModelInvalid(format!("{}: {err}", dir.display())))?;
        self.load(&candidate)
    }

    /// The model folders loaded lately, newest first, that are still on this computer (the one
    /// in use included: the UI marks it).
    pub fn recent(&self) -> Vec<RecentModel> {
        Settings::recent_models(&self.store)
            .into_iter()
            .filter(|dir| Path::new(dir).is_dir())
            .map(|dir| RecentModel {
                name: self.named_dir(Path::new(&dir), models::display_name(Path::new(&dir))),
                dir,
            })
            .collect()
    }

    /// Loads a folder of the recent list again (as [`Models::choose`] does); a folder not on
    /// the list is refused: the UI offers the list, it does not name folders of its own.
    pub fn open_recent(&self, dir: &str) -> Result<ModelState, Error> {
        if !Settings::recent_models(&self.store)
            .iter()
            .any(|known| known == dir)
        {
            return Err(Error::Invalid(format!(
                "{dir} is not one of the recent model folders"
            )));
        }
        self.choose(Path::new(dir))
    }

    /// Unloads the model and forgets it, so the next start shows the model picker too. An
    /// answer being written is stopped first (it is kept, marked stopped).
    pub fn forget(&self) -> Result<ModelState, Error> {
        if lock(&self.download).is_some() {
            return Err(Error::Invalid(
                "a model is downloading: cancel the download first".into(),
            ));
        }
        let _switching = lock(&self.switching);
        self.engine.unload()?;
        *lock(&self.defaults) = None;
        *lock(&self.faster) = FasterAnswers::NoModel;
        Settings::remember_model(&self.store, None)?;
        self.set(ModelState::None);
        Ok(ModelState::None)
    }

    /// Loads a checked folder (blocking), remembering it for the next start. A model that
    /// cannot fit the machine is refused in words before anything changes: the model in use
    /// stays (with no model in use, the refusal is the state shown).
    pub fn load(&self, candidate: &ModelCandidate) -> Result<ModelState, Error> {
        let _switching = lock(&self.switching);
        let candidate = &self.named(candidate);
        let dir = candidate.dir.display().to_string();
        // The checkpoint's headers, read once per load, against the machine.
        let needs = Needs::of(&candidate.dir, &LoadOptions::default()).ok();
        let defaults = MachineDefaults::choose(
            &lock(&self.machine),
            needs.as_ref().unwrap_or(&Needs::default()),
        );
        let options = LoadOptions {
            ple_resident: defaults.ple_resident,
            ..LoadOptions::default()
        };
        let needs = needs.map(|needs| {
            if options.ple_resident {
                needs.with_ple_table()
            } else {
                needs
            }
        });
        if let Err(err) = self.check_fit(candidate, needs.as_ref(), &defaults) {
            match self.state() {
                // A download beside it that ended here says why it is not in use.
                ModelState::Ready {
                    download: Some(side),
                    ..
                } => self.set_side_download(Some(SideDownload {
                    progress: None,
                    failed: Some(err.to_string()),
                    ..*side
                })),
                ModelState::Ready { .. } => {}
                _ => self.set(ModelState::Failed {
                    dir: Some(dir),
                    message: err.to_string(),
                }),
            }
            return Err(err);
        }
        self.set(ModelState::Loading {
            name: candidate.name.clone(),
            dir: dir.clone(),
            stage: format!(
                "Reading {:.1} GB of weights",
                gigabytes(candidate.size_bytes)
            ),
        });
        match self.engine.load(&candidate.dir, options) {
            Ok(info) => {
                let context_window = window_of(candidate);
                *lock(&self.defaults) = Some(defaults);
                let machine = lock(&self.machine).clone();
                let _ = Settings::remember_machine_context(
                    &self.store,
                    &MachineContext {
                        tokens: context_window.min(defaults.context_length as u32),
                        memory_bytes: machine.memory_bytes,
                        mac: machine.backend == "metal",
                    },
                );
                self.apply_faster_answers(&candidate.dir, &defaults);
                let tower_idle = self.apply_tower_idle(&defaults);
                let ready = ModelState::Ready {
                    name: candidate.name.clone(),
                    dir: dir.clone(),
                    context_window,
                    vision: info.vision,
                    audio: info.audio,
                    checkpoint: candidate.clone(),
                    tower_idle,
                    download: None,
                };
                let _ = Settings::remember_model(&self.store, Some(&dir));
                let _ = Settings::remember_recent(&self.store, &dir);
                self.set(ready.clone());
                Ok(ready)
            }
            Err(err) => {
                let message = format!("{} could not be loaded: {err}", candidate.name);
                *lock(&self.defaults) = None;
                // The engine let go of any previous model before loading this one.
                self.set(ModelState::Failed {
                    dir: Some(dir),
                    message: message.clone(),
                });
                Err(Error::ModelInvalid(message))
            }
        }
    }

    /// Where "Faster answers" stands.
    pub fn faster_answers(&self) -> FasterAnswers {
        lock(&self.faster).clone()
    }

    /// Switches "Faster answers" (kept for the next start) and applies it to the loaded model.
    pub fn set_faster_answers(&self, on: bool) -> Result<FasterAnswers, Error> {
        let _switching = lock(&self.switching);
        Settings::set_faster_answers(&self.store, on)?;
        if let ModelState::Ready { dir, .. } = self.state() {
            let dir = Path::new(&dir);
            self.apply_faster_answers(dir, &self.defaults(dir));
        }
        Ok(self.faster_answers())
    }

    /// Downloads the drafter ([`models::DRAFTER_REPO`], ~159 MB) into the models folder on a
    /// background thread, then uses it for the loaded model. The model keeps answering alone
    /// meanwhile; progress and the outcome come as `faster-answers` events. Running already:
    /// where it stands.
    pub fn start_drafter_download(self: &Arc<Self>) -> Result<FasterAnswers, Error> {
        if !matches!(self.state(), ModelState::Ready { .. }) {
            return Err(Error::NoModel);
        }
        let cancel = {
            let mut download = lock(&self.drafter_download);
            if download.is_some() {
                return Ok(self.faster_answers());
            }
            let cancel = Arc::new(AtomicBool::new(false));
            *download = Some(cancel.clone());
            cancel
        };
        let this = self.clone();
        std::thread::Builder::new()
            .name("drafter-download".into())
            .spawn(move || {
                this.download_drafter(&cancel);
                *lock(&this.drafter_download) = None;
            })
            .map_err(|e| Error::Internal(format!("could not start the download: {e}")))?;
        Ok(self.faster_answers())
    }

    /// Stops a running drafter download; what arrived is kept for the next try.
    pub fn cancel_drafter_download(&self) {
        if let Some(cancel) = lock(&self.drafter_download).as_ref() {
            cancel.store(true, Ordering::Relaxed);
        }
    }

    fn download_drafter(&self, cancel: &AtomicBool) {
        let download = models::Download::new(&self.models_dir)
            .repo(models::DRAFTER_REPO)
            .hub(models::Hub::new(self.hub_url.clone()));
        let result = download.run(
            &mut |progress: &DownloadProgress| {
                self.set_faster(FasterAnswers::Downloading {
                    progress: progress.clone(),
                })
            },
            cancel,
        );
        let _switching = lock(&self.switching);
        let ModelState::Ready { dir, .. } = self.state() else {
            self.set_faster(FasterAnswers::NoModel);
            return;
        };
        // Found in the models folder now, checked against the model like any drafter.
        let dir = Path::new(&dir);
        self.apply_faster_answers(dir, &self.defaults(dir));
        if let (Err(err), false) = (result, cancel.load(Ordering::Relaxed)) {
            let state = match self.faster_answers() {
                FasterAnswers::Missing {
                    repo, models_dir, ..
                } => FasterAnswers::Missing {
                    repo,
                    models_dir,
                    failed: Some(format!(
                        "The download stopped: {err}. Download again to resume it: what arrived is kept."
                    )),
                },
                other => other,
            };
            self.set_faster(state);
        }
    }

    fn set_faster(&self, state: FasterAnswers) {
        *lock(&self.faster) = state.clone();
        self.events.faster_answers(&state);
    }

    /// Finds and sets the drafter for the model in `model_dir` (the engine has just loaded it,
    /// without one), as the switch says (unset: the machine's `defaults`).
    fn apply_faster_answers(&self, model_dir: &Path, defaults: &MachineDefaults) {
        let on = Settings::faster_answers_or(&self.store, defaults.drafting);
        let state = faster::apply(
            &self.engine,
            on,
            model_dir,
            &self.models_dir,
            &self.hf_cache,
        );
        self.set_faster(state);
    }

    /// How long a tower the model read for an image or a clip stays after its last use: the
    /// user's period (Settings → Model), else the machine's: the engine's period where the
    /// machine has room for the towers beside the model (`MachineDefaults::towers_warm`), else
    /// `TIGHT_TOWER_IDLE`, so that on a Mac without that room the tower's memory goes back soon
    /// after the question. Returns what was applied.
    fn apply_tower_idle(&self, defaults: &MachineDefaults) -> TowerIdle {
        let machine_secs = tower_idle(defaults).as_secs() as u32;
        let chosen = Settings::tower_idle_secs(&self.store);
        let secs = chosen.unwrap_or(machine_secs);
        if let Err(err) = self
            .engine
            .set_tower_idle(Duration::from_secs(u64::from(secs)))
        {
            eprintln!("the towers' idle period was not set: {err}");
        }
        TowerIdle {
            secs,
            machine_secs,
            chosen: chosen.is_some(),
        }
    }

    /// Sets how long the image and audio encoders stay after their last use (seconds, one of
    /// `TOWER_IDLE_CHOICES`; `None`: the machine's), kept for the next start and applied to the
    /// loaded model at once. Returns the model's state, which says the period now.
    pub fn set_tower_idle(&self, secs: Option<u32>) -> Result<ModelState, Error> {
        let _switching = lock(&self.switching);
        Settings::set_tower_idle_secs(&self.store, secs)?;
        if let ModelState::Ready { dir, .. } = self.state() {
            let applied = self.apply_tower_idle(&self.defaults(Path::new(&dir)));
            let mut state = lock(&self.state);
            if let ModelState::Ready { tower_idle, .. } = &mut *state {
                *tower_idle = applied;
            }
            let shown = state.clone();
            drop(state);
            self.events.model_state(&shown);
        }
        Ok(self.state())
    }

    /// A download of the app's, in its models folder, goes by its repository id, as it did
    /// while it downloaded, whether it is loaded right after or at a later start.
    fn named(&self, candidate: &ModelCandidate) -> ModelCandidate {
        let mut named = candidate.clone();
        named.name = self.named_dir(&candidate.dir, candidate.name.clone());
        named
    }

    /// The name the model folder `dir` goes by: its repository id when it is a download of the
    /// app's in its models folder, else `name`.
    fn named_dir(&self, dir: &Path, name: String) -> String {
        if dir.parent() == Some(self.models_dir.as_path()) {
            if let Some((repo, _)) = DOWNLOADS
                .iter()
                .find(|(repo, _)| repo.rsplit('/').next() == Some(name.as_str()))
            {
                return (*repo).to_owned();
            }
        }
        name
    }

    /// Starts downloading `repo` (one of [`DOWNLOADS`]; `None`: the default) on a background
    /// thread, then loads it. Does nothing when a download is already running. A model in use
    /// stays loaded until the new one is ready; cancelling goes back to it.
    pub fn start_download(self: &Arc<Self>, repo: Option<&str>) -> Result<(), Error> {
        let repo = match repo {
            None => models::DEFAULT_REPO,
            Some(repo) => DOWNLOADS
                .iter()
                .map(|(known, _)| *known)
                .find(|known| *known == repo)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "{repo:?} is not one of the models Gemma Desk downloads"
                    ))
                })?,
        };
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
                this.download(repo, &cancel);
                *lock(&this.download) = None;
            })
            .map_err(|e| Error::Internal(format!("could not start the download: {e}")))?;
        Ok(())
    }

    fn download(&self, repo: &str, cancel: &AtomicBool) {
        let before = self.state();
        // With a model in use, it keeps answering: the download shows beside it.
        let beside = matches!(before, ModelState::Ready { .. });
        let side = |progress: Option<DownloadProgress>, failed: Option<String>| SideDownload {
            repo: repo.to_owned(),
            progress,
            failed,
        };
        if beside {
            self.set_side_download(Some(side(None, None)));
        }
        let download = models::Download::new(&self.models_dir)
            .repo(repo)
            .hub(models::Hub::new(self.hub_url.clone()));
        let result = download.run(
            &mut |progress: &DownloadProgress| {
                if beside {
                    self.set_side_download(Some(side(Some(progress.clone()), None)));
                } else {
                    self.set(ModelState::Downloading {
                        progress: progress.clone(),
                    })
                }
            },
            cancel,
        );
        if beside {
            match &result {
                Err(_) if cancel.load(Ordering::Relaxed) => self.set_side_download(None),
                Err(err) => {
                    self.set_side_download(Some(side(
                        None,
                        Some(format!(
                            "The download stopped: {err}. Download again to resume it: what arrived is kept."
                        )),
                    )));
                    return;
                }
                Ok(_) => {}
            }
        }
        match result {
            Ok(dir) => match models::check_folder(&dir) {
                Ok(candidate) => {
                    let _ = self.load(&candidate);
                }
                Err(err) => self.set(ModelState::Failed {
                    dir: Some(dir.display().to_string()),
                    message: format!("the downloaded model is not usable: {err}"),
                }),
            },
            // Back to the model in use, if there was one: the engine still holds it.
            Err(_) if cancel.load(Ordering::Relaxed) => self.set(match before {
                ready @ ModelState::Ready { .. } => ready,
                _ => ModelState::None,
            }),
            Err(err) => self.set(ModelState::Failed {
                dir: None,
                message: format!("The download stopped: {err}. Download again to resume it: what arrived is kept."),
            }),
        }
    }

    /// Shows `download` beside the model in use (nothing when no model is ready).
    fn set_side_download(&self, download: Option<SideDownload>) {
        let mut state = lock(&self.state);
        if let ModelState::Ready { download: side, .. } = &mut *state {
            *side = download.map(Box::new);
            let shown = state.clone();
            drop(state);
            self.events.model_state(&shown);
        }
    }

    /// Stops a running download; what was fetched is kept for the next try.
    pub fn cancel_download(&self) {
        if let Some(cancel) = lock(&self.download).as_ref() {
            cancel.store(true, Ordering::Relaxed);
        }
    }
}

/// The most positions a conversation with `candidate` may use: what it supports, at most
/// [`MAX_CONTEXT`].
fn window_of(candidate: &ModelCandidate) -> u32 {
    candidate
        .context_length
        .map_or(MAX_CONTEXT, |n| n.min(MAX_CONTEXT))
}

fn gigabytes(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}
