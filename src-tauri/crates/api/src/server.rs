//! The router (paths with and without `/v1`, the guard in front of them) and the server that
//! listens on 127.0.0.1 only.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Path, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use engine::worker::Engine;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::completions::{chat_completions, Running, Served};
use crate::config::{ApiConfig, ModelSlot, ServedModel};
use crate::error::{ApiError, ServeError};
use crate::guard::{cors, require_host, require_key, Guard};
use crate::http::{json_response, unix_now};
use crate::log::{self, Finished, Log, Note, Requests, Watcher};
use crate::queue::Admission;
use crate::responses::responses;
use crate::wire::model_object;

/// Longest path kept in the request log, in characters.
const PATH_CHARS: usize = 200;

/// How long a shutdown waits for open connections after stopping their answers.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The API's routes over `engine`, for a server listening on `port` (the Host check needs it).
pub(crate) fn router(engine: Arc<Engine>, config: &ApiConfig, port: u16) -> (Router, Arc<Served>) {
    let guard = Arc::new(Guard::new(
        port,
        config.key.clone(),
        config.allowed_origins.clone(),
    ));
    let served = Arc::new(Served {
        engine,
        model: ModelSlot::new(config.model.clone()),
        admission: Admission::new(config.parallel, config.queue_depth),
        max_body_bytes: config.max_body_bytes,
        running: Running::default(),
        log: Log::default(),
        requests: Arc::default(),
        created: unix_now(),
    });
    let keyed = Router::new()
        .route("/v1/models", get(list_models))
        .route("/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route("/models/{id}", get(get_model))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route("/responses", post(responses))
        .route_layer(from_fn_with_state(guard.clone(), require_key));
    let router = Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .merge(keyed)
        .fallback(no_route)
        .method_not_allowed_fallback(no_route)
        .with_state(served.clone())
        .layer(from_fn_with_state(guard.clone(), cors))
        .layer(from_fn_with_state(guard, require_host))
        .layer(from_fn_with_state(served.requests.clone(), record));
    (router, served)
}

/// A running server.
pub struct Server {
    address: SocketAddr,
    served: Arc<Served>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Server {
    /// Listens on 127.0.0.1:`config.port` and serves until [`Server::shutdown`]. A busy port
    /// is an error ([`ServeError::PortInUse`]), never a quiet move to another one.
    pub async fn start(engine: Arc<Engine>, config: ApiConfig) -> Result<Self, ServeError> {
        let port = config.port;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::AddrInUse => ServeError::PortInUse { port },
                _ => ServeError::Bind { port, source },
            })?;
        let address = listener.local_addr()?;
        let (router, served) = router(engine, &config, address.port());
        let (stop, stopped) = oneshot::channel::<()>();
        // Every streamed chunk goes out at once: without TCP_NODELAY, Nagle's algorithm may
        // hold a small write until the client acknowledges the one before, which a client's
        // delayed ACK can put off by up to 40 ms — longer than a token takes on a GPU.
        let listener = listener.tap_io(|socket| {
            let _ = socket.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .map_err(ServeError::from)
        });
        Ok(Self {
            address,
            served,
            stop: Some(stop),
            task,
        })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The base URL clients are given: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// The engine now writes `answers` at once (after `Engine::set_parallel`): the queue's
    /// places follow.
    pub fn set_parallel(&self, answers: usize) {
        self.served.admission.set_running(answers);
    }

    /// Requests in the engine's hands (running or queued).
    pub fn in_flight(&self) -> usize {
        self.served.admission.in_flight()
    }

    /// The last generations that ended, oldest first.
    pub fn finished(&self) -> Vec<Finished> {
        self.served.log.entries()
    }

    /// The request log: the last requests that ended, oldest first.
    pub fn requests(&self) -> Vec<log::Request> {
        self.served.requests.entries()
    }

    /// Answers being asked for now (POST requests being handled, queued or running).
    pub fn open_requests(&self) -> usize {
        self.served.requests.open()
    }

    /// Keeps request bodies in the log from now on (`true`), or stops keeping them.
    pub fn set_verbose(&self, on: bool) {
        self.served.requests.set_verbose(on);
    }

    /// Who is told as requests come and end (`None`: nobody).
    pub fn watch(&self, watcher: Option<Arc<dyn Watcher>>) {
        self.served.requests.set_watcher(watcher);
    }

    /// The model to serve from the next request on; `None` while the engine has none
    /// (requests get 503 `model_not_loaded`, `/v1/models` lists nothing).
    pub fn set_model(&self, model: Option<ServedModel>) {
        self.served.model.set(model);
    }

    /// Stops the answers being written, stops listening, and waits (a few seconds at most)
    /// for the open connections to close.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.served.running.cancel_all(&self.served.engine);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut self.task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(ServeError::Io(std::io::Error::other(join))),
            Err(_) => {
                self.task.abort();
                Ok(())
            }
        }
    }
}

/// `GET /health`: up or not, nothing more (no key needed).
async fn health() -> Response {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

async fn list_models(State(served): State<Arc<Served>>) -> Response {
    let data: Vec<_> = served
        .model
        .current()
        .map(|model| model_object(&model.id, served.created))
        .into_iter()
        .collect();
    json_response(StatusCode::OK, &json!({ "object": "list", "data": data }))
}

async fn get_model(State(served): State<Arc<Served>>, Path(id): Path<String>) -> Response {
    let model = match served.model.current() {
        Ok(model) => model,
        Err(error) => return error.into_response(),
    };
    if model.is_named(&id) {
        json_response(StatusCode::OK, &model_object(&model.id, served.created))
    } else {
        ApiError::ModelNotFound {
            given: id,
            valid: model.id.clone(),
        }
        .into_response()
    }
}

/// Puts every request in the request log: a [`Note`] the handler fills in (tokens, the body
/// when verbose), recorded when the response's last byte is written or its client leaves.
async fn record(
    State(requests): State<Arc<Requests>>,
    mut request: Request,
    next: Next,
) -> Response {
    let client = request
        .headers()
        .get(header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let path: String = request.uri().path().chars().take(PATH_CHARS).collect();
    let note = requests.begin(request.method().as_str(), &path, &client);
    request.extensions_mut().insert(note.clone());
    let response = next.run(request).await;
    note.status(response.status().as_u16());
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(Ending {
            inner: body,
            note: Some(note),
        }),
    )
}

/// A response body that ends its request's log entry when it has been written (or dropped,
/// when the client left).
struct Ending {
    inner: Body,
    note: Option<Note>,
}

impl HttpBody for Ending {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            if let Some(note) = self.note.take() {
                note.end();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

async fn no_route(method: Method, uri: Uri) -> Response {
    ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
    .into_response()
}
