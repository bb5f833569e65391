//! The context window and the prompt cache: a follow-up reuses the history it shares, and a
//! conversation that outgrows the window says so and keeps the question.

use super::*;

#[test]
fn a_conversation_that_outgrows_the_context_says_so_and_keeps_the_question() {
    let h = Harness::with_model();
    let settings = Settings {
        context_length: 512,
        max_tokens: 16,
        ..short()
    };
    let sent = h.send(&"many words ".repeat(400), &settings).unwrap();

    let events = h.finish(sent.generation_id);

    let GenerationEvent::Error { error, .. } = events.last().unwrap() else {
        panic!("{events:?}");
    };
    assert_eq!(error.kind, ErrorKind::ContextFull);
    assert!(error.message.contains("512"), "{}", error.message);
    // One message longer than the window: a new chat would not help, and it says so.
    let need = error.context.unwrap();
    assert!(
        need.alone && need.window == 512 && need.needed > 512,
        "{need:?}"
    );
    assert!(
        error.message.starts_with("This message is "),
        "{}",
        error.message
    );
    let messages = h
        .state
        .store
        .get_conversation(&sent.conversation.id)
        .unwrap()
        .messages;
    assert_eq!(
        messages[0].text.len(),
        "many words ".repeat(400).trim_end().len()
    );
    assert_eq!(messages[1].status, MessageStatus::Error);
    assert!(!h.state.chat.is_busy(), "the next message can be sent");
}

#[test]
fn a_follow_up_after_a_long_answer_reuses_the_whole_history() {
    let h = Harness::with_model();
    // Longer than the tiny model's sliding window (32) and its rewind slack together.
    let settings = Settings {
        max_tokens: 150,
        temperature: 0.0,
        ..Settings::default()
    };
    let sent = h.send("Count to twenty.", &settings).unwrap();
    h.finish(sent.generation_id);
    let id = sent.conversation.id.clone();
    let answer = h.state.store.get_conversation(&id).unwrap().messages[1].clone();
    let first = answer.usage.clone().unwrap();
    assert_eq!(first.stop_reason, StopReason::MaxTokens, "{first:?}");
    let ids = answer.generated.expect("the answer's token ids are kept");
    assert_eq!(ids.len(), first.generated_tokens as usize);

    let follow_up = h.send_to(Some(&id), "And backwards?", &settings).unwrap();
    let events = h.finish(follow_up.generation_id);
    let Some(GenerationEvent::Done { usage, .. }) = events.last() else {
        panic!("{events:?}");
    };
    // Everything the model read in the first turn (its last id is sampled, never read).
    let history = first.prompt_tokens + first.generated_tokens - 1;
    assert_eq!(
        usage.reused_tokens, history,
        "the follow-up reused the whole history (a control id in the fixture's greedy answer \
         would stop reuse there: pick another question if the fixture changed)"
    );
    // Prefilled: the answer's last id, the turn markers and the four-word question.
    assert!(usage.prompt_tokens - usage.reused_tokens < 30, "{usage:?}");
    // The ids survive a restart of the store: they are saved with the answer.
    let reopened = chats::Store::open(&DataDir::new(h.data_dir.clone()).chats()).unwrap();
    let again = reopened.get_conversation(&id).unwrap();
    assert_eq!(again.messages[1].generated.as_deref(), Some(ids.as_slice()));
}

#[test]
fn a_conversation_that_outgrows_the_context_offers_a_new_chat_not_a_shorter_message() {
    let h = Harness::with_model();
    let roomy = Settings {
        context_length: 2048,
        max_tokens: 4,
        ..short()
    };
    let sent = h.send(&"many words ".repeat(450), &roomy).unwrap();
    h.finish(sent.generation_id);
    // The same chat with a window the history no longer fits, though the new message does.
    let tight = Settings {
        context_length: 512,
        ..roomy
    };
    let follow_up = h
        .send_to(Some(&sent.conversation.id), "And then?", &tight)
        .unwrap();
    let events = h.finish(follow_up.generation_id);
    let Some(GenerationEvent::Error { error, .. }) = events.last() else {
        panic!("{events:?}");
    };
    let need = error.context.unwrap();
    assert!(
        !need.alone && need.window == 512 && need.needed > 512,
        "{need:?}"
    );
    assert!(
        error.message.starts_with("This conversation needs ") && error.message.contains("new chat"),
        "{}",
        error.message
    );
}
