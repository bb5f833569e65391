//! The API over the tiny model on 127.0.0.1:0, through plain HTTP/1.1: what a client gets
//! (shapes, SSE framing, usage), what it is refused (Host, key, CORS, body, images, context,
//! model), and what the server does when it is busy or a client leaves.

mod common;

use common::{chat, png_data_url, Request, TestServer, KEY, MODEL};
use engine::generate::StopReason;
use serde_json::{json, Value};

/// A prompt no end of turn ends (greedy on the fixture): only a limit or a cancel does.
const ENDLESS: &str = "Write forever.";

fn post(server: &TestServer, body: &Value) -> common::Reply {
    Request::post("/v1/chat/completions", body).send(server.port)
}

/// The JSON chunks of an event stream, after checking its framing: every event is one
/// `data:` line, and the last is `data: [DONE]`.
fn chunks(events: &[String]) -> Vec<Value> {
    assert_eq!(
        events.last().map(String::as_str),
        Some("data: [DONE]"),
        "{events:?}"
    );
    events[..events.len() - 1]
        .iter()
        .map(|e| {
            assert!(
                e.starts_with("data: ") && !e.contains('\n'),
                "one data line per event: {e:?}"
            );
            serde_json::from_str(&e["data: ".len()..]).unwrap()
        })
        .collect()
}

fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

#[test]
fn health_and_models_answer_with_and_without_v1() {
    let server = TestServer::start(|_| {});
    let health = Request::get("/health")
        .without("authorization")
        .send(server.port);
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({ "status": "ok" }));

    for path in ["/v1/models", "/models"] {
        let list = Request::get(path).send(server.port);
        assert_eq!(list.status, 200, "{path}");
        let body = list.json();
        assert_eq!(body["object"], "list");
        assert_eq!(body["data"][0]["id"], MODEL);
        assert_eq!(body["data"][0]["object"], "model");
        assert_eq!(body["data"].as_array().unwrap().len(), 1);
    }
    for path in ["/v1/models/tiny", "/models/TINY", "/v1/models/tiny-alias"] {
        let one = Request::get(path).send(server.port);
        assert_eq!(one.status, 200, "{path}");
        assert_eq!(
            one.json()["id"],
            MODEL,
            "the real id, whatever name was asked"
        );
    }
    let missing = Request::get("/v1/models/gpt-4o").send(server.port);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "model_not_found");
    assert!(missing.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains(MODEL));

    let nowhere = Request::get("/v1/embeddings").send(server.port);
    assert_eq!(nowhere.status, 404);
    assert_eq!(nowhere.error_code(), "not_found");
}

#[test]
fn a_non_streaming_answer_has_openais_shape_and_usage() {
    let server = TestServer::start(|_| {});
    for path in ["/v1/chat/completions", "/chat/completions"] {
        let reply = Request::post(path, &chat("Hello there", 6)).send(server.port);
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        assert!(reply
            .header("content-type")
            .unwrap()
            .starts_with("application/json"));
        let body = reply.json();
        assert_eq!(body["object"], "chat.completion");
        assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(body["model"], MODEL);
        assert!(body["created"].as_u64().unwrap() > 1_700_000_000);
        let choice = &body["choices"][0];
        assert_eq!(choice["index"], 0);
        assert_eq!(choice["message"]["role"], "assistant");
        assert!(choice["message"]["content"].is_string());
        assert!(choice["message"]["refusal"].is_null() && choice["logprobs"].is_null());
        assert!(["stop", "length"].contains(&choice["finish_reason"].as_str().unwrap()));
        let usage = &body["usage"];
        let prompt = usage["prompt_tokens"].as_u64().unwrap();
        let completion = usage["completion_tokens"].as_u64().unwrap();
        assert!(prompt > 3 && (1..=6).contains(&completion), "{usage}");
        assert_eq!(usage["total_tokens"].as_u64().unwrap(), prompt + completion);
        assert!(
            usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
                < prompt
        );
    }
    // A limit reached is "length".
    let body = post(&server, &chat(ENDLESS, 3)).json();
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 3);
}

#[test]
fn a_stream_is_sse_with_a_role_first_usage_last_and_done() {
    let server = TestServer::start(|_| {});
    let mut request = chat(ENDLESS, 8);
    let whole = post(&server, &request).json();
    request["stream"] = json!(true);
    request["stream_options"] = json!({ "include_usage": true });
    let mut response = Request::post("/v1/chat/completions", &request).open(server.port);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    assert_eq!(response.header("cache-control"), Some("no-cache"));
    assert!(response.header("access-control-allow-origin").is_none());
    let chunks = chunks(&response.events());

    let first = &chunks[0];
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let (usage_chunk, rest) = chunks.split_last().unwrap();
    for chunk in rest {
        assert_eq!(chunk["id"], first["id"], "one id for the whole answer");
        assert_eq!(chunk["model"], MODEL);
        assert!(
            chunk["usage"].is_null() && chunk.get("usage").is_some(),
            "{chunk}"
        );
        assert_eq!(chunk["choices"].as_array().unwrap().len(), 1);
        assert!(chunk["choices"][0]["logprobs"].is_null());
    }
    let finishes: Vec<&Value> = rest
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(
        finishes,
        [&json!("length")],
        "one finish, on the last choice chunk"
    );
    assert!(rest.last().unwrap()["choices"][0]["finish_reason"].is_string());

    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 8);
    assert!(usage_chunk["usage"]["prompt_tokens"].as_u64().unwrap() > 3);
    assert!(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"].is_u64());

    // Greedy: the stream says what the whole answer said.
    assert_eq!(
        streamed_text(&chunks),
        whole["choices"][0]["message"]["content"]
    );

    // Without include_usage: no usage fields, no usage chunk.
    request["stream_options"] = json!(null);
    let events = Request::post("/v1/chat/completions", &request)
        .open(server.port)
        .events();
    let plain = self::chunks(&events);
    assert!(plain.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(streamed_text(&plain), streamed_text(&chunks));
}

#[test]
fn an_answer_ends_before_a_stop_string_streamed_or_not() {
    let server = TestServer::start(|_| {});
    let free = post(&server, &chat(ENDLESS, 24)).json();
    let text = free["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let chars: Vec<char> = text.chars().collect();
    assert!(
        chars.len() >= 6,
        "the fixture's answer is too short to test stops: {text:?}"
    );
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let expected = &text[..text.find(&stop).unwrap()];

    let mut request = chat(ENDLESS, 24);
    request["stop"] = json!([stop, "a stop string that never comes"]);
    let body = post(&server, &request).json();
    assert_eq!(body["choices"][0]["message"]["content"], expected);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    request["stop"] = json!(stop);
    request["stream"] = json!(true);
    let chunks = chunks(
        &Request::post("/v1/chat/completions", &request)
            .open(server.port)
            .events(),
    );
    assert_eq!(streamed_text(&chunks), expected);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

#[test]
fn an_image_as_a_data_url_is_seen_and_counted() {
    let server = TestServer::start(|_| {});
    let text_only = post(&server, &chat("What is this?", 2)).json();
    let request = json!({
        "model": MODEL,
        "max_tokens": 2,
        "stream": true,
        "stream_options": { "include_usage": true },
        "messages": [{ "role": "user", "content": [
            { "type": "text", "text": "What is this?" },
            { "type": "image_url", "image_url": { "url": png_data_url(96, 96), "detail": "low" } },
        ]}],
    });
    let mut response = Request::post("/v1/chat/completions", &request).open(server.port);
    assert_eq!(response.status, 200);
    let chunks = chunks(&response.events());
    let with_image = chunks.last().unwrap()["usage"]["prompt_tokens"]
        .as_u64()
        .unwrap();
    let without = text_only["usage"]["prompt_tokens"].as_u64().unwrap();
    // 96×96 at this budget is 2×2 soft tokens, between the image's begin and end tokens.
    assert!(with_image >= without + 4, "{with_image} vs {without}");
}

#[test]
fn the_host_header_must_name_this_server() {
    let server = TestServer::start(|_| {});
    let port = server.port;
    for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        assert_eq!(
            Request::get("/v1/models")
                .host(Some(&host))
                .send(port)
                .status,
            200,
            "{host}"
        );
    }
    let refused = [
        Request::get("/v1/models").host(None),
        Request::get("/v1/models").host(Some("")),
        Request::get("/health").host(Some("attacker.example")),
        // DNS rebinding: the attacker's page, its name now pointing at 127.0.0.1.
        Request::post("/v1/chat/completions", &chat("hi", 1))
            .host(Some(&format!("attacker.example:{port}")))
            .header("origin", &format!("http://attacker.example:{port}")),
        Request::get("/v1/models").host(Some(&format!("127.0.0.1:{}", port + 1))),
    ];
    for request in refused {
        let reply = request.send(port);
        assert_eq!(reply.status, 403);
        assert_eq!(reply.error_code(), "host_not_allowed");
        assert!(reply.header("access-control-allow-origin").is_none());
    }
}

#[test]
fn the_key_is_required_and_checked() {
    let server = TestServer::start(|_| {});
    let port = server.port;
    let missing = Request::get("/v1/models")
        .without("authorization")
        .send(port);
    assert_eq!(missing.status, 401);
    assert_eq!(missing.error_code(), "invalid_api_key");
    assert_eq!(missing.json()["error"]["type"], "authentication_error");
    let wrong = Request::get("/v1/models")
        .header("authorization", "Bearer test-key-0123456789abcdeX")
        .send(port);
    assert_eq!(wrong.status, 401);
    let post = Request::post("/v1/chat/completions", &chat("hi", 1))
        .without("authorization")
        .send(port);
    assert_eq!(post.status, 401);
    let x_api_key = Request::get("/v1/models")
        .without("authorization")
        .header("x-api-key", KEY)
        .send(port);
    assert_eq!(x_api_key.status, 200);
}

#[test]
fn cors_headers_go_to_allowed_origins_only() {
    let server = TestServer::start(|c| c.allowed_origins = vec!["chrome-extension://okid".into()]);
    let port = server.port;
    let preflight = |origin: &str| {
        Request::new("OPTIONS", "/v1/chat/completions")
            .without("authorization")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type, x-stainless-os, x-evil",
            )
            .send(port)
    };
    let foreign = preflight("https://evil.example");
    assert!(
        foreign.header("access-control-allow-origin").is_none(),
        "{foreign:?}"
    );
    assert!(foreign.header("access-control-allow-headers").is_none());
    let allowed = preflight("chrome-extension://okid");
    assert_eq!(allowed.status, 204);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("chrome-extension://okid")
    );
    assert_eq!(
        allowed.header("access-control-allow-headers"),
        Some("authorization, content-type, x-stainless-os")
    );
    assert!(allowed.header("access-control-allow-credentials").is_none());

    // A keyed request from a foreign page is answered, but its page may not read it.
    let read = Request::get("/v1/models")
        .header("origin", "https://evil.example")
        .send(port);
    assert_eq!(read.status, 200);
    assert!(read.header("access-control-allow-origin").is_none());
    let ok = Request::get("/v1/models")
        .header("origin", "chrome-extension://okid")
        .send(port);
    assert_eq!(
        ok.header("access-control-allow-origin"),
        Some("chrome-extension://okid")
    );

    // With the default (no origins), even that one gets nothing.
    let closed = TestServer::start(|_| {});
    let none = Request::get("/v1/models")
        .header("origin", "chrome-extension://okid")
        .send(closed.port);
    assert!(none.header("access-control-allow-origin").is_none());
}

#[test]
fn bodies_must_be_json_and_bounded() {
    let server = TestServer::start(|c| c.max_body_bytes = 4096);
    let port = server.port;
    let body = chat("hi", 1);
    // The browser's "simple" cross-site POST.
    let plain = Request::post("/v1/chat/completions", &body)
        .header("content-type", "text/plain")
        .send(port);
    assert_eq!(plain.status, 415);
    assert_eq!(plain.error_code(), "unsupported_media_type");
    let form = Request::post("/v1/chat/completions", &body)
        .header("content-type", "application/x-www-form-urlencoded")
        .send(port);
    assert_eq!(form.status, 415);
    let untyped = Request::post("/v1/chat/completions", &body)
        .without("content-type")
        .send(port);
    assert_eq!(untyped.status, 415);
    let charset = Request::post("/v1/chat/completions", &body)
        .header("content-type", "application/json; charset=utf-8")
        .send(port);
    assert_eq!(charset.status, 200);

    let big = chat(&"word ".repeat(2000), 1);
    let too_large = Request::post("/v1/chat/completions", &big).send(port);
    assert_eq!(too_large.status, 413);
    assert_eq!(too_large.error_code(), "request_too_large");

    let broken = Request::post("/v1/chat/completions", &body)
        .body(b"{\"model\": ".to_vec())
        .send(port);
    assert_eq!(broken.status, 400);
    assert_eq!(broken.error_code(), "invalid_json");
}

#[test]
fn requests_the_server_cannot_honour_are_400_in_words() {
    let server = TestServer::start(|_| {});
    let image = |url: &str| {
        json!({ "model": MODEL, "messages": [{ "role": "user", "content": [
            { "type": "text", "text": "What is this?" },
            { "type": "image_url", "image_url": { "url": url } },
        ]}]})
    };
    for url in [
        "http://127.0.0.1:1/cat.png",
        "https://example.com/cat.png",
        "file:///etc/passwd",
        "/etc/passwd",
    ] {
        let reply = post(&server, &image(url));
        assert_eq!(reply.status, 400, "{url}");
        reply.error_code();
        assert_eq!(
            reply.json()["error"]["param"],
            "messages[0].content[1]",
            "{url}"
        );
    }
    let corrupt = post(&server, &image("data:image/png;base64,aGVsbG8="));
    assert_eq!(corrupt.status, 400);
    assert!(corrupt.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("image"));

    let mut unknown = chat("hi", 1);
    unknown["model"] = json!("gpt-4o");
    let reply = post(&server, &unknown);
    assert_eq!(reply.status, 404);
    assert_eq!(reply.error_code(), "model_not_found");
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains(MODEL));

    for (field, value) in [
        ("n", json!(2)),
        ("tools", json!([{ "type": "function", "function": {} }])),
        ("tool_choice", json!("required")),
        ("response_format", json!({ "type": "xml" })),
        ("temperature", json!(3.5)),
        ("max_tokens", json!(0)),
    ] {
        let mut request = chat("hi", 1);
        request[field] = value;
        let reply = post(&server, &request);
        assert_eq!(reply.status, 400, "{field}");
        let param = reply.json()["error"]["param"].as_str().unwrap().to_owned();
        assert!(param.starts_with(field), "{field}: {param}");
    }
    let tool_message = json!({ "model": MODEL, "messages": [{ "role": "tool", "content": "42" }] });
    assert_eq!(post(&server, &tool_message).status, 400);
}

#[test]
fn a_prompt_that_does_not_fit_is_refused_not_cut() {
    let server = TestServer::start(|c| c.model.as_mut().unwrap().context_window = 64);
    let long = "Tell me about this. ".repeat(40);
    for stream in [false, true] {
        let mut request = chat(&long, 4);
        request["stream"] = json!(stream);
        let reply = post(&server, &request);
        assert_eq!(reply.status, 400, "stream: {stream}");
        assert_eq!(reply.error_code(), "context_length_exceeded");
        assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    }
    // A history too long with a short last message is refused the same way.
    let history = json!({ "model": MODEL, "messages": [
        { "role": "user", "content": long },
        { "role": "assistant", "content": "Sure." },
        { "role": "user", "content": "And?" },
    ]});
    let reply = post(&server, &history);
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_code(), "context_length_exceeded");
    // What fits is answered.
    assert_eq!(post(&server, &chat("hi", 2)).status, 200);
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let server = TestServer::start(|c| {
        c.parallel = 1;
        c.queue_depth = 0;
    });
    let mut endless = chat(ENDLESS, 2000);
    endless["stream"] = json!(true);
    let mut running = Request::post("/v1/chat/completions", &endless).open(server.port);
    assert_eq!(running.status, 200);
    running.next_event().unwrap();

    let busy = post(&server, &chat("hi", 1));
    assert_eq!(busy.status, 503);
    assert_eq!(busy.error_code(), "server_busy");
    assert_eq!(busy.header("retry-after"), Some("2"));

    drop(running);
    server.wait_idle();
    assert_eq!(
        post(&server, &chat("hi", 1)).status,
        200,
        "a freed place is taken again"
    );
}

#[test]
fn four_streams_are_answered_at_once_each_as_alone_with_its_usage() {
    let server = TestServer::start(|c| c.queue_depth = 0);
    let bodies: Vec<Value> = (0..4)
        .map(|k| {
            let mut body = chat(&format!("Tell me about the number {k}."), 10 + 3 * k);
            body["stream"] = json!(true);
            body["stream_options"] = json!({ "include_usage": true });
            body
        })
        .collect();
    // Alone, one after the other.
    let alone: Vec<String> = bodies
        .iter()
        .map(|b| {
            let mut body = b.clone();
            body["stream"] = json!(false);
            body.as_object_mut().unwrap().remove("stream_options");
            post(&server, &body).json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();

    // Four endless streams all make progress at once, and a fifth request finds no place.
    let mut endless: Vec<_> = (0..4)
        .map(|k| {
            let mut body = chat(&format!("{ENDLESS} {k}"), 2000);
            body["stream"] = json!(true);
            let response = Request::post("/v1/chat/completions", &body).open(server.port);
            assert_eq!(response.status, 200);
            response
        })
        .collect();
    for _ in 0..3 {
        for response in &mut endless {
            response.next_event().expect("every stream moves");
        }
    }
    assert_eq!(post(&server, &chat("hi", 1)).status, 503);
    drop(endless);
    server.wait_idle();

    // Together: each the same answer as alone, its usage its own.
    let port = server.port;
    let together: Vec<Vec<Value>> = std::thread::scope(|scope| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|body| {
                scope.spawn(move || {
                    chunks(
                        &Request::post("/v1/chat/completions", body)
                            .open(port)
                            .events(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (k, chunks) in together.iter().enumerate() {
        assert_eq!(streamed_text(chunks), alone[k], "stream {k}");
        let usage = &chunks.last().unwrap()["usage"];
        let completion = usage["completion_tokens"].as_u64().unwrap();
        assert!((1..=10 + 3 * k as u64).contains(&completion), "{usage}");
        assert_eq!(
            usage["total_tokens"].as_u64().unwrap(),
            usage["prompt_tokens"].as_u64().unwrap() + completion
        );
    }
    // A client can read its last chunk before the engine thread logs the answer (the log is
    // written after the event goes out; the place is freed after that).
    server.wait_idle();
    let finished = server.server().finished();
    let last_four = &finished[finished.len() - 4..];
    assert!(last_four
        .iter()
        .all(|f| f.outcome != api::Outcome::Ended(StopReason::Cancelled)));
}

#[test]
fn a_client_that_leaves_stops_its_answer_within_a_token_or_two() {
    let server = TestServer::start(|_| {});
    let mut endless = chat(ENDLESS, 2000);
    endless["stream"] = json!(true);
    let mut response = Request::post("/v1/chat/completions", &endless).open(server.port);
    for _ in 0..3 {
        response.next_event().unwrap();
    }
    drop(response);
    let finished = server.wait_for_finished(|f| f.client_left);
    assert_eq!(finished.outcome, api::Outcome::Ended(StopReason::Cancelled));
    assert!(
        finished.tokens_after_client_left <= 2,
        "{} tokens after the client left",
        finished.tokens_after_client_left
    );
    assert!(finished.generated_tokens < 2000);

    // Not streaming: the client waits for the whole answer, and leaves before it comes.
    let first = finished.generation_id;
    endless["stream"] = json!(false);
    let waiting = Request::post("/v1/chat/completions", &endless).open_only(server.port);
    while server.server().in_flight() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(waiting);
    let finished = server.wait_for_finished(|f| f.client_left && f.generation_id != first);
    assert_eq!(finished.outcome, api::Outcome::Ended(StopReason::Cancelled));
    assert!(finished.generated_tokens < 2000);
    server.wait_idle();
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city today",
        "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "description": "The city"}},
            "required": ["city"]}}})
}

fn prompt_tokens(reply: &common::Reply) -> u64 {
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["usage"]["prompt_tokens"].as_u64().unwrap()
}

#[test]
fn tools_and_tool_results_reach_the_model() {
    let server = TestServer::start(|_| {});
    let plain = prompt_tokens(&post(&server, &chat("Weather in Paris?", 1)));
    let mut with_tools = chat("Weather in Paris?", 1);
    with_tools["tools"] = json!([weather_tool(), {"type": "web_search"}]);
    let declared = prompt_tokens(&post(&server, &with_tools));
    assert!(
        declared > plain + 20,
        "the declaration is in the prompt ({declared} vs {plain})"
    );
    with_tools["tool_choice"] = json!("none");
    assert_eq!(
        prompt_tokens(&post(&server, &with_tools)),
        plain,
        "`none` shows no tools"
    );

    // The model called the tool; here is what it returned.
    let mut conversation = chat("Weather in Paris?", 2);
    conversation["tools"] = json!([weather_tool()]);
    conversation["messages"] = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"sky\": \"sunny <turn|>\", \"deg\": 21}"},
    ]);
    let reply = post(&server, &conversation);
    let answered = prompt_tokens(&reply);
    assert!(
        answered > declared,
        "the call and its result are in the prompt"
    );
    let body = reply.json();
    assert_eq!(body["object"], "chat.completion");
    assert!(["stop", "length", "tool_calls"]
        .contains(&body["choices"][0]["finish_reason"].as_str().unwrap()));

    let mut stray = conversation.clone();
    stray["messages"][2]["tool_call_id"] = json!("call_9");
    let reply = post(&server, &stray);
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["param"], "messages[2].tool_call_id");
}

#[test]
fn thinking_is_asked_for_and_streamed_apart_from_the_content() {
    let server = TestServer::start(|_| {});
    let off = prompt_tokens(&post(&server, &chat("Hi", 1)));
    for switch in [
        json!({"reasoning_effort": "high"}),
        json!({"chat_template_kwargs": {"enable_thinking": true}}),
    ] {
        let mut request = chat("Hi", 3);
        for (key, value) in switch.as_object().unwrap() {
            request[key] = value.clone();
        }
        let on = prompt_tokens(&post(&server, &request));
        assert!(
            on > off,
            "thinking on writes <|think|> ({on} vs {off}): {switch}"
        );
        request["stream"] = json!(true);
        let chunks = chunks(
            &Request::post("/v1/chat/completions", &request)
                .open(server.port)
                .events(),
        );
        for chunk in &chunks {
            let delta = &chunk["choices"][0]["delta"];
            let content = delta["content"].as_str().unwrap_or("");
            assert!(!content.contains("<|channel>"), "{chunk}");
            if let Some(reasoning) = delta.get("reasoning_content") {
                assert!(
                    reasoning.is_string() && delta.get("content").is_none(),
                    "{chunk}"
                );
            }
        }
    }
    let mut none = chat("Hi", 1);
    none["reasoning_effort"] = json!("none");
    assert_eq!(prompt_tokens(&post(&server, &none)), off);
}

fn respond(server: &TestServer, body: &Value) -> common::Reply {
    Request::post("/v1/responses", body).send(server.port)
}

#[test]
fn a_response_is_answered_whole_with_its_usage() {
    let server = TestServer::start(|_| {});
    let chat_prompt = {
        let mut request = chat("Say hi.", 3);
        request["messages"] = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Say hi."},
        ]);
        prompt_tokens(&post(&server, &request))
    };
    for input in [
        json!("Say hi."),
        json!([{"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}]),
    ] {
        let reply = respond(
            &server,
            &json!({"model": MODEL, "instructions": "Be brief.", "input": input,
                    "max_output_tokens": 3, "temperature": 0, "store": true}),
        );
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let body = reply.json();
        assert_eq!(body["object"], "response");
        assert!(body["id"].as_str().unwrap().starts_with("resp_"));
        assert_eq!(body["model"], MODEL);
        let usage = &body["usage"];
        assert_eq!(
            usage["input_tokens"], chat_prompt,
            "the same prompt as chat"
        );
        let output_tokens = usage["output_tokens"].as_u64().unwrap();
        assert!((1..=3).contains(&output_tokens));
        assert_eq!(
            usage["total_tokens"].as_u64().unwrap(),
            chat_prompt + output_tokens
        );
        assert!(usage["input_tokens_details"]["cached_tokens"].is_u64());
        match body["status"].as_str().unwrap() {
            "incomplete" => {
                assert_eq!(body["incomplete_details"]["reason"], "max_output_tokens")
            }
            status => assert_eq!(status, "completed"),
        }
        let messages: Vec<&Value> = body["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["type"] == "message")
            .collect();
        assert!(messages.len() <= 1);
        for message in messages {
            assert_eq!(message["role"], "assistant");
            assert_eq!(message["content"][0]["type"], "output_text");
        }
    }

    let reply = respond(
        &server,
        &json!({"model": MODEL, "input": "Again", "previous_response_id": "resp_123"}),
    );
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["param"], "previous_response_id");
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("whole conversation"));
    let reply = respond(&server, &json!({"model": "gpt-4o", "input": "hi"}));
    assert_eq!(reply.status, 404);
}

#[test]
fn a_streamed_response_sends_the_events_the_sdks_read() {
    let server = TestServer::start(|_| {});
    for path in ["/v1/responses", "/responses"] {
        let request = json!({"model": MODEL, "input": "Write forever.", "max_output_tokens": 4,
                             "temperature": 0, "stream": true});
        let mut response = Request::post(path, &request).open(server.port);
        assert_eq!(response.status, 200);
        assert_eq!(response.header("content-type"), Some("text/event-stream"));
        let events: Vec<Value> = response
            .events()
            .iter()
            .map(|event| {
                let (name, data) = event
                    .strip_prefix("event: ")
                    .and_then(|e| e.split_once("\ndata: "))
                    .unwrap_or_else(|| panic!("an event line and a data line: {event:?}"));
                let data: Value = serde_json::from_str(data).unwrap();
                assert_eq!(data["type"], name);
                data
            })
            .collect();
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        for (n, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], n, "{kinds:?}");
        }
        assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
        let last = events.last().unwrap();
        assert!(
            ["response.completed", "response.incomplete"].contains(&kinds[kinds.len() - 1]),
            "{kinds:?}"
        );
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        let output = &last["response"]["output"];
        if !text.is_empty() {
            let order = [
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
            ];
            let at: Vec<usize> = order
                .iter()
                .map(|k| kinds.iter().position(|x| x == k).unwrap())
                .collect();
            assert!(at.windows(2).all(|w| w[0] < w[1]), "{kinds:?}");
            assert_eq!(output[0]["content"][0]["text"], text);
            assert_eq!(output[0]["status"], "completed");
        }
        let usage = &last["response"]["usage"];
        assert!(usage["input_tokens"].as_u64().unwrap() > 0);
        assert!((1..=4).contains(&usage["output_tokens"].as_u64().unwrap()));
    }
}

/// A schema a random model can only satisfy by ending: every value bounded.
fn ticket_format() -> Value {
    json!({ "type": "json_schema", "json_schema": { "name": "ticket", "strict": true, "schema": {
        "type": "object",
        "properties": {
            "title": { "type": "string", "maxLength": 12 },
            "priority": { "type": "integer", "minimum": 1, "maximum": 5 },
            "open": { "type": "boolean" },
            "team": { "enum": ["web", "app", "api"] }
        },
        "required": ["title", "priority", "open", "team"],
        "additionalProperties": false
    } } })
}

fn assert_ticket(content: &str) {
    let ticket: Value = serde_json::from_str(content)
        .unwrap_or_else(|e| panic!("the content is not JSON ({e}): {content:?}"));
    let object = ticket.as_object().unwrap();
    assert_eq!(object.len(), 4, "{content}");
    assert!(
        object["title"].as_str().unwrap().chars().count() <= 12,
        "{content}"
    );
    assert!(
        (1..=5).contains(&object["priority"].as_i64().unwrap()),
        "{content}"
    );
    assert!(object["open"].is_boolean(), "{content}");
    assert!(
        ["web", "app", "api"].contains(&object["team"].as_str().unwrap()),
        "{content}"
    );
}

#[test]
fn a_json_schema_response_format_is_followed_streamed_or_not() {
    let server = TestServer::start(|_| {});
    for seed in [None, Some(3)] {
        let mut request = chat(ENDLESS, 300);
        request["response_format"] = ticket_format();
        if let Some(seed) = seed {
            request["temperature"] = json!(1.0);
            request["seed"] = json!(seed);
        }
        let whole = post(&server, &request);
        assert_eq!(whole.status, 200, "{:?}", whole.json());
        let whole = whole.json();
        assert_eq!(whole["choices"][0]["finish_reason"], "stop", "{whole}");
        let content = whole["choices"][0]["message"]["content"].as_str().unwrap();
        assert_ticket(content);

        request["stream"] = json!(true);
        let mut response = Request::post("/v1/chat/completions", &request).open(server.port);
        assert_eq!(response.status, 200);
        let chunks = chunks(&response.events());
        let finish = chunks
            .iter()
            .rev()
            .find_map(|c| c["choices"][0]["finish_reason"].as_str());
        assert_eq!(finish, Some("stop"));
        assert_eq!(
            streamed_text(&chunks),
            content,
            "the same seed, the same answer"
        );
    }

    // json_object: an object, or, cut by max_tokens, the start of one.
    let mut request = chat(ENDLESS, 3);
    request["response_format"] = json!({ "type": "json_object" });
    let reply = post(&server, &request).json();
    assert_eq!(reply["choices"][0]["finish_reason"], "length");
    assert!(reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with('{'));
}

#[test]
fn a_schema_that_cannot_be_enforced_is_a_400_before_anything_is_generated() {
    let server = TestServer::start(|_| {});
    for (schema, says) in [
        (
            json!({ "type": "object", "properties": { "a": { "type": "colour" } } }),
            "colour",
        ),
        (json!({ "type": "string", "pattern": "([a-z" }), ""),
    ] {
        for stream in [false, true] {
            let mut request = chat("hi", 8);
            request["stream"] = json!(stream);
            request["response_format"] =
                json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": schema } });
            let reply = post(&server, &request);
            assert_eq!(reply.status, 400, "{schema}");
            let error = &reply.json()["error"];
            assert_eq!(error["param"], "response_format", "{error}");
            assert_eq!(error["type"], "invalid_request_error");
            let message = error["message"].as_str().unwrap();
            assert!(
                message.contains("cannot be enforced") && message.contains(says),
                "{message}"
            );
        }
    }
    // The server still answers.
    assert_eq!(post(&server, &chat("hi", 2)).status, 200);
}

/// Two tools with bounded arguments, so a random model held to a call always finishes one.
fn bounded_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10},
                           "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"]}}},
        {"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object",
            "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                           "loud": {"type": "boolean"}},
            "required": ["hour", "loud"], "additionalProperties": false}}},
    ])
}

/// A call's arguments, checked against `bounded_tools`' schema.
fn assert_valid_call(name: &str, arguments: &str) {
    let args: Value = serde_json::from_str(arguments)
        .unwrap_or_else(|e| panic!("{name} arguments {arguments:?}: {e}"));
    let args = args.as_object().expect("arguments are an object");
    match name {
        "get_weather" => {
            let city = args["city"].as_str().expect("city is a string");
            assert!((1..=10).contains(&city.chars().count()), "{arguments}");
            if let Some(unit) = args.get("unit") {
                assert!(unit == "c" || unit == "f", "{arguments}");
            }
            assert!(
                args.keys().all(|k| k == "city" || k == "unit"),
                "{arguments}"
            );
        }
        "set_alarm" => {
            assert!(
                args["hour"].as_u64().is_some_and(|h| h <= 23),
                "{arguments}"
            );
            assert!(args["loud"].is_boolean(), "{arguments}");
            assert_eq!(args.len(), 2, "{arguments}");
        }
        other => panic!("a call to a tool not offered: {other}"),
    }
}

#[test]
fn a_forced_tool_call_is_a_valid_call_streamed_or_not() {
    let server = TestServer::start(|_| {});
    let named = json!({"type": "function", "function": {"name": "set_alarm"}});
    for (choice, seed) in [
        (json!("required"), None),
        (json!("required"), Some(5)),
        (named.clone(), None),
        (named, Some(9)),
    ] {
        let mut request = chat(ENDLESS, 200);
        request["tools"] = bounded_tools();
        request["tool_choice"] = choice.clone();
        request["parallel_tool_calls"] = json!(false);
        if let Some(seed) = seed {
            request["temperature"] = json!(1.0);
            request["seed"] = json!(seed);
        }
        let whole = post(&server, &request);
        assert_eq!(whole.status, 200, "{:?}", whole.json());
        let whole = whole.json();
        let choice_out = &whole["choices"][0];
        assert_eq!(choice_out["finish_reason"], "tool_calls", "{whole}");
        assert!(choice_out["message"]["content"].is_null(), "{whole}");
        let calls = choice_out["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "one call without parallel calls: {whole}");
        let function = &calls[0]["function"];
        let name = function["name"].as_str().unwrap();
        if choice.is_object() {
            assert_eq!(name, "set_alarm", "the named function is the one called");
        }
        let arguments = function["arguments"].as_str().unwrap();
        assert_valid_call(name, arguments);
        assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));

        // Streamed: the same call (same seed), `index` on every delta, `id` on the first.
        request["stream"] = json!(true);
        let mut response = Request::post("/v1/chat/completions", &request).open(server.port);
        assert_eq!(response.status, 200);
        let chunks = chunks(&response.events());
        let deltas: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
            .flatten()
            .collect();
        assert!(!deltas.is_empty(), "{chunks:?}");
        assert!(deltas.iter().all(|d| d["index"] == 0), "{deltas:?}");
        assert!(deltas[0]["id"].is_string() && deltas[0]["function"]["name"] == name);
        let streamed: String = deltas
            .iter()
            .filter_map(|d| d["function"]["arguments"].as_str())
            .collect();
        assert_eq!(streamed, arguments, "the same call streamed");
        let finish = chunks
            .iter()
            .rev()
            .find_map(|c| c["choices"][0]["finish_reason"].as_str());
        assert_eq!(finish, Some("tool_calls"));
    }

    // "required" with parallel calls allowed: one call or more, each valid, or an answer cut
    // by max_tokens inside a later call.
    let mut request = chat(ENDLESS, 120);
    request["tools"] = bounded_tools();
    request["tool_choice"] = json!("required");
    let reply = post(&server, &request).json();
    let message = &reply["choices"][0]["message"];
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        assert_valid_call(
            call["function"]["name"].as_str().unwrap(),
            call["function"]["arguments"].as_str().unwrap(),
        );
    }

    // A forced call and a response_format together are refused in words.
    let mut request = chat(ENDLESS, 5);
    request["tools"] = bounded_tools();
    request["tool_choice"] = json!("required");
    request["response_format"] = json!({"type": "json_object"});
    let reply = post(&server, &request);
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["param"], "tool_choice");
}
