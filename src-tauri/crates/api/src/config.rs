//! What a server is started with: the port, the key, the browser origins it answers, its
//! limits, and the one model it serves.

use std::fmt;
use std::sync::RwLock;

use base64::Engine as _;
use engine::image::SoftTokenBudget;
use engine::sampler::SamplerConfig;

use crate::error::ApiError;

/// The port used unless one is given. None of the anchors uses it (LM Studio 1234, Ollama
/// 11434, Jan 1337, mlx-lm 8080), so Gemma Desk can run next to any of them.
pub const DEFAULT_PORT: u16 = 7341;
/// Largest request body: a few photos as base64 data URLs fit; an endless upload does not.
pub const DEFAULT_MAX_BODY_BYTES: usize = 20 * 1024 * 1024;
/// Requests that may wait behind the ones being answered; more get 503 with `Retry-After`.
pub const DEFAULT_QUEUE_DEPTH: usize = 8;
/// Most images one request may carry.
pub const MAX_IMAGES: usize = 10;
/// Audio files one request may carry (each up to the engine's clip limit).
pub const MAX_AUDIO: usize = 4;
/// Context windows a server may be given, in tokens (the bounds of the app's Settings).
pub const MIN_CONTEXT: usize = 512;
pub const MAX_CONTEXT: usize = 131_072;
/// The context window unless one is given (the app's default).
pub const DEFAULT_CONTEXT: usize = 16_384;
/// Shortest API key accepted from a person (generated ones are 46 characters).
pub const MIN_KEY_CHARS: usize = 16;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The port on 127.0.0.1; 0 picks a free one (tests). A busy port is an error.
    pub port: u16,
    pub key: ApiKey,
    /// Browser origins (`scheme://host[:port]`, exactly) that get CORS headers. Empty: none.
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// Answers the engine writes at once (what it was given with `Engine::set_parallel`):
    /// so many requests run, and [`Self::queue_depth`] more wait.
    pub parallel: usize,
    /// Requests waiting behind the running ones before new ones are refused.
    pub queue_depth: usize,
    /// The model served; `None` until one is loaded (see [`crate::Server::set_model`]).
    pub model: Option<ServedModel>,
}

impl ApiConfig {
    /// The defaults for serving `model` with `key`.
    pub fn new(key: ApiKey, model: ServedModel) -> Self {
        Self {
            port: DEFAULT_PORT,
            key,
            allowed_origins: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            parallel: engine::batch::DEFAULT_PARALLEL,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            model: Some(model),
        }
    }
}

/// The model the engine has loaded, as the API names and runs it. A request names it by
/// `id` (or an alias), never by a path.
#[derive(Debug, Clone)]
pub struct ServedModel {
    pub id: String,
    /// Other names accepted for it (compared without case, like `id`).
    pub aliases: Vec<String>,
    /// Whether it can see images.
    pub vision: bool,
    /// Whether it can hear audio (`input_audio` parts).
    pub audio: bool,
    /// Positions a request may use, prompt and answer together.
    pub context_window: usize,
    /// Sampling when a request sets nothing (the checkpoint's generation_config.json).
    pub sampler: SamplerConfig,
    /// Soft tokens per image.
    pub image_budget: SoftTokenBudget,
}

impl ServedModel {
    /// Whether `name` names this model.
    pub fn is_named(&self, name: &str) -> bool {
        std::iter::once(&self.id)
            .chain(&self.aliases)
            .any(|id| id.eq_ignore_ascii_case(name))
    }

    /// A model id from a folder name: lowercase letters, digits, `-`, `.` and `_`, the rest
    /// turned into `-` (so that the id is safe in a URL and says nothing of where it lives).
    pub fn id_from_folder_name(name: &str) -> String {
        let id: String = name
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '-' | '.' | '_' => c,
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => '-',
            })
            .collect();
        let id = id.trim_matches(|c| c == '-' || c == '.');
        if id.is_empty() {
            "gemma".to_owned()
        } else {
            id.to_owned()
        }
    }
}

/// The model served now, swapped when the engine loads another or none.
#[derive(Debug, Default)]
pub struct ModelSlot(RwLock<Option<ServedModel>>);

impl ModelSlot {
    pub fn new(model: Option<ServedModel>) -> Self {
        Self(RwLock::new(model))
    }

    pub fn set(&self, model: Option<ServedModel>) {
        if let Ok(mut slot) = self.0.write() {
            *slot = model;
        }
    }

    /// The model, or 503 `model_not_loaded`.
    pub fn current(&self) -> Result<ServedModel, ApiError> {
        self.0
            .read()
            .ok()
            .and_then(|m| m.clone())
            .ok_or(ApiError::NoModel)
    }
}

/// A browser origin a person allows (`scheme://host[:port]`, exactly as browsers send it:
/// no path, no wildcard), lowercased, without a trailing `/`; or why it is not one.
pub fn check_origin(origin: &str) -> Result<String, String> {
    let given = origin.trim();
    let lower = given.to_ascii_lowercase();
    let refuse = |why: &str| Err(format!("`{given}` is not an origin: {why}"));
    let Some((scheme, rest)) = lower.split_once("://") else {
        return refuse("it needs a scheme, as in http://localhost:3000");
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let origin = format!("{scheme}://{rest}");
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase())
        && scheme
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c));
    if !scheme_ok {
        return refuse("the scheme is not valid");
    }
    if origin.contains('*') {
        return refuse("wildcards are not allowed; list each origin");
    }
    if rest.is_empty() {
        return refuse("it has no host");
    }
    if rest.contains(['/', '?', '#', '@'])
        || rest.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return refuse("only scheme://host[:port], without a path");
    }
    // `[::1]:8080`: the port is what follows the bracket; `host:8080`: the last colon.
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, after)) => (host, Some(after.strip_prefix(':').unwrap_or("x"))),
            None => return refuse("the IPv6 address has no closing bracket"),
        },
        None => match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        },
    };
    if host.is_empty() {
        return refuse("it has no host");
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return refuse("the port is not a number from 0 to 65535");
    }
    Ok(origin)
}

/// The secret a client must send. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

/// A key a person chose that is not good enough.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the API key is empty")]
    Empty,
    #[error("the API key must be at least {MIN_KEY_CHARS} characters, not {0}")]
    TooShort(usize),
    #[error("the API key may not contain spaces or control characters")]
    BadCharacter,
    #[error("no random bytes for a new API key: {0}")]
    Random(String),
}

impl ApiKey {
    /// A new random key: `gd-` and 32 random bytes in URL-safe base64.
    pub fn generate() -> Result<Self, KeyError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self(format!(
            "gd-{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        )))
    }

    /// A key a person chose (surrounding whitespace is dropped, as from a key file).
    pub fn new(key: &str) -> Result<Self, KeyError> {
        let key = key.trim();
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(KeyError::BadCharacter);
        }
        let chars = key.chars().count();
        if chars < MIN_KEY_CHARS {
            return Err(KeyError::TooShort(chars));
        }
        Ok(Self(key.to_owned()))
    }

    /// The key itself, to show the person who runs the server.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this key, in time that does not depend on where they differ.
    pub fn matches(&self, given: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(given).into()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_differ_and_pass_their_own_check() {
        let a = ApiKey::generate().unwrap();
        let b = ApiKey::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(ApiKey::new(a.reveal()).unwrap(), a);
        assert!(a.matches(a.reveal().as_bytes()));
        assert!(!a.matches(b.reveal().as_bytes()));
        assert!(!a.matches(&a.reveal().as_bytes()[1..]));
        assert_eq!(format!("{a:?}"), "ApiKey(…)");
    }

    #[test]
    fn weak_keys_are_refused_in_words() {
        assert_eq!(ApiKey::new("  \n"), Err(KeyError::Empty));
        assert_eq!(ApiKey::new("short"), Err(KeyError::TooShort(5)));
        assert_eq!(
            ApiKey::new("has a space in the middle"),
            Err(KeyError::BadCharacter)
        );
        assert!(ApiKey::new("  a-long-enough-key-1234\n").is_ok());
    }

    #[test]
    fn origins_are_exact_and_refused_in_words() {
        assert_eq!(
            check_origin(" http://LocalHost:3000/ ").unwrap(),
            "http://localhost:3000"
        );
        assert_eq!(
            check_origin("chrome-extension://abcdefghijklmnop").unwrap(),
            "chrome-extension://abcdefghijklmnop"
        );
        assert_eq!(
            check_origin("http://[::1]:8080").unwrap(),
            "http://[::1]:8080"
        );
        for (bad, why) in [
            ("localhost:3000", "scheme"),
            ("https://*.example.com", "wildcard"),
            ("https://example.com/app", "path"),
            ("https://", "no host"),
            ("http://localhost:99999", "port"),
            ("1http://x", "scheme"),
        ] {
            let error = check_origin(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }

    #[test]
    fn ids_from_folder_names_are_url_safe() {
        assert_eq!(
            ServedModel::id_from_folder_name("gemma-4-E4B-it-4bit"),
            "gemma-4-e4b-it-4bit"
        );
        assert_eq!(ServedModel::id_from_folder_name("my model/../"), "my-model");
        assert_eq!(ServedModel::id_from_folder_name("///"), "gemma");
    }
}
