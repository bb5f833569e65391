//! `POST /v1/chat/completions`: the request checked and turned into the engine's, queued on the
//! one engine, and its events written back as one JSON answer or as server-sent events ending
//! in `data: [DONE]`. A client that goes away cancels its answer at once: the handler (or the
//! stream) is dropped, and with it the guard that cancels the generation.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::constraint::{ConstraintError, Grammar};
use engine::error::{EngineError, GenerateError};
use engine::events::{ChatRequest, Event};
use engine::generate::Usage;
use engine::options::GenerateOptions;
use engine::output::{Piece, Splitter};
use engine::template::ToolCall;
use engine::worker::{Canceller, Engine};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::config::{ModelSlot, ServedModel};
use crate::error::ApiError;
use crate::http::{json_response, random_id, read_request, unix_now};
use crate::log::{Finished, Log, Note, Outcome, Requests};
use crate::messages;
use crate::queue::Admission;
use crate::stop::StopMatcher;
use crate::tools::Tools;
use crate::wire::{finish_reason, tool_call_json, ChatCompletionRequest, Completion};

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
pub(crate) struct Plan {
    pub stream: bool,
    include_usage: bool,
    options: GenerateOptions,
    stops: Vec<String>,
    tools: Tools,
    thinking: bool,
}

impl Plan {
    fn new(request: &ChatCompletionRequest, model: &ServedModel) -> Result<Self, ApiError> {
        if request.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid(
                "n",
                "only one choice per request (n = 1) is served",
            ));
        }
        let tools = Tools::new(request.tools.as_deref(), request.tool_choice.as_ref())?;
        let constraint = match crate::call_grammar::call_grammar(
            &tools,
            request.thinking(),
            request.parallel_tool_calls.unwrap_or(true),
        ) {
            // `tool_choice` "required" or a named function: sampling held to a call.
            Some(_) if request.response_format.as_ref().is_some_and(|f| f["type"] != "text") => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "`tool_choice` \"required\" or a named function cannot be combined with a `response_format`: the answer is a tool call",
                ))
            }
            Some(grammar) => Some(Grammar::Lark(grammar)),
            None => crate::format::grammar(request.response_format.as_ref())?,
        };
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
                constraint,
                ..GenerateOptions::default()
            },
            stops,
            tools,
            thinking: request.thinking(),
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
    let (request, note) = read_request::<ChatCompletionRequest>(&served, request).await?;
    let (plan, answer) = start(&served, request, note).await?;
    if plan.stream {
        Ok(sse(answer))
    } else {
        whole(answer).await
    }
}

/// Checks a request, queues it on the engine and waits for its first event: what both
/// `/v1/chat/completions` and `/v1/responses` answer from. `note` is the request's entry in the
/// request log, told the tokens when the answer ends.
pub(crate) async fn start(
    served: &Arc<Served>,
    request: ChatCompletionRequest,
    note: Option<Note>,
) -> Result<(Plan, Answer), ApiError> {
    let model = served.model.current()?;
    if !model.is_named(&request.model) {
        return Err(ApiError::ModelNotFound {
            given: request.model,
            valid: model.id.clone(),
        });
    }
    let plan = Plan::new(&request, &model)?;
    let (engine_messages, media) = messages::convert(&request.messages, model.vision, model.audio)?;
    drop(request);
    let budget = model.image_budget;
    let (encoded, audio) = (media.images, media.audio);
    let images = if encoded.is_empty() {
        Vec::new()
    } else {
        tokio::task::spawn_blocking(move || messages::preprocess(encoded, budget))
            .await
            .map_err(|e| ApiError::Internal(format!("preparing the images failed: {e}")))??
    };
    let (engine_messages, audio) = if audio.is_empty() {
        (engine_messages, Vec::new())
    } else {
        tokio::task::spawn_blocking(move || messages::prepare_audio(engine_messages, audio))
            .await
            .map_err(|e| ApiError::Internal(format!("preparing the audio failed: {e}")))??
    };

    let permit = served.admission.try_admit().ok_or(ApiError::QueueFull)?;
    let (events, mut inbox) = unbounded_channel();
    let canceller = served.engine.canceller();
    let chat = ChatRequest {
        conversation: API_CONVERSATION.to_owned(),
        messages: engine_messages,
        images,
        audio,
        thinking: plan.thinking,
        tools: plan.tools.declared.clone(),
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
        // Told before the event goes out: the log entry is written when the response ends,
        // which the last event can bring about at once.
        if let (Some((_, prompt_tokens, _, generated_tokens)), Some(note)) = (&ended, &note) {
            note.tokens(*prompt_tokens, *generated_tokens);
        }
        if events.send(event).is_err() {
            // The client is gone (its stream or handler was dropped): stop at once.
            client_left = true;
            after_left += usize::from(is_token);
            canceller.cancel(id);
        }
        if let Some((outcome, prompt_tokens, cached_tokens, generated_tokens)) = ended {
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
        if let (
            true,
            EngineError::Generate(GenerateError::Constraint(ConstraintError::Invalid(why))),
        ) = (plan.tools.choice.needs_constraint(), &error)
        {
            return Err(ApiError::invalid(
                "tools",
                format!("a call to these tools cannot be enforced: {why}"),
            ));
        }
        return Err(error.into());
    }
    let completion = Completion {
        id: completion_id(),
        created: unix_now(),
        model: model.id.clone(),
    };
    let answer = Answer::new(
        inbox,
        guard,
        StopMatcher::new(plan.stops.clone()),
        Some(first),
        completion,
        plan.include_usage,
        !plan.tools.declared.is_empty(),
    );
    Ok((plan, answer))
}

/// One answer being read from the engine.
pub(crate) struct Answer {
    inbox: UnboundedReceiver<Event>,
    guard: CancelOnDrop,
    stops: StopMatcher,
    splitter: Splitter,
    /// An event already taken from `inbox`, to handle first.
    pending: Option<Event>,
    /// Steps ready to hand out, before the next event is read.
    ready: VecDeque<Step>,
    pub completion: Completion,
    include_usage: bool,
    /// Tool calls found so far, and streamed so far (the next one's `index`).
    calls: usize,
    streamed_calls: usize,
    /// Whether the first chunk (the role) went out.
    started: bool,
    finished: bool,
}

/// What the engine said next, as the client sees it.
pub(crate) enum Step {
    Text(String),
    Reasoning(String),
    /// A tool call, with its id (`call_…`).
    Call(String, ToolCall),
    Done {
        finish: &'static str,
        usage: Usage,
    },
    Failed(ApiError),
}

impl Answer {
    fn new(
        inbox: UnboundedReceiver<Event>,
        guard: CancelOnDrop,
        stops: StopMatcher,
        pending: Option<Event>,
        completion: Completion,
        include_usage: bool,
        parse_calls: bool,
    ) -> Self {
        Self {
            inbox,
            guard,
            stops,
            splitter: Splitter::new(parse_calls),
            pending,
            ready: VecDeque::new(),
            completion,
            include_usage,
            calls: 0,
            streamed_calls: 0,
            started: false,
            finished: false,
        }
    }

    pub(crate) async fn step(&mut self) -> Step {
        loop {
            if let Some(step) = self.ready.pop_front() {
                return step;
            }
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
                Event::Delta { delta, marker, .. } => {
                    if self.stops.hit() {
                        continue;
                    }
                    for piece in self.splitter.push(marker, &delta) {
                        self.take(piece);
                    }
                }
                Event::Done { usage, .. } => {
                    self.guard.ended();
                    if !self.stops.hit() {
                        for piece in self.splitter.finish() {
                            self.take(piece);
                        }
                    }
                    let hit = self.stops.hit();
                    if !hit {
                        let rest = self.stops.finish();
                        if !rest.is_empty() {
                            self.ready.push_back(Step::Text(rest));
                        }
                    }
                    self.ready
                        .push_back(match finish_reason(usage.stop_reason, hit) {
                            Some("stop") if self.calls > 0 => Step::Done {
                                finish: "tool_calls",
                                usage,
                            },
                            Some(finish) => Step::Done { finish, usage },
                            None => Step::Failed(ApiError::Stopped(
                                "the model was switched or the server is stopping".into(),
                            )),
                        });
                }
                Event::Error { error, .. } => {
                    self.guard.ended();
                    return Step::Failed(error.into());
                }
            }
        }
    }

    /// Queues one piece of the answer: text through the stop strings, a thought as it is, a
    /// call with a fresh id.
    fn take(&mut self, piece: Piece) {
        if self.stops.hit() {
            return;
        }
        match piece {
            Piece::Content(text) => {
                let shown = self.stops.push(&text);
                if self.stops.hit() {
                    // The rest is not wanted: stop now, and report the usage when it ends.
                    self.guard.cancel();
                }
                if !shown.is_empty() {
                    self.ready.push_back(Step::Text(shown));
                }
            }
            Piece::Reasoning(text) => self.ready.push_back(Step::Reasoning(text)),
            Piece::Call(call) => {
                // Text held back for a stop string comes before the call.
                let held = self.stops.finish();
                if !held.is_empty() {
                    self.ready.push_back(Step::Text(held));
                }
                self.calls += 1;
                self.ready.push_back(Step::Call(random_id("call_"), call));
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
        let delta = match self.step().await {
            Step::Text(text) => json!({ "content": text }),
            Step::Reasoning(text) => json!({ "reasoning_content": text }),
            Step::Call(id, call) => {
                let mut call = tool_call_json(&id, &call);
                call["index"] = json!(self.streamed_calls);
                self.streamed_calls += 1;
                json!({ "tool_calls": [call] })
            }
            Step::Done { finish, usage } => {
                self.finished = true;
                push_event(
                    &mut out,
                    &self.completion.chunk(json!({}), Some(finish), with_usage),
                );
                if with_usage {
                    push_event(&mut out, &self.completion.usage_chunk(&usage));
                }
                out.push_str("data: [DONE]\n\n");
                return Some(out);
            }
            Step::Failed(error) => {
                // An error event, and no `[DONE]`: the answer did not end well.
                self.finished = true;
                push_event(&mut out, &error.envelope());
                return Some(out);
            }
        };
        push_event(&mut out, &self.completion.chunk(delta, None, with_usage));
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
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    loop {
        match answer.step().await {
            Step::Text(piece) => text.push_str(&piece),
            Step::Reasoning(piece) => reasoning.push_str(&piece),
            Step::Call(id, call) => calls.push(tool_call_json(&id, &call)),
            Step::Done { finish, usage } => {
                let body = answer
                    .completion
                    .message(&text, &reasoning, &calls, finish, &usage);
                return Ok(json_response(StatusCode::OK, &body));
            }
            Step::Failed(error) => return Err(error),
        }
    }
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
    random_id("chatcmpl-")
}

#[cfg(test)]
mod tests {
    //! The layer that turns engine events into chunks, fed the events of real answers: the
    //! tiny checkpoint's ids for a thought, text and tool calls (its random weights never
    //! write a call by themselves).

    use std::path::{Path, PathBuf};

    use engine::generate::StopReason;
    use engine::output::{replay, STRING_DELIMITER, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};
    use engine::tokenizer::{Tokenizer, CHANNEL_CLOSE, CHANNEL_OPEN};

    use super::*;

    fn tokenizer() -> Tokenizer {
        let root = std::env::var_os("GEMMA_FIXTURES")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/out/fixtures")
            });
        Tokenizer::load(&root.join("tiny")).expect("the tiny fixture (make fixtures)")
    }

    /// An answer's ids: markers as their control ids, text as that text's ordinary ids.
    fn answer_ids(tokenizer: &Tokenizer, parts: &[&str]) -> Vec<u32> {
        let control = [
            TOOL_CALL_OPEN,
            TOOL_CALL_CLOSE,
            STRING_DELIMITER,
            CHANNEL_OPEN,
            CHANNEL_CLOSE,
        ];
        let mut ids = Vec::new();
        for part in parts {
            if control.contains(part) {
                ids.extend(tokenizer.token_id(part));
            } else {
                let marked = tokenizer.mark_special_text(part, &[]).unwrap();
                ids.extend(tokenizer.encode_marked(&marked).unwrap());
            }
        }
        ids
    }

    /// The answer the engine streams for `ids`, ended by an end of turn.
    fn answer(ids: &[u32], tools: bool) -> (Answer, Engine) {
        let tokenizer = tokenizer();
        let (events, inbox) = unbounded_channel();
        for (n, (marker, delta)) in replay(&tokenizer, ids).unwrap().into_iter().enumerate() {
            let delta = Event::Delta {
                generation_id: 1,
                delta,
                token_count: n + 1,
                marker,
            };
            events.send(delta).unwrap();
        }
        let usage = Usage {
            prompt_tokens: 10,
            reused_tokens: 0,
            generated_tokens: ids.len(),
            time_to_first_token_ms: 0.0,
            prefill_tokens_per_second: 0.0,
            decode_tokens_per_second: 0.0,
            stop_reason: StopReason::EndOfTurn,
            speculative: None,
        };
        let done = Event::Done {
            generation_id: 1,
            usage,
            ids: ids.to_vec(),
        };
        events.send(done).unwrap();
        let engine = Engine::spawn();
        let guard = CancelOnDrop::new(engine.canceller(), Running::default(), 1);
        let completion = Completion {
            id: "chatcmpl-test".into(),
            created: 0,
            model: "tiny".into(),
        };
        let answer = Answer::new(
            inbox,
            guard,
            StopMatcher::new(Vec::new()),
            None,
            completion,
            false,
            tools,
        );
        (answer, engine)
    }

    async fn streamed(ids: &[u32], tools: bool) -> Vec<Value> {
        let (mut answer, _engine) = answer(ids, tools);
        let mut text = String::new();
        while let Some(bytes) = answer.next_sse().await {
            text.push_str(&bytes);
        }
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        text.split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str(e).unwrap())
            .collect()
    }

    async fn whole_body(ids: &[u32], tools: bool) -> Value {
        let (answer, _engine) = answer(ids, tools);
        let response = whole(answer).await.unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn delta_text(chunks: &[Value], field: &str) -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][field].as_str())
            .collect()
    }

    const Q: &str = STRING_DELIMITER;

    fn thought_text_and_two_calls(tokenizer: &Tokenizer) -> Vec<u32> {
        answer_ids(
            tokenizer,
            &[
                CHANNEL_OPEN,
                "thought\nThe user wants weather.",
                CHANNEL_CLOSE,
                "Checking.",
                TOOL_CALL_OPEN,
                "call:get_weather{city:",
                Q,
                "Paris \"{x}\" <turn|>",
                Q,
                ",days:[1,2],opts:{metric:true}}",
                TOOL_CALL_CLOSE,
                TOOL_CALL_OPEN,
                "call:get_time{}",
                TOOL_CALL_CLOSE,
            ],
        )
    }

    #[tokio::test]
    async fn a_thought_and_tool_calls_stream_as_openai_deltas() {
        let ids = thought_text_and_two_calls(&tokenizer());
        let chunks = streamed(&ids, true).await;
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            delta_text(&chunks, "reasoning_content"),
            "The user wants weather."
        );
        assert_eq!(delta_text(&chunks, "content"), "Checking.");
        let calls: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
            .flatten()
            .collect();
        assert_eq!(calls.len(), 2, "{chunks:?}");
        for (index, call) in calls.iter().enumerate() {
            assert_eq!(call["index"], index, "an index on every call delta");
            assert!(call["id"].as_str().unwrap().starts_with("call_"));
            assert_eq!(call["type"], "function");
        }
        assert_ne!(calls[0]["id"], calls[1]["id"]);
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        let arguments: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            arguments,
            json!({"city": "Paris \"{x}\" <turn|>", "days": [1, 2], "opts": {"metric": true}})
        );
        assert_eq!(calls[1]["function"]["arguments"], "{}");
        let finish = chunks.last().unwrap();
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(finish["choices"][0]["delta"], json!({}));
        // Text comes before the calls, the thought before the text.
        let first = |field: &str| {
            chunks
                .iter()
                .position(|c| {
                    let value = &c["choices"][0]["delta"][field];
                    value.is_array() || value.as_str().is_some_and(|t| !t.is_empty())
                })
                .unwrap()
        };
        assert!(first("reasoning_content") < first("content"));
        assert!(first("content") < first("tool_calls"));
    }

    #[tokio::test]
    async fn the_whole_answer_carries_calls_and_thought_apart_from_its_content() {
        let tokenizer = tokenizer();
        let body = whole_body(&thought_text_and_two_calls(&tokenizer), true).await;
        let message = &body["choices"][0]["message"];
        assert_eq!(message["content"], "Checking.");
        assert_eq!(message["reasoning_content"], "The user wants weather.");
        assert_eq!(message["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");

        let only_call = answer_ids(
            &tokenizer,
            &[TOOL_CALL_OPEN, "call:get_time{}", TOOL_CALL_CLOSE],
        );
        let body = whole_body(&only_call, true).await;
        let message = &body["choices"][0]["message"];
        assert!(message["content"].is_null(), "only a call: no content");
        assert_eq!(message["tool_calls"][0]["function"]["name"], "get_time");
        assert!(message.get("reasoning_content").is_none());
    }

    #[tokio::test]
    async fn a_malformed_call_is_answered_as_text() {
        let tokenizer = tokenizer();
        let broken = answer_ids(
            &tokenizer,
            &[TOOL_CALL_OPEN, "call:get_time{oops", TOOL_CALL_CLOSE],
        );
        let chunks = streamed(&broken, true).await;
        assert_eq!(
            delta_text(&chunks, "content"),
            "<|tool_call>call:get_time{oops<tool_call|>"
        );
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
        let body = whole_body(&broken, true).await;
        assert!(body["choices"][0]["message"].get("tool_calls").is_none());
    }
}
