//! Settings → Tools: the MCP servers the user added, kept with the app's settings, started and
//! stopped through the `mcp` crate's hub, each tool switched on or off. Nothing starts unless the
//! user added the server, confirmed its exact command line once and switched it on.
//! docs/TOOLS.md tells the whole story.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

use chats::Store;
use mcp::{Hub, HubEvent, SearchPath, ServerConfig, ServerState, TransportConfig};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::Error;
use crate::events::Events;

/// Key of the servers' row in the chats database (beside the other settings).
const KEY: &str = "mcp_servers";

/// What is stored: the servers as the user added them, the tools switched off and the command
/// lines the user confirmed. Environment values (often API keys) are stored here, in the local
/// database only, never in a chat export.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct Stored {
    servers: Vec<ServerConfig>,
    /// Server name → names of its tools switched off.
    tools_off: BTreeMap<String, BTreeSet<String>>,
    /// Server name → the command line the user confirmed before its first start.
    confirmed: BTreeMap<String, String>,
}

/// One server as Settings → Tools shows it.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct ServerView {
    pub config: ServerConfig,
    pub state: ServerState,
    /// The exact command line (or URL) that starts it.
    pub command_line: String,
    /// The user confirmed this command line: switching it on needs no confirmation.
    pub confirmed: bool,
}

/// One tool of a ready server.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct ToolView {
    pub name: String,
    /// The server's text: shown as data, never as markup.
    pub description: String,
    /// The JSON Schema of its arguments, as the server sent it.
    #[ts(type = "unknown")]
    pub input_schema: serde_json::Value,
    pub enabled: bool,
}

/// What an import of an `mcpServers` file did.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct McpImported {
    /// Added, switched off: each needs its command line confirmed.
    pub added: Vec<String>,
    /// Left as they were: a server of that name exists.
    pub skipped: Vec<String>,
}

/// Settings → Tools of the app.
pub struct McpServers {
    store: Arc<Store>,
    events: Arc<dyn Events>,
    /// Taken when it is dropped (shut down in the background: a drop may happen on its own
    /// worker, where waiting is not allowed).
    runtime: Option<tokio::runtime::Runtime>,
    stored: Mutex<Stored>,
    /// Made on the first start: resolving the login shell's `PATH` costs a shell run.
    hub: OnceLock<Arc<Hub>>,
}

impl McpServers {
    /// Reads the stored servers and starts those switched on (the user added, confirmed and
    /// enabled each).
    pub fn open(store: Arc<Store>, events: Arc<dyn Events>) -> anyhow::Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mcp")
            .enable_all()
            .build()?;
        let stored: Stored = store.get_setting(KEY).ok().flatten().unwrap_or_default();
        let servers = Arc::new(Self {
            store,
            events,
            runtime: Some(runtime),
            stored: Mutex::new(stored),
            hub: OnceLock::new(),
        });
        let enabled: Vec<ServerConfig> = servers
            .lock()
            .servers
            .iter()
            .filter(|s| s.enabled)
            .cloned()
            .collect();
        for config in enabled {
            servers.start(config);
        }
        Ok(servers)
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("taken only on drop")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stored> {
        self.stored.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hub(self: &Arc<Self>) -> Arc<Hub> {
        self.hub
            .get_or_init(|| {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let hub = Arc::new(Hub::new(SearchPath::resolve(), tx));
                let weak = Arc::downgrade(self);
                self.runtime().spawn(async move {
                    while let Some(event) = rx.recv().await {
                        let Some(this) = weak.upgrade() else { break };
                        // The state the event carries: the hub may have moved on since.
                        let view = match event {
                            HubEvent::State { server, state } => {
                                this.view(&server).map(|v| ServerView { state, ..v })
                            }
                            HubEvent::ToolsChanged { server, .. } => this.view(&server),
                            HubEvent::Progress { .. } => None,
                        };
                        if let Some(view) = view {
                            this.events.mcp_server(&view);
                        }
                    }
                });
                hub
            })
            .clone()
    }

    fn state(&self, name: &str) -> ServerState {
        self.hub
            .get()
            .map_or(ServerState::Stopped, |hub| hub.state(name))
    }

    fn view_of(&self, stored: &Stored, config: &ServerConfig) -> ServerView {
        let command_line = config.command_line();
        ServerView {
            confirmed: stored.confirmed.get(&config.name) == Some(&command_line),
            state: self.state(&config.name),
            command_line,
            config: config.clone(),
        }
    }

    fn view(&self, name: &str) -> Option<ServerView> {
        let stored = self.lock();
        let config = stored.servers.iter().find(|s| s.name == name)?;
        Some(self.view_of(&stored, config))
    }

    /// Every server, in the order added, with its state.
    pub fn list(&self) -> Vec<ServerView> {
        let stored = self.lock();
        stored
            .servers
            .iter()
            .map(|config| self.view_of(&stored, config))
            .collect()
    }

    fn save(&self, stored: &Stored) -> Result<(), Error> {
        self.store.set_setting(KEY, stored)?;
        Ok(())
    }

    fn start(self: &Arc<Self>, config: ServerConfig) {
        let hub = self.hub();
        self.runtime().spawn(async move {
            // The outcome arrives as the server's state (an event); a failure names its cause.
            let _ = hub.start(&config).await;
        });
    }

    fn stop(self: &Arc<Self>, name: &str) {
        if let Some(hub) = self.hub.get().cloned() {
            let name = name.to_string();
            let (done, stopped) = std::sync::mpsc::channel();
            self.runtime().spawn(async move {
                hub.stop(&name).await;
                let _ = done.send(());
            });
            // Stopping kills the process group at once; waited for so a new start of the same
            // name cannot race it.
            let _ = stopped.recv_timeout(std::time::Duration::from_secs(10));
        }
    }

    /// Adds a server, or replaces the one named `previous` (an edit: it is stopped, and starts
    /// again with the new settings when it was on and its command line is unchanged).
    pub fn save_server(
        self: &Arc<Self>,
        config: ServerConfig,
        previous: Option<&str>,
    ) -> Result<ServerView, Error> {
        let mut config = config;
        check(&config)?;
        let mut stored = self.lock();
        let taken = stored
            .servers
            .iter()
            .any(|s| s.name == config.name && Some(s.name.as_str()) != previous);
        if taken {
            return Err(Error::Invalid(format!(
                "a server named \"{}\" exists already",
                config.name
            )));
        }
        let index = match previous {
            Some(previous) => Some(
                stored
                    .servers
                    .iter()
                    .position(|s| s.name == previous)
                    .ok_or_else(|| Error::Invalid(format!("no server named \"{previous}\"")))?,
            ),
            None => None,
        };
        let confirmed = stored
            .confirmed
            .get(previous.unwrap_or(&config.name))
            .cloned();
        // A new command line is confirmed again before it runs.
        if confirmed.as_deref() != Some(config.command_line().as_str()) {
            config.enabled = false;
        }
        let mut next = stored.clone();
        match index {
            Some(i) => {
                let old = next.servers[i].name.clone();
                next.servers[i] = config.clone();
                if old != config.name {
                    if let Some(off) = next.tools_off.remove(&old) {
                        next.tools_off.insert(config.name.clone(), off);
                    }
                    if let Some(line) = next.confirmed.remove(&old) {
                        next.confirmed.insert(config.name.clone(), line);
                    }
                }
            }
            None => next.servers.push(config.clone()),
        }
        self.save(&next)?;
        *stored = next;
        drop(stored);
        if let Some(previous) = previous {
            self.stop(previous);
        }
        if config.enabled {
            self.start(config.clone());
        }
        Ok(self.view(&config.name).expect("just saved"))
    }

    /// Removes a server (stopped first) with its tool switches.
    pub fn remove(self: &Arc<Self>, name: &str) -> Result<(), Error> {
        let mut stored = self.lock();
        let mut next = stored.clone();
        next.servers.retain(|s| s.name != name);
        next.tools_off.remove(name);
        next.confirmed.remove(name);
        self.save(&next)?;
        *stored = next;
        drop(stored);
        self.stop(name);
        Ok(())
    }

    /// Switches a server on (started) or off (stopped). The first start of a command line
    /// needs `confirmed_command_line` equal to it: the UI showed it and the user agreed.
    pub fn set_enabled(
        self: &Arc<Self>,
        name: &str,
        enabled: bool,
        confirmed_command_line: Option<&str>,
    ) -> Result<ServerView, Error> {
        let mut stored = self.lock();
        let Some(i) = stored.servers.iter().position(|s| s.name == name) else {
            return Err(Error::Invalid(format!("no server named \"{name}\"")));
        };
        let mut next = stored.clone();
        let line = next.servers[i].command_line();
        if enabled && next.confirmed.get(name) != Some(&line) {
            if confirmed_command_line != Some(line.as_str()) {
                return Err(Error::Invalid(format!(
                    "confirm the command line before the first start: {line}"
                )));
            }
            next.confirmed.insert(name.to_string(), line);
        }
        next.servers[i].enabled = enabled;
        let config = next.servers[i].clone();
        self.save(&next)?;
        *stored = next;
        drop(stored);
        if enabled {
            self.start(config);
        } else {
            self.stop(name);
        }
        Ok(self.view(name).expect("exists"))
    }

    /// The tools of a ready server, each with its switch (none while it is not ready).
    pub fn tools(&self, name: &str) -> Vec<ToolView> {
        let Some(hub) = self.hub.get() else {
            return Vec::new();
        };
        let stored = self.lock();
        let off = stored.tools_off.get(name);
        hub.tools()
            .into_iter()
            .filter(|t| t.server == name)
            .map(|t| ToolView {
                enabled: !off.is_some_and(|off| off.contains(&t.name)),
                name: t.name,
                description: t.description,
                input_schema: t.input_schema,
            })
            .collect()
    }

    /// Switches one tool on or off; kept across restarts.
    pub fn set_tool_enabled(&self, server: &str, tool: &str, enabled: bool) -> Result<(), Error> {
        let mut stored = self.lock();
        if !stored.servers.iter().any(|s| s.name == server) {
            return Err(Error::Invalid(format!("no server named \"{server}\"")));
        }
        let mut next = stored.clone();
        let off = next.tools_off.entry(server.to_string()).or_default();
        if enabled {
            off.remove(tool);
        } else {
            off.insert(tool.to_string());
        }
        next.tools_off.retain(|_, off| !off.is_empty());
        self.save(&next)?;
        *stored = next;
        Ok(())
    }

    /// Adds the servers of an `mcpServers` file (Claude Desktop, LM Studio, Cursor), switched
    /// off; a name already here is left as it is.
    pub fn import(&self, text: &str) -> Result<McpImported, Error> {
        let configs = mcp::import_mcp_servers(text).map_err(|e| Error::Invalid(e.to_string()))?;
        let mut stored = self.lock();
        let mut next = stored.clone();
        let mut out = McpImported {
            added: Vec::new(),
            skipped: Vec::new(),
        };
        for config in configs {
            if next.servers.iter().any(|s| s.name == config.name) {
                out.skipped.push(config.name);
            } else {
                out.added.push(config.name.clone());
                next.servers.push(ServerConfig {
                    enabled: false,
                    ..config
                });
            }
        }
        self.save(&next)?;
        *stored = next;
        Ok(out)
    }

    /// Ends every server now (the app is quitting): no process is left behind.
    pub fn shutdown(&self) {
        if let Some(hub) = self.hub.get() {
            hub.shutdown();
        }
    }
}

impl Drop for McpServers {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn check(config: &ServerConfig) -> Result<(), Error> {
    if config.name.trim().is_empty() {
        return Err(Error::Invalid("a server needs a name".into()));
    }
    match &config.transport {
        TransportConfig::Stdio { command, .. } if command.trim().is_empty() => {
            Err(Error::Invalid("a server needs a command".into()))
        }
        TransportConfig::Http { url } => {
            mcp::check_loopback_url(url).map_err(|e| Error::Invalid(e.to_string()))
        }
        _ => Ok(()),
    }
}
