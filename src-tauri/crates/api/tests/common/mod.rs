//! A server on 127.0.0.1:0 over the tiny fixture, and a plain HTTP/1.1 client that writes
//! exactly the bytes a test asks for (a missing Host, a foreign Origin, a `text/plain` body)
//! and reads SSE frames as they arrive.
#![allow(dead_code)] // each test file uses its own subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use api::{ApiConfig, ApiKey, ServedModel, Server};
use engine::image::SoftTokenBudget;
use engine::sampler::SamplerConfig;
use engine::worker::Engine;
use gemma::LoadOptions;
use serde_json::Value;

pub const KEY: &str = "test-key-0123456789abcdef";
pub const MODEL: &str = "tiny";

#[path = "../../../fixture_dir.rs"]
mod fixture_dir;
pub use fixture_dir::fixture;

/// One engine for the whole test binary, the tiny model loaded in float32 (fastest on CPU).
pub fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let engine = Engine::spawn();
            let options = LoadOptions {
                dtype: Some(mlx_rs::Dtype::Float32),
                ..LoadOptions::default()
            };
            let info = engine
                .load(&fixture(), options)
                .expect("loading the fixture");
            assert!(info.vision, "the tiny fixture has a vision tower");
            Arc::new(engine)
        })
        .clone()
}

/// The tiny fixture as the test servers serve it.
pub fn served_model() -> ServedModel {
    ServedModel {
        id: MODEL.into(),
        aliases: vec!["tiny-alias".into()],
        vision: true,
        audio: true,
        context_window: 4096,
        sampler: SamplerConfig::greedy(),
        image_budget: SoftTokenBudget::T70,
    }
}

/// A server over the shared engine; `configure` changes the defaults (port 0, the test key).
pub struct TestServer {
    runtime: tokio::runtime::Runtime,
    server: Option<Server>,
    pub port: u16,
}

impl TestServer {
    pub fn start(configure: impl FnOnce(&mut ApiConfig)) -> Self {
        let mut config = ApiConfig::new(ApiKey::new(KEY).unwrap(), served_model());
        config.port = 0;
        configure(&mut config);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime
            .block_on(Server::start(engine(), config))
            .expect("starting the server");
        let port = server.address().port();
        Self {
            runtime,
            server: Some(server),
            port,
        }
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }

    /// Waits (up to a minute) for the generation log to hold an entry `accept` takes.
    pub fn wait_for_finished(&self, accept: impl Fn(&api::Finished) -> bool) -> api::Finished {
        for _ in 0..600 {
            if let Some(f) = self.server().finished().into_iter().find(|f| accept(f)) {
                return f;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no such generation ended: {:?}", self.server().finished());
    }

    /// Waits (up to a minute) until nothing is queued or running.
    pub fn wait_idle(&self) {
        for _ in 0..600 {
            if self.server().in_flight() == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("requests still in flight: {}", self.server().in_flight());
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = self.runtime.block_on(server.shutdown());
        }
    }
}

/// A request, written out byte for byte.
#[derive(Clone)]
pub struct Request {
    method: &'static str,
    path: String,
    /// `None`: no Host header; `Some(None)`: ours (`127.0.0.1:PORT`).
    host: Option<Option<String>>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    pub fn get(path: &str) -> Self {
        Self::new("GET", path)
    }

    pub fn post(path: &str, body: &Value) -> Self {
        Self::new("POST", path)
            .header("content-type", "application/json")
            .body(body.to_string().into_bytes())
    }

    pub fn new(method: &'static str, path: &str) -> Self {
        Self {
            method,
            path: path.to_owned(),
            host: Some(None),
            headers: vec![("authorization".into(), format!("Bearer {KEY}"))],
            body: Vec::new(),
        }
    }

    /// Host as given (`None`: no Host header at all). By default `127.0.0.1:PORT`.
    pub fn host(mut self, host: Option<&str>) -> Self {
        self.host = host.map(|h| Some(h.to_owned()));
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    /// Connects and writes the request, without reading anything back.
    pub fn open_only(&self, port: u16) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut head = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        match &self.host {
            Some(None) => head.push_str(&format!("Host: 127.0.0.1:{port}\r\n")),
            Some(Some(h)) => head.push_str(&format!("Host: {h}\r\n")),
            None => {}
        }
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("Connection: close\r\n\r\n");
        let mut writer = stream.try_clone().unwrap();
        writer.write_all(head.as_bytes()).unwrap();
        writer.write_all(&self.body).unwrap();
        stream
    }

    /// Connects and writes the request; the response is read from the returned reader.
    pub fn open(&self, port: u16) -> Response {
        Response::read_head(BufReader::new(self.open_only(port)))
    }

    /// Sends and reads the whole response.
    pub fn send(&self, port: u16) -> Reply {
        let mut response = self.open(port);
        let body = response.read_body();
        Reply {
            status: response.status,
            headers: response.headers.clone(),
            body,
        }
    }
}

/// A response being read.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    length: Option<usize>,
    /// Body bytes read but not yet split into SSE events.
    pending: String,
    ended: bool,
}

impl Response {
    fn read_head(mut reader: BufReader<TcpStream>) -> Self {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let mut headers = Vec::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (name, value) = l.split_once(':').unwrap();
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let chunked = get("transfer-encoding").is_some_and(|v| v.contains("chunked"));
        let length = get("content-length").and_then(|v| v.parse().ok());
        Self {
            status,
            headers,
            reader,
            chunked,
            length,
            pending: String::new(),
            ended: false,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The next piece of the body as it arrives (`None` at its end).
    fn read_piece(&mut self) -> Option<Vec<u8>> {
        if self.ended {
            return None;
        }
        if self.chunked {
            let mut size = String::new();
            if self.reader.read_line(&mut size).ok()? == 0 {
                self.ended = true;
                return None;
            }
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut piece = vec![0; size + 2];
            self.reader.read_exact(&mut piece).ok()?;
            piece.truncate(size);
            if size == 0 {
                self.ended = true;
                return None;
            }
            Some(piece)
        } else {
            self.ended = true;
            let mut body = Vec::new();
            match self.length {
                Some(n) => {
                    body.resize(n, 0);
                    self.reader.read_exact(&mut body).unwrap();
                }
                None => {
                    self.reader.read_to_end(&mut body).unwrap();
                }
            }
            Some(body)
        }
    }

    pub fn read_body(&mut self) -> Vec<u8> {
        let mut body = self.pending.clone().into_bytes();
        self.pending.clear();
        while let Some(piece) = self.read_piece() {
            body.extend(piece);
        }
        body
    }

    /// The next SSE event's raw text (without the blank line that ends it).
    pub fn next_event(&mut self) -> Option<String> {
        loop {
            if let Some(at) = self.pending.find("\n\n") {
                let event = self.pending[..at].to_owned();
                self.pending.drain(..at + 2);
                return Some(event);
            }
            let piece = self.read_piece()?;
            self.pending.push_str(std::str::from_utf8(&piece).unwrap());
        }
    }

    /// Every remaining SSE event.
    pub fn events(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.next_event()).collect()
    }
}

/// A whole response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The error envelope's `code`, checking the envelope's shape on the way.
    pub fn error_code(&self) -> Value {
        let body = self.json();
        let error = &body["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
        assert!(error["type"].is_string(), "{body}");
        assert!(
            error.get("param").is_some() && error.get("code").is_some(),
            "{body}"
        );
        error["code"].clone()
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A chat request for the tiny model.
pub fn chat(text: &str, max_tokens: usize) -> Value {
    serde_json::json!({
        "model": MODEL,
        "messages": [{ "role": "user", "content": text }],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

/// A small PNG as a data URL.
pub fn png_data_url(width: u32, height: u32) -> String {
    use base64::Engine as _;
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8])
    });
    let mut png = Vec::new();
    image::DynamicImage::ImageRgb8(image)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}
