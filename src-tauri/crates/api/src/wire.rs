//! OpenAI's chat-completions shapes, as far as this server takes and gives them. Answers are
//! written with every field a strict client checks for (`logprobs`, `refusal`,
//! `finish_reason` as explicit `null`s).

use engine::generate::{StopReason, Usage};
use serde::Deserialize;
use serde_json::{json, Value};

/// `POST /v1/chat/completions`. Fields not listed are ignored (`user`, `metadata`, `store`…);
/// those listed but not served yet are refused in words (see `completions::Plan`).
#[derive(Debug, Default, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub stop: Option<Stop>,
    pub seed: Option<i64>,
    pub n: Option<u64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    /// `false`: a forced call (`tool_choice` "required") is exactly one call.
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<Value>,
    /// Anything but `"none"` turns thinking on.
    pub reasoning_effort: Option<String>,
    /// `{"enable_thinking": true}` turns thinking on, as mlx-lm and vLLM take it.
    pub chat_template_kwargs: Option<Value>,
}

impl ChatCompletionRequest {
    /// Whether the request asks the model to think first.
    pub fn thinking(&self) -> bool {
        let kwarg = self
            .chat_template_kwargs
            .as_ref()
            .and_then(|k| k.get("enable_thinking"))
            .and_then(Value::as_bool);
        match kwarg {
            Some(on) => on,
            None => self
                .reasoning_effort
                .as_deref()
                .is_some_and(|effort| effort != "none"),
        }
    }
}

/// One message; `content` is checked part by part in `messages`, so errors can name the part.
#[derive(Debug, Default, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Value,
    pub tool_calls: Option<Value>,
    /// For a `tool` message: the call it answers.
    pub tool_call_id: Option<String>,
    /// For a `tool` message: the function's name (optional; found from the call otherwise).
    pub name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `stop`: one string or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// What every answer to one request shares: its id, time and model.
#[derive(Debug, Clone)]
pub struct Completion {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Completion {
    /// The non-streaming answer: `content` null when the answer is only tool calls, and
    /// `reasoning_content` when the model thought.
    pub fn message(
        &self,
        text: &str,
        reasoning: &str,
        calls: &[Value],
        finish: &str,
        usage: &Usage,
    ) -> Value {
        let mut message = json!({
            "role": "assistant",
            "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) },
            "refusal": null,
        });
        if !reasoning.is_empty() {
            message["reasoning_content"] = json!(reasoning);
        }
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish,
            }],
            "usage": usage_json(usage),
        })
    }

    /// One streamed chunk of the answer; `usage: null` on each when the client asked for the
    /// usage chunk (as OpenAI sends it).
    pub fn chunk(&self, delta: Value, finish: Option<&str>, with_usage: bool) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish,
            }],
        });
        if with_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The last chunk before `[DONE]` when `stream_options.include_usage` is set.
    pub fn usage_chunk(&self, usage: &Usage) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [],
            "usage": usage_json(usage),
        })
    }
}

/// OpenAI's usage, with the prompt tokens the engine's cache already held as `cached_tokens`.
pub fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.generated_tokens,
        "total_tokens": usage.prompt_tokens + usage.generated_tokens,
        "prompt_tokens_details": { "cached_tokens": usage.reused_tokens },
        "completion_tokens_details": { "reasoning_tokens": 0 },
    })
}

/// OpenAI's `finish_reason` for how the engine ended; `None` when the answer was cut short by
/// someone other than this request (see `completions`).
pub fn finish_reason(reason: StopReason, stopped_at_stop_string: bool) -> Option<&'static str> {
    match reason {
        _ if stopped_at_stop_string => Some("stop"),
        StopReason::EndOfTurn => Some("stop"),
        StopReason::MaxTokens | StopReason::ContextFull => Some("length"),
        StopReason::Cancelled => None,
    }
}

/// A tool call as OpenAI writes it: `{"id", "type": "function", "function": {"name",
/// "arguments"}}`, the arguments as a JSON string.
pub fn tool_call_json(id: &str, call: &engine::template::ToolCall) -> Value {
    json!({
        "id": id,
        "type": "function",
        "function": { "name": call.name, "arguments": call.arguments.to_string() },
    })
}

/// A model as `/v1/models` lists it.
pub fn model_object(id: &str, created: u64) -> Value {
    json!({ "id": id, "object": "model", "created": created, "owned_by": "gemma-desk" })
}
