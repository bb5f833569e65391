//! `POST /v1/chat/completions`: the request checked and turned into the engine's, queued on the
//! one engine, and its events written back as one JSON answer or as server-sent events ending
//! in `data: [DONE]`. A client that goes away cancels its answer at once: the handler (or the
//! stream) is dropped, and with it the guard that cancels the generation.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::generate::{GenerateOptions, Usage};
use engine::worker::{Canceller, ChatRequest, Engine, Event};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::config::{ModelSlot, ServedModel};
use crate::error::ApiError;
use crate::log::{Finished, Log, Note, Outcome, Requests};
use crate::messages;
use crate::queue::Admission;
use crate::stop::StopMatcher;
use crate::wire::{finish_reason, ChatCompletionRequest, Completion};

/// The engine keeps the cache of one conversation; API requests share this one, so a client
/// that sends its conversation again with a new turn reuses the prefix it already paid for.
const API_CONVERSATION: &str = "local-api";
/// Most stop strings one request may give.
const MAX_STOPS: usize = 16;

/// What the handlers share.
pub struct Served {
    pub engine: Arc<Engine>,
    /// The model the engine has loaded now; none while it has none (503 `model_not_loaded`).
    pub model: ModelSlot,
    pub admission: Arc<Admission>,
    pub max_body_bytes: usize,
    pub running: Running,
    pub log: Log,
    pub requests: Arc<Requests>,
    /// When the server started (the models' `created`).
    pub created: u64,
}

/// The generations this server has started and not seen end (stopped when it shuts down).
#[derive(Debug, Clone, Default)]
pub struct Running(Arc<Mutex<HashSet<u64>>>);

impl Running {
    fn insert(&self, id: u64) {
        if let Ok(mut ids) = self.0.lock() {
            ids.insert(id);
        }
    }

    fn remove(&self, id: u64) {
        if let Ok(mut ids) = self.0.lock() {
            ids.remove(&id);
        }
    }

    /// Asks every one of them to stop.
    pub fn cancel_all(&self, engine: &Engine) {
        let ids: Vec<u64> = self
            .0
            .lock()
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default();
        for id in ids {
            engine.cancel(id);
        }
    }
}

/// Cancels its generation when dropped before the generation ended: when the client went away
/// (hyper drops the handler or the response stream), or the request failed on our side.
struct CancelOnDrop {
    canceller: Canceller,
    running: Running,
    id: u64,
    armed: bool,
}

impl CancelOnDrop {
    fn new(canceller: Canceller, running: Running, id: u64) -> Self {
        running.insert(id);
        Self {
            canceller,
            running,
            id,
            armed: true,
        }
    }

    fn cancel(&self) {
        self.canceller.cancel(self.id);
    }

    /// The generation has ended: nothing to cancel.
    fn ended(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.canceller.cancel(self.id);
        }
        self.running.remove(self.id);
    }
}

/// How to answer one request.
struct Plan {
    stream: bool,
    include_usage: bool,
    options: GenerateOptions,
    stops: Vec<String>,
}

impl Plan {
    fn new(request: &ChatCompletionRequest, model: &ServedModel) -> Result<Self, ApiError> {
        if request.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid(
                "n",
                "only one choice per request (n = 1) is served",
            ));
        }
        if request.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(ApiError::invalid("tools", "tools are not supported yet"));
        }
        match &request.tool_choice {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "none" || s == "auto" => {}
            Some(_) => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "tools are not supported yet",
                ))
            }
        }
        if let Some(format) = &request.response_format {
            let kind = format.get("type").and_then(Value::as_str);
            if !(format.is_null() || kind == Some("text")) {
                return Err(ApiError::invalid(
                    "response_format",
                    "structured output (json_object, json_schema) is not supported yet",
                ));
            }
        }
        let context = model.context_window;
        let (field, max_tokens) = match (request.max_completion_tokens, request.max_tokens) {
            (Some(n), _) => ("max_completion_tokens", Some(n)),
            (None, n) => ("max_tokens", n),
        };
        let max_tokens = match max_tokens {
            Some(0) => {
                return Err(ApiError::invalid(
                    field,
                    format!("`{field}` must be at least 1"),
                ))
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(context),
            None => context,
        };
        let mut sampler = model.sampler.clone();
        if let Some(t) = request.temperature {
            if !(t.is_finite() && (0.0..=2.0).contains(&t)) {
                return Err(ApiError::invalid(
                    "temperature",
                    format!("`temperature` must be between 0 and 2, not {t}"),
                ));
            }
            sampler.temperature = t;
        }
        if let Some(p) = request.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(ApiError::invalid(
                    "top_p",
                    format!("`top_p` must be above 0 and at most 1, not {p}"),
                ));
            }
            sampler.top_p = (p < 1.0).then_some(p);
        }
        // Same seed, same request, same answer; without one, a fresh seed per answer.
        sampler.seed = match request.seed {
            Some(seed) => seed as u64,
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        sampler
            .validate()
            .map_err(|e| ApiError::invalid("temperature", e.to_string()))?;
        let stops = request
            .stop
            .as_ref()
            .map(|s| match s {
                crate::wire::Stop::One(one) => vec![one.clone()],
                crate::wire::Stop::Many(many) => many.clone(),
            })
            .unwrap_or_default();
        if stops.len() > MAX_STOPS {
            return Err(ApiError::invalid(
                "stop",
                format!("at most {MAX_STOPS} stop strings, not {}", stops.len()),
            ));
        }
        Ok(Self {
            stream: request.stream.unwrap_or(false),
            include_usage: request
                .stream_options
                .as_ref()
                .is_some_and(|o| o.include_usage),
            options: GenerateOptions {
                sampler,
                max_tokens,
                context_window: context,
                ..GenerateOptions::default()
            },
            stops,
        })
    }
}

/// The handler.
pub async fn chat_completions(State(served): State<Arc<Served>>, request: Request) -> Response {
    match answer(served, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn answer(served: Arc<Served>, request: Request) -> Result<Response, ApiError> {
    let note = request.extensions().get::<Note>().cloned();
    let body = read_json_body(request, served.max_body_bytes).await?;
    if let Some(note) = &note {
        note.body(&body);
    }
    let request: ChatCompletionRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadJson(e.to_string()))?;
    drop(body);
    let model = served.model.current()?;
    if !model.is_named(&request.model) {
        return Err(ApiError::ModelNotFound {
            given: request.model,
            valid: model.id.clone(),
        });
    }
    let plan = Plan::new(&request, &model)?;
    let (engine_messages, encoded) = messages::convert(&request.messages, model.vision)?;
    drop(request);
    let budget = model.image_budget;
    let images = if encoded.is_empty() {
        Vec::new()
    } else {
        tokio::task::spawn_blocking(move || messages::preprocess(encoded, budget))
            .await
            .map_err(|e| ApiError::Internal(format!("preparing the images failed: {e}")))??
    };

    let permit = served.admission.try_admit().ok_or(ApiError::QueueFull)?;
    let (events, mut inbox) = unbounded_channel();
    let canceller = served.engine.canceller();
    let chat = ChatRequest {
        conversation: API_CONVERSATION.to_owned(),
        messages: engine_messages,
        images,
        thinking: false,
        options: plan.options.clone(),
    };
    let log = served.log.clone();
    let mut client_left = false;
    let mut after_left = 0;
    let id = served.engine.generate(chat, move |event| {
        // The place in the queue is held until the engine is done with this request.
        let _place = &permit;
        let id = generation_id(&event);
        let is_token = matches!(event, Event::Delta { .. });
        let ended = match &event {
            Event::Done { usage, .. } => Some((
                Outcome::Ended(usage.stop_reason),
                usage.prompt_tokens,
                usage.reused_tokens,
                usage.generated_tokens,
            )),
            Event::Error { error, .. } => Some((Outcome::Failed(error.to_string()), 0, 0, 0)),
            _ => None,
        };
        if events.send(event).is_err() {
            // The client is gone (its stream or handler was dropped): stop at once.
            client_left = true;
            after_left += usize::from(is_token);
            canceller.cancel(id);
        }
        if let Some((outcome, prompt_tokens, cached_tokens, generated_tokens)) = ended {
            if let Some(note) = &note {
                note.tokens(prompt_tokens, generated_tokens);
            }
            log.record(Finished {
                generation_id: id,
                outcome,
                prompt_tokens,
                cached_tokens,
                generated_tokens,
                client_left,
                tokens_after_client_left: after_left,
            });
        }
    })?;
    let mut guard = CancelOnDrop::new(served.engine.canceller(), served.running.clone(), id);

    // The first event says whether the prompt was taken: a prompt that does not fit, or a
    // template that refuses the conversation, is an HTTP error, not a stream that fails.
    let first = inbox.recv().await.ok_or_else(engine_went_away)?;
    if let Event::Error { error, .. } = first {
        guard.ended();
        return Err(error.into());
    }
    let completion = Completion {
        id: completion_id(),
        created: unix_now(),
        model: model.id.clone(),
    };
    let answer = Answer {
        inbox,
        guard,
        stops: StopMatcher::new(plan.stops),
        pending: Some(first),
        completion,
        include_usage: plan.include_usage,
        started: false,
        finished: false,
    };
    if plan.stream {
        Ok(sse(answer))
    } else {
        whole(answer).await
    }
}

/// One answer being read from the engine.
struct Answer {
    inbox: UnboundedReceiver<Event>,
    guard: CancelOnDrop,
    stops: StopMatcher,
    /// An event already taken from `inbox`, to handle first.
    pending: Option<Event>,
    completion: Completion,
    include_usage: bool,
    /// Whether the first chunk (the role) went out.
    started: bool,
    finished: bool,
}

/// What the engine said next, as the client sees it.
enum Step {
    Text(String),
    Done {
        rest: String,
        finish: &'static str,
        usage: Usage,
    },
    Failed(ApiError),
}

impl Answer {
    async fn step(&mut self) -> Step {
        loop {
            let event = match self.pending.take() {
                Some(event) => event,
                None => match self.inbox.recv().await {
                    Some(event) => event,
                    None => {
                        self.guard.ended();
                        return Step::Failed(engine_went_away());
                    }
                },
            };
            match event {
                Event::Prefill { .. } => {}
                Event::Delta { delta, .. } => {
                    if self.stops.hit() {
                        continue;
                    }
                    let shown = self.stops.push(&delta);
                    if self.stops.hit() {
                        // The rest is not wanted: stop now, and report the usage when it ends.
                        self.guard.cancel();
                    }
                    if !shown.is_empty() {
                        return Step::Text(shown);
                    }
                }
                Event::Done { usage, .. } => {
                    self.guard.ended();
                    let hit = self.stops.hit();
                    return match finish_reason(usage.stop_reason, hit) {
                        Some(finish) => Step::Done {
                            rest: if hit {
                                String::new()
                            } else {
                                self.stops.finish()
                            },
                            finish,
                            usage,
                        },
                        None => Step::Failed(ApiError::Stopped(
                            "the model was switched or the server is stopping".into(),
                        )),
                    };
                }
                Event::Error { error, .. } => {
                    self.guard.ended();
                    return Step::Failed(error.into());
                }
            }
        }
    }

    /// The next bytes of the event stream; `None` once it has ended.
    async fn next_sse(&mut self) -> Option<String> {
        if self.finished {
            return None;
        }
        let with_usage = self.include_usage;
        let mut out = String::new();
        if !self.started {
            self.started = true;
            let role = json!({ "role": "assistant", "content": "" });
            push_event(&mut out, &self.completion.chunk(role, None, with_usage));
        }
        match self.step().await {
            Step::Text(text) => {
                push_event(
                    &mut out,
                    &self
                        .completion
                        .chunk(json!({ "content": text }), None, with_usage),
                );
            }
            Step::Done {
                rest,
                finish,
                usage,
            } => {
                self.finished = true;
                if !rest.is_empty() {
                    push_event(
                        &mut out,
                        &self
                            .completion
                            .chunk(json!({ "content": rest }), None, with_usage),
                    );
                }
                push_event(
                    &mut out,
                    &self.completion.chunk(json!({}), Some(finish), with_usage),
                );
                if with_usage {
                    push_event(&mut out, &self.completion.usage_chunk(&usage));
                }
                out.push_str("data: [DONE]\n\n");
            }
            Step::Failed(error) => {
                // An error event, and no `[DONE]`: the answer did not end well.
                self.finished = true;
                push_event(&mut out, &error.envelope());
            }
        }
        Some(out)
    }
}

fn push_event(out: &mut String, value: &Value) {
    out.push_str("data: ");
    out.push_str(&value.to_string());
    out.push_str("\n\n");
}

/// The answer as server-sent events.
fn sse(answer: Answer) -> Response {
    let stream = futures_util::stream::unfold(answer, |mut answer| async move {
        let bytes = answer.next_sse().await?;
        Some((Ok::<_, Infallible>(Bytes::from(bytes)), answer))
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The answer as one JSON body, once it has ended.
async fn whole(mut answer: Answer) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match answer.step().await {
            Step::Text(piece) => text.push_str(&piece),
            Step::Done {
                rest,
                finish,
                usage,
            } => {
                text.push_str(&rest);
                let body = answer.completion.message(&text, finish, &usage);
                return Ok(json_response(StatusCode::OK, &body));
            }
            Step::Failed(error) => return Err(error),
        }
    }
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The body of a JSON request: `Content-Type: application/json` (a browser's "simple"
/// cross-site POST cannot send it) and at most `limit` bytes.
async fn read_json_body(request: Request, limit: usize) -> Result<Bytes, ApiError> {
    let headers = request.headers();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_json = content_type.as_deref().is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
    });
    if !is_json {
        return Err(ApiError::NotJson {
            given: content_type.map_or("no Content-Type".to_owned(), |t| format!("`{t}`")),
        });
    }
    let too_large = || ApiError::TooLarge {
        limit_mb: limit / (1024 * 1024),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    let mut frames = request.into_body().into_data_stream();
    while let Some(frame) = frames.next().await {
        let frame =
            frame.map_err(|e| ApiError::BadJson(format!("the body could not be read ({e})")))?;
        if body.len() + frame.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&frame);
    }
    Ok(Bytes::from(body))
}

fn generation_id(event: &Event) -> u64 {
    match event {
        Event::Prefill { generation_id, .. }
        | Event::Delta { generation_id, .. }
        | Event::Done { generation_id, .. }
        | Event::Error { generation_id, .. } => *generation_id,
    }
}

fn engine_went_away() -> ApiError {
    ApiError::Stopped("the engine stopped".into())
}

/// `chatcmpl-` and 24 random hex digits.
fn completion_id() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = unix_nanos().to_le_bytes()[..12]
            .try_into()
            .unwrap_or_default();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("chatcmpl-{hex}")
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
