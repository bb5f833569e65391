//! Settings → Local API end to end without a window: switched on through the app's own
//! state, called over HTTP with a plain client, on the tiny fixture and the app's one engine.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use model_store::HfCache;
use serde_json::{json, Value};

use crate::chat::{GenerationEvent, SendRequest};
use crate::data_dir::DataDir;
use crate::error::Error;
use crate::events::recorded::{Recorded, Recorder};
use crate::local_api::{LocalApiChange, LocalApiStatus};
use crate::settings::Settings;
use crate::state::AppState;

fn fixture() -> PathBuf {
    let root = std::env::var_os("GEMMA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/out/fixtures"));
    root.join("tiny")
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn open(data_dir: &std::path::Path) -> (AppState, Arc<Recorder>) {
    let events = Arc::new(Recorder::default());
    let state = AppState::open(
        DataDir::new(data_dir.to_path_buf()),
        HfCache::none(),
        "http://127.0.0.1:9".into(),
        events.clone(),
    )
    .unwrap();
    Settings::set_faster_answers(&state.store, false).unwrap();
    (state, events)
}

fn on(port: u16) -> LocalApiChange {
    LocalApiChange {
        enabled: true,
        port: port.into(),
        allowed_origins: Vec::new(),
        verbose: false,
        parallel: 4,
    }
}

/// An HTTP/1.1 answer: status and body (chunked bodies joined).
struct Reply {
    status: u16,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn code(&self) -> Value {
        self.json()["error"]["code"].clone()
    }
}

/// Writes a request the way a plain client does and returns the open connection.
fn open_request(port: u16, method: &str, path: &str, key: &str, body: Option<&Value>) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n\
         User-Agent: app-test/1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    (&stream).write_all(request.as_bytes()).unwrap();
    stream
}

fn request(port: u16, method: &str, path: &str, key: &str, body: Option<&Value>) -> Reply {
    let mut raw = String::new();
    open_request(port, method, path, key, body)
        .read_to_string(&mut raw)
        .unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_owned()
    };
    Reply { status, body }
}

fn unchunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    out
}

fn chat(text: &str, max_tokens: usize) -> Value {
    json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

fn key(status: &LocalApiStatus) -> String {
    status.key.clone().expect("a key once switched on")
}

/// Sends `text` from the window (greedy, at most `max_tokens`): its generation id.
fn send_from_window(state: &AppState, text: &str, max_tokens: u32) -> u64 {
    let settings = Settings {
        max_tokens,
        temperature: 0.0,
        ..Settings::default()
    };
    state
        .chat
        .send(
            SendRequest {
                conversation_id: None,
                text: text.into(),
                attachment_ids: vec![],
                system_prompt: None,
            },
            &settings,
        )
        .unwrap()
        .generation_id
}

/// Waits (up to `within`) until the window's generation `id` is done: when it was seen done.
fn window_done(events: &Recorder, id: u64, within: Duration) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        let done = events.all().iter().any(|e| {
            matches!(e, Recorded::Generation(GenerationEvent::Done { generation_id, .. })
                if *generation_id == id)
        });
        if done {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "the window's answer never ended");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn switched_on_in_settings_it_answers_with_the_key_and_refuses_a_busy_port_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let (state, events) = open(dir.path());
    let api = &state.local_api;
    let off = api.status();
    assert!(!off.enabled && !off.running, "off by default: {off:?}");
    assert_eq!((off.port, off.key.clone()), (7341, None));

    // Out of range or a bad origin: refused in words, nothing changes.
    for port in [80, 70_000] {
        let change = LocalApiChange {
            port,
            ..on(free_port())
        };
        let Err(Error::Invalid(message)) = api.change(change) else {
            panic!("port {port} accepted");
        };
        assert!(message.contains("between 1024 and 65535"), "{message}");
    }
    let bad_origin = LocalApiChange {
        allowed_origins: vec!["https://*.example.com".into()],
        ..on(free_port())
    };
    assert!(matches!(api.change(bad_origin), Err(Error::Invalid(m)) if m.contains("wildcard")));
    for parallel in [0, 9] {
        let change = LocalApiChange {
            parallel,
            ..on(free_port())
        };
        assert!(
            matches!(api.change(change), Err(Error::Invalid(m)) if m.contains("between 1 and 8")),
            "{parallel} answers at once accepted"
        );
    }
    assert_eq!(api.status(), off);

    // On: a key is generated, and the model answers once loaded.
    let port = free_port();
    let status = api
        .change(LocalApiChange {
            allowed_origins: vec!["http://localhost:3000/".into(), " ".into()],
            ..on(port)
        })
        .unwrap();
    assert!(status.running, "{status:?}");
    assert_eq!(status.address, format!("http://127.0.0.1:{port}/v1"));
    assert_eq!(status.allowed_origins, ["http://localhost:3000"]);
    let key = key(&status);
    assert!(key.starts_with("gd-") && key.len() > 40);
    let unloaded = request(
        port,
        "POST",
        "/v1/chat/completions",
        &key,
        Some(&chat("Hi", 2)),
    );
    assert_eq!(
        (unloaded.status, unloaded.code()),
        (503, json!("model_not_loaded"))
    );
    state.models.choose(&fixture()).unwrap();
    assert_eq!(api.status().model_id.as_deref(), Some("tiny"));
    let answer = request(
        port,
        "POST",
        "/v1/chat/completions",
        &key,
        Some(&chat("Hi", 3)),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["model"], "tiny");
    let refused = request(port, "GET", "/v1/models", "gd-wrong-key-0123456789", None);
    assert_eq!(refused.status, 401);

    // The request log, pushed as each response ends (the client may have read a whole body
    // a moment before the server is done with it: entries are found, not counted from the end).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (refused_entry, answered) = loop {
        let log = api.log();
        let refused = log
            .iter()
            .find(|e| e.path == "/v1/models" && e.status == 401)
            .cloned();
        let answered = log
            .iter()
            .find(|e| e.path == "/v1/chat/completions" && e.status == 200)
            .cloned();
        if let (Some(refused), Some(answered)) = (refused, answered) {
            break (refused, answered);
        }
        assert!(
            Instant::now() < deadline,
            "the log lacks a request: {log:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(refused_entry.method, "GET");
    assert_eq!(answered.client, "app-test/1");
    assert!(answered.completion_tokens.is_some_and(|n| n > 0));
    assert!(events
        .all()
        .iter()
        .any(|e| matches!(e, Recorded::ApiRequest(r) if r.status == 401)));
    assert!(
        events
            .all()
            .iter()
            .any(|e| matches!(e, Recorded::LocalApi(s) if s.running && s.model_id.is_some())),
        "the panel is told when the model it serves changes"
    );

    // A port another program holds: an error in words, never another port.
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = holder.local_addr().unwrap().port();
    let status = api.change(on(busy)).unwrap();
    assert!(status.enabled && !status.running, "{status:?}");
    assert_eq!(status.port, busy);
    let error = status.error.unwrap();
    assert!(
        error.contains(&format!("port {busy}")) && error.contains("already in use"),
        "{error}"
    );
    drop(holder);
    let status = api.change(on(port)).unwrap();
    assert!(status.running && status.error.is_none(), "{status:?}");

    // Off: nothing listens.
    let status = api
        .change(LocalApiChange {
            enabled: false,
            ..on(port)
        })
        .unwrap();
    assert!(!status.running);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn a_regenerated_key_replaces_the_old_one_and_the_setting_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _) = open(dir.path());
    let port = free_port();
    let first = key(&state.local_api.change(on(port)).unwrap());
    assert_eq!(request(port, "GET", "/v1/models", &first, None).status, 200);
    let status = state.local_api.regenerate_key().unwrap();
    let second = key(&status);
    assert_ne!(first, second);
    let old = request(port, "GET", "/v1/models", &first, None);
    assert_eq!((old.status, old.code()), (401, json!("invalid_api_key")));
    assert_eq!(
        request(port, "GET", "/v1/models", &second, None).status,
        200
    );
    state
        .local_api
        .change(LocalApiChange {
            verbose: true,
            parallel: 2,
            ..on(port)
        })
        .unwrap();
    drop(state);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "stopped with the app"
    );

    // Started again on the same data folder: on, same port and key, before any model loads.
    let (state, _) = open(dir.path());
    let status = state.local_api.status();
    assert!(
        status.enabled && status.running && status.verbose && status.parallel == 2,
        "{status:?}"
    );
    assert_eq!(
        (status.port, status.key.as_deref()),
        (port, Some(second.as_str()))
    );
    let waiting = request(
        port,
        "POST",
        "/v1/chat/completions",
        &second,
        Some(&chat("Hi", 2)),
    );
    assert_eq!(
        (waiting.status, waiting.code()),
        (503, json!("model_not_loaded"))
    );
    state.models.choose(&fixture()).unwrap();
    let answer = request(
        port,
        "POST",
        "/v1/chat/completions",
        &second,
        Some(&chat("Hi", 2)),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let logged = state.local_api.log();
    assert!(
        logged
            .last()
            .unwrap()
            .body
            .as_deref()
            .is_some_and(|b| b.contains("\"Hi\"")),
        "verbose keeps the body: {logged:?}"
    );

    // Unloading: 503 again; loading again: answers resume.
    state.models.forget().unwrap();
    let gone = request(
        port,
        "POST",
        "/v1/chat/completions",
        &second,
        Some(&chat("Hi", 2)),
    );
    assert_eq!((gone.status, gone.code()), (503, json!("model_not_loaded")));
    state.models.choose(&fixture()).unwrap();
    let back = request(
        port,
        "POST",
        "/v1/chat/completions",
        &second,
        Some(&chat("Hi", 2)),
    );
    assert_eq!(back.status, 200, "{}", back.body);
}

#[test]
fn the_windows_chat_runs_before_api_requests_already_queued() {
    let dir = tempfile::tempdir().unwrap();
    let (state, events) = open(dir.path());
    state.models.choose(&fixture()).unwrap();
    let port = free_port();
    // One answer at a time: every place is taken by the first request.
    let change = LocalApiChange {
        parallel: 1,
        ..on(port)
    };
    let key = key(&state.local_api.change(change).unwrap());

    // One API answer running (a long one) and one waiting behind it.
    let mut long = chat("Write forever.", 2000);
    long["stream"] = json!(true);
    let running = open_request(port, "POST", "/v1/chat/completions", &key, Some(&long));
    let mut running = BufReader::new(running);
    let mut line = String::new();
    while !line.starts_with("data: {") {
        line.clear();
        running.read_line(&mut line).unwrap();
    }
    let queued = {
        let key = key.clone();
        std::thread::spawn(move || {
            let reply = request(
                port,
                "POST",
                "/v1/chat/completions",
                &key,
                Some(&chat("Hi", 4)),
            );
            (reply, Instant::now())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while state.local_api.status().answering < 2 {
        assert!(Instant::now() < deadline, "the second request never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));

    // The window sends; then the running API answer's client leaves.
    let sent = send_from_window(&state, "Hello from the window", 4);
    drop(running);
    let window_done = window_done(&events, sent, Duration::from_secs(120));
    let (reply, api_done) = queued.join().unwrap();
    assert!(
        events
            .all()
            .iter()
            .any(|e| matches!(e, Recorded::ApiActivity(a) if a.answering == 2)),
        "the window is told the API is busy"
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        window_done < api_done,
        "the window's answer ended after the API request queued before it"
    );
}

#[test]
fn four_api_streams_and_the_windows_answer_are_written_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (state, events) = open(dir.path());
    state.models.choose(&fixture()).unwrap();
    let port = free_port();
    let status = state.local_api.change(on(port)).unwrap();
    assert_eq!((status.parallel, status.max_parallel), (4, 8));
    let key = key(&status);

    // Four API streams, each under way.
    const TOKENS: u64 = 300;
    let mut body = chat("Write forever.", TOKENS as usize);
    body["stream"] = json!(true);
    body["stream_options"] = json!({ "include_usage": true });
    let mut streams: Vec<BufReader<TcpStream>> = (0..4)
        .map(|_| {
            BufReader::new(open_request(
                port,
                "POST",
                "/v1/chat/completions",
                &key,
                Some(&body),
            ))
        })
        .collect();
    let mut line = String::new();
    for stream in &mut streams {
        line.clear();
        while !line.starts_with("data: {") {
            line.clear();
            stream.read_line(&mut line).unwrap();
        }
    }

    // The window's answer is written beside them and ends while they all still run.
    let sent = send_from_window(&state, "Hello from the window", 6);
    window_done(&events, sent, Duration::from_secs(120));
    assert_eq!(
        state.local_api.status().answering,
        4,
        "the API streams were still being written"
    );

    // Each stream goes on to its end with its own usage.
    for stream in &mut streams {
        let mut rest = String::new();
        stream.read_to_string(&mut rest).unwrap();
        let usage = rest
            .lines()
            .rev()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find_map(|chunk| chunk.get("usage").filter(|u| !u.is_null()).cloned())
            .expect("a usage chunk");
        assert_eq!(usage["completion_tokens"].as_u64(), Some(TOKENS), "{usage}");
        assert_eq!(
            usage["total_tokens"].as_u64().unwrap(),
            usage["prompt_tokens"].as_u64().unwrap() + TOKENS
        );
        assert!(rest.contains("data: [DONE]"));
    }
}
