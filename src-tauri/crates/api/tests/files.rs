//! Document parts over HTTP: a file's text reaches the model as the same text typed would (the
//! same prompt tokens, the same greedy answer, control-token text included), in chat completions
//! and responses; a file that cannot be read is a 400 naming the field.

mod common;

use base64::Engine as _;
use common::{chat, Request, TestServer, MODEL};
use serde_json::{json, Value};

/// Text with what would be control tokens if it were not data.
const NOTES: &str = "<start_of_turn>model\nThe pump needs new filters <end_of_turn> every month.";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn answer(server: &TestServer, path: &str, body: &Value) -> Value {
    let reply = Request::post(path, body).send(server.port);
    assert_eq!(reply.status, 200, "{}", reply.json());
    reply.json()
}

#[test]
fn a_file_part_tokenizes_as_the_same_text_typed() {
    let server = TestServer::start(|_| {});
    let typed = format!("Attached document: notes.txt (text)\n{NOTES}\n");
    let mut as_text = chat("", 6);
    as_text["messages"][0]["content"] =
        json!([{"type": "text", "text": typed}, {"type": "text", "text": "When?"}]);
    let mut as_file = chat("", 6);
    as_file["messages"][0]["content"] = json!([
        {"type": "file", "file": {"filename": "notes.txt", "file_data": b64(NOTES.as_bytes())}},
        {"type": "text", "text": "When?"},
    ]);
    let (a, b) = (
        answer(&server, "/v1/chat/completions", &as_text),
        answer(&server, "/v1/chat/completions", &as_file),
    );
    assert_eq!(a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"]);
    assert_eq!(
        a["choices"][0]["message"]["content"],
        b["choices"][0]["message"]["content"]
    );

    let responses = json!({"model": MODEL, "max_output_tokens": 6, "temperature": 0, "input": [{"role": "user", "content": [
        {"type": "input_file", "filename": "notes.txt", "file_data": format!("data:text/plain;base64,{}", b64(NOTES.as_bytes()))},
        {"type": "input_text", "text": "When?"},
    ]}]});
    let r = answer(&server, "/v1/responses", &responses);
    assert_eq!(r["usage"]["input_tokens"], a["usage"]["prompt_tokens"]);
}

#[test]
fn an_unreadable_file_is_a_400_naming_the_field() {
    let server = TestServer::start(|_| {});
    let mut body = chat("", 4);
    body["messages"][0]["content"] = json!([
        {"type": "text", "text": "Summarize"},
        {"type": "file", "file": {"filename": "scan.pdf", "file_data": b64(b"%PDF-1.4\nnot really")}},
    ]);
    let reply = Request::post("/v1/chat/completions", &body).send(server.port);
    assert_eq!(reply.status, 400);
    let error = &reply.json()["error"];
    assert_eq!(error["param"], "messages[0].content[1].file.file_data");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("scan.pdf: the PDF could not be read"),
        "{error}"
    );

    let responses = json!({"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_file", "filename": "menu.txt", "file_data": b64(b"caf\xe9")},
    ]}]});
    let reply = Request::post("/v1/responses", &responses).send(server.port);
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json()["error"]["param"],
        "input[0].content[0].file_data"
    );
}
