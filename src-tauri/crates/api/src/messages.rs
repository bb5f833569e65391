//! OpenAI messages into the engine's: roles mapped, text kept as text (it reaches the model
//! only through the engine's one protected prompt path, where control-token text stays text),
//! images taken only as base64 data URLs and audio only as base64 `input_audio` data — this
//! server never fetches a URL or opens a path.

use std::sync::Arc;

use base64::Engine as _;
use engine::audio::{prepare_bytes, AudioClip, AudioLimits};
use engine::image::{preprocess_bytes, Preprocessed, SoftTokenBudget};
use engine::template::{Message, Part, Role, ToolCall, ToolResponse};
use serde_json::Value;

use crate::config::{MAX_AUDIO, MAX_IMAGES};
use crate::error::ApiError;
use crate::wire::ChatMessage;

/// An image of a request, still encoded, with the field it came from (for errors).
#[derive(Debug)]
pub struct EncodedImage {
    pub param: String,
    pub bytes: Vec<u8>,
}

/// A sound file of a request, still encoded, with the field it came from (for errors).
#[derive(Debug)]
pub struct EncodedAudio {
    pub param: String,
    pub bytes: Vec<u8>,
}

/// The media of a request, each kind in the order of its parts.
#[derive(Debug, Default)]
pub struct Media {
    pub images: Vec<EncodedImage>,
    /// One per `Part::Audio` item of the converted messages (a file longer than 30 s becomes
    /// several clips, and its one item several, in [`prepare_audio`]).
    pub audio: Vec<EncodedAudio>,
}

/// The engine's messages for `messages`, and their media in the order of their `Part::Image`
/// and `Part::Audio` items. `vision` / `hearing`: whether the model takes images / audio.
pub fn convert(
    messages: &[ChatMessage],
    vision: bool,
    hearing: bool,
) -> Result<(Vec<Message>, Media), ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut media = Media::default();
    // The ids of the tool calls so far, with their function's names.
    let mut call_ids: Vec<(String, String)> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let param = format!("messages[{i}]");
        let role = match message.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" | "function" => {
                tool_response(message, &param, &call_ids, &mut out, &mut media)?;
                continue;
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("{param}.role"),
                    format!(
                        "unknown role `{other}`: use system, developer, user, assistant or tool"
                    ),
                ))
            }
        };
        let calls = match &message.tool_calls {
            Some(calls) if role == Role::Assistant => tool_calls(calls, &param)?,
            Some(Value::Null) | None => Vec::new(),
            Some(_) => {
                return Err(ApiError::invalid(
                    &format!("{param}.tool_calls"),
                    "only assistant messages carry tool calls",
                ))
            }
        };
        let parts = content_parts(&message.content, role, &param, &mut media)?;
        // The answer after a tool's results goes on in the same model turn (Gemma 4 writes
        // call, results and answer in one turn).
        if let (Role::Assistant, true, Some(last)) = (role, calls.is_empty(), out.last_mut()) {
            let open = last.role == Role::Assistant
                && !last.tool_responses.is_empty()
                && last
                    .content
                    .iter()
                    .all(|p| matches!(p, Part::Text { text } if text.is_empty()));
            if open {
                last.content = parts;
                continue;
            }
        }
        let mut engine_message = Message::new(role, parts);
        for (id, call) in calls {
            call_ids.push((id, call.name.clone()));
            engine_message.tool_calls.push(call);
        }
        out.push(engine_message);
    }
    if let (Some(image), false) = (media.images.first(), vision) {
        return Err(ApiError::invalid(
            &image.param,
            "this model cannot see images; send text only",
        ));
    }
    if let (Some(audio), false) = (media.audio.first(), hearing) {
        return Err(ApiError::invalid(
            &audio.param,
            "this model cannot hear audio (it has no audio tower); send text only",
        ));
    }
    if media.images.len() > MAX_IMAGES {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "a request may carry at most {MAX_IMAGES} images, not {}",
                media.images.len()
            ),
        ));
    }
    if media.audio.len() > MAX_AUDIO {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "a request may carry at most {MAX_AUDIO} audio files, not {}",
                media.audio.len()
            ),
        ));
    }
    Ok((out, media))
}

/// An assistant message's `tool_calls`: `[{"id", "type": "function", "function": {"name",
/// "arguments"}}]`, the arguments a JSON string (or an object).
fn tool_calls(calls: &Value, param: &str) -> Result<Vec<(String, ToolCall)>, ApiError> {
    let param = format!("{param}.tool_calls");
    let Some(list) = calls.as_array() else {
        return Err(ApiError::invalid(&param, "`tool_calls` must be a list"));
    };
    let mut out = Vec::with_capacity(list.len());
    for (k, call) in list.iter().enumerate() {
        let param = format!("{param}[{k}]");
        let function = call.get("function").ok_or_else(|| {
            ApiError::invalid(
                &param,
                "a tool call needs a `function` with `name` and `arguments`",
            )
        })?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::invalid(&param, "a tool call needs a `function.name`"))?;
        let arguments = match function.get("arguments") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(Value::String(text)) if text.trim().is_empty() => {
                Value::Object(Default::default())
            }
            Some(Value::String(text)) => serde_json::from_str(text).map_err(|e| {
                ApiError::invalid(
                    &format!("{param}.function.arguments"),
                    format!("the arguments are not valid JSON: {e}"),
                )
            })?,
            Some(object) => object.clone(),
        };
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        out.push((
            id,
            ToolCall {
                name: name.to_owned(),
                arguments,
            },
        ));
    }
    Ok(out)
}

/// A `tool` message: what a tool returned, added to the answer that called it (a JSON object
/// as it is, anything else as a string).
fn tool_response(
    message: &ChatMessage,
    param: &str,
    call_ids: &[(String, String)],
    out: &mut [Message],
    media: &mut Media,
) -> Result<(), ApiError> {
    let caller = out
        .last_mut()
        .filter(|m| m.role == Role::Assistant && !m.tool_calls.is_empty())
        .ok_or_else(|| {
            ApiError::invalid(
                &format!("{param}.role"),
                "a tool message must follow the assistant message whose `tool_calls` it answers",
            )
        })?;
    let by_id = message.tool_call_id.as_deref().and_then(|id| {
        call_ids
            .iter()
            .rev()
            .find(|(known, _)| known == id)
            .map(|(_, name)| name.clone())
    });
    let name = match (by_id, &message.name) {
        (Some(name), _) => name,
        (None, Some(name)) if !name.is_empty() => name.clone(),
        (None, _) if caller.tool_calls.len() == 1 && message.tool_call_id.is_none() => {
            caller.tool_calls[0].name.clone()
        }
        (None, _) => {
            return Err(ApiError::invalid(
                &format!("{param}.tool_call_id"),
                match &message.tool_call_id {
                    Some(id) => format!("`tool_call_id` `{id}` matches no earlier tool call"),
                    None => "a tool message needs the `tool_call_id` of the call it answers".into(),
                },
            ))
        }
    };
    let text = match content_parts(&message.content, Role::System, param, media)?.as_slice() {
        [Part::Text { text }] => text.clone(),
        _ => String::new(),
    };
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => object,
        _ => Value::String(text),
    };
    caller.tool_responses.push(ToolResponse { name, response });
    Ok(())
}

/// The parts of one message's `content`: a string, or a list of `text` / `image_url` /
/// `input_audio` / `file` parts (a file's text joins the turn as text: `files.rs`).
/// System and assistant messages hold text only, joined into one part (templates write a
/// system message's content as one string).
fn content_parts(
    content: &Value,
    role: Role,
    param: &str,
    media: &mut Media,
) -> Result<Vec<Part>, ApiError> {
    let param = format!("{param}.content");
    let list = match content {
        Value::Null => {
            return Ok(vec![Part::Text {
                text: String::new(),
            }])
        }
        Value::String(text) => return Ok(vec![Part::Text { text: text.clone() }]),
        Value::Array(list) => list,
        _ => {
            return Err(ApiError::invalid(
                &param,
                "`content` must be a string or a list of content parts",
            ))
        }
    };
    let mut parts = Vec::with_capacity(list.len());
    for (j, part) in list.iter().enumerate() {
        let param = format!("{param}[{j}]");
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" | "input_text" => {
                let text = part.get("text").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid(&param, "a text part needs a string `text`")
                })?;
                parts.push(Part::Text {
                    text: text.to_owned(),
                });
            }
            "image_url" if role == Role::User => {
                let url = match part.get("image_url") {
                    Some(Value::String(url)) => url.as_str(),
                    Some(object) => object.get("url").and_then(Value::as_str).unwrap_or(""),
                    None => "",
                };
                media.images.push(EncodedImage {
                    bytes: decode_data_url(url, &param)?,
                    param: param.clone(),
                });
                parts.push(Part::Image);
            }
            "file" if role == Role::User => {
                let text = crate::files::file_text(part.get("file"), &format!("{param}.file"))?;
                parts.push(Part::Text { text });
            }
            "input_audio" if role == Role::User => {
                media.audio.push(EncodedAudio {
                    bytes: decode_input_audio(part.get("input_audio"), &param)?,
                    param: param.clone(),
                });
                parts.push(Part::Audio);
            }
            "input_audio" => {
                return Err(ApiError::invalid(
                    &param,
                    "only user messages may hold audio",
                ))
            }
            "image_url" => {
                return Err(ApiError::invalid(
                    &param,
                    "only user messages may hold images",
                ))
            }
            "file" => return Err(ApiError::invalid(&param, "only user messages may hold files")),
            "" => return Err(ApiError::invalid(&param, "a content part needs a `type`")),
            other => {
                return Err(ApiError::invalid(
                    &param,
                    format!(
                        "content parts of type `{other}` are not supported; use text, image_url, input_audio or file"
                    ),
                ))
            }
        }
    }
    if role != Role::User {
        let text = parts
            .into_iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text),
                Part::Image | Part::Audio => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        return Ok(vec![Part::Text { text }]);
    }
    if parts.is_empty() {
        parts.push(Part::Text {
            text: String::new(),
        });
    }
    Ok(parts)
}

/// The bytes of a `data:image/…;base64,…` URL. Anything else is refused: the server never
/// fetches (no `http(s)://`) and never reads a file (no `file://`, no path).
pub fn decode_data_url(url: &str, param: &str) -> Result<Vec<u8>, ApiError> {
    let url = url.trim();
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("data") => {}
        Some("http" | "https") => {
            return Err(ApiError::invalid(
                param,
                "this server does not fetch image URLs; send the image inline as a base64 data URL (data:image/png;base64,…)",
            ))
        }
        Some("file") => {
            return Err(ApiError::invalid(
                param,
                "this server does not read files; send the image inline as a base64 data URL (data:image/png;base64,…)",
            ))
        }
        _ => {
            return Err(ApiError::invalid(
                param,
                "an image must be a base64 data URL (data:image/png;base64,…)",
            ))
        }
    }
    let (header, data) = url[5..]
        .split_once(',')
        .ok_or_else(|| ApiError::invalid(param, "the data URL has no `,` before its data"))?;
    let header = header.to_ascii_lowercase();
    if !header.starts_with("image/") || !header.ends_with(";base64") {
        return Err(ApiError::invalid(
            param,
            "an image data URL must be `data:image/<type>;base64,<data>`",
        ));
    }
    let data: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(data.as_bytes())
        .map_err(|e| ApiError::invalid(param, format!("the image's base64 data is not valid: {e}")))
}

/// The bytes of an `input_audio` part: `{"data": "<base64>", "format": "wav" | "mp3" | …}` (the
/// format is read from the bytes themselves; a URL or a path is never taken).
fn decode_input_audio(value: Option<&Value>, param: &str) -> Result<Vec<u8>, ApiError> {
    let data = value
        .and_then(|v| v.get("data"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ApiError::invalid(
                param,
                "an input_audio part needs `input_audio.data`: the file's bytes in base64",
            )
        })?;
    let bytes = decode_base64_data(data).map_err(|e| {
        ApiError::invalid(param, format!("the audio's base64 data is not valid: {e}"))
    })?;
    if bytes.is_empty() {
        return Err(ApiError::invalid(param, "the audio data is empty"));
    }
    Ok(bytes)
}

/// The clips of a request's audio files, decoded as the app decodes a dropped file, and the
/// messages with each file's `Part::Audio` item repeated once per 30 s clip (CPU work: call it
/// off the async threads). A file longer than the clip limit is refused: an API caller gets a
/// clear error rather than an answer about part of what it sent.
pub fn prepare_audio(
    messages: Vec<Message>,
    audio: Vec<EncodedAudio>,
) -> Result<(Vec<Message>, Vec<Arc<AudioClip>>), ApiError> {
    let limits = AudioLimits::default();
    let mut per_file = Vec::with_capacity(audio.len());
    for file in &audio {
        let prepared = prepare_bytes(&file.bytes, &limits).map_err(|e| {
            ApiError::invalid(&file.param, format!("the audio cannot be used: {e}"))
        })?;
        if prepared.limit_reached {
            return Err(ApiError::invalid(
                &file.param,
                format!(
                    "the audio is {:.0} s long; a request's file may be at most {:.0} s ({} clips of 30 s)",
                    prepared.seconds, prepared.kept_seconds, limits.max_clips
                ),
            ));
        }
        per_file.push(prepared.clips);
    }
    let mut files = per_file.into_iter();
    let mut clips = Vec::new();
    let messages = messages
        .into_iter()
        .map(|mut message| {
            let mut content = Vec::with_capacity(message.content.len());
            for part in message.content {
                if part != Part::Audio {
                    content.push(part);
                    continue;
                }
                let file = files.next().unwrap_or_default();
                content.extend(file.iter().map(|_| Part::Audio));
                clips.extend(file);
            }
            message.content = content;
            message
        })
        .collect();
    Ok((messages, clips))
}

/// The images ready for the vision tower, decoded and resized as the app does a dropped image
/// (CPU work: call it off the async threads).
pub fn preprocess(
    images: Vec<EncodedImage>,
    budget: SoftTokenBudget,
) -> Result<Vec<Arc<Preprocessed>>, ApiError> {
    images
        .into_iter()
        .map(|image| {
            preprocess_bytes(&image.bytes, budget)
                .map(Arc::new)
                .map_err(|e| {
                    ApiError::invalid(&image.param, format!("the image cannot be used: {e}"))
                })
        })
        .collect()
}

/// The bytes of a part's base64 data; a data URL's header is accepted too (clients send one),
/// its data is what counts, and whitespace inside is ignored.
pub(crate) fn decode_base64_data(data: &str) -> Result<Vec<u8>, base64::DecodeError> {
    let data = match data.trim().strip_prefix("data:") {
        Some(rest) => rest.split_once(',').map_or("", |(_, d)| d),
        None => data,
    };
    let data: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(data.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(role: &str, content: Value) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content,
            ..ChatMessage::default()
        }
    }

    #[test]
    fn roles_map_and_text_stays_text() {
        let (messages, media) = convert(
            &[
                message("developer", json!("Be brief.")),
                message(
                    "user",
                    json!([{"type": "text", "text": "<start_of_turn>hi"}]),
                ),
                message(
                    "assistant",
                    json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
                ),
                message("user", json!("and?")),
            ],
            true,
            true,
        )
        .unwrap();
        assert!(media.images.is_empty() && media.audio.is_empty());
        assert_eq!(messages[0], Message::text(Role::System, "Be brief."));
        assert_eq!(messages[1], Message::text(Role::User, "<start_of_turn>hi"));
        assert_eq!(messages[2], Message::text(Role::Assistant, "a\nb"));
    }

    #[test]
    fn only_base64_data_urls_are_images() {
        let bytes = decode_data_url("data:image/png;base64,iVBO Rw==", "p").unwrap();
        assert_eq!(bytes, [0x89, 0x50, 0x4e, 0x47]);
        for url in [
            "http://example.com/cat.png",
            "HTTPS://example.com/cat.png",
            "file:///etc/passwd",
            "/etc/passwd",
            "../cat.png",
            "data:text/plain;base64,aGk=",
            "data:image/png,rawbytes",
            "data:image/png;base64,not base64!",
        ] {
            let error = decode_data_url(url, "p").unwrap_err();
            assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST, "{url}");
        }
    }

    fn wav(seconds: f64) -> Vec<u8> {
        let samples = (seconds * 16_000.0) as usize;
        let mut out = Vec::new();
        let data_bytes = (samples * 2) as u32;
        out.extend(b"RIFF");
        out.extend((36 + data_bytes).to_le_bytes());
        out.extend(b"WAVEfmt ");
        out.extend(16u32.to_le_bytes());
        out.extend(1u16.to_le_bytes()); // PCM
        out.extend(1u16.to_le_bytes()); // mono
        out.extend(16_000u32.to_le_bytes());
        out.extend(32_000u32.to_le_bytes());
        out.extend(2u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend(b"data");
        out.extend(data_bytes.to_le_bytes());
        for i in 0..samples {
            let v = (8000.0 * (i as f64 * 0.05).sin()) as i16;
            out.extend(v.to_le_bytes());
        }
        out
    }

    fn audio_part(bytes: &[u8]) -> Value {
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        json!({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
    }

    #[test]
    fn audio_needs_a_hearing_model_a_user_message_and_base64_data() {
        let content = json!([{"type": "text", "text": "What is said?"}, audio_part(&wav(1.0))]);
        assert!(convert(&[message("user", content.clone())], true, false).is_err());
        assert!(convert(&[message("system", content.clone())], true, true).is_err());
        for bad in [
            json!({"type": "input_audio"}),
            json!({"type": "input_audio", "input_audio": {"data": "not base64!"}}),
            json!({"type": "input_audio", "input_audio": {"data": ""}}),
            json!({"type": "input_audio", "input_audio": {"url": "file:///etc/passwd"}}),
        ] {
            let error = convert(&[message("user", json!([bad]))], true, true).unwrap_err();
            assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST, "{bad}");
        }
        let (messages, media) = convert(&[message("user", content)], true, true).unwrap();
        assert_eq!(messages[0].content[1], Part::Audio);
        assert_eq!(media.audio[0].param, "messages[0].content[1]");
    }

    #[test]
    fn a_long_file_becomes_one_audio_item_per_clip_and_garbage_is_refused() {
        let content =
            json!([audio_part(&wav(1.0)), {"type": "text", "text": "and"}, audio_part(&wav(65.0))]);
        let (messages, media) = convert(&[message("user", content)], true, true).unwrap();
        let (messages, clips) = prepare_audio(messages, media.audio).unwrap();
        let audio = |m: &Message| m.content.iter().filter(|p| **p == Part::Audio).count();
        assert_eq!(audio(&messages[0]), 4, "1 s, then 65 s as 30 + 30 + 5");
        assert_eq!(clips.len(), 4);
        assert_eq!(messages[0].content[1], Part::Text { text: "and".into() });
        assert_eq!(clips[0].soft_tokens, 25);
        assert_eq!(clips[3].soft_tokens, 125);

        let garbage = json!([audio_part(b"RIFF....WAVEnot really")]);
        let (messages, media) = convert(&[message("user", garbage)], true, true).unwrap();
        let error = prepare_audio(messages, media.audio).unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
    }

    #[test]
    fn images_need_a_seeing_model_and_a_user_message() {
        let image =
            json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]);
        assert!(convert(&[message("user", image.clone())], false, false).is_err());
        assert!(convert(&[message("system", image.clone())], true, true).is_err());
        let (messages, media) = convert(&[message("user", image)], true, true).unwrap();
        assert_eq!(messages[0].content, [Part::Image]);
        assert_eq!(media.images[0].param, "messages[0].content[0]");
        assert!(convert(&[message("tool", json!("42"))], true, true).is_err());
        assert!(convert(&[], true, true).is_err());
    }

    #[test]
    fn tool_results_join_the_answer_that_called_them() {
        let mut call = message("assistant", Value::Null);
        call.tool_calls = Some(json!([
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}},
        ]));
        // Answered out of order: each result goes to the call its id names.
        let mut time = message("tool", json!([{"type": "text", "text": "noon"}]));
        time.tool_call_id = Some("call_2".into());
        let mut weather = message("tool", json!("{\"sky\": \"clear\"}"));
        weather.tool_call_id = Some("call_1".into());
        let (messages, _) = convert(
            &[
                message("user", json!("Weather?")),
                call,
                time,
                weather,
                message("assistant", json!("Clear at noon.")),
            ],
            true,
            true,
        )
        .unwrap();
        assert_eq!(
            messages.len(),
            2,
            "call, results and answer are one model turn"
        );
        let answer = &messages[1];
        assert_eq!(answer.tool_calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(answer.tool_calls[1].arguments, json!({}));
        assert_eq!(
            answer.tool_responses,
            [
                ToolResponse {
                    name: "get_time".into(),
                    response: json!("noon")
                },
                ToolResponse {
                    name: "get_weather".into(),
                    response: json!({"sky": "clear"})
                },
            ]
        );
        assert_eq!(
            answer.content,
            [Part::Text {
                text: "Clear at noon.".into()
            }]
        );

        let mut stray = message("tool", json!("x"));
        stray.tool_call_id = Some("call_9".into());
        let mut bad_args = message("assistant", Value::Null);
        bad_args.tool_calls =
            Some(json!([{"id": "c", "function": {"name": "f", "arguments": "{not json"}}]));
        for messages in [
            vec![message("user", json!("hi")), stray],
            vec![message("user", json!("hi")), bad_args],
        ] {
            let error = convert(&messages, true, true).unwrap_err();
            assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
        }
    }
}
