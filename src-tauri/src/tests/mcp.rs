//! Settings → Tools against a real MCP server nobody here wrote
//! (`@modelcontextprotocol/server-everything`, installed pinned by `make mcp-test-deps` under
//! tests/mcp/): add, confirm and enable, ready with its tools, a tool switched off and still off
//! after a restart, remove; the import of a `claude_desktop_config.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ::mcp::{ServerConfig, ServerState, TransportConfig};

use super::*;
use crate::mcp_servers::ServerView;

/// The installed server-everything; panics with the command that installs it.
fn everything_entry() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.exists(),
        "{} is missing: run `make mcp-test-deps` (it installs the pinned test servers)",
        path.display()
    );
    path.canonicalize().unwrap().display().to_string()
}

/// The server run in `cwd`: tests run side by side, each finds its own process by its folder.
fn everything(cwd: &std::path::Path) -> ServerConfig {
    ServerConfig {
        name: "everything".into(),
        enabled: true,
        transport: TransportConfig::Stdio {
            command: "node".into(),
            args: vec![everything_entry(), "stdio".into()],
            env: BTreeMap::from([("API_KEY".to_string(), "s3cret".to_string())]),
            cwd: Some(cwd.to_path_buf()),
        },
    }
}

fn view(state: &AppState, name: &str) -> Option<ServerView> {
    state.mcp.list().into_iter().find(|s| s.config.name == name)
}

fn ready_tools(state: &AppState, name: &str) -> usize {
    poll(&format!("{name} ready"), 60, || {
        match view(state, name)?.state {
            ServerState::Ready { tools } => Some(tools),
            ServerState::Failed {
                error, stderr_tail, ..
            } => {
                panic!("{name} failed: {error}; stderr: {stderr_tail}")
            }
            _ => None,
        }
    })
}

/// The processes of server-everything running in `cwd` (Linux: read from /proc).
fn pids_of(entry: &str, cwd: &std::path::Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(entry))
                && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|d| d == cwd)
        })
        .collect()
}

#[test]
fn a_server_added_confirmed_and_enabled_is_ready_and_its_tool_switch_outlives_a_restart() {
    let harness = Harness::new();
    let state = &harness.state;
    let cwd = harness._dir.path().canonicalize().unwrap();

    // Added switched on, it still waits for its command line to be confirmed: nothing runs.
    let added = state.mcp.save_server(everything(&cwd), None).unwrap();
    assert!(!added.config.enabled && !added.confirmed);
    assert!(added.command_line.starts_with("node ") && added.command_line.ends_with(" stdio"));
    assert_eq!(added.state, ServerState::Stopped);
    let refused = state.mcp.set_enabled("everything", true, None).unwrap_err();
    assert!(
        refused.to_string().contains(&added.command_line),
        "{refused}"
    );
    let wrong = state
        .mcp
        .set_enabled("everything", true, Some("node other.js"));
    assert!(wrong.is_err());
    assert_eq!(
        view(state, "everything").unwrap().state,
        ServerState::Stopped
    );

    let on = state
        .mcp
        .set_enabled("everything", true, Some(&added.command_line))
        .unwrap();
    assert!(on.config.enabled && on.confirmed);
    let n = ready_tools(state, "everything");
    assert!(n >= 5, "server-everything listed {n} tools");
    // The window heard it start and become ready.
    let pushed: Vec<ServerState> = harness
        .events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            Recorded::McpServer(v) if v.config.name == "everything" => Some(v.state),
            _ => None,
        })
        .collect();
    assert!(pushed.contains(&ServerState::Starting), "{pushed:?}");
    assert!(
        pushed.contains(&ServerState::Ready { tools: n }),
        "{pushed:?}"
    );

    let tools = state.mcp.tools("everything");
    assert_eq!(tools.len(), n);
    let echo = tools
        .iter()
        .find(|t| t.name == "echo")
        .expect("an echo tool");
    assert!(echo.enabled && !echo.description.is_empty());
    assert!(
        echo.input_schema["properties"]["message"].is_object(),
        "{}",
        echo.input_schema
    );

    state
        .mcp
        .set_tool_enabled("everything", "echo", false)
        .unwrap();
    // Quit and start again: the server starts by itself (enabled, confirmed), echo stays off.
    let entry = everything_entry();
    assert!(!pids_of(&entry, &cwd).is_empty(), "the server runs");
    let (state, _events, _dir) = harness.restart();
    let n_again = ready_tools(&state, "everything");
    assert_eq!(n_again, n);
    let tools = state.mcp.tools("everything");
    let off: Vec<&str> = tools
        .iter()
        .filter(|t| !t.enabled)
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(off, ["echo"]);

    // Removed: stopped, gone from the list, and its process with it.
    state.mcp.remove("everything").unwrap();
    assert!(state.mcp.list().is_empty());
    poll("the server's process ends", 10, || {
        pids_of(&entry, &cwd).is_empty().then_some(())
    });
}

#[test]
fn a_claude_desktop_config_is_imported_switched_off_and_an_app_quit_leaves_no_server() {
    let harness = Harness::new();
    let state = &harness.state;
    let cwd = harness._dir.path().canonicalize().unwrap();
    let entry = everything_entry();
    let file = serde_json::json!({
        "mcpServers": {
            "everything": {"command": "node", "args": [entry, "stdio"]},
            "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        },
        "globalShortcut": "Ctrl+Space",
    });
    let imported = state.mcp.import(&file.to_string()).unwrap();
    assert_eq!(imported.added, ["everything", "time"]);
    assert!(imported.skipped.is_empty());
    let list = state.mcp.list();
    assert_eq!(list.len(), 2);
    // Nothing starts on import.
    assert!(list
        .iter()
        .all(|s| !s.config.enabled && s.state == ServerState::Stopped && !s.confirmed));

    // Imported again: the names are taken, nothing changes.
    let again = state.mcp.import(&file.to_string()).unwrap();
    assert!(again.added.is_empty());
    assert_eq!(again.skipped, ["everything", "time"]);
    assert_eq!(state.mcp.list().len(), 2);

    // Not an mcpServers file: a clear error, nothing lost.
    let bad = state.mcp.import("{\"mcpServers\": 3}").unwrap_err();
    assert!(!bad.to_string().is_empty());
    assert_eq!(state.mcp.list().len(), 2);

    // Edited to run in this test's folder: the command line is the same.
    let line = list[0].command_line.clone();
    let mut edited = list[0].config.clone();
    if let TransportConfig::Stdio { cwd: folder, .. } = &mut edited.transport {
        *folder = Some(cwd.clone());
    }
    let saved = state.mcp.save_server(edited, Some("everything")).unwrap();
    assert_eq!(saved.command_line, line);
    state
        .mcp
        .set_enabled("everything", true, Some(&line))
        .unwrap();
    ready_tools(state, "everything");
    assert!(!pids_of(&entry, &cwd).is_empty());
    // The app quits (RunEvent::Exit): no server process is left.
    state.mcp.shutdown();
    poll("the server's process ends", 10, || {
        pids_of(&entry, &cwd).is_empty().then_some(())
    });
}
