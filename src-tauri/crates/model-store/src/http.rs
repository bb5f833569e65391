//! Blocking HTTP GETs that can be cancelled at any moment.
//!
//! The request runs on its own thread and hands the body over in chunks through a small
//! channel; the caller polls that channel and the cancel flag every few tens of milliseconds.
//! A socket read cannot be interrupted, so after a cancel the thread finishes on its own: at
//! the next chunk, or when the stall timeout ends a silent connection. It never touches files.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::thread;
use std::time::Duration;

use ureq::Agent;

use super::error::DownloadError;

/// How often a waiting caller looks at its cancel flag.
const POLL: Duration = Duration::from_millis(50);
/// Bytes per read; the channel holds a few of these.
const CHUNK: usize = 64 * 1024;
const CHUNKS_IN_FLIGHT: usize = 8;

/// An HTTP client with the download's timeouts.
#[derive(Clone)]
pub(crate) struct Client {
    agent: Agent,
    stall: Duration,
}

/// The start of an answer; its body follows through [`Response::next_chunk`].
pub(crate) struct Response {
    pub status: u16,
    /// Start of `Content-Range: bytes START-END/TOTAL`, when the server sent one.
    pub range_start: Option<u64>,
    /// The `Link: <…>; rel="next"` target (the hub pages long listings).
    pub next_page: Option<String>,
    pub url: String,
    pieces: Receiver<Piece>,
    stall: Duration,
}

enum Piece {
    Head {
        status: u16,
        content_range: Option<String>,
        link: Option<String>,
    },
    Data(Vec<u8>),
    End,
    Failed(ureq::Error),
}

impl Client {
    /// `connect` bounds name resolution and connecting; `stall` bounds every read and write.
    pub fn new(connect: Duration, stall: Duration) -> Self {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_resolve(Some(connect))
            .timeout_connect(Some(connect))
            .timeout_per_read(Some(stall))
            .timeout_per_write(Some(stall))
            .user_agent(concat!("gemma-desk/", env!("CARGO_PKG_VERSION")))
            .build();
        Self {
            agent: config.into(),
            stall,
        }
    }

    /// Sends `GET url` (from byte `from` on, when it is not 0), following redirects, and waits
    /// for the answer's head. Any status comes back as a `Response`.
    pub fn get(
        &self,
        url: &str,
        from: u64,
        cancel: &AtomicBool,
    ) -> Result<Response, DownloadError> {
        let (sender, pieces) = sync_channel(CHUNKS_IN_FLIGHT);
        let agent = self.agent.clone();
        let target = url.to_string();
        thread::Builder::new()
            .name("model-download".into())
            .spawn(move || fetch(&agent, &target, from, &sender))
            .map_err(|e| DownloadError::Network {
                host: host_of(url).into(),
                message: format!("cannot start the download thread: {e}"),
            })?;
        let mut response = Response {
            status: 0,
            range_start: None,
            next_page: None,
            url: url.to_string(),
            pieces,
            stall: self.stall,
        };
        match response.next_piece(cancel, &mut || {})? {
            Piece::Head {
                status,
                content_range,
                link,
            } => {
                response.status = status;
                response.range_start = content_range.as_deref().and_then(range_start);
                response.next_page = link.as_deref().and_then(next_link);
                Ok(response)
            }
            _ => Err(response.interrupted()),
        }
    }
}

impl Response {
    /// The next piece of the body, or `None` at its end. `idle` runs while waiting.
    pub fn next_chunk(
        &mut self,
        cancel: &AtomicBool,
        idle: &mut dyn FnMut(),
    ) -> Result<Option<Vec<u8>>, DownloadError> {
        match self.next_piece(cancel, idle)? {
            Piece::Data(data) => Ok(Some(data)),
            Piece::End => Ok(None),
            Piece::Head { .. } => Err(self.interrupted()),
            Piece::Failed(e) => Err(network_error(e, &self.url, self.stall)),
        }
    }

    /// The whole body, up to `limit` bytes.
    pub fn read_all(
        &mut self,
        limit: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<u8>, DownloadError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.next_chunk(cancel, &mut || {})? {
            body.extend_from_slice(&chunk);
            if body.len() > limit {
                return Err(DownloadError::Network {
                    host: host_of(&self.url).into(),
                    message: format!("the answer to {} is unexpectedly large", self.url),
                });
            }
        }
        Ok(body)
    }

    /// The error for a status this download cannot use.
    pub fn status_error(&self) -> DownloadError {
        DownloadError::Http {
            status: self.status,
            url: self.url.clone(),
        }
    }

    fn next_piece(
        &mut self,
        cancel: &AtomicBool,
        idle: &mut dyn FnMut(),
    ) -> Result<Piece, DownloadError> {
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(DownloadError::Cancelled);
            }
            match self.pieces.recv_timeout(POLL) {
                Ok(Piece::Failed(e)) => return Err(network_error(e, &self.url, self.stall)),
                Ok(piece) => return Ok(piece),
                Err(RecvTimeoutError::Timeout) => idle(),
                Err(RecvTimeoutError::Disconnected) => return Err(self.interrupted()),
            }
        }
    }

    fn interrupted(&self) -> DownloadError {
        DownloadError::Interrupted {
            host: host_of(&self.url).into(),
        }
    }
}

/// The request thread: head first, then the body chunk by chunk. Stops as soon as the
/// receiver is gone.
fn fetch(agent: &Agent, url: &str, from: u64, out: &SyncSender<Piece>) {
    let mut request = agent.get(url);
    if from > 0 {
        request = request.header("Range", format!("bytes={from}-"));
    }
    let response = match request.call() {
        Ok(response) => response,
        Err(e) => {
            let _ = out.send(Piece::Failed(e));
            return;
        }
    };
    let header = |name: &str| {
        let value = response.headers().get(name)?;
        value.to_str().ok().map(str::to_string)
    };
    let head = Piece::Head {
        status: response.status().as_u16(),
        content_range: header("content-range"),
        link: header("link"),
    };
    if out.send(head).is_err() {
        return;
    }
    let mut body = response.into_body().into_reader();
    loop {
        let mut buffer = vec![0; CHUNK];
        let piece = match body.read(&mut buffer) {
            Ok(0) => Piece::End,
            Ok(n) => {
                buffer.truncate(n);
                Piece::Data(buffer)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => Piece::Failed(ureq::Error::from(e)),
        };
        let last = !matches!(piece, Piece::Data(_));
        if out.send(piece).is_err() || last {
            return;
        }
    }
}

/// A failed request or read, in words: unreachable, stalled, interrupted or something else.
fn network_error(error: ureq::Error, url: &str, stall: Duration) -> DownloadError {
    use io::ErrorKind as Kind;
    use ureq::Timeout;

    let host = host_of(url).to_string();
    match error {
        ureq::Error::HostNotFound
        | ureq::Error::ConnectionFailed
        | ureq::Error::Timeout(Timeout::Resolve | Timeout::Connect) => {
            DownloadError::Unreachable { host }
        }
        ureq::Error::Timeout(_) => DownloadError::Stalled {
            host,
            seconds: stall.as_secs(),
        },
        ureq::Error::Io(e) => match e.kind() {
            Kind::ConnectionRefused
            | Kind::NotConnected
            | Kind::AddrNotAvailable
            | Kind::NetworkUnreachable
            | Kind::HostUnreachable
            | Kind::NetworkDown => DownloadError::Unreachable { host },
            Kind::TimedOut | Kind::WouldBlock => DownloadError::Stalled {
                host,
                seconds: stall.as_secs(),
            },
            Kind::UnexpectedEof
            | Kind::ConnectionReset
            | Kind::ConnectionAborted
            | Kind::BrokenPipe => DownloadError::Interrupted { host },
            _ => DownloadError::Network {
                host,
                message: e.to_string(),
            },
        },
        ureq::Error::TooManyRedirects => DownloadError::Network {
            host,
            message: format!("too many redirects for {url}"),
        },
        other => DownloadError::Network {
            host,
            message: other.to_string(),
        },
    }
}

/// `https://host:port/path` → `host:port`.
pub(crate) fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or(rest)
}

/// `bytes 100-999/1000` → 100.
fn range_start(value: &str) -> Option<u64> {
    let range = value.trim().strip_prefix("bytes")?.trim_start();
    range.split('-').next()?.trim().parse().ok()
}

/// The `rel="next"` target of a `Link` header.
fn next_link(value: &str) -> Option<String> {
    value.split(',').find_map(|link| {
        let (target, params) = link.split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"));
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        is_next.then(|| target.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_parsed() {
        assert_eq!(range_start("bytes 100-999/1000"), Some(100));
        assert_eq!(range_start("bytes 0-0/*"), Some(0));
        assert_eq!(range_start("items 1-2"), None);
        assert_eq!(
            next_link(r#"<https://hf.co/api/x?cursor=abc>; rel="next""#).as_deref(),
            Some("https://hf.co/api/x?cursor=abc")
        );
        assert_eq!(next_link(r#"<https://hf.co/a>; rel="prev""#), None);
        assert_eq!(
            host_of("https://huggingface.co/api/models"),
            "huggingface.co"
        );
        assert_eq!(host_of("http://127.0.0.1:8080"), "127.0.0.1:8080");
    }
}
