//! OpenAI messages into the engine's: roles mapped, text kept as text (it reaches the model
//! only through the engine's one protected prompt path, where control-token text stays text),
//! images taken only as base64 data URLs — this server never fetches a URL or opens a path.

use std::sync::Arc;

use base64::Engine as _;
use engine::image::{preprocess_bytes, Preprocessed, SoftTokenBudget};
use engine::template::{Message, Part, Role, ToolCall, ToolResponse};
use serde_json::Value;

use crate::config::MAX_IMAGES;
use crate::error::ApiError;
use crate::wire::ChatMessage;

/// An image of a request, still encoded, with the field it came from (for errors).
#[derive(Debug)]
pub struct EncodedImage {
    pub param: String,
    pub bytes: Vec<u8>,
}

/// The engine's messages for `messages`, and their images in the order of their
/// `Part::Image` items.
pub fn convert(
    messages: &[ChatMessage],
    vision: bool,
) -> Result<(Vec<Message>, Vec<EncodedImage>), ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut images = Vec::new();
    // The ids of the tool calls so far, with their function's names.
    let mut call_ids: Vec<(String, String)> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let param = format!("messages[{i}]");
        let role = match message.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" | "function" => {
                tool_response(message, &param, &call_ids, &mut out, &mut images)?;
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
        let parts = content_parts(&message.content, role, &param, &mut images)?;
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
    if !images.is_empty() && !vision {
        return Err(ApiError::invalid(
            &images[0].param,
            "this model cannot see images; send text only",
        ));
    }
    if images.len() > MAX_IMAGES {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "a request may carry at most {MAX_IMAGES} images, not {}",
                images.len()
            ),
        ));
    }
    Ok((out, images))
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
    images: &mut Vec<EncodedImage>,
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
    let text = match content_parts(&message.content, Role::System, param, images)?.as_slice() {
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

/// The parts of one message's `content`: a string, or a list of `text` / `image_url` parts.
/// System and assistant messages hold text only, joined into one part (templates write a
/// system message's content as one string).
fn content_parts(
    content: &Value,
    role: Role,
    param: &str,
    images: &mut Vec<EncodedImage>,
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
                images.push(EncodedImage {
                    bytes: decode_data_url(url, &param)?,
                    param: param.clone(),
                });
                parts.push(Part::Image);
            }
            "image_url" => {
                return Err(ApiError::invalid(
                    &param,
                    "only user messages may hold images",
                ))
            }
            "" => return Err(ApiError::invalid(&param, "a content part needs a `type`")),
            other => {
                return Err(ApiError::invalid(
                    &param,
                    format!(
                        "content parts of type `{other}` are not supported; use text or image_url"
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
                Part::Image => None,
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
        let (messages, images) = convert(
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
        )
        .unwrap();
        assert!(images.is_empty());
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

    #[test]
    fn images_need_a_seeing_model_and_a_user_message() {
        let image =
            json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]);
        assert!(convert(&[message("user", image.clone())], false).is_err());
        assert!(convert(&[message("system", image.clone())], true).is_err());
        let (messages, images) = convert(&[message("user", image)], true).unwrap();
        assert_eq!(messages[0].content, [Part::Image]);
        assert_eq!(images[0].param, "messages[0].content[0]");
        assert!(convert(&[message("tool", json!("42"))], true).is_err());
        assert!(convert(&[], true).is_err());
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
            let error = convert(&messages, true).unwrap_err();
            assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
        }
    }
}
