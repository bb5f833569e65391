//! What the server keeps about what it did, in memory: the last generations (how tests see that
//! a client that left stopped its answer) and the request log the app shows (time, client,
//! path, status, tokens, milliseconds; the body only when "verbose" is on), pushed to a
//! [`Watcher`] as each request ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use engine::generate::StopReason;

/// Entries kept; older ones are dropped.
const KEPT: usize = 200;

/// How a generation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ended(StopReason),
    Failed(String),
}

/// One generation that has ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub generation_id: u64,
    pub outcome: Outcome,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    /// Whether the client had gone before the end (disconnected).
    pub client_left: bool,
    /// Tokens generated after the client left: how quickly its leaving stopped the engine.
    pub tokens_after_client_left: usize,
}

/// The last [`KEPT`] generations, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<VecDeque<Finished>>>);

impl Log {
    pub fn record(&self, entry: Finished) {
        if let Ok(mut entries) = self.0.lock() {
            if entries.len() == KEPT {
                entries.pop_front();
            }
            entries.push_back(entry);
        }
    }

    pub fn entries(&self) -> Vec<Finished> {
        self.0
            .lock()
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Longest client name (User-Agent) kept, in characters.
const CLIENT_CHARS: usize = 200;
/// Longest request body kept in verbose mode, in bytes (a base64 image is cut short).
const BODY_BYTES: usize = 16 * 1024;

/// One request that has ended (its response written or its client gone).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Milliseconds since the Unix epoch when it arrived.
    pub at_ms: u64,
    /// The client's `User-Agent`, or empty.
    pub client: String,
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub status: u16,
    /// Prompt and generated tokens, for a request that reached the model.
    pub prompt_tokens: Option<usize>,
    pub completion_tokens: Option<usize>,
    /// From arrival to the last byte of the response (or the client leaving).
    pub ms: u64,
    /// The request body as sent (cut at 16 KB), only while verbose is on.
    pub body: Option<String>,
}

/// Told about the server's requests as they come and go: the app shows "API: answering" and
/// the request log with it. Called on the server's threads; keep it quick.
pub trait Watcher: Send + Sync {
    /// A request arrived; `open` requests (POSTs: answers asked for) are being handled now.
    fn started(&self, open: usize);
    /// A request ended; `open` are still being handled.
    fn ended(&self, request: &Request, open: usize);
}

/// The request log: the last [`KEPT`] requests, whether bodies are kept, and who is told.
#[derive(Default)]
pub struct Requests {
    entries: Mutex<VecDeque<Request>>,
    verbose: AtomicBool,
    open: AtomicUsize,
    watcher: Mutex<Option<Arc<dyn Watcher>>>,
    /// Held from a count's change until the watcher is told of it, so the watcher hears the
    /// counts in the order they happened and its last word is the count now (two requests
    /// told from two threads could otherwise arrive swapped: "4" and then a stale "3").
    told: Mutex<()>,
}

impl Requests {
    pub fn set_verbose(&self, on: bool) {
        self.verbose.store(on, Ordering::SeqCst);
    }

    pub fn set_watcher(&self, watcher: Option<Arc<dyn Watcher>>) {
        if let Ok(mut slot) = self.watcher.lock() {
            *slot = watcher;
        }
    }

    /// POST requests being handled now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    pub fn entries(&self) -> Vec<Request> {
        self.entries
            .lock()
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn watcher(&self) -> Option<Arc<dyn Watcher>> {
        self.watcher.lock().ok().and_then(|w| w.clone())
    }

    /// A request arrived: the note its handler fills in and its response's end records.
    pub fn begin(self: &Arc<Self>, method: &str, path: &str, client: &str) -> Note {
        let counted = method == "POST";
        if counted {
            let _in_order = self.told.lock().unwrap_or_else(|e| e.into_inner());
            let open = self.open.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(watcher) = self.watcher() {
                watcher.started(open);
            }
        }
        Note(Arc::new(NoteInner {
            requests: self.clone(),
            started: Instant::now(),
            counted,
            entry: Mutex::new(Some(Request {
                at_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                client: client.chars().take(CLIENT_CHARS).collect(),
                method: method.to_owned(),
                path: path.to_owned(),
                status: 0,
                prompt_tokens: None,
                completion_tokens: None,
                ms: 0,
                body: None,
            })),
        }))
    }

    fn end(&self, mut entry: Request, started: Instant, counted: bool) {
        entry.ms = started.elapsed().as_millis() as u64;
        let _in_order = self.told.lock().unwrap_or_else(|e| e.into_inner());
        let open = if counted {
            self.open.fetch_sub(1, Ordering::SeqCst).saturating_sub(1)
        } else {
            self.open()
        };
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() == KEPT {
                entries.pop_front();
            }
            entries.push_back(entry.clone());
        }
        if let Some(watcher) = self.watcher() {
            watcher.ended(&entry, open);
        }
    }
}

/// One request's entry while it runs; recorded once, when the last clone of it is dropped or
/// [`Note::end`] is called.
#[derive(Clone)]
pub struct Note(Arc<NoteInner>);

struct NoteInner {
    requests: Arc<Requests>,
    started: Instant,
    counted: bool,
    entry: Mutex<Option<Request>>,
}

impl Note {
    fn update(&self, change: impl FnOnce(&mut Request)) {
        if let Ok(mut entry) = self.0.entry.lock() {
            if let Some(entry) = entry.as_mut() {
                change(entry);
            }
        }
    }

    pub fn status(&self, status: u16) {
        self.update(|e| e.status = status);
    }

    pub fn tokens(&self, prompt: usize, completion: usize) {
        self.update(|e| {
            e.prompt_tokens = Some(prompt);
            e.completion_tokens = Some(completion);
        });
    }

    /// Keeps the body when verbose is on.
    pub fn body(&self, body: &[u8]) {
        if !self.0.requests.verbose.load(Ordering::SeqCst) {
            return;
        }
        let cut = &body[..body.len().min(BODY_BYTES)];
        let mut text = String::from_utf8_lossy(cut).into_owned();
        if body.len() > BODY_BYTES {
            text.push('…');
        }
        self.update(|e| e.body = Some(text));
    }

    /// Records the entry now (the response has ended).
    pub fn end(&self) {
        let taken = self.0.entry.lock().ok().and_then(|mut e| e.take());
        if let Some(entry) = taken {
            self.0.requests.end(entry, self.0.started, self.0.counted);
        }
    }
}

impl Drop for NoteInner {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.get_mut().ok().and_then(Option::take) {
            self.requests.end(entry, self.started, self.counted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(String, usize)>>);

    impl Watcher for Seen {
        fn started(&self, open: usize) {
            self.0.lock().unwrap().push(("started".into(), open));
        }
        fn ended(&self, request: &Request, open: usize) {
            self.0.lock().unwrap().push((request.path.clone(), open));
        }
    }

    #[test]
    fn requests_from_many_threads_are_told_in_the_order_their_counts_changed() {
        // The window shows the last count it was told: a stale count told last would leave
        // "answering 3" on screen while 4 run (or "1" after all ended).
        const THREADS: usize = 8;
        let requests = Arc::new(Requests::default());
        let seen = Arc::new(Seen::default());
        requests.set_watcher(Some(seen.clone()));
        let all_begun = Arc::new(std::sync::Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (requests, all_begun) = (requests.clone(), all_begun.clone());
                std::thread::spawn(move || {
                    let note = requests.begin("POST", "/v1/chat/completions", "");
                    all_begun.wait();
                    drop(note);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let counts: Vec<usize> = seen.0.lock().unwrap().iter().map(|(_, n)| *n).collect();
        let expected: Vec<usize> = (1..=THREADS).chain((0..THREADS).rev()).collect();
        assert_eq!(counts, expected, "counts told out of order");
    }

    #[test]
    fn a_request_is_logged_once_when_it_ends_and_its_body_only_when_verbose() {
        let requests = Arc::new(Requests::default());
        let seen = Arc::new(Seen::default());
        requests.set_watcher(Some(seen.clone()));
        let note = requests.begin("POST", "/v1/chat/completions", "OpenAI/Python 2.8.1");
        let kept = note.clone();
        note.status(200);
        note.tokens(12, 3);
        note.body(b"{\"secret\": 1}");
        assert_eq!(requests.open(), 1);
        assert!(requests.entries().is_empty(), "not logged before it ends");
        drop(note);
        assert!(requests.entries().is_empty(), "a clone still holds it");
        kept.end();
        drop(kept);
        let entries = requests.entries();
        assert_eq!(entries.len(), 1);
        let entry = &entries[0];
        assert_eq!(entry.client, "OpenAI/Python 2.8.1");
        assert_eq!(
            (entry.status, entry.prompt_tokens, entry.completion_tokens),
            (200, Some(12), Some(3))
        );
        assert_eq!(entry.body, None, "no body unless verbose");
        assert_eq!(requests.open(), 0);

        requests.set_verbose(true);
        let note = requests.begin("GET", "/v1/models", "curl/8");
        note.body(&vec![b'x'; BODY_BYTES + 10]);
        drop(note);
        let body = requests.entries()[1].body.clone().unwrap();
        assert!(body.ends_with('…') && body.len() < BODY_BYTES + 10);
        assert_eq!(
            *seen.0.lock().unwrap(),
            vec![
                ("started".to_owned(), 1),
                ("/v1/chat/completions".to_owned(), 0),
                ("/v1/models".to_owned(), 0)
            ]
        );
    }
}
