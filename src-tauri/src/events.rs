//! What the backend tells the UI without being asked: model state, streamed answers, drops.
//! Logic emits through [`Events`]; the window implements it with Tauri events, tests record.

use std::sync::Arc;

use serde::Serialize;
use tauri::{AppHandle, Emitter};

use crate::attachments::DropEvent;
use crate::chat::GenerationEvent;
use crate::faster::FasterAnswers;
use crate::local_api::{ApiActivity, ApiLogEntry, LocalApi, LocalApiStatus};
use crate::mcp_servers::ServerView;
use crate::model_setup::ModelState;

/// Event names the UI listens to.
pub const MODEL_STATE: &str = "model-state";
pub const GENERATION: &str = "generation";
pub const DROP: &str = "drop";
pub const FASTER_ANSWERS: &str = "faster-answers";
pub const LOCAL_API: &str = "local-api";
pub const API_REQUEST: &str = "api-request";
pub const API_ACTIVITY: &str = "api-activity";
pub const MCP_SERVER: &str = "mcp-server";

/// Where events go.
pub trait Events: Send + Sync + 'static {
    fn model_state(&self, state: &ModelState);
    fn generation(&self, event: &GenerationEvent);
    fn dropped(&self, event: &DropEvent);
    /// Where "Faster answers" stands, when it changes by itself (a drafter download).
    fn faster_answers(&self, state: &FasterAnswers);
    /// Where the local API stands, when it changes (switched, restarted, model changed).
    fn local_api(&self, status: &LocalApiStatus);
    /// A local API request ended (the request log's next row).
    fn api_request(&self, entry: &ApiLogEntry);
    /// How many local API answers are asked for now.
    fn api_activity(&self, activity: &ApiActivity);
    /// An MCP server's state changed (starting, ready with its tools, failed, stopped).
    fn mcp_server(&self, view: &ServerView);
}

impl Events for AppHandle {
    fn model_state(&self, state: &ModelState) {
        emit(self, MODEL_STATE, state);
    }

    fn generation(&self, event: &GenerationEvent) {
        emit(self, GENERATION, event);
    }

    fn dropped(&self, event: &DropEvent) {
        emit(self, DROP, event);
    }

    fn faster_answers(&self, state: &FasterAnswers) {
        emit(self, FASTER_ANSWERS, state);
    }

    fn local_api(&self, status: &LocalApiStatus) {
        emit(self, LOCAL_API, status);
    }

    fn api_request(&self, entry: &ApiLogEntry) {
        emit(self, API_REQUEST, entry);
    }

    fn api_activity(&self, activity: &ApiActivity) {
        emit(self, API_ACTIVITY, activity);
    }

    fn mcp_server(&self, view: &ServerView) {
        emit(self, MCP_SERVER, view);
    }
}

/// The app's events, with the model's state also handed to the local API (which serves
/// whatever model the window loaded).
pub struct FollowModel {
    pub inner: Arc<dyn Events>,
    pub api: Arc<LocalApi>,
}

impl Events for FollowModel {
    fn model_state(&self, state: &ModelState) {
        self.api.model_changed(state);
        self.inner.model_state(state);
    }
    fn generation(&self, event: &GenerationEvent) {
        self.inner.generation(event);
    }
    fn dropped(&self, event: &DropEvent) {
        self.inner.dropped(event);
    }
    fn faster_answers(&self, state: &FasterAnswers) {
        self.inner.faster_answers(state);
    }
    fn local_api(&self, status: &LocalApiStatus) {
        self.inner.local_api(status);
    }
    fn api_request(&self, entry: &ApiLogEntry) {
        self.inner.api_request(entry);
    }
    fn api_activity(&self, activity: &ApiActivity) {
        self.inner.api_activity(activity);
    }
    fn mcp_server(&self, view: &ServerView) {
        self.inner.mcp_server(view);
    }
}

fn emit(app: &AppHandle, name: &str, payload: &impl Serialize) {
    if let Err(err) = app.emit(name, payload) {
        eprintln!("gemma-desk: could not send the {name} event: {err}");
    }
}

#[cfg(test)]
pub mod recorded {
    //! An [`Events`] that keeps everything, for tests.
    use std::sync::Mutex;

    use super::*;

    /// One emitted event.
    #[derive(Debug, Clone)]
    pub enum Recorded {
        ModelState(ModelState),
        Generation(GenerationEvent),
        FasterAnswers(FasterAnswers),
        LocalApi(LocalApiStatus),
        ApiRequest(ApiLogEntry),
        ApiActivity(ApiActivity),
        McpServer(
            #[cfg_attr(
                not(target_os = "linux"),
                expect(
                    dead_code,
                    reason = "read by the MCP tests, which run on Linux only (/proc)"
                )
            )]
            ServerView,
        ),
    }

    #[derive(Default)]
    pub struct Recorder(pub Mutex<Vec<Recorded>>);

    impl Recorder {
        pub fn all(&self) -> Vec<Recorded> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Events for Recorder {
        fn model_state(&self, state: &ModelState) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::ModelState(state.clone()));
        }
        fn generation(&self, event: &GenerationEvent) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::Generation(event.clone()));
        }
        /// Drops come from the window only; no logic under test emits them.
        fn dropped(&self, _: &DropEvent) {}
        fn faster_answers(&self, state: &FasterAnswers) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::FasterAnswers(state.clone()));
        }
        fn local_api(&self, status: &LocalApiStatus) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::LocalApi(status.clone()));
        }
        fn api_request(&self, entry: &ApiLogEntry) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::ApiRequest(entry.clone()));
        }
        fn api_activity(&self, activity: &ApiActivity) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::ApiActivity(*activity));
        }
        fn mcp_server(&self, view: &ServerView) {
            self.0
                .lock()
                .unwrap()
                .push(Recorded::McpServer(view.clone()));
        }
    }
}
