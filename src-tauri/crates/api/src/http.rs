//! What every endpoint shares over HTTP: a JSON request's body read within its limit, a JSON
//! response, and the ids and times written into answers.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::Value;

use crate::completions::Served;
use crate::error::ApiError;
use crate::log::Note;

/// A JSON response.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A POST's JSON body as `T`, and the request's entry in the log (given the body when the log
/// is verbose).
pub(crate) async fn read_request<T: serde::de::DeserializeOwned>(
    served: &Served,
    request: Request,
) -> Result<(T, Option<Note>), ApiError> {
    let note = request.extensions().get::<Note>().cloned();
    let body = read_json_body(request, served.max_body_bytes).await?;
    if let Some(note) = &note {
        note.body(&body);
    }
    let parsed = serde_json::from_slice(&body).map_err(|e| ApiError::BadJson(e.to_string()))?;
    Ok((parsed, note))
}

/// The body of a JSON request: `Content-Type: application/json` (a browser's "simple"
/// cross-site POST cannot send it) and at most `limit` bytes.
pub(crate) async fn read_json_body(request: Request, limit: usize) -> Result<Bytes, ApiError> {
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

/// `prefix` and 24 random hex digits.
pub(crate) fn random_id(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = unix_nanos().to_le_bytes()[..12]
            .try_into()
            .unwrap_or_default();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
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
