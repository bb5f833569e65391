//! Settings → "Local API": the `api` crate's OpenAI-compatible server over the app's own engine
//! (one model in memory), off unless switched on. Its settings (on or off, port, key, allowed
//! origins, verbose, answers at once) persist in the chats database; when on, it starts with
//! the app, before a model is loaded (requests get 503 `model_not_loaded` until one is), and
//! follows the model the window loads. The engine writes several answers at once (up to
//! "answers at once"); the window's chat never waits for a place: it joins with
//! `Engine::generate_first`.

use std::collections::VecDeque;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use api::{ApiConfig, ApiKey, ServedModel, Server, DEFAULT_PORT};
use chats::Store;
use engine::batch::{DEFAULT_PARALLEL, MAX_PARALLEL};
use engine::sampler::SamplerConfig;
use engine::worker::Engine;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::Error;
use crate::events::Events;
use crate::model_setup::ModelState;
use crate::settings::Settings;
use crate::sync::lock;

/// Key of the stored settings in the chats database.
const KEY: &str = "local_api";
/// Ports a person may choose (below 1024 are the system's).
pub const MIN_PORT: u32 = 1024;
pub const MAX_PORT: u32 = 65_535;
/// Request log entries the app keeps (across restarts of the server, not of the app).
const LOG_KEPT: usize = 200;

/// What is stored. The key is kept beside the other settings, in the app's own data folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Stored {
    enabled: bool,
    port: u16,
    /// Generated when the API is first switched on.
    key: Option<String>,
    allowed_origins: Vec<String>,
    verbose: bool,
    /// Answers the engine writes at once (1 to `MAX_PARALLEL`).
    parallel: usize,
}

impl Default for Stored {
    fn default() -> Self {
        Self {
            enabled: false,
            port: DEFAULT_PORT,
            key: None,
            allowed_origins: Vec::new(),
            verbose: false,
            parallel: DEFAULT_PARALLEL,
        }
    }
}

/// Where the local API stands, for Settings.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct LocalApiStatus {
    /// Switched on (the choice persists, also while it cannot run).
    pub enabled: bool,
    /// Listening now.
    pub running: bool,
    pub port: u16,
    pub default_port: u16,
    pub min_port: u32,
    pub max_port: u32,
    /// `http://127.0.0.1:PORT/v1`.
    pub address: String,
    /// `None` until first switched on.
    pub key: Option<String>,
    pub allowed_origins: Vec<String>,
    pub verbose: bool,
    /// Answers written at once; requests beyond wait (the window's chat never does).
    pub parallel: u32,
    pub default_parallel: u32,
    pub max_parallel: u32,
    /// Why it is on but not running (e.g. the port is used by another program), in words.
    pub error: Option<String>,
    /// The id clients name the loaded model by; `None` while no model is loaded.
    pub model_id: Option<String>,
    /// Answers being asked for now (running or queued).
    pub answering: u32,
}

/// What Settings changes.
#[derive(Debug, Clone, PartialEq, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct LocalApiChange {
    pub enabled: bool,
    /// Checked here: 1024–65535.
    pub port: u32,
    /// One origin per item, as `scheme://host[:port]`; blank items are dropped.
    pub allowed_origins: Vec<String>,
    pub verbose: bool,
    /// Checked here: 1 to the most answers at once.
    pub parallel: u32,
}

/// One request the server answered or refused, for the request log.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct ApiLogEntry {
    /// Milliseconds since the Unix epoch when it arrived.
    #[ts(type = "number")]
    pub at_ms: u64,
    /// The client's User-Agent.
    pub client: String,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    #[ts(type = "number")]
    pub ms: u64,
    /// The request body, only while verbose is on.
    pub body: Option<String>,
}

impl From<&api::Request> for ApiLogEntry {
    fn from(r: &api::Request) -> Self {
        Self {
            at_ms: r.at_ms,
            client: r.client.clone(),
            method: r.method.clone(),
            path: r.path.clone(),
            status: r.status,
            prompt_tokens: r.prompt_tokens.map(|n| n as u32),
            completion_tokens: r.completion_tokens.map(|n| n as u32),
            ms: r.ms,
            body: r.body.clone(),
        }
    }
}

/// How busy the API is, sent as requests come and go.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct ApiActivity {
    pub answering: u32,
}

/// The local API of the app.
pub struct LocalApi {
    engine: Arc<Engine>,
    store: Arc<Store>,
    events: Arc<dyn Events>,
    runtime: tokio::runtime::Runtime,
    /// Held while a change applies, which may wait for a server to stop and for the engine.
    inner: Mutex<Inner>,
    /// Where it stands as last published, with requests counted as they come and go: what
    /// Settings reads, never waiting for a change, a restart or the engine.
    shown: Arc<Mutex<LocalApiStatus>>,
    log: Arc<Mutex<VecDeque<ApiLogEntry>>>,
}

struct Inner {
    stored: Stored,
    server: Option<Server>,
    error: Option<String>,
    model: Option<ServedModel>,
}

/// Tells the window as requests come and end, and keeps the log and the shown status.
struct Watcher {
    events: Arc<dyn Events>,
    log: Arc<Mutex<VecDeque<ApiLogEntry>>>,
    shown: Arc<Mutex<LocalApiStatus>>,
}

impl api::Watcher for Watcher {
    fn started(&self, open: usize) {
        lock(&self.shown).answering = open as u32;
        self.events.api_activity(&ApiActivity {
            answering: open as u32,
        });
    }

    fn ended(&self, request: &api::Request, open: usize) {
        let entry = ApiLogEntry::from(request);
        if let Ok(mut log) = self.log.lock() {
            if log.len() == LOG_KEPT {
                log.pop_front();
            }
            log.push_back(entry.clone());
        }
        self.events.api_request(&entry);
        lock(&self.shown).answering = open as u32;
        self.events.api_activity(&ApiActivity {
            answering: open as u32,
        });
    }
}

impl LocalApi {
    /// Reads the stored settings and, when the API was on, starts it (no model yet).
    pub fn open(
        engine: Arc<Engine>,
        store: Arc<Store>,
        events: Arc<dyn Events>,
    ) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("local-api")
            .enable_all()
            .build()?;
        let mut stored: Stored = store.get_setting(KEY).ok().flatten().unwrap_or_default();
        stored.parallel = stored.parallel.clamp(1, MAX_PARALLEL);
        engine.set_parallel(stored.parallel)?;
        let inner = Inner {
            stored,
            server: None,
            error: None,
            model: None,
        };
        let shown = Arc::new(Mutex::new(status_of(&inner)));
        let api = Self {
            engine,
            store,
            events,
            runtime,
            inner: Mutex::new(inner),
            shown,
            log: Arc::default(),
        };
        {
            let mut inner = api.lock();
            api.restart(&mut inner);
            *lock(&api.shown) = status_of(&inner);
        }
        Ok(api)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// Where it stands, at once: while a change is being applied, where it stood before it.
    pub fn status(&self) -> LocalApiStatus {
        lock(&self.shown).clone()
    }

    /// Applies what Settings changed: checked first (a bad port or origin changes nothing),
    /// then stored, then the server is started, stopped or restarted as needed. A port another
    /// program uses leaves the API on but not running, with the reason in `error`.
    pub fn change(&self, change: LocalApiChange) -> Result<LocalApiStatus, Error> {
        if !(MIN_PORT..=MAX_PORT).contains(&change.port) {
            return Err(Error::Invalid(format!(
                "the port must be between {MIN_PORT} and {MAX_PORT}, not {}",
                change.port
            )));
        }
        if !(1..=MAX_PARALLEL as u32).contains(&change.parallel) {
            return Err(Error::Invalid(format!(
                "answers at once must be between 1 and {MAX_PARALLEL}, not {}",
                change.parallel
            )));
        }
        let origins = change
            .allowed_origins
            .iter()
            .filter(|o| !o.trim().is_empty())
            .map(|o| api::check_origin(o).map_err(Error::Invalid))
            .collect::<Result<Vec<_>, _>>()?;
        let mut inner = self.lock();
        let mut stored = Stored {
            enabled: change.enabled,
            port: change.port as u16,
            allowed_origins: origins,
            verbose: change.verbose,
            parallel: change.parallel as usize,
            ..inner.stored.clone()
        };
        if stored.enabled && stored.key.is_none() {
            stored.key = Some(generate_key()?);
        }
        self.store.set_setting(KEY, &stored)?;
        let before = std::mem::replace(&mut inner.stored, stored);
        self.engine.set_parallel(inner.stored.parallel)?;
        let same_server = Stored {
            verbose: before.verbose,
            parallel: before.parallel,
            ..inner.stored.clone()
        } == before;
        if same_server && (inner.server.is_some() || !inner.stored.enabled) {
            if let Some(server) = &inner.server {
                server.set_verbose(inner.stored.verbose);
                server.set_parallel(inner.stored.parallel);
            }
        } else {
            self.restart(&mut inner);
        }
        Ok(self.publish(&inner))
    }

    /// A new key; a running server is restarted with it, so the old key gets 401 at once.
    pub fn regenerate_key(&self) -> Result<LocalApiStatus, Error> {
        let mut inner = self.lock();
        let stored = Stored {
            key: Some(generate_key()?),
            ..inner.stored.clone()
        };
        self.store.set_setting(KEY, &stored)?;
        inner.stored = stored;
        if inner.stored.enabled {
            self.restart(&mut inner);
        }
        Ok(self.publish(&inner))
    }

    /// The requests logged since the app started, oldest first.
    pub fn log(&self) -> Vec<ApiLogEntry> {
        self.log
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The window's model changed: serve it (or none while there is none).
    pub fn model_changed(&self, state: &ModelState) {
        let model = match state {
            ModelState::Ready {
                dir,
                context_window,
                vision,
                audio,
                ..
            } => Some(served_model(
                Path::new(dir),
                *context_window,
                (*vision, *audio),
                &Settings::load(&self.store),
            )),
            _ => None,
        };
        let mut inner = self.lock();
        if let Some(server) = &inner.server {
            server.set_model(model.clone());
        }
        inner.model = model;
        self.publish(&inner);
    }

    /// Stops the server (the app is quitting): answers being written end at once.
    pub fn shutdown(&self) {
        let mut inner = self.lock();
        if let Some(server) = inner.server.take() {
            let _ = self.wait(server.shutdown());
        }
    }

    /// Stops the server if one runs, and starts one as the stored settings say.
    fn restart(&self, inner: &mut Inner) {
        if let Some(server) = inner.server.take() {
            let _ = self.wait(server.shutdown());
        }
        inner.error = None;
        if !inner.stored.enabled {
            return;
        }
        let key = inner
            .stored
            .key
            .as_deref()
            .map(ApiKey::new)
            .transpose()
            .map_err(|e| e.to_string());
        let key = match key {
            Ok(Some(key)) => key,
            Ok(None) => {
                inner.error = Some("there is no API key yet: switch the API off and on".into());
                return;
            }
            Err(e) => {
                inner.error = Some(format!("the stored API key cannot be used: {e}"));
                return;
            }
        };
        let config = ApiConfig {
            port: inner.stored.port,
            parallel: inner.stored.parallel,
            allowed_origins: inner.stored.allowed_origins.clone(),
            model: inner.model.clone(),
            ..ApiConfig::new(key, placeholder_model())
        };
        match self.wait(Server::start(self.engine.clone(), config)) {
            Ok(Ok(server)) => {
                server.set_verbose(inner.stored.verbose);
                server.watch(Some(Arc::new(Watcher {
                    events: self.events.clone(),
                    log: self.log.clone(),
                    shown: self.shown.clone(),
                })));
                inner.server = Some(server);
            }
            Ok(Err(e)) => inner.error = Some(e.to_string()),
            Err(e) => inner.error = Some(e),
        }
    }

    /// Runs `work` on the API's runtime and waits for it (callable from any thread, also one
    /// of another runtime's).
    fn wait<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, String> {
        let (done, result) = std::sync::mpsc::channel();
        self.runtime.spawn(async move {
            let _ = done.send(work.await);
        });
        result
            .recv()
            .map_err(|_| "the local API's runtime stopped".to_owned())
    }

    fn publish(&self, inner: &Inner) -> LocalApiStatus {
        let status = status_of(inner);
        *lock(&self.shown) = status.clone();
        self.events.local_api(&status);
        status
    }
}

fn status_of(inner: &Inner) -> LocalApiStatus {
    let stored = &inner.stored;
    let port = inner
        .server
        .as_ref()
        .map_or(stored.port, |s| s.address().port());
    LocalApiStatus {
        enabled: stored.enabled,
        running: inner.server.is_some(),
        port,
        default_port: DEFAULT_PORT,
        min_port: MIN_PORT,
        max_port: MAX_PORT,
        address: format!("http://127.0.0.1:{port}/v1"),
        key: stored.key.clone(),
        allowed_origins: stored.allowed_origins.clone(),
        verbose: stored.verbose,
        parallel: stored.parallel as u32,
        default_parallel: DEFAULT_PARALLEL as u32,
        max_parallel: MAX_PARALLEL as u32,
        error: inner.error.clone(),
        model_id: inner.model.as_ref().map(|m| m.id.clone()),
        answering: inner
            .server
            .as_ref()
            .map_or(0, |s| s.open_requests() as u32),
    }
}

impl Drop for LocalApi {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn generate_key() -> Result<String, Error> {
    ApiKey::generate()
        .map(|k| k.reveal().to_owned())
        .map_err(|e| Error::Internal(e.to_string()))
}

/// The model loaded in `dir` as the API serves it: its id is the folder's name, its context
/// window the app's setting (at most the model's), its sampling the checkpoint's defaults.
/// `(vision, audio)`: whether it sees images and hears audio.
fn served_model(
    dir: &Path,
    model_window: u32,
    (vision, audio): (bool, bool),
    settings: &Settings,
) -> ServedModel {
    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ServedModel {
        id: ServedModel::id_from_folder_name(&folder),
        aliases: Vec::new(),
        vision,
        audio,
        context_window: settings.context_length.min(model_window) as usize,
        sampler: SamplerConfig::load(dir).unwrap_or_default(),
        image_budget: settings.image_budget().unwrap_or_default(),
    }
}

/// Replaced at once by the real model (or none): `ApiConfig::new` wants one.
fn placeholder_model() -> ServedModel {
    ServedModel {
        id: String::new(),
        aliases: Vec::new(),
        vision: false,
        audio: false,
        context_window: 0,
        sampler: SamplerConfig::default(),
        image_budget: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::events::recorded::Recorder;

    #[test]
    fn settings_read_where_it_stands_while_a_change_is_being_applied() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("chats.sqlite")).unwrap());
        let api = Arc::new(
            LocalApi::open(
                Arc::new(Engine::spawn()),
                store,
                Arc::new(Recorder::default()),
            )
            .unwrap(),
        );
        // A change being applied holds this while a server stops and the engine is told.
        let applying = api.lock();
        let (answer, status) = mpsc::channel();
        let reader = api.clone();
        std::thread::spawn(move || {
            let _ = answer.send(reader.status());
        });
        let status = status
            .recv_timeout(Duration::from_secs(10))
            .expect("Settings waited for the change to end");
        drop(applying);
        assert!(!status.enabled && !status.running, "{status:?}");
        assert_eq!(
            status.address,
            format!("http://127.0.0.1:{DEFAULT_PORT}/v1")
        );
    }
}
