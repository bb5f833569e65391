//! Quick ask's command path: a question asked from the quick-ask window is answered by the same
//! engine, continues with a follow-up, and is handed over to the main window as a chat the list
//! shows.

use super::*;
use crate::quick_ask;

#[test]
fn a_quick_question_is_answered_and_handed_over_as_a_listed_chat() {
    let harness = Harness::with_model();
    let settings = Settings {
        max_tokens: 6,
        ..Settings::default()
    };
    // The window sends with no conversation: a new chat, as the main window's first message.
    let sent = harness
        .send_to(None, "What is the capital of France?", &settings)
        .unwrap();
    let events = harness.finish(sent.generation_id);
    assert!(
        matches!(events.last(), Some(GenerationEvent::Done { .. })),
        "{events:?}"
    );
    let id = sent.conversation.id.clone();
    // A follow-up in the window continues the same chat.
    let follow = harness
        .send_to(Some(&id), "And of Italy?", &settings)
        .unwrap();
    assert_eq!(follow.conversation.id, id);
    harness.finish(follow.generation_id);

    // "Open in Gemma Desk": the chat the main window opens holds both turns, answered.
    let handed = quick_ask::check_hand_over(&harness.state.store, &id).unwrap();
    let texts: Vec<(Role, &str)> = handed
        .messages
        .iter()
        .map(|m| (m.role, m.text.as_str()))
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert_eq!(texts[0], (Role::User, "What is the capital of France?"));
    assert_eq!(texts[2], (Role::User, "And of Italy?"));
    for answer in [&handed.messages[1], &handed.messages[3]] {
        assert_eq!(answer.role, Role::Assistant);
        assert_eq!(answer.status, MessageStatus::Complete);
        assert!(!answer.text.is_empty());
    }
    // …and the sidebar lists it.
    let listed = harness.state.store.list_conversations().unwrap();
    assert!(listed.iter().any(|c| c.id == id), "{listed:?}");
}

#[test]
fn handing_over_a_chat_deleted_meanwhile_is_refused_in_words() {
    let harness = Harness::with_model();
    let settings = Settings {
        max_tokens: 3,
        ..Settings::default()
    };
    let sent = harness.send_to(None, "Hi", &settings).unwrap();
    harness.finish(sent.generation_id);
    harness
        .state
        .store
        .delete_conversation(&sent.conversation.id)
        .unwrap();
    let err = quick_ask::check_hand_over(&harness.state.store, &sent.conversation.id).unwrap_err();
    assert!(err.to_string().contains("was deleted"), "{err}");
}

#[test]
fn the_shortcut_is_alt_space_until_another_is_saved() {
    let harness = Harness::new();
    let store = &harness.state.store;
    assert_eq!(quick_ask::stored(store), "Alt+Space");
    store.set_setting(quick_ask::KEY, "Ctrl+Shift+K").unwrap();
    assert_eq!(quick_ask::stored(store), "Ctrl+Shift+K");
    // A stored value that is no shortcut (edited by hand) falls back to the default.
    store.set_setting(quick_ask::KEY, "Banana").unwrap();
    assert_eq!(quick_ask::stored(store), "Alt+Space");
}
