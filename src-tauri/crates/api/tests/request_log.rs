//! What the app builds on: the request log (every request, its client, status, tokens and
//! time; bodies only while verbose), the watcher told as requests come and go, and a model
//! that can be taken away and given back while the server runs.

mod common;

use std::sync::{Arc, Mutex};

use common::{chat, Request, TestServer};
use serde_json::json;

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl api::Watcher for Seen {
    fn started(&self, open: usize) {
        self.0.lock().unwrap().push(format!("started {open}"));
    }
    fn ended(&self, request: &api::Request, open: usize) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {} {open}", request.path, request.status));
    }
}

#[test]
fn every_request_is_logged_as_it_ends_with_its_client_status_and_tokens() {
    let server = TestServer::start(|_| {});
    let seen = Arc::new(Seen::default());
    server.server().watch(Some(seen.clone()));

    let answer = Request::post("/v1/chat/completions", &chat("Hi", 3))
        .header("user-agent", "OpenAI/Python 2.8.1")
        .send(server.port);
    assert_eq!(answer.status, 200);
    let usage = answer.json()["usage"].clone();
    let refused = Request::get("/v1/models")
        .header("authorization", "Bearer wrong-key-0123456789")
        .header("user-agent", "curl/8.5.0")
        .send(server.port);
    assert_eq!(refused.status, 401);

    let log = server.server().requests();
    assert_eq!(log.len(), 2, "{log:?}");
    let (chat_entry, models_entry) = (&log[0], &log[1]);
    assert_eq!(chat_entry.client, "OpenAI/Python 2.8.1");
    assert_eq!(
        (chat_entry.method.as_str(), chat_entry.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(chat_entry.status, 200);
    assert_eq!(
        chat_entry.prompt_tokens,
        Some(usage["prompt_tokens"].as_u64().unwrap() as usize)
    );
    assert_eq!(
        chat_entry.completion_tokens,
        Some(usage["completion_tokens"].as_u64().unwrap() as usize)
    );
    assert_eq!(chat_entry.body, None, "no body unless verbose");
    assert_eq!(
        (models_entry.client.as_str(), models_entry.status),
        ("curl/8.5.0", 401)
    );
    assert_eq!(models_entry.prompt_tokens, None);
    assert_eq!(
        *seen.0.lock().unwrap(),
        vec![
            "started 1".to_owned(),
            "/v1/chat/completions 200 0".to_owned(),
            "/v1/models 401 0".to_owned()
        ]
    );

    // Verbose: the body as sent; streamed answers are logged once their stream has ended.
    server.server().set_verbose(true);
    let mut streamed = chat("Secret plans", 3);
    streamed["stream"] = json!(true);
    let mut response = Request::post("/v1/chat/completions", &streamed).open(server.port);
    let events = response.events();
    assert_eq!(events.last().map(String::as_str), Some("data: [DONE]"));
    server.wait_idle();
    let log = server.server().requests();
    let last = log.last().unwrap();
    assert!(
        last.body.as_deref().unwrap().contains("Secret plans"),
        "{last:?}"
    );
    assert!(last.completion_tokens.is_some_and(|n| n > 0));
    assert_eq!(server.server().open_requests(), 0);
}

#[test]
fn without_a_model_requests_get_503_model_not_loaded_and_answers_resume_after() {
    let server = TestServer::start(|_| {});
    let model = {
        let models = Request::get("/v1/models").send(server.port).json();
        assert_eq!(models["data"].as_array().unwrap().len(), 1);
        models["data"][0]["id"].as_str().unwrap().to_owned()
    };
    let served = common::served_model();
    server.server().set_model(None);

    let refused = Request::post("/v1/chat/completions", &chat("Hi", 2)).send(server.port);
    assert_eq!(refused.status, 503);
    assert_eq!(refused.error_code(), "model_not_loaded");
    assert_eq!(refused.json()["error"]["type"], "server_error");
    let models = Request::get("/v1/models").send(server.port).json();
    assert_eq!(models["data"], json!([]), "no model, none listed");
    let one = Request::get(&format!("/v1/models/{model}")).send(server.port);
    assert_eq!(one.status, 503);

    server.server().set_model(Some(served));
    let answer = Request::post("/v1/chat/completions", &chat("Hi", 2)).send(server.port);
    assert_eq!(answer.status, 200, "{:?}", answer.json());
    assert_eq!(answer.json()["model"], model);
}
