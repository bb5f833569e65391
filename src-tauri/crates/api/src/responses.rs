//! `POST /v1/responses`: OpenAI's Responses API, stateless. A request becomes a chat-completions
//! request (one conversion to the engine's messages, one generation path: `completions::start`),
//! and the answer's steps become the Responses output items: a reasoning item for the thought,
//! a message with `output_text`, a `function_call` per tool call; streamed as the typed events
//! the official SDKs read (`response.created` … `response.completed`, each with its
//! `sequence_number`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::generate::Usage;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::completions::{start, Answer, Served, Step};
use crate::error::ApiError;
use crate::http::{json_response, random_id, read_request};
use crate::tools::from_responses_tool;
use crate::wire::{ChatCompletionRequest, ChatMessage};

/// `POST /v1/responses`. Fields not listed are ignored (`store`, `metadata`, `user`, …).
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: String,
    #[serde(default)]
    pub input: Value,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub stream: Option<bool>,
    pub previous_response_id: Option<String>,
    pub reasoning: Option<Value>,
    pub text: Option<Value>,
}

impl ResponsesRequest {
    /// The same request in chat-completions terms.
    fn into_chat(self) -> Result<ChatCompletionRequest, ApiError> {
        if let Some(id) = self.previous_response_id.filter(|id| !id.is_empty()) {
            return Err(ApiError::invalid(
                "previous_response_id",
                format!(
                    "this server keeps no responses, so `previous_response_id` ({id}) cannot be used: send the whole conversation in `input`"
                ),
            ));
        }
        let mut messages = Vec::new();
        if let Some(instructions) = self.instructions.filter(|i| !i.is_empty()) {
            messages.push(ChatMessage {
                role: "system".into(),
                content: Value::String(instructions),
                ..ChatMessage::default()
            });
        }
        match self.input {
            Value::String(text) => messages.push(ChatMessage {
                role: "user".into(),
                content: Value::String(text),
                ..ChatMessage::default()
            }),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    input_item(item, &format!("input[{i}]"), &mut messages)?;
                }
            }
            _ => {
                return Err(ApiError::invalid(
                    "input",
                    "`input` must be a string or a list of input items",
                ))
            }
        }
        let effort = self
            .reasoning
            .as_ref()
            .and_then(|r| r.get("effort"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(ChatCompletionRequest {
            model: self.model,
            messages,
            stream: self.stream,
            max_completion_tokens: self.max_output_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            tools: self
                .tools
                .map(|tools| tools.iter().map(from_responses_tool).collect()),
            tool_choice: self.tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            response_format: self.text.and_then(|t| t.get("format").map(chat_format)),
            reasoning_effort: effort,
            ..ChatCompletionRequest::default()
        })
    }
}

/// `text.format` in chat-completions terms: the Responses API writes a JSON schema's `name`,
/// `schema` and `strict` beside `type`, chat completions inside `json_schema`.
fn chat_format(format: &Value) -> Value {
    match format {
        Value::Object(flat)
            if flat.get("type").and_then(Value::as_str) == Some("json_schema")
                && !flat.contains_key("json_schema") =>
        {
            let mut spec = flat.clone();
            spec.remove("type");
            json!({ "type": "json_schema", "json_schema": spec })
        }
        other => other.clone(),
    }
}

/// One item of `input`, added to `messages`: a message (`{"role", "content"}`, typed
/// `message` or not), a `function_call` the model made, or a `function_call_output`.
/// Reasoning items of an earlier answer are dropped (the template drops thoughts too).
fn input_item(item: &Value, param: &str, messages: &mut Vec<ChatMessage>) -> Result<(), ApiError> {
    let kind = item.get("type").and_then(Value::as_str);
    let text_field = |name: &str| -> Result<String, ApiError> {
        item.get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::invalid(
                    param,
                    format!("a `{}` item needs a string `{name}`", kind.unwrap_or("")),
                )
            })
    };
    match kind {
        Some("message") | None if item.get("role").is_some() => {
            let role = item.get("role").and_then(Value::as_str).unwrap_or("");
            if !["user", "system", "developer", "assistant"].contains(&role) {
                return Err(ApiError::invalid(
                    &format!("{param}.role"),
                    format!("unknown role `{role}`: use user, system, developer or assistant"),
                ));
            }
            messages.push(ChatMessage {
                role: role.to_owned(),
                content: content(item.get("content").unwrap_or(&Value::Null), param)?,
                ..ChatMessage::default()
            });
        }
        Some("function_call") => {
            let call = json!({
                "id": text_field("call_id")?,
                "type": "function",
                "function": { "name": text_field("name")?, "arguments": text_field("arguments")? },
            });
            // Calls made together belong to one answer.
            match messages.last_mut() {
                Some(last) if last.role == "assistant" && last.tool_calls.is_some() => {
                    if let Some(Value::Array(calls)) = &mut last.tool_calls {
                        calls.push(call);
                    }
                }
                _ => messages.push(ChatMessage {
                    role: "assistant".into(),
                    tool_calls: Some(json!([call])),
                    ..ChatMessage::default()
                }),
            }
        }
        Some("function_call_output") => {
            let output = match item.get("output") {
                Some(Value::String(text)) => Value::String(text.clone()),
                Some(parts @ Value::Array(_)) => content(parts, param)?,
                _ => {
                    return Err(ApiError::invalid(
                        param,
                        "a `function_call_output` item needs an `output`",
                    ))
                }
            };
            messages.push(ChatMessage {
                role: "tool".into(),
                content: output,
                tool_call_id: Some(text_field("call_id")?),
                ..ChatMessage::default()
            });
        }
        Some("reasoning") => {}
        Some(other) => {
            return Err(ApiError::invalid(
                param,
                format!("input items of type `{other}` are not supported; use message, function_call or function_call_output"),
            ))
        }
        None => {
            return Err(ApiError::invalid(
                param,
                "an input item needs a `type` or a `role`",
            ))
        }
    }
    Ok(())
}

/// A message's content in chat-completions parts: `input_text` / `output_text` as text,
/// `input_image` (a data URL) as an image, `input_file` as its document's text (`files.rs`).
fn content(content: &Value, param: &str) -> Result<Value, ApiError> {
    let Value::Array(parts) = content else {
        return Ok(content.clone());
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let param = format!("{param}.content[{j}]");
        match part.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => {
                out.push(json!({ "type": "text", "text": part.get("text").cloned().unwrap_or(Value::Null) }));
            }
            Some("input_image") => {
                let url = part
                    .get("image_url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            &param,
                            "an `input_image` needs an `image_url` (a base64 data URL; file ids are not served)",
                        )
                    })?;
                out.push(json!({ "type": "image_url", "image_url": { "url": url } }));
            }
            Some("input_file") => {
                let text = crate::files::file_text(Some(part), &param)?;
                out.push(json!({ "type": "text", "text": text }));
            }
            Some("refusal") => {}
            other => {
                return Err(ApiError::invalid(
                    &param,
                    format!(
                        "content parts of type `{}` are not supported; use input_text, input_image, input_file or output_text",
                        other.unwrap_or("")
                    ),
                ))
            }
        }
    }
    Ok(Value::Array(out))
}

/// The handler.
pub async fn responses(State(served): State<Arc<Served>>, request: Request) -> Response {
    match answer(served, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn answer(served: Arc<Served>, request: Request) -> Result<Response, ApiError> {
    let (request, note) = read_request::<ResponsesRequest>(&served, request).await?;
    let echo = Echo::of(&request);
    let (plan, answer) = start(&served, request.into_chat()?, note).await?;
    let output = Output::new(
        echo,
        answer.completion.created,
        answer.completion.model.clone(),
    );
    if plan.stream {
        Ok(stream(answer, output))
    } else {
        whole(answer, output).await
    }
}

/// The request's fields a response object repeats.
#[derive(Debug, Clone)]
struct Echo {
    instructions: Value,
    max_output_tokens: Value,
    temperature: Value,
    top_p: Value,
    tools: Value,
    tool_choice: Value,
}

impl Echo {
    fn of(request: &ResponsesRequest) -> Self {
        Self {
            instructions: json!(request.instructions),
            max_output_tokens: json!(request.max_output_tokens),
            temperature: json!(request.temperature),
            top_p: json!(request.top_p),
            tools: json!(request.tools.clone().unwrap_or_default()),
            tool_choice: request.tool_choice.clone().unwrap_or(json!("auto")),
        }
    }
}

/// The item being written (a thought or a message), with its index in `output`.
#[derive(Debug)]
enum Open {
    Reasoning {
        id: String,
        index: usize,
        text: String,
    },
    Message {
        id: String,
        index: usize,
        text: String,
    },
}

/// The response being built from an answer's steps, and the events that tell it.
struct Output {
    id: String,
    created: u64,
    model: String,
    echo: Echo,
    items: Vec<Value>,
    open: Option<Open>,
    sequence: u64,
}

impl Output {
    fn new(echo: Echo, created: u64, model: String) -> Self {
        Self {
            id: random_id("resp_"),
            created,
            model,
            echo,
            items: Vec::new(),
            open: None,
            sequence: 0,
        }
    }

    /// The response object in its state `status`.
    fn response(&self, status: &str, usage: Option<&Usage>, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": null,
            "incomplete_details": if finish == Some("length") {
                json!({ "reason": "max_output_tokens" })
            } else {
                Value::Null
            },
            "instructions": self.echo.instructions,
            "max_output_tokens": self.echo.max_output_tokens,
            "model": self.model,
            "output": self.items,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": { "effort": null, "summary": null },
            "store": false,
            "temperature": self.echo.temperature,
            "text": { "format": { "type": "text" } },
            "tool_choice": self.echo.tool_choice,
            "tools": self.echo.tools,
            "top_p": self.echo.top_p,
            "truncation": "disabled",
            "usage": usage.map(usage_json),
            "metadata": {},
        })
    }

    /// One event: its `type`, its fields and the next `sequence_number`.
    fn event(&mut self, kind: &str, mut fields: Value) -> Value {
        fields["type"] = json!(kind);
        fields["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        fields
    }

    /// The events that open the stream.
    fn opening(&mut self) -> Vec<Value> {
        let response = self.response("in_progress", None, None);
        vec![
            self.event("response.created", json!({ "response": response })),
            self.event("response.in_progress", json!({ "response": response })),
        ]
    }

    /// The events of one step; `Err` when the answer failed.
    fn step(&mut self, step: Step) -> Result<Vec<Value>, ApiError> {
        let mut events = Vec::new();
        match step {
            Step::Text(text) => {
                if !matches!(self.open, Some(Open::Message { .. })) {
                    self.close(&mut events);
                    let (id, index) = (random_id("msg_"), self.items.len());
                    let item = message_item(&id, "", "in_progress");
                    let mut item_empty = item.clone();
                    item_empty["content"] = json!([]);
                    events.push(self.event(
                        "response.output_item.added",
                        json!({ "output_index": index, "item": item_empty }),
                    ));
                    events.push(self.event(
                        "response.content_part.added",
                        json!({ "item_id": id, "output_index": index, "content_index": 0,
                                "part": output_text("") }),
                    ));
                    self.items.push(item);
                    self.open = Some(Open::Message {
                        id,
                        index,
                        text: String::new(),
                    });
                }
                let fields = if let Some(Open::Message {
                    id,
                    index,
                    text: all,
                }) = &mut self.open
                {
                    all.push_str(&text);
                    Some(
                        json!({ "item_id": id, "output_index": index, "content_index": 0,
                                         "delta": text, "logprobs": [] }),
                    )
                } else {
                    None
                };
                if let Some(fields) = fields {
                    events.push(self.event("response.output_text.delta", fields));
                }
            }
            Step::Reasoning(text) => {
                if !matches!(self.open, Some(Open::Reasoning { .. })) {
                    self.close(&mut events);
                    let (id, index) = (random_id("rs_"), self.items.len());
                    let item = json!({ "type": "reasoning", "id": id, "summary": [] });
                    events.push(self.event(
                        "response.output_item.added",
                        json!({ "output_index": index, "item": item }),
                    ));
                    self.items.push(item);
                    self.open = Some(Open::Reasoning {
                        id,
                        index,
                        text: String::new(),
                    });
                }
                let fields = if let Some(Open::Reasoning {
                    id,
                    index,
                    text: all,
                }) = &mut self.open
                {
                    all.push_str(&text);
                    Some(
                        json!({ "item_id": id, "output_index": index, "content_index": 0,
                                         "delta": text }),
                    )
                } else {
                    None
                };
                if let Some(fields) = fields {
                    events.push(self.event("response.reasoning_text.delta", fields));
                }
            }
            Step::Call(call_id, call) => {
                self.close(&mut events);
                let (id, index) = (random_id("fc_"), self.items.len());
                let arguments = call.arguments.to_string();
                let mut item = json!({ "type": "function_call", "id": id, "call_id": call_id,
                                       "name": call.name, "arguments": "", "status": "in_progress" });
                events.push(self.event(
                    "response.output_item.added",
                    json!({ "output_index": index, "item": item }),
                ));
                events.push(self.event(
                    "response.function_call_arguments.delta",
                    json!({ "item_id": id, "output_index": index, "delta": arguments }),
                ));
                events.push(self.event(
                    "response.function_call_arguments.done",
                    json!({ "item_id": id, "output_index": index, "name": call.name,
                            "arguments": arguments }),
                ));
                item["arguments"] = json!(arguments);
                item["status"] = json!("completed");
                events.push(self.event(
                    "response.output_item.done",
                    json!({ "output_index": index, "item": item }),
                ));
                self.items.push(item);
            }
            Step::Done { finish, usage } => {
                self.close(&mut events);
                let (status, kind) = if finish == "length" {
                    ("incomplete", "response.incomplete")
                } else {
                    ("completed", "response.completed")
                };
                let response = self.response(status, Some(&usage), Some(finish));
                events.push(self.event(kind, json!({ "response": response })));
            }
            Step::Failed(error) => return Err(error),
        }
        Ok(events)
    }

    /// Finishes the item being written.
    fn close(&mut self, events: &mut Vec<Value>) {
        match self.open.take() {
            None => {}
            Some(Open::Message { id, index, text }) => {
                events.push(self.event(
                    "response.output_text.done",
                    json!({ "item_id": id, "output_index": index, "content_index": 0,
                            "text": text, "logprobs": [] }),
                ));
                events.push(self.event(
                    "response.content_part.done",
                    json!({ "item_id": id, "output_index": index, "content_index": 0,
                            "part": output_text(&text) }),
                ));
                let item = message_item(&id, &text, "completed");
                events.push(self.event(
                    "response.output_item.done",
                    json!({ "output_index": index, "item": item }),
                ));
                self.items[index] = item;
            }
            Some(Open::Reasoning { id, index, text }) => {
                events.push(self.event(
                    "response.reasoning_text.done",
                    json!({ "item_id": id, "output_index": index, "content_index": 0,
                            "text": text }),
                ));
                let item = json!({ "type": "reasoning", "id": id, "summary": [],
                                   "content": [{ "type": "reasoning_text", "text": text }] });
                events.push(self.event(
                    "response.output_item.done",
                    json!({ "output_index": index, "item": item }),
                ));
                self.items[index] = item;
            }
        }
    }
}

fn output_text(text: &str) -> Value {
    json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] })
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({ "type": "message", "id": id, "status": status, "role": "assistant",
            "content": [output_text(text)] })
}

/// The Responses API's usage.
fn usage_json(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": { "cached_tokens": usage.reused_tokens },
        "output_tokens": usage.generated_tokens,
        "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": usage.prompt_tokens + usage.generated_tokens,
    })
}

/// The whole response, once the answer has ended.
async fn whole(mut answer: Answer, mut output: Output) -> Result<Response, ApiError> {
    loop {
        let step = answer.step().await;
        let done = matches!(step, Step::Done { .. });
        let events = output.step(step)?;
        if done {
            let response = events
                .into_iter()
                .last()
                .and_then(|mut e| e.get_mut("response").map(Value::take))
                .unwrap_or(Value::Null);
            return Ok(json_response(StatusCode::OK, &response));
        }
    }
}

/// The response as server-sent events, `event: TYPE` and `data: {…}` each.
fn stream(answer: Answer, mut output: Output) -> Response {
    let opening = frame(&output.opening());
    let state = (answer, output, Some(opening), false);
    let events = futures_util::stream::unfold(
        state,
        |(mut answer, mut output, first, ended)| async move {
            if let Some(first) = first {
                return Some((
                    Ok::<_, Infallible>(Bytes::from(first)),
                    (answer, output, None, false),
                ));
            }
            if ended {
                return None;
            }
            let step = answer.step().await;
            let done = matches!(step, Step::Done { .. });
            let (bytes, ended) = match output.step(step) {
                Ok(events) => (frame(&events), done),
                Err(error) => {
                    let envelope = error.envelope();
                    let error = &envelope["error"];
                    let event = output.event(
                    "error",
                    json!({ "code": error["code"], "message": error["message"], "param": error["param"] }),
                );
                    (frame(&[event]), true)
                }
            };
            Some((Ok(Bytes::from(bytes)), (answer, output, None, ended)))
        },
    );
    let mut response = Body::from_stream(events).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn frame(events: &[Value]) -> String {
    let mut out = String::new();
    for event in events {
        out.push_str("event: ");
        out.push_str(event["type"].as_str().unwrap_or("message"));
        out.push_str("\ndata: ");
        out.push_str(&event.to_string());
        out.push_str("\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> Result<ChatCompletionRequest, ApiError> {
        serde_json::from_value::<ResponsesRequest>(body)
            .unwrap()
            .into_chat()
    }

    #[test]
    fn input_items_become_chat_messages() {
        let chat = request(json!({
            "model": "m", "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,aGk="}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Sunny."}]},
            ],
            "max_output_tokens": 9, "reasoning": {"effort": "low"},
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        }))
        .unwrap();
        let roles: Vec<&str> = chat.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
        assert_eq!(chat.messages[1].content[1]["type"], "image_url");
        assert_eq!(
            chat.messages[2]
                .tool_calls
                .as_ref()
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(chat.messages[3].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(chat.max_completion_tokens, Some(9));
        assert!(chat.thinking());
        assert_eq!(chat.tools.unwrap()[0]["function"]["name"], "get_weather");
    }

    #[test]
    fn a_thought_text_and_a_call_become_items_and_events_in_order() {
        let echo = Echo::of(&serde_json::from_value(json!({"model": "m", "input": "x"})).unwrap());
        let mut output = Output::new(echo, 0, "tiny".into());
        let mut events = output.opening();
        let usage = Usage {
            prompt_tokens: 7,
            reused_tokens: 2,
            generated_tokens: 5,
            time_to_first_token_ms: 0.0,
            prefill_tokens_per_second: 0.0,
            decode_tokens_per_second: 0.0,
            stop_reason: engine::generate::StopReason::EndOfTurn,
            speculative: None,
        };
        let call = engine::template::ToolCall {
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        };
        for step in [
            Step::Reasoning("hm".into()),
            Step::Text("Check".into()),
            Step::Text("ing.".into()),
            Step::Call("call_1".into(), call),
            Step::Done {
                finish: "tool_calls",
                usage,
            },
        ] {
            events.extend(output.step(step).unwrap());
        }
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (n, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], n);
        }
        let response = &events.last().unwrap()["response"];
        assert_eq!(response["status"], "completed");
        let output = response["output"].as_array().unwrap();
        assert_eq!(output[0]["type"], "reasoning");
        assert_eq!(output[0]["content"][0]["text"], "hm");
        assert_eq!(output[1]["content"][0]["text"], "Checking.");
        assert_eq!(output[1]["status"], "completed");
        assert_eq!(output[2]["type"], "function_call");
        assert_eq!(output[2]["call_id"], "call_1");
        assert_eq!(output[2]["arguments"], "{\"city\":\"Paris\"}");
        assert_eq!(
            response["usage"],
            json!({"input_tokens": 7, "input_tokens_details": {"cached_tokens": 2},
                   "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                   "total_tokens": 12})
        );
        // Every item added is the item done, at the same index (what the SDKs check).
        let added: Vec<(&Value, &Value)> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.added")
            .map(|e| (&e["output_index"], &e["item"]["id"]))
            .collect();
        let done: Vec<(&Value, &Value)> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| (&e["output_index"], &e["item"]["id"]))
            .collect();
        assert_eq!(added, done);
    }

    #[test]
    fn unservable_requests_are_refused_in_words() {
        for body in [
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"}),
            json!({"model": "m", "input": 3}),
            json!({"model": "m", "input": [{"type": "file_search_call"}]}),
            json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}),
            json!({"model": "m", "input": [{"role": "user",
                "content": [{"type": "input_image", "file_id": "f"}]}]}),
        ] {
            let error = request(body.clone()).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{body}");
        }
    }
}
