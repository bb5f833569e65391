//! The generation loop on a tiny real-layout checkpoint: prompt-cache reuse, limits, stop
//! reasons and cancellation through the engine thread.

mod common;
use common::{fixture, greedy, test_image};

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::channel;
use std::time::Duration;

use engine::error::{EngineError, GenerateError};
use engine::events::{ChatRequest, Event};
use engine::generate::StopReason;
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::sampler::SamplerConfig;
use engine::stream::{Session, StreamEnd, StreamRequest};
use engine::template::{Message, Role};
use engine::worker::Engine;
use gemma::LoadOptions;

#[test]
fn a_follow_up_turn_prefills_only_the_new_tokens() {
    let m = LoadedModel::load(&fixture(), &LoadOptions::default()).unwrap();
    let cancel = AtomicBool::new(false);
    let mut session = Session::new(&m.model);
    let mut messages = vec![Message::text(Role::User, "Tell me about bread and rivers.")];
    let first = m.prompt(&messages, false, &[]).unwrap();
    let mut answer_ids = Vec::new();
    let usage = m
        .generate(
            StreamRequest::new(&mut session, &first, &greedy(12), &cancel),
            |d| answer_ids.extend(d.token),
        )
        .unwrap();
    assert_eq!(usage.reused_tokens, 0);
    assert_eq!(usage.prompt_tokens, first.ids.len());

    // The second turn: the history (as the template renders it) plus a new question.
    let answer = m.tokenizer.decode(&answer_ids, true).unwrap();
    messages.push(Message::text(Role::Assistant, answer));
    messages.push(Message::text(Role::User, "And mountains?"));
    let second = m.prompt(&messages, false, &[]).unwrap();
    let cached = session.tokens().to_vec();
    let common = engine::stream::shared_prefix(&cached, &second.ids);
    assert!(
        common > first.ids.len(),
        "the second prompt shares the whole first turn ({common} of {})",
        first.ids.len()
    );
    let usage = m
        .generate(
            StreamRequest::new(&mut session, &second, &greedy(4), &cancel),
            |_| {},
        )
        .unwrap();
    assert_eq!(
        usage.reused_tokens, common,
        "reused exactly the common prefix"
    );
    assert_eq!(
        usage.prompt_tokens - usage.reused_tokens,
        second.ids.len() - common,
        "only new tokens were prefilled"
    );
}

#[test]
fn reused_cache_gives_the_same_answer_as_a_fresh_one() {
    let m = LoadedModel::load(
        &fixture(),
        &LoadOptions {
            dtype: Some(mlx_rs::Dtype::Float32),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let cancel = AtomicBool::new(false);
    let first = m
        .prompt(&[Message::text(Role::User, "Bread?")], false, &[])
        .unwrap();
    let mut warm = Session::new(&m.model);
    m.generate(
        StreamRequest::new(&mut warm, &first, &greedy(40), &cancel),
        |_| {},
    )
    .unwrap();
    let messages = vec![
        Message::text(Role::User, "Bread?"),
        Message::text(Role::Assistant, "Flour and water."),
        Message::text(
            Role::User,
            "What else goes in it, and how long does it rise?",
        ),
    ];
    let second = m.prompt(&messages, false, &[]).unwrap();
    let tokens = |session: &mut Session| {
        let mut ids = Vec::new();
        m.generate(
            StreamRequest::new(session, &second, &greedy(8), &cancel),
            |d| ids.extend(d.token),
        )
        .unwrap();
        ids
    };
    let with_reuse = tokens(&mut warm);
    let fresh = tokens(&mut Session::new(&m.model));
    assert_eq!(with_reuse, fresh);
}

#[test]
fn limits_are_reported_not_silent() {
    let m = LoadedModel::load(&fixture(), &LoadOptions::default()).unwrap();
    let cancel = AtomicBool::new(false);
    let prompt = m
        .prompt(&[Message::text(Role::User, "Hello")], false, &[])
        .unwrap();
    let mut session = Session::new(&m.model);
    let mut count = 0;
    let usage = m
        .generate(
            StreamRequest::new(&mut session, &prompt, &greedy(3), &cancel),
            |_| count += 1,
        )
        .unwrap();
    assert_eq!(
        (usage.generated_tokens, usage.stop_reason),
        (3, StopReason::MaxTokens)
    );
    assert!(count >= 3);

    let tight = GenerateOptions {
        context_window: prompt.ids.len() + 2,
        ..greedy(100)
    };
    let usage = m
        .generate(
            StreamRequest::new(Session::new(&m.model), &prompt, &tight, &cancel),
            |_| {},
        )
        .unwrap();
    assert_eq!(usage.stop_reason, StopReason::ContextFull);
    assert!(usage.generated_tokens <= 2);

    let too_small = GenerateOptions {
        context_window: prompt.ids.len(),
        ..greedy(10)
    };
    let error = m
        .generate(
            StreamRequest::new(Session::new(&m.model), &prompt, &too_small, &cancel),
            |_| {},
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            EngineError::Generate(GenerateError::PromptTooLong { .. })
        ),
        "{error}"
    );
}

#[test]
fn the_engine_thread_streams_and_stops_when_cancelled() {
    let engine = Engine::spawn();
    engine.load(&fixture(), LoadOptions::default()).unwrap();
    let (tx, rx) = channel();
    let request = ChatRequest {
        conversation: "c1".into(),
        messages: vec![Message::text(Role::User, "Write forever.")],
        images: Vec::new(),
        audio: Vec::new(),
        thinking: false,
        tools: Vec::new(),
        // No end-of-turn stop can end it early: the answer only ends by cancellation.
        options: GenerateOptions {
            sampler: SamplerConfig::greedy(),
            max_tokens: 100_000,
            ..GenerateOptions::default()
        },
    };
    let id = engine.generate(request, move |e| drop(tx.send(e))).unwrap();
    let mut deltas = 0;
    let mut cancelled = false;
    let done = loop {
        match rx
            .recv_timeout(Duration::from_secs(60))
            .expect("engine went silent")
        {
            Event::Delta {
                generation_id,
                token_count,
                ..
            } => {
                assert_eq!(generation_id, id);
                deltas += 1;
                assert_eq!(token_count, deltas);
                if deltas == 3 {
                    assert!(engine.cancel(id));
                    cancelled = true;
                }
            }
            Event::Prefill { .. } => assert_eq!(deltas, 0, "the prompt is read before any token"),
            Event::Done { usage, .. } => break usage,
            Event::Error { error, .. } => panic!("{error}"),
        }
    };
    assert!(cancelled);
    assert_eq!(done.stop_reason, StopReason::Cancelled);
    assert!(
        done.generated_tokens <= 5,
        "stopped within a token or two, not after {}",
        done.generated_tokens
    );
}

/// A request no end-of-turn can end: only a cancel does, or, should that fail, 2,000 tokens
/// (so a missing cancel shows as `MaxTokens`, not as a test that runs for hours).
fn endless_request() -> ChatRequest {
    ChatRequest {
        conversation: "c1".into(),
        messages: vec![Message::text(Role::User, "Write forever.")],
        images: Vec::new(),
        audio: Vec::new(),
        thinking: false,
        tools: Vec::new(),
        options: GenerateOptions {
            sampler: SamplerConfig::greedy(),
            max_tokens: 2_000,
            ..GenerateOptions::default()
        },
    }
}

#[test]
fn switching_models_stops_the_running_answer_and_unloading_leaves_none() {
    let engine = Engine::spawn();
    engine.load(&fixture(), LoadOptions::default()).unwrap();
    let (tx, rx) = channel();
    let id = engine
        .generate(endless_request(), move |e| drop(tx.send(e)))
        .unwrap();
    // The prompt is read, then the first token streams.
    loop {
        match rx.recv_timeout(Duration::from_secs(60)).expect("no token") {
            Event::Prefill { generation_id, .. } => assert_eq!(generation_id, id),
            Event::Delta { generation_id, .. } => break assert_eq!(generation_id, id),
            other => panic!("{other:?}"),
        }
    }

    // Another load (the same folder will do) ends the answer first, as cancelled.
    engine.load(&fixture(), LoadOptions::default()).unwrap();
    let usage = loop {
        match rx
            .try_recv()
            .expect("the answer did not end before the load")
        {
            Event::Prefill { .. } | Event::Delta { .. } => {}
            Event::Done { usage, .. } => break usage,
            Event::Error { error, .. } => panic!("{error}"),
        }
    };
    assert_eq!(usage.stop_reason, StopReason::Cancelled);

    engine.unload().unwrap();
    let (tx, rx) = channel();
    engine
        .generate(endless_request(), move |e| drop(tx.send(e)))
        .unwrap();
    match rx.recv_timeout(Duration::from_secs(60)).expect("no answer") {
        Event::Error {
            error: EngineError::NoModel,
            ..
        } => {}
        other => panic!("after unloading: {other:?}"),
    }
}

#[test]
fn a_follow_up_about_an_image_reuses_its_features_and_its_cache() {
    use engine::template::Part;
    let m = LoadedModel::load(&fixture(), &LoadOptions::default()).unwrap();
    let cancel = AtomicBool::new(false);
    let image = test_image();
    let images = vec![image.clone()];
    let mut session = Session::new(&m.model);
    let mut messages = vec![Message::new(
        Role::User,
        vec![
            Part::Image,
            Part::Text {
                text: "What is this?".into(),
            },
        ],
    )];
    let first = m.prompt(&messages, false, &images).unwrap();
    let placeholder = m.specials.image.unwrap().placeholder;
    assert_eq!(
        first.ids.iter().filter(|&&t| t == placeholder).count(),
        image.soft_tokens
    );
    let mut answer = Vec::new();
    m.generate(
        StreamRequest::new(&mut session, &first, &greedy(6), &cancel),
        |d| answer.extend(d.token),
    )
    .unwrap();
    assert_eq!(m.vision_tower_runs(), 1);

    // Same conversation, a follow-up: neither the tower nor the image prefill runs again.
    messages.push(Message::text(
        Role::Assistant,
        m.tokenizer.decode(&answer, true).unwrap(),
    ));
    messages.push(Message::text(Role::User, "And the colours?"));
    let second = m.prompt(&messages, false, &images).unwrap();
    let usage = m
        .generate(
            StreamRequest::new(&mut session, &second, &greedy(3), &cancel),
            |_| {},
        )
        .unwrap();
    assert_eq!(
        m.vision_tower_runs(),
        1,
        "the follow-up did not run the vision tower"
    );
    let last_image_position = second.ids.iter().rposition(|&t| t == placeholder).unwrap();
    assert!(
        usage.reused_tokens > last_image_position,
        "the image was not prefilled again"
    );

    // A new conversation about the same picture: prefilled again, but from cached features.
    let usage = m
        .generate(
            StreamRequest::new(Session::new(&m.model), &first, &greedy(2), &cancel),
            |_| {},
        )
        .unwrap();
    assert_eq!((usage.reused_tokens, m.vision_tower_runs()), (0, 1));

    // A prompt whose placeholders do not match the images is refused with both counts.
    let error = m.prompt(&messages, false, &[]).unwrap_err().to_string();
    assert!(error.contains('1') && error.contains('0'), "{error}");
}

#[test]
fn a_stop_during_prefill_ends_before_any_token() {
    let m = LoadedModel::load(&fixture(), &LoadOptions::default()).unwrap();
    let prompt = m
        .prompt(
            &[Message::text(Role::User, "word ".repeat(300))],
            false,
            &[],
        )
        .unwrap();
    let mut session = Session::new(&m.model);
    // Set before the first chunk: the flag is read between prefill chunks, not only between tokens.
    let cancel = AtomicBool::new(true);
    let mut deltas = 0;

    let usage = m
        .generate(
            StreamRequest::new(
                &mut session,
                &prompt,
                &GenerateOptions {
                    prefill_chunk: 64,
                    ..greedy(8)
                },
                &cancel,
            ),
            |_| deltas += 1,
        )
        .unwrap();

    assert_eq!(usage.stop_reason, StopReason::Cancelled);
    assert_eq!((usage.generated_tokens, deltas), (0, 0));
    assert!(session.tokens().is_empty(), "nothing was prefilled");
}

/// The answer to `messages` (greedy, `max_tokens`) through the engine thread, as text.
fn engine_answer(
    engine: &Engine,
    conversation: &str,
    messages: Vec<Message>,
    max_tokens: usize,
) -> String {
    let (tx, rx) = channel();
    let request = ChatRequest {
        conversation: conversation.into(),
        messages,
        images: Vec::new(),
        audio: Vec::new(),
        thinking: false,
        tools: Vec::new(),
        options: greedy(max_tokens),
    };
    engine.generate(request, move |e| drop(tx.send(e))).unwrap();
    let mut text = String::new();
    loop {
        match rx
            .recv_timeout(Duration::from_secs(60))
            .expect("engine went silent")
        {
            Event::Prefill { .. } => {}
            Event::Delta { delta, .. } => text.push_str(&delta),
            Event::Done { .. } => return text,
            Event::Error { error, .. } => panic!("{error}"),
        }
    }
}

#[test]
fn the_warm_up_after_loading_changes_no_answer() {
    let messages = vec![Message::text(Role::User, "Tell me about bread and rivers.")];
    let m = LoadedModel::load(&fixture(), &LoadOptions::default()).unwrap();
    let cancel = AtomicBool::new(false);
    let mut cold = Vec::new();
    let prompt = m.prompt(&messages, false, &[]).unwrap();
    m.generate(
        StreamRequest::new(Session::new(&m.model), &prompt, &greedy(10), &cancel),
        |d| cold.extend(d.token),
    )
    .unwrap();
    let cold = m.tokenizer.decode(&cold, false).unwrap();
    assert!(!cold.is_empty());
    m.warm_up().unwrap();
    assert!(m.warm_up_over(300, &AtomicBool::new(false)).unwrap());
    // Stopped (as by a request sent after the load): it returns at once, having done nothing
    // that changes an answer.
    assert!(!m.warm_up_over(300, &AtomicBool::new(true)).unwrap());
    drop(m);

    // The engine thread warms up right after it replies to the load: a request sent at once
    // waits for it and gets the answer a model without warm-up gives.
    let engine = Engine::spawn();
    engine.load(&fixture(), LoadOptions::default()).unwrap();
    assert_eq!(engine_answer(&engine, "w1", messages.clone(), 10), cold);
    assert_eq!(engine_answer(&engine, "w2", messages, 10), cold);
}

#[test]
fn the_token_stream_hands_out_the_generators_ids_and_says_why_it_ended() {
    let m = common::load_f32();
    let prompt = m
        .prompt(
            &[Message::text(Role::User, "Tell me about bread.")],
            false,
            &[],
        )
        .unwrap();
    let mut streamed = Vec::new();
    let usage = m
        .generate(
            StreamRequest::new(
                Session::new(&m.model),
                &prompt,
                &greedy(8),
                &AtomicBool::new(false),
            ),
            |d| streamed.extend(d.token),
        )
        .unwrap();

    // The stream alone knows no end of turn: it runs to max_tokens, through the same ids.
    let cancel = AtomicBool::new(false);
    let mut session = Session::new(&m.model);
    let mut stream = m
        .token_stream(StreamRequest::new(
            &mut session,
            &prompt,
            &greedy(8),
            &cancel,
        ))
        .unwrap();
    let mut ids = Vec::new();
    while let Some(id) = stream.next_token().unwrap() {
        ids.push(id);
    }
    assert_eq!(stream.end(), Some(StreamEnd::MaxTokens));
    assert_eq!(ids.len(), 8);
    assert_eq!(&ids[..streamed.len()], streamed.as_slice());
    assert_eq!(
        usage.generated_tokens,
        streamed.len() + usize::from(usage.stop_reason == StopReason::EndOfTurn)
    );
    // The caches hold the prompt and every id but the last (never fed forward).
    drop(stream);
    assert_eq!(
        session.tokens(),
        [prompt.ids.as_slice(), &ids[..7]].concat()
    );

    // Room for three ids in the context window: three, then ContextFull.
    let tight = GenerateOptions {
        context_window: prompt.ids.len() + 3,
        ..greedy(100)
    };
    let mut session = Session::new(&m.model);
    let mut stream = m
        .token_stream(StreamRequest::new(&mut session, &prompt, &tight, &cancel))
        .unwrap();
    let mut count = 0;
    while stream.next_token().unwrap().is_some() {
        count += 1;
    }
    assert_eq!((count, stream.end()), (3, Some(StreamEnd::ContextFull)));

    // Cancelled after two ids: nothing more, and it says so.
    let mut session = Session::new(&m.model);
    let mut stream = m
        .token_stream(StreamRequest::new(
            &mut session,
            &prompt,
            &greedy(100),
            &cancel,
        ))
        .unwrap();
    stream.next_token().unwrap().unwrap();
    stream.next_token().unwrap().unwrap();
    cancel.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(stream.next_token().unwrap(), None);
    assert_eq!(stream.end(), Some(StreamEnd::Cancelled));
}

/// The greedy answer to `prompt` in `session`: its ids, its streamed text and its usage.
fn greedy_answer(
    m: &LoadedModel,
    session: &mut Session,
    prompt: &engine::prompt::Prompt,
    max_tokens: usize,
) -> (Vec<u32>, String, engine::generate::Usage) {
    let (mut ids, mut text) = (Vec::new(), String::new());
    let usage = m
        .generate(
            StreamRequest::new(
                session,
                prompt,
                &greedy(max_tokens),
                &AtomicBool::new(false),
            ),
            |d| {
                ids.extend(d.token);
                text.push_str(&d.text);
            },
        )
        .unwrap();
    (ids, text, usage)
}

/// A greedy answer to `question` of up to `max_tokens` ids, cut before its first control id
/// (a random-weight model emits some; a real answer's hidden control ids are never written
/// back into a prompt, so reuse stops there).
fn long_answer(m: &LoadedModel, question: &str, max_tokens: usize) -> Vec<u32> {
    let prompt = m
        .prompt(&[Message::text(Role::User, question)], false, &[])
        .unwrap();
    let (mut ids, _, _) = greedy_answer(m, &mut Session::new(&m.model), &prompt, max_tokens);
    let plain = ids
        .iter()
        .take_while(|&&id| !m.tokenizer.is_special(id))
        .count();
    ids.truncate(plain);
    ids
}

#[test]
fn a_follow_up_after_a_long_answer_reuses_the_whole_history() {
    let m = common::load_f32();
    let question = "What is the capital of France?";
    // Longer than the sliding window and its rewind slack together: the tiny model's window
    // is 32, so this answer pushes everything before it out of the sliding caches.
    let answer = long_answer(&m, question, 110);
    assert!(
        answer.len() > 32 + gemma::cache::REWIND_SLACK,
        "the fixture's greedy answer is too short to test this ({} ids): pick another question",
        answer.len()
    );
    let mut session = Session::new(&m.model);
    let first = m
        .prompt(&[Message::text(Role::User, question)], false, &[])
        .unwrap();
    let (again, text, _) = greedy_answer(&m, &mut session, &first, answer.len());
    assert_eq!(again, answer);
    let history = session.tokens().to_vec();

    // The answer kept with its ids: the follow-up prefills only the new question.
    let messages = vec![
        Message::text(Role::User, question),
        Message::text(Role::Assistant, text.clone()).with_generated(answer.clone()),
        Message::text(Role::User, "And of Italy?"),
    ];
    let second = m.prompt(&messages, false, &[]).unwrap();
    assert_eq!(&second.ids[..history.len()], history.as_slice());
    let (reused_answer, _, usage) = greedy_answer(&m, &mut session, &second, 8);
    assert_eq!(
        usage.reused_tokens,
        history.len(),
        "the whole history was reused"
    );
    let (fresh_answer, _, _) = greedy_answer(&m, &mut Session::new(&m.model), &second, 8);
    assert_eq!(reused_answer, fresh_answer);

    // An answer the history writes differently (here: another text; in a chat, a thought the
    // template drops) still reuses everything before it, from the snapshot taken where it
    // began — the sliding caches can no longer rewind that far themselves — and answers
    // exactly as a fresh session does.
    let mut session = Session::new(&m.model);
    greedy_answer(&m, &mut session, &first, answer.len());
    let messages = vec![
        Message::text(Role::User, question),
        Message::text(Role::Assistant, "Paris."),
        Message::text(Role::User, "And of Italy?"),
    ];
    let third = m.prompt(&messages, false, &[]).unwrap();
    let (reused_answer, _, usage) = greedy_answer(&m, &mut session, &third, 8);
    assert_eq!(usage.reused_tokens, first.ids.len());
    let (fresh_answer, _, _) = greedy_answer(&m, &mut Session::new(&m.model), &third, 8);
    assert_eq!(reused_answer, fresh_answer);
}
