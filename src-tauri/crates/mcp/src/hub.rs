//! The hub: the running servers, their tools, and calls to them. Every protocol message goes
//! through `rmcp` (the official Rust SDK); the hub owns the processes (one process group per
//! stdio server, killed with the hub), their stderr tail, the time limits, cancellation and the
//! size limit of what a call returns.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, ProgressNotificationParam,
    ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::config::{check_loopback_url, ServerConfig, TransportConfig};
use crate::search_path::SearchPath;

/// The largest single message a stdio server may send (a 50 MB result fits; the result is then
/// cut to [`CallOptions::max_result_chars`]). A larger line is dropped by the SDK and the call
/// ends at its time limit.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// How much of a server's stderr is kept (its last bytes), whatever it prints.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// What the UI shows for a server.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    Stopped,
    Starting,
    Ready {
        tools: usize,
    },
    Failed {
        error: String,
        /// The last lines the server printed on stderr (empty for HTTP servers).
        stderr_tail: String,
        /// What the user can do about it.
        hint: String,
    },
}

/// One tool as a server lists it. `description` and the schema are the server's text:
/// untrusted data, never prompt control.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    pub server: String,
    pub name: String,
    pub description: String,
    /// The JSON Schema of the arguments (`inputSchema`).
    pub input_schema: serde_json::Value,
}

/// What the hub reports while it works.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HubEvent {
    State {
        server: String,
        state: ServerState,
    },
    /// The server said its tools changed (`notifications/tools/list_changed`); listed again.
    ToolsChanged {
        server: String,
        tools: usize,
    },
    Progress {
        call_id: String,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub struct CallOptions {
    /// Names the call in [`HubEvent::Progress`].
    pub call_id: String,
    /// Time without an answer (or progress) after which the call is cancelled.
    pub timeout: Duration,
    /// Characters of the result kept; the rest is cut with a note.
    pub max_result_chars: usize,
}

/// What a call returned, as text for the model and the card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallOutcome {
    pub text: String,
    /// The server marked the result as a tool error (`isError`).
    pub is_error: bool,
    /// The result's length in characters when it was cut.
    pub cut_from_chars: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("no server named \"{0}\" is running")]
    NoServer(String),
    #[error("the server \"{server}\" has no tool \"{tool}\"")]
    NoTool { server: String, tool: String },
    #[error("the call was cancelled")]
    Cancelled,
    /// The seconds waited, and what the server sent instead of an answer, if it was not JSON-RPC.
    #[error("the server gave no answer within {0} s; the call was cancelled{note}", note = note(.1))]
    Timeout(u64, Option<String>),
    #[error("the server stopped during the call{}", tail_note(.stderr_tail))]
    ServerExited { stderr_tail: String },
    #[error("the server answered with an error: {0}")]
    Server(String),
    #[error("the call failed: {0}")]
    Protocol(String),
}

fn note(what: &Option<String>) -> String {
    what.as_ref().map(|w| format!(". {w}")).unwrap_or_default()
}

fn tail_note(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!(". Its last output: {}", tail.trim())
    }
}

/// The start of a server failed.
#[derive(Debug, Clone, PartialEq)]
pub struct StartError {
    pub error: String,
    pub stderr_tail: String,
    pub hint: String,
}

pub struct Hub {
    search_path: SearchPath,
    events: UnboundedSender<HubEvent>,
    servers: Mutex<HashMap<String, Slot>>,
    /// How long a server may take to answer `initialize`.
    pub init_timeout: Duration,
}

struct Slot {
    state: ServerState,
    conn: Option<Arc<Connection>>,
}

struct Connection {
    service: RunningService<RoleClient, Handler>,
    tools: Arc<Mutex<Vec<ToolInfo>>>,
    stderr: Arc<Mutex<Tail>>,
    /// The last line of its stdout that was not JSON-RPC (the SDK drops such a line).
    garbled: Arc<Mutex<Option<String>>>,
    /// Killing the process group (stdio servers): on stop, on drop, when the hub ends.
    group: Option<ProcessGroup>,
}

impl Hub {
    pub fn new(search_path: SearchPath, events: UnboundedSender<HubEvent>) -> Hub {
        Hub {
            search_path,
            events,
            servers: Mutex::new(HashMap::new()),
            init_timeout: Duration::from_secs(60),
        }
    }

    pub fn state(&self, server: &str) -> ServerState {
        self.servers
            .lock()
            .unwrap()
            .get(server)
            .map_or(ServerState::Stopped, |s| s.state.clone())
    }

    /// The tools of every ready server.
    pub fn tools(&self) -> Vec<ToolInfo> {
        let servers = self.servers.lock().unwrap();
        let mut out: Vec<ToolInfo> = servers
            .values()
            .filter_map(|s| s.conn.as_ref())
            .flat_map(|c| c.tools.lock().unwrap().clone())
            .collect();
        out.sort_by(|a, b| (&a.server, &a.name).cmp(&(&b.server, &b.name)));
        out
    }

    fn set_state(&self, server: &str, state: ServerState, conn: Option<Option<Arc<Connection>>>) {
        let mut servers = self.servers.lock().unwrap();
        let slot = servers.entry(server.to_string()).or_insert(Slot {
            state: ServerState::Stopped,
            conn: None,
        });
        slot.state = state.clone();
        if let Some(conn) = conn {
            slot.conn = conn;
        }
        drop(servers);
        let _ = self.events.send(HubEvent::State {
            server: server.to_string(),
            state,
        });
    }

    /// Starts `config` (stopping a running server of that name first), initializes it and lists
    /// its tools. A server that is not `enabled` is not started. On failure the server's state says why, with its stderr tail and a hint.
    pub async fn start(self: &Arc<Self>, config: &ServerConfig) -> Result<usize, StartError> {
        self.stop(&config.name).await;
        if !config.enabled {
            return Err(StartError {
                error: "the server is switched off".into(),
                stderr_tail: String::new(),
                hint: "Switch it on in Settings → Tools (its command line is shown there).".into(),
            });
        }
        self.set_state(&config.name, ServerState::Starting, None);
        match self.connect(config).await {
            Ok(conn) => {
                let n = conn.tools.lock().unwrap().len();
                let conn = Arc::new(conn);
                self.set_state(
                    &config.name,
                    ServerState::Ready { tools: n },
                    Some(Some(conn.clone())),
                );
                self.watch(config.name.clone(), conn);
                Ok(n)
            }
            Err(e) => {
                self.set_state(
                    &config.name,
                    ServerState::Failed {
                        error: e.error.clone(),
                        stderr_tail: e.stderr_tail.clone(),
                        hint: e.hint.clone(),
                    },
                    Some(None),
                );
                Err(e)
            }
        }
    }

    /// Marks the server failed when its connection ends without a stop.
    fn watch(self: &Arc<Self>, name: String, conn: Arc<Connection>) {
        let hub = Arc::downgrade(self);
        let peer = conn.service.peer().clone();
        tokio::spawn(async move {
            // Polled: the SDK closes its side when the server's stdout ends or HTTP fails.
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let Some(hub) = hub.upgrade() else { return };
                let current = hub
                    .servers
                    .lock()
                    .unwrap()
                    .get(&name)
                    .and_then(|s| s.conn.as_ref())
                    .is_some_and(|c| Arc::ptr_eq(c, &conn));
                if !current {
                    return;
                }
                if peer.is_transport_closed() {
                    break;
                }
            }
            let Some(hub) = hub.upgrade() else { return };
            let current = {
                let servers = hub.servers.lock().unwrap();
                servers
                    .get(&name)
                    .and_then(|s| s.conn.as_ref())
                    .is_some_and(|c| Arc::ptr_eq(c, &conn))
            };
            if current {
                hub.set_state(
                    &name,
                    ServerState::Failed {
                        error: "the server stopped".into(),
                        stderr_tail: conn.stderr.lock().unwrap().text(),
                        hint: "Start it again from Settings → Tools; if it stops again, run its command in Terminal to see why.".into(),
                    },
                    Some(None),
                );
            }
        });
    }

    async fn connect(&self, config: &ServerConfig) -> Result<Connection, StartError> {
        let tools = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let garbled = Arc::new(Mutex::new(None));
        let handler = Handler {
            server: config.name.clone(),
            tools: tools.clone(),
            progress: Arc::new(Mutex::new(HashMap::new())),
            events: self.events.clone(),
        };
        let plain = |error: String, hint: &str| StartError {
            error,
            stderr_tail: String::new(),
            hint: hint.to_string(),
        };
        let (service, group) = match &config.transport {
            TransportConfig::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let program = self.search_path.find(command, cwd.as_deref()).map_err(|e| {
                    plain(
                        e.to_string(),
                        "Install the program, or edit the server and write the command's full path.",
                    )
                })?;
                let mut cmd = tokio::process::Command::new(&program);
                cmd.args(args)
                    .env("PATH", self.search_path.joined())
                    .envs(env)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true)
                    // Its own process group: the hub kills the server and whatever it started
                    // (npx → node, uvx → python) at once.
                    .process_group(0);
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let mut child = cmd.spawn().map_err(|e| {
                    plain(
                        format!("{} could not be started: {e}", program.display()),
                        "Check the command and its working folder in the server's settings.",
                    )
                })?;
                let group = ProcessGroup::new(child.id().map(|id| id as i32));
                let stdout = child.stdout.take().expect("piped");
                let stdin = child.stdin.take().expect("piped");
                if let Some(mut err) = child.stderr.take() {
                    let stderr = stderr.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 8192];
                        while let Ok(n) = err.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            stderr.lock().unwrap().push(&buf[..n]);
                        }
                    });
                }
                // The child is reaped here; the group is killed by `ProcessGroup`.
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
                let stdout = Watched {
                    inner: stdout,
                    line: Vec::new(),
                    overlong: false,
                    note: garbled.clone(),
                };
                let transport = AsyncRwTransport::<RoleClient, _, _>::new(stdout, stdin)
                    .with_max_line_length(MAX_MESSAGE_BYTES);
                let served =
                    tokio::time::timeout(self.init_timeout, handler.serve(transport)).await;
                (served, Some(group))
            }
            TransportConfig::Http { url } => {
                check_loopback_url(url)
                    .map_err(|e| plain(e.to_string(), "Edit the server's address."))?;
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                (
                    tokio::time::timeout(self.init_timeout, handler.serve(transport)).await,
                    None,
                )
            }
        };
        let tail = |stderr: &Arc<Mutex<Tail>>| {
            // The stderr reader may still be copying the last bytes.
            stderr.lock().unwrap().text()
        };
        let service = match service {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                let hint = match &config.transport {
                    TransportConfig::Http { url } => format!(
                        "Check that the server is running and answers at {url}, then start it again."
                    ),
                    _ => "Its last output is shown; run the command in Terminal to see the problem."
                        .into(),
                };
                drop(group);
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(StartError {
                    error: format!("the server did not start: {e}"),
                    stderr_tail: tail(&stderr),
                    hint,
                });
            }
            Err(_) => {
                drop(group);
                return Err(StartError {
                    error: format!(
                        "the server did not answer \"initialize\" within {} s",
                        self.init_timeout.as_secs()
                    ),
                    stderr_tail: tail(&stderr),
                    hint: "It may be waiting for something (a login, a download); run the command in Terminal, then start it again.".into(),
                });
            }
        };
        let listed = tokio::time::timeout(self.init_timeout, service.peer().list_all_tools()).await;
        match listed {
            Ok(Ok(list)) => *tools.lock().unwrap() = to_infos(&config.name, list),
            Ok(Err(e)) => {
                return Err(StartError {
                    error: format!("the server did not list its tools: {e}"),
                    stderr_tail: tail(&stderr),
                    hint: "Run the command in Terminal to see the problem.".into(),
                })
            }
            Err(_) => {
                return Err(StartError {
                    error: format!(
                        "the server did not list its tools within {} s",
                        self.init_timeout.as_secs()
                    ),
                    stderr_tail: tail(&stderr),
                    hint: "Run the command in Terminal to see the problem.".into(),
                })
            }
        }
        Ok(Connection {
            service,
            tools,
            stderr,
            garbled,
            group,
        })
    }

    /// Stops the server and every process it started.
    pub async fn stop(&self, server: &str) {
        let conn = {
            let mut servers = self.servers.lock().unwrap();
            servers.get_mut(server).and_then(|s| s.conn.take())
        };
        if let Some(conn) = conn {
            conn.service.cancellation_token().cancel();
            if let Some(group) = &conn.group {
                group.kill();
            }
            self.set_state(server, ServerState::Stopped, Some(None));
        }
    }

    /// Ends every server now (the app is quitting): each process group is killed.
    pub fn shutdown(&self) {
        let conns: Vec<Arc<Connection>> = self
            .servers
            .lock()
            .unwrap()
            .values_mut()
            .filter_map(|s| {
                s.state = ServerState::Stopped;
                s.conn.take()
            })
            .collect();
        for conn in conns {
            conn.service.cancellation_token().cancel();
            if let Some(group) = &conn.group {
                group.kill();
            }
        }
    }

    /// Calls `tool` of `server`. Progress arrives as [`HubEvent::Progress`] under
    /// `options.call_id`; `cancel` sends the protocol's `notifications/cancelled` and returns
    /// [`CallError::Cancelled`] at once.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        options: &CallOptions,
        cancel: &CancellationToken,
    ) -> Result<CallOutcome, CallError> {
        let conn = self
            .servers
            .lock()
            .unwrap()
            .get(server)
            .and_then(|s| s.conn.clone())
            .ok_or_else(|| CallError::NoServer(server.to_string()))?;
        if !conn.tools.lock().unwrap().iter().any(|t| t.name == tool) {
            return Err(CallError::NoTool {
                server: server.to_string(),
                tool: tool.to_string(),
            });
        }
        let exited = |conn: &Connection| CallError::ServerExited {
            stderr_tail: conn.stderr.lock().unwrap().text(),
        };
        let peer = conn.service.peer().clone();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_string()).with_arguments(arguments),
        ));
        let request_options = PeerRequestOptions::with_timeout(options.timeout)
            .reset_timeout_on_progress()
            .with_max_total_timeout(options.timeout * 20);
        let handle = peer
            .send_cancellable_request(request, request_options)
            .await
            .map_err(|e| match e {
                ServiceError::TransportClosed | ServiceError::TransportSend(_) => exited(&conn),
                e => CallError::Protocol(e.to_string()),
            })?;
        let id = handle.id.clone();
        let token_key = token_key(&handle.progress_token);
        conn.service
            .service()
            .progress
            .lock()
            .unwrap()
            .insert(token_key.clone(), options.call_id.clone());
        let result = tokio::select! {
            r = handle.await_response() => Some(r),
            _ = cancel.cancelled() => None,
        };
        // The SDK hands notifications to the handler on tasks of their own, so the last
        // progress of a call may be handled after its answer: the token is kept a moment.
        let progress = conn.service.service().progress.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            progress.lock().unwrap().remove(&token_key);
        });
        let response = match result {
            None => {
                let note = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("the user pressed Stop".into()),
                ));
                let _ = peer.send_notification(note.into()).await;
                return Err(CallError::Cancelled);
            }
            Some(r) => r,
        };
        match response {
            Ok(ServerResult::CallToolResult(result)) => {
                let content = serde_json::to_value(&result.content).unwrap_or_default();
                let mut text = content_text(&content);
                if text.is_empty() {
                    if let Some(structured) = &result.structured_content {
                        text = structured.to_string();
                    }
                }
                let (text, cut_from_chars) = cut(text, options.max_result_chars);
                Ok(CallOutcome {
                    text,
                    is_error: result.is_error.unwrap_or(false),
                    cut_from_chars,
                })
            }
            Ok(_) => Err(CallError::Protocol(
                "the server answered with something other than a tool result".into(),
            )),
            Err(ServiceError::McpError(e)) => Err(CallError::Server(e.message.to_string())),
            Err(ServiceError::Timeout { timeout }) => Err(CallError::Timeout(
                timeout.as_secs(),
                conn.garbled.lock().unwrap().take(),
            )),
            Err(ServiceError::TransportClosed) | Err(ServiceError::TransportSend(_)) => {
                // Let the stderr reader catch up with the server's last words.
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(exited(&conn))
            }
            Err(e) => Err(CallError::Protocol(e.to_string())),
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn token_key(token: &rmcp::model::ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

fn to_infos(server: &str, list: Vec<rmcp::model::Tool>) -> Vec<ToolInfo> {
    list.into_iter()
        .map(|t| ToolInfo {
            server: server.to_string(),
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()).unwrap_or_default(),
            input_schema: serde_json::Value::Object((*t.input_schema).clone()),
        })
        .collect()
}

/// The text of a result's content blocks; what is not text is named, not inlined.
fn content_text(content: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    for block in content.as_array().into_iter().flatten() {
        let kind = block.get("type").and_then(|t| t.as_str()).unwrap_or("");
        let text =
            |v: &serde_json::Value, k: &str| v.get(k).and_then(|t| t.as_str()).map(str::to_string);
        let part = match kind {
            "text" => text(block, "text").unwrap_or_default(),
            "image" | "audio" => format!(
                "[{kind} ({}), {} bytes of base64, not shown]",
                text(block, "mimeType").unwrap_or_default(),
                text(block, "data").map_or(0, |d| d.len())
            ),
            "resource" => {
                let res = block.get("resource").cloned().unwrap_or_default();
                text(&res, "text").unwrap_or_else(|| {
                    format!("[resource {}]", text(&res, "uri").unwrap_or_default())
                })
            }
            "resource_link" => format!("[link: {}]", text(block, "uri").unwrap_or_default()),
            other => format!("[{other} content]"),
        };
        parts.push(part);
    }
    parts.join("\n")
}

/// Keeps the first `max` characters of `text`, with a note saying how much was cut.
pub fn cut(text: String, max: usize) -> (String, Option<usize>) {
    let total = text.chars().count();
    if total <= max {
        return (text, None);
    }
    let end = text.char_indices().nth(max).map_or(text.len(), |(i, _)| i);
    let mut kept = text[..end].to_string();
    kept.push_str(&format!(
        "\n[cut: the result was {total} characters; the first {max} are kept]"
    ));
    (kept, Some(total))
}

/// Lines of stdout longer than this are not checked (one that long is a result, not noise).
const CHECKED_LINE_BYTES: usize = 1 << 20;

/// A stdio server's stdout on its way to the SDK, read line by line on the side: a line that
/// is not JSON (invalid UTF-8 included) is dropped by the SDK, so the call waiting for it would
/// end in a bare timeout; the line is noted here and the timeout says what came instead.
struct Watched<R> {
    inner: R,
    line: Vec<u8>,
    overlong: bool,
    note: Arc<Mutex<Option<String>>>,
}

impl<R> Watched<R> {
    fn scan(&mut self, bytes: &[u8]) {
        for chunk in bytes.split_inclusive(|&b| b == b'\n') {
            let ends = chunk.last() == Some(&b'\n');
            let body = if ends {
                &chunk[..chunk.len() - 1]
            } else {
                chunk
            };
            if !self.overlong {
                if self.line.len() + body.len() > CHECKED_LINE_BYTES {
                    self.overlong = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(body);
                }
            }
            if ends {
                if !self.overlong {
                    if let Some(why) = not_json_rpc(&self.line) {
                        *self.note.lock().unwrap() = Some(why);
                    }
                }
                self.line.clear();
                self.overlong = false;
            }
        }
    }
}

/// Why `line` is not a JSON-RPC message, with its start; `None` when it is JSON or blank.
fn not_json_rpc(line: &[u8]) -> Option<String> {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return None;
    }
    let why = match std::str::from_utf8(trimmed) {
        Err(_) => "invalid UTF-8",
        Ok(text) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() => "not JSON",
        Ok(_) => return None,
    };
    let start: String = String::from_utf8_lossy(trimmed).chars().take(120).collect();
    Some(format!(
        "It sent a line that is not JSON-RPC ({why}): {start}"
    ))
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &poll {
            this.scan(&buf.filled()[before..]);
        }
        poll
    }
}

/// A stdio server's process group (its id is the server's pid). Killed once: a second signal
/// could reach a later group that reuses the id.
struct ProcessGroup(Option<i32>, std::sync::atomic::AtomicBool);

impl ProcessGroup {
    fn new(pgid: Option<i32>) -> ProcessGroup {
        ProcessGroup(pgid, std::sync::atomic::AtomicBool::new(false))
    }

    fn kill(&self) {
        if let Some(pgid) = self.0 {
            if self.1.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            // SAFETY: killpg only sends a signal; the group is the server's own.
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > STDERR_TAIL_BYTES {
            let drop_n = self.0.len() - STDERR_TAIL_BYTES;
            self.0.drain(..drop_n);
        }
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0).trim().to_string()
    }
}

struct Handler {
    server: String,
    tools: Arc<Mutex<Vec<ToolInfo>>>,
    /// Progress token (as JSON) → the call id it reports for.
    progress: Arc<Mutex<HashMap<String, String>>>,
    events: UnboundedSender<HubEvent>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("gemma-desk", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let call = self
            .progress
            .lock()
            .unwrap()
            .get(&token_key(&params.progress_token))
            .cloned();
        if let Some(call_id) = call {
            let _ = self.events.send(HubEvent::Progress {
                call_id,
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        if let Ok(list) = context.peer.list_all_tools().await {
            let infos = to_infos(&self.server, list);
            let n = infos.len();
            *self.tools.lock().unwrap() = infos;
            let _ = self.events.send(HubEvent::ToolsChanged {
                server: self.server.clone(),
                tools: n,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_whole_characters_and_says_how_much() {
        let (kept, total) = cut("héllo wörld".to_string(), 4);
        assert_eq!(
            kept,
            "héll\n[cut: the result was 11 characters; the first 4 are kept]"
        );
        assert_eq!(total, Some(11));
        assert_eq!(cut("short".into(), 10), ("short".to_string(), None));
    }

    #[test]
    fn lines_that_are_not_json_rpc_are_noted_across_reads() {
        let note = Arc::new(Mutex::new(None));
        let mut w = Watched {
            inner: (),
            line: Vec::new(),
            overlong: false,
            note: note.clone(),
        };
        w.scan(b"{\"jsonrpc\":\"2.0\",");
        w.scan(b"\"id\":1}\n\n");
        assert_eq!(*note.lock().unwrap(), None);
        w.scan(b"{\"text\":\"\xff\xfe\"}\n");
        assert_eq!(
            note.lock().unwrap().take().unwrap(),
            "It sent a line that is not JSON-RPC (invalid UTF-8): {\"text\":\"\u{fffd}\u{fffd}\"}"
        );
        w.scan(b"Debug: listening\n");
        assert!(note
            .lock()
            .unwrap()
            .take()
            .unwrap()
            .contains("(not JSON): Debug: listening"));
    }

    #[test]
    fn stderr_tail_keeps_the_last_bytes_only() {
        let mut tail = Tail::default();
        for _ in 0..10_000 {
            tail.push(b"line of noise\n");
        }
        tail.push(b"the real error");
        assert!(tail.0.len() <= STDERR_TAIL_BYTES);
        assert!(tail.text().ends_with("the real error"));
    }
}
