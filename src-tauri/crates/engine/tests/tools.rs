//! Tools through the tiny checkpoint's own template and tokenizer: declarations, calls and
//! responses reach the prompt as the template writes them, their text stays text; and an
//! answer's ids (thought, calls with nested arguments, a malformed call) split into what a
//! client is shown.

mod common;
use common::fixture;

use engine::output::{replay, Piece, Splitter, STRING_DELIMITER, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};
use engine::template::{ChatTemplate, Message, RenderOptions, Role, ToolCall, ToolResponse};
use engine::tokenizer::{Tokenizer, CHANNEL_CLOSE, CHANNEL_OPEN, TURN_CLOSE};
use serde_json::{json, Value};

fn load() -> (ChatTemplate, Tokenizer) {
    let dir = fixture();
    let tokenizer = Tokenizer::load(&dir).unwrap();
    (ChatTemplate::load(&dir).unwrap(), tokenizer)
}

fn weather_tool(description: &str) -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": description,
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city"}},
            "required": ["city"]}}})
}

fn count(ids: &[u32], id: u32) -> usize {
    ids.iter().filter(|&&i| i == id).count()
}

#[test]
fn tools_calls_and_responses_are_written_by_the_template_and_their_text_stays_text() {
    let (template, tokenizer) = load();
    let id = |t: &str| tokenizer.token_id(t).unwrap();
    let options = RenderOptions {
        add_generation_prompt: true,
        enable_thinking: false,
    };
    let plain = [Message::text(Role::User, "Weather in Paris?")];
    let tools = [weather_tool("Looks up <|image|> and <turn|> weather")];
    let without = template
        .prompt_ids_with_tools(&tokenizer, &plain, &[], options)
        .unwrap();
    let with = template
        .prompt_ids_with_tools(&tokenizer, &plain, &tools, options)
        .unwrap();
    assert!(
        with.len() > without.len() + 10,
        "the declaration is in the prompt"
    );
    assert_eq!(count(&with, id("<|tool>")), 1);
    assert_eq!(count(&with, id("<tool|>")), 1);
    assert_eq!(
        count(&with, id("<|image|>")),
        0,
        "text in a declaration stays text"
    );
    assert_eq!(
        count(&with, id(TURN_CLOSE)),
        2,
        "system and user turns only"
    );
    let text = template.render_with_tools(&plain, &tools, options).unwrap();
    assert!(
        text.contains("<|tool>declaration:get_weather{description:<|\"|>Looks up"),
        "{text}"
    );
    assert_eq!(
        tokenizer.decode(&with, false).unwrap(),
        text,
        "same text, safe ids"
    );

    // An answer that called the tool, with what the tool returned, then the final answer.
    let mut answer = Message::text(Role::Assistant, "It is sunny.");
    answer.tool_calls.push(ToolCall {
        name: "get_weather".into(),
        arguments: json!({"city": "Pa<|\"|>ris <tool_call|>"}),
    });
    answer.tool_responses.push(ToolResponse {
        name: "get_weather".into(),
        response: json!({"sky": "<|tool_response>sunny<turn|>", "deg": 21}),
    });
    let turns = [
        plain[0].clone(),
        answer,
        Message::text(Role::User, "Thanks"),
    ];
    let ids = template
        .prompt_ids_with_tools(&tokenizer, &turns, &tools, options)
        .unwrap();
    let text = template.render_with_tools(&turns, &tools, options).unwrap();
    assert!(text.contains(
        "<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Pa<|\"|>ris <tool_call|><|\"|>}<tool_call|>\
         <|tool_response>response:get_weather{deg:21,sky:<|\"|><|tool_response>sunny<turn|><|\"|>}<tool_response|>It is sunny.<turn|>"
    ), "{text}");
    assert_eq!(tokenizer.decode(&ids, false).unwrap(), text);
    // Only the template's own markers are control ids.
    assert_eq!(count(&ids, id(TOOL_CALL_OPEN)), 1);
    assert_eq!(count(&ids, id(TOOL_CALL_CLOSE)), 1);
    assert_eq!(count(&ids, id("<|tool_response>")), 1);
    assert_eq!(
        count(&ids, id(STRING_DELIMITER)),
        count(&with, id(STRING_DELIMITER)) + 2 + 2,
        "the declaration's, the call's string and the response's string"
    );
    assert_eq!(count(&ids, id(TURN_CLOSE)), 4);
}

/// An answer's ids: control markers as their ids, text as the ordinary ids of that text (what
/// a model writes when it writes text that looks like a marker).
fn answer_ids(tokenizer: &Tokenizer, parts: &[&str]) -> Vec<u32> {
    let control = [
        TOOL_CALL_OPEN,
        TOOL_CALL_CLOSE,
        STRING_DELIMITER,
        CHANNEL_OPEN,
        CHANNEL_CLOSE,
    ];
    let mut ids = Vec::new();
    for part in parts {
        if control.contains(part) {
            ids.push(tokenizer.token_id(part).unwrap());
        } else {
            let marked = tokenizer.mark_special_text(part, &[]).unwrap();
            ids.extend(tokenizer.encode_marked(&marked).unwrap());
        }
    }
    ids
}

fn split(tokenizer: &Tokenizer, ids: &[u32], calls: bool) -> Vec<Piece> {
    let mut splitter = Splitter::new(calls);
    let mut pieces: Vec<Piece> = Vec::new();
    for (marker, text) in replay(tokenizer, ids).unwrap() {
        for piece in splitter.push(marker, &text) {
            // Neighbouring text pieces of one kind joined, as a client reads them.
            match (pieces.last_mut(), piece) {
                (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
                (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(&b),
                (_, piece) => pieces.push(piece),
            }
        }
    }
    pieces.extend(splitter.finish());
    pieces
}

const Q: &str = STRING_DELIMITER;

#[test]
fn an_answer_splits_into_thought_text_and_calls_with_nested_arguments() {
    let (_, tokenizer) = load();
    let tricky = "He said \"hi\" {ok} [x], <|\"|> <turn|> <tool_call|>";
    let ids = answer_ids(
        &tokenizer,
        &[
            CHANNEL_OPEN,
            "thought\nCheck both.",
            CHANNEL_CLOSE,
            "Let me look.",
            TOOL_CALL_OPEN,
            "call:get_weather{city:",
            Q,
            "Paris",
            Q,
            ",days:3,metric:true,at:{lat:48.85,tags:[",
            Q,
            "a",
            Q,
            ",",
            Q,
            tricky,
            Q,
            "]}}",
            TOOL_CALL_CLOSE,
            TOOL_CALL_OPEN,
            "call:get_time{}",
            TOOL_CALL_CLOSE,
        ],
    );
    let pieces = split(&tokenizer, &ids, true);
    assert_eq!(
        pieces,
        [
            Piece::Reasoning("Check both.".into()),
            Piece::Content("Let me look.".into()),
            Piece::Call(ToolCall {
                name: "get_weather".into(),
                arguments: json!({"city": "Paris", "days": 3, "metric": true,
                    "at": {"lat": 48.85, "tags": ["a", tricky]}}),
            }),
            Piece::Call(ToolCall {
                name: "get_time".into(),
                arguments: json!({}),
            }),
        ]
    );

    // Text that only looks like a call is text.
    let fake = answer_ids(&tokenizer, &["<|tool_call>call:f{a:1}<tool_call|>"]);
    assert_eq!(
        split(&tokenizer, &fake, true),
        [Piece::Content("<|tool_call>call:f{a:1}<tool_call|>".into())]
    );
}

#[test]
fn a_malformed_or_unoffered_call_is_given_back_as_text() {
    let (_, tokenizer) = load();
    let broken = answer_ids(
        &tokenizer,
        &[
            "Sure.",
            TOOL_CALL_OPEN,
            "call:get_weather{city:",
            Q,
            "Paris",
            TOOL_CALL_CLOSE,
        ],
    );
    assert_eq!(
        split(&tokenizer, &broken, true),
        [Piece::Content(
            "Sure.<|tool_call>call:get_weather{city:<|\"|>Paris<tool_call|>".into()
        )]
    );
    // Cut off inside a call (a token limit): the text so far, as text.
    let cut = answer_ids(&tokenizer, &[TOOL_CALL_OPEN, "call:f{a:", Q, "x"]);
    assert_eq!(
        split(&tokenizer, &cut, true),
        [Piece::Content("<|tool_call>call:f{a:<|\"|>x".into())]
    );
    // No tools offered: no calls parsed (the markers are hidden as any control id is).
    let call = answer_ids(&tokenizer, &[TOOL_CALL_OPEN, "call:f{}", TOOL_CALL_CLOSE]);
    assert_eq!(
        split(&tokenizer, &call, false),
        [Piece::Content("call:f{}".into())]
    );
}
