//! Gemma Desk's MCP (Model Context Protocol) client, on the official Rust SDK `rmcp`: the
//! servers a user configures (stdio child processes, Streamable HTTP on loopback), their
//! tools, and calls with a time limit, cancellation, progress and a size limit.
//! docs/TOOLS.md tells how a call travels.

pub mod config;
pub mod declare;
pub mod hub;
pub mod search_path;

pub use config::{
    check_loopback_url, import_mcp_servers, ConfigError, ServerConfig, TransportConfig,
};
pub use declare::Declared;
pub use hub::{
    CallError, CallOptions, CallOutcome, Hub, HubEvent, ServerState, StartError, ToolInfo,
};
pub use search_path::{NotFound, SearchPath};
