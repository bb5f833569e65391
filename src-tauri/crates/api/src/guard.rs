//! What every request passes before a handler sees it: the Host allow-list (the DNS-rebinding
//! defence), CORS for the configured origins only, and the API key.
//!
//! A page a browser loads from elsewhere cannot read our answers: it does not know the key,
//! gets no CORS headers, and a rebound name (its own domain pointing at 127.0.0.1) arrives with
//! its own domain as Host, which is refused before anything else runs.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::ApiKey;
use crate::error::ApiError;

/// Request headers a browser page on an allowed origin may send (what the OpenAI SDKs send).
const CORS_HEADERS: [&str; 6] = [
    "authorization",
    "content-type",
    "x-api-key",
    "openai-beta",
    "openai-organization",
    "openai-project",
];
/// Prefix of the OpenAI SDKs' own headers (`x-stainless-os`, `x-stainless-retry-count`, …).
const STAINLESS_PREFIX: &str = "x-stainless-";
/// How long a browser may cache a preflight answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "600";

/// What the checks compare against.
#[derive(Debug)]
pub struct Guard {
    /// `127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT` for the port actually bound.
    hosts: Vec<String>,
    key: ApiKey,
    origins: Vec<String>,
}

impl Guard {
    pub fn new(port: u16, key: ApiKey, origins: Vec<String>) -> Self {
        Self {
            hosts: vec![
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                format!("[::1]:{port}"),
            ],
            key,
            origins,
        }
    }

    /// Exactly one Host header, naming this server as the loopback address or `localhost`
    /// with its port; an absolute request target must name it too.
    fn check_host(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), ApiError> {
        let mut values = headers.get_all(header::HOST).iter();
        let host = match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().unwrap_or("").trim().to_ascii_lowercase(),
            (None, _) => String::new(),
            (Some(_), Some(_)) => "(several)".to_owned(),
        };
        let allowed = |name: &str| self.hosts.iter().any(|h| h == name);
        let authority_ok = authority.is_none_or(|a| allowed(&a.to_ascii_lowercase()));
        if allowed(&host) && authority_ok {
            return Ok(());
        }
        Err(ApiError::HostNotAllowed {
            given: if host.is_empty() {
                "missing".to_owned()
            } else {
                format!("`{host}`")
            },
            allowed: self.hosts.join(", "),
        })
    }

    /// The key from `Authorization: Bearer KEY` or `x-api-key: KEY`.
    fn check_key(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let bearer = headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|v| {
                let v = v.as_bytes();
                (v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
                    .then(|| v[7..].trim_ascii())
            });
        let plain = headers
            .get_all("x-api-key")
            .iter()
            .map(|v| v.as_bytes().trim_ascii());
        let mut given = bearer.chain(plain).peekable();
        if given.peek().is_none() {
            return Err(ApiError::MissingKey);
        }
        // Every credential sent is compared, so the time taken says nothing of which one matched.
        let matched = given.fold(false, |found, key| self.key.matches(key) | found);
        if matched {
            Ok(())
        } else {
            Err(ApiError::WrongKey)
        }
    }

    /// The request's Origin, if it is one of the allowed ones.
    fn allowed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        self.origins
            .iter()
            .any(|o| o == text)
            .then(|| origin.clone())
    }
}

/// Refuses a request whose Host is not this server (403), before anything else runs.
pub async fn require_host(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    match guard.check_host(request.headers(), authority.as_deref()) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// Refuses a request without the key (401).
pub async fn require_key(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.check_key(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// CORS for the allowed origins only: their preflights are answered here (a browser sends no
/// key with them), their responses name them. Any other origin gets no CORS header at all, so
/// its page cannot read a response.
pub async fn cors(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let Some(origin) = guard.allowed_origin(request.headers()) else {
        return next.run(request).await;
    };
    let headers = request.headers();
    if request.method() == Method::OPTIONS
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        let requested = headers
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let allowed: Vec<String> = requested
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| CORS_HEADERS.contains(&h.as_str()) || h.starts_with(STAINLESS_PREFIX))
            .collect();
        let mut response = StatusCode::NO_CONTENT.into_response();
        let out = response.headers_mut();
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        out.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        if let Ok(value) = HeaderValue::from_str(&allowed.join(", ")) {
            out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, value);
        }
        out.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE),
        );
        out.insert(header::VARY, HeaderValue::from_static("Origin"));
        return response;
    }
    let mut response = next.run(request).await;
    let out = response.headers_mut();
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    out.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard::new(
            7341,
            ApiKey::new("a-key-of-sixteen-chars").unwrap(),
            vec!["chrome-extension://abc".into()],
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn only_loopback_names_with_our_port_pass_as_host() {
        let g = guard();
        for host in [
            "127.0.0.1:7341",
            "localhost:7341",
            "LOCALHOST:7341",
            "[::1]:7341",
        ] {
            assert_eq!(
                g.check_host(&headers(&[("host", host)]), None),
                Ok(()),
                "{host}"
            );
        }
        for host in [
            "",
            ":7341",
            "localhost",
            "127.0.0.1",
            "127.0.0.1:7342",
            "attacker.example",
            "attacker.example:7341",
            "localhost.attacker.example:7341",
            "0.0.0.0:7341",
        ] {
            assert!(
                g.check_host(&headers(&[("host", host)]), None).is_err(),
                "{host}"
            );
        }
        assert!(g.check_host(&HeaderMap::new(), None).is_err());
        let two = headers(&[("host", "127.0.0.1:7341"), ("host", "attacker.example")]);
        assert!(g.check_host(&two, None).is_err());
        let ok = headers(&[("host", "127.0.0.1:7341")]);
        assert!(g.check_host(&ok, Some("attacker.example:7341")).is_err());
    }

    #[test]
    fn the_key_is_taken_from_bearer_or_x_api_key() {
        let g = guard();
        let key = "a-key-of-sixteen-chars";
        assert_eq!(
            g.check_key(&headers(&[("authorization", &format!("Bearer {key}"))])),
            Ok(())
        );
        assert_eq!(
            g.check_key(&headers(&[("authorization", &format!("bearer {key}"))])),
            Ok(())
        );
        assert_eq!(g.check_key(&headers(&[("x-api-key", key)])), Ok(()));
        assert_eq!(g.check_key(&HeaderMap::new()), Err(ApiError::MissingKey));
        assert_eq!(
            g.check_key(&headers(&[("authorization", &format!("Basic {key}"))])),
            Err(ApiError::MissingKey)
        );
        assert_eq!(
            g.check_key(&headers(&[(
                "authorization",
                "Bearer a-key-of-sixteen-charz"
            )])),
            Err(ApiError::WrongKey)
        );
    }
}
