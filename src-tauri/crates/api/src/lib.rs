//! Gemma Desk's local API: an OpenAI-compatible HTTP server over the engine, for other
//! programs on the same machine. Safe by default: it listens on 127.0.0.1 only, refuses any
//! Host but its own loopback names (DNS rebinding), requires the API key, sends CORS headers
//! to configured origins only, takes JSON bodies of bounded size, and never fetches a URL or
//! opens a path a request names. Knows nothing of windows; the app and `gemma-desk-cli serve`
//! start it over their engine. What is served: `docs/API.md`.

mod call_grammar;
mod completions;
pub mod config;
pub mod error;
mod files;
mod format;
mod guard;
mod http;
mod log;
mod messages;
mod queue;
mod responses;
mod server;
mod stop;
mod tools;
mod wire;

pub use config::{check_origin, ApiConfig, ApiKey, KeyError, ServedModel, DEFAULT_PORT};
pub use error::{ApiError, ServeError};
pub use log::{Finished, Outcome, Request, Watcher};
pub use server::Server;
