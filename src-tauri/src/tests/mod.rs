//! The app's logic end to end without a window: the tiny fixture model on the real engine
//! thread, a real chats database, events recorded instead of sent to a webview. This module is
//! the harness every command family's tests share; each family is a module of its own.

mod attachments;
mod chat;
mod commands;
mod context;
mod conversations;
mod documents;
mod download;
mod export;
mod faster;
mod machine;
// Finds the servers' processes in /proc.
#[cfg(target_os = "linux")]
mod mcp;
mod model;
mod quick_ask;
mod versions;

#[path = "../../crates/tensor_files.rs"]
mod tensor_files;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chats::{MessageStatus, Role, StopReason};
use model_store::HfCache;

use crate::chat::{GenerationEvent, SendRequest, Sent};
use crate::data_dir::DataDir;
use crate::error::{Error, ErrorKind};
use crate::events::recorded::{Recorded, Recorder};
use crate::model_setup::ModelState;
use crate::settings::Settings;
use crate::state::AppState;

fn fixture() -> PathBuf {
    fixture_named("tiny")
}

/// One of the generated test checkpoints: tiny, tiny-optiq, tiny-plmp-bf16.
fn fixture_named(name: &str) -> PathBuf {
    let dir = match std::env::var_os("GEMMA_FIXTURES") {
        Some(root) => PathBuf::from(root),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/out/fixtures"),
    };
    dir.join(name)
}

/// A copy of the tiny fixture under `dir` that computes in float32: every bf16 tensor widened
/// (exactly). On random weights, bf16 rounding differs between a prompt read in one chunk and
/// one read after a cached prefix, enough to change a greedy answer; in float32 it does not (as
/// in engine/tests/generation.rs, `reused_cache_gives_the_same_answer_as_a_fresh_one`).
fn fixture_f32(dir: &std::path::Path) -> PathBuf {
    let to = dir.join("tiny-f32");
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let from = entry.unwrap().path();
        let target = to.join(from.file_name().unwrap());
        if from.extension().is_some_and(|e| e == "safetensors") {
            let mut tensors = tensor_files::read_tensors(&from);
            for (dtype, _, bytes) in tensors.values_mut() {
                if *dtype == safetensors::Dtype::BF16 {
                    *bytes = bytes
                        .chunks_exact(2)
                        .flat_map(|b| {
                            (u32::from(u16::from_le_bytes([b[0], b[1]])) << 16).to_le_bytes()
                        })
                        .collect();
                    *dtype = safetensors::Dtype::F32;
                }
            }
            tensor_files::write_tensors(&target, &tensors);
        } else {
            std::fs::copy(&from, &target).unwrap();
        }
    }
    to
}

struct Harness {
    _dir: tempfile::TempDir,
    data_dir: PathBuf,
    state: AppState,
    events: Arc<Recorder>,
}

impl Harness {
    fn new() -> Self {
        Self::with_hub("http://127.0.0.1:9")
    }

    /// The app downloading from the hub at `hub_url`.
    fn with_hub(hub_url: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let events = Arc::new(Recorder::default());
        let state = AppState::open(
            DataDir::new(data_dir.clone()),
            HfCache::none(),
            hub_url.into(),
            events.clone(),
        )
        .unwrap();
        // The tiny fixture has a drafter beside it: "Faster answers" stays off in these tests
        // unless one turns it on (its own tests below), so that every other test runs plain.
        Settings::set_faster_answers(&state.store, false).unwrap();
        Self {
            _dir: dir,
            data_dir,
            state,
            events,
        }
    }

    fn with_model() -> Self {
        let harness = Self::new();
        let state = harness.state.models.choose(&fixture()).unwrap();
        assert!(
            matches!(state, ModelState::Ready { vision: true, .. }),
            "{state:?}"
        );
        harness
    }

    /// The app with a float32 copy of the tiny model loaded (see [`fixture_f32`]).
    fn with_model_f32() -> Self {
        let harness = Self::new();
        let model = fixture_f32(harness._dir.path());
        let state = harness.state.models.choose(&model).unwrap();
        assert!(matches!(state, ModelState::Ready { .. }), "{state:?}");
        harness
    }

    /// The app started again on the same data folder, as after a quit.
    fn restart(self) -> (AppState, Arc<Recorder>, tempfile::TempDir) {
        let Self {
            _dir,
            data_dir,
            state,
            ..
        } = self;
        drop(state);
        let events = Arc::new(Recorder::default());
        let state = AppState::open(
            DataDir::new(data_dir),
            HfCache::none(),
            "http://127.0.0.1:9".into(),
            events.clone(),
        )
        .unwrap();
        (state, events, _dir)
    }

    fn send(&self, text: &str, settings: &Settings) -> Result<Sent, Error> {
        self.send_to(None, text, settings)
    }

    /// Sends `text` with the pending attachments `attachment_ids` in a new conversation.
    fn send_with(
        &self,
        text: &str,
        attachment_ids: Vec<String>,
        settings: &Settings,
    ) -> Result<Sent, Error> {
        self.state.chat.send(
            SendRequest {
                conversation_id: None,
                text: text.into(),
                attachment_ids,
                system_prompt: None,
            },
            settings,
        )
    }

    /// Sends `text` in `conversation` (`None`: a new one), without attachments.
    fn send_to(
        &self,
        conversation: Option<&str>,
        text: &str,
        settings: &Settings,
    ) -> Result<Sent, Error> {
        self.state.chat.send(
            SendRequest {
                conversation_id: conversation.map(str::to_owned),
                text: text.into(),
                attachment_ids: vec![],
                system_prompt: None,
            },
            settings,
        )
    }

    /// Waits for the generation's final event and returns every event it sent.
    fn finish(&self, generation_id: u64) -> Vec<GenerationEvent> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let events = self.generation_events(generation_id);
            if events.iter().any(|e| {
                matches!(
                    e,
                    GenerationEvent::Done { .. } | GenerationEvent::Error { .. }
                )
            }) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "no final event for {generation_id}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn generation_events(&self, generation_id: u64) -> Vec<GenerationEvent> {
        self.events
            .all()
            .into_iter()
            .filter_map(|e| match e {
                Recorded::Generation(g) if id_of(&g) == generation_id => Some(g),
                _ => None,
            })
            .collect()
    }
}

/// What `probe` finds, asked every 20 ms for up to `seconds`.
fn poll<T>(what: &str, seconds: u64, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "waited {seconds} s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn id_of(event: &GenerationEvent) -> u64 {
    match event {
        GenerationEvent::Prefill { generation_id, .. }
        | GenerationEvent::Delta { generation_id, .. }
        | GenerationEvent::Done { generation_id, .. }
        | GenerationEvent::Error { generation_id, .. } => *generation_id,
    }
}

fn streamed_text(events: &[GenerationEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            GenerationEvent::Delta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

fn short() -> Settings {
    Settings {
        max_tokens: 12,
        temperature: 0.0,
        ..Settings::default()
    }
}

fn long() -> Settings {
    Settings {
        max_tokens: 6000,
        context_length: 8192,
        ..Settings::default()
    }
}

fn prompt_len(messages: &[engine::template::Message]) -> u32 {
    prompt_ids(messages).len() as u32
}

/// The prompt the fixture's template and tokenizer make of `messages` (as the engine renders
/// them: thinking off, ending with the model's turn).
fn prompt_ids(messages: &[engine::template::Message]) -> Vec<u32> {
    let tokenizer = engine::tokenizer::Tokenizer::load(&fixture()).unwrap();
    let template = engine::template::ChatTemplate::load(&fixture()).unwrap();
    let options = engine::template::RenderOptions {
        add_generation_prompt: true,
        enable_thinking: false,
    };
    template.prompt_ids(&tokenizer, messages, options).unwrap()
}

fn user(text: &str) -> engine::template::Message {
    engine::template::Message::text(engine::template::Role::User, text)
}

/// The usage of a finished answer.
fn usage_of(events: &[GenerationEvent]) -> chats::Usage {
    match events.last() {
        Some(GenerationEvent::Done { usage, .. }) => usage.clone(),
        other => panic!("{other:?}"),
    }
}

/// A hub on 127.0.0.1 laid out as huggingface.co is (`/api/models/{repo}/tree/main`,
/// `/{repo}/resolve/main/{file}`), serving the files of `dir` as `repo`. Returns its address.
fn serve_hub(repo: &str, dir: &std::path::Path) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    let listing = serde_json::to_vec(
        &files
            .iter()
            .map(|(path, bytes)| serde_json::json!({"type": "file", "path": path, "size": bytes.len()}))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let (tree, resolve) = (
        format!("/api/models/{repo}/tree/main"),
        format!("/{repo}/resolve/main/"),
    );
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = String::new();
            let mut reader = BufReader::new(&stream);
            let _ = reader.read_line(&mut request);
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                header.clear();
            }
            let path = request.split(' ').nth(1).unwrap_or_default();
            let body = if path.starts_with(&tree) {
                Some(listing.as_slice())
            } else {
                path.strip_prefix(&resolve)
                    .and_then(|name| files.iter().find(|(f, _)| f == name))
                    .map(|(_, bytes)| bytes.as_slice())
            };
            let _ = match body {
                Some(body) => write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .and_then(|()| stream.write_all(body)),
                None => write!(
                    stream,
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                ),
            };
        }
    });
    base
}

/// The `state` of every model state sent to the UI, in order.
fn model_states(events: &Recorder) -> Vec<ModelState> {
    events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            Recorded::ModelState(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// A PNG of `width` × `height` pixels of one colour, as a user would drop it.
fn png_of(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    let mut png = Vec::new();
    image::RgbImage::from_pixel(width, height, image::Rgb(rgb))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    png
}
