//! Everything the API refuses or fails at, each with its HTTP status and OpenAI's error
//! envelope: `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::constraint::ConstraintError;
use engine::error::{EngineError, GenerateError};
use serde_json::json;

/// Seconds a client told "busy" should wait before asking again.
pub const RETRY_AFTER_SECONDS: u32 = 2;

/// Why a request was not answered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The Host header is missing or names another server (the DNS-rebinding defence).
    #[error("requests must be addressed to {allowed}; the Host header was {given}")]
    HostNotAllowed { given: String, allowed: String },
    #[error("an API key is required: send it as `Authorization: Bearer KEY` or `x-api-key: KEY`")]
    MissingKey,
    #[error("the API key is not valid")]
    WrongKey,
    #[error("the request body must be JSON (Content-Type: application/json), not {given}")]
    NotJson { given: String },
    #[error("the request body is larger than the {limit_mb} MB limit")]
    TooLarge { limit_mb: usize },
    #[error("the request body is not valid JSON for this endpoint: {0}")]
    BadJson(String),
    /// A field has a value this server does not take.
    #[error("{message}")]
    Invalid {
        message: String,
        param: Option<String>,
    },
    /// The prompt does not fit the context window (it is never cut to fit).
    #[error("{0}")]
    ContextLengthExceeded(String),
    #[error("the model `{given}` does not exist here; the models served are: {valid}")]
    ModelNotFound { given: String, valid: String },
    #[error(
        "the server is answering other requests and its queue is full; retry in a few seconds"
    )]
    QueueFull,
    #[error("no model is loaded")]
    NoModel,
    #[error("the answer was stopped before it finished ({0})")]
    Stopped(String),
    #[error("there is no {method} {path} here")]
    NoRoute { method: String, path: String },
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::Invalid {
            message: message.into(),
            param: Some(param.to_owned()),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::HostNotAllowed { .. } => StatusCode::FORBIDDEN,
            Self::MissingKey | Self::WrongKey => StatusCode::UNAUTHORIZED,
            Self::NotJson { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BadJson(_) | Self::Invalid { .. } | Self::ContextLengthExceeded(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::ModelNotFound { .. } | Self::NoRoute { .. } => StatusCode::NOT_FOUND,
            Self::QueueFull | Self::NoModel | Self::Stopped(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::HostNotAllowed { .. } => "permission_error",
            Self::MissingKey | Self::WrongKey => "authentication_error",
            Self::QueueFull | Self::NoModel | Self::Stopped(_) | Self::Internal(_) => {
                "server_error"
            }
            _ => "invalid_request_error",
        }
    }

    /// OpenAI's `code`: what a program can match on.
    pub fn code(&self) -> Option<&'static str> {
        Some(match self {
            Self::HostNotAllowed { .. } => "host_not_allowed",
            Self::MissingKey | Self::WrongKey => "invalid_api_key",
            Self::NotJson { .. } => "unsupported_media_type",
            Self::TooLarge { .. } => "request_too_large",
            Self::BadJson(_) => "invalid_json",
            Self::ContextLengthExceeded(_) => "context_length_exceeded",
            Self::ModelNotFound { .. } => "model_not_found",
            Self::QueueFull => "server_busy",
            Self::NoModel => "model_not_loaded",
            Self::Stopped(_) => "generation_stopped",
            Self::NoRoute { .. } => "not_found",
            Self::Invalid { .. } | Self::Internal(_) => return None,
        })
    }

    /// OpenAI's `param`: the request field at fault.
    pub fn param(&self) -> Option<&str> {
        match self {
            Self::Invalid { param, .. } => param.as_deref(),
            Self::ContextLengthExceeded(_) => Some("messages"),
            Self::ModelNotFound { .. } => Some("model"),
            _ => None,
        }
    }

    /// The envelope, as a JSON value (also sent as an SSE event mid-stream).
    pub fn envelope(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.to_string(),
                "type": self.kind(),
                "param": self.param(),
                "code": self.code(),
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.envelope().to_string(),
        )
            .into_response();
        let headers = response.headers_mut();
        match self {
            Self::QueueFull | Self::NoModel => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            }
            Self::MissingKey | Self::WrongKey => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::NoModel => Self::NoModel,
            EngineError::Stopped => Self::Stopped("the engine has stopped".into()),
            EngineError::MessageTooLong { message, context } => Self::ContextLengthExceeded(
                format!(
                    "the last message alone is {message} tokens, but this server's context window holds {context}; shorten the message"
                ),
            ),
            EngineError::Generate(GenerateError::PromptTooLong { prompt, context }) => {
                Self::ContextLengthExceeded(format!(
                    "the messages are {prompt} tokens, but this server's context window holds {context}; send fewer or shorter messages"
                ))
            }
            EngineError::Generate(GenerateError::EmptyPrompt) => Self::Invalid {
                message: "the prompt is empty".into(),
                param: Some("messages".into()),
            },
            // The template refuses conversations it cannot write (e.g. roles out of order).
            EngineError::Template(e) => Self::Invalid {
                message: e.to_string(),
                param: Some("messages".into()),
            },
            EngineError::Image(e) => Self::Invalid {
                message: e.to_string(),
                param: Some("messages".into()),
            },
            // Refused with the model's vocabulary, before anything was generated.
            EngineError::Generate(GenerateError::Constraint(ConstraintError::Invalid(why))) => {
                Self::Invalid {
                    message: format!("`response_format` cannot be enforced: {why}"),
                    param: Some("response_format".into()),
                }
            }
            other => Self::Internal(other.to_string()),
        }
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("port {port} on 127.0.0.1 is already in use by another program; choose another port")]
    PortInUse { port: u16 },
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_the_openai_envelope() {
        let error = ApiError::ModelNotFound {
            given: "gpt-4o".into(),
            valid: "gemma".into(),
        };
        let body = error.envelope();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["param"], "model");
        assert!(body["error"]["message"].as_str().unwrap().contains("gemma"));
        let response = ApiError::QueueFull.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn prompts_that_do_not_fit_are_context_length_errors() {
        let error = ApiError::from(EngineError::Generate(GenerateError::PromptTooLong {
            prompt: 90,
            context: 64,
        }));
        assert_eq!(error.code(), Some("context_length_exceeded"));
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        let error = ApiError::from(EngineError::MessageTooLong {
            message: 90,
            context: 64,
        });
        assert_eq!(error.code(), Some("context_length_exceeded"));
    }
}
