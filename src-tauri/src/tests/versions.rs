//! Regenerate and edit: each makes another version of its turn from the same prompt, and the
//! versions shown before stay and come back.

use super::*;

/// The conversation shown: (text, version, versions) of each message.
fn shown(h: &Harness, id: &str) -> Vec<(String, u32, u32)> {
    h.state
        .store
        .get_conversation(id)
        .unwrap()
        .messages
        .into_iter()
        .map(|m| (m.text, m.version, m.versions))
        .collect()
}

#[test]
fn regenerate_keeps_the_earlier_answer_and_a_follow_up_continues_the_version_shown() {
    let h = Harness::with_model();
    let first = h.send("Question one", &short()).unwrap();
    h.finish(first.generation_id);
    let id = first.conversation.id.clone();
    let follow = h.send_to(Some(&id), "Question two", &short()).unwrap();
    h.finish(follow.generation_id);
    let old_answer = h.state.store.get_conversation(&id).unwrap().messages[3].clone();

    let again = h.state.chat.regenerate(&id, &short()).unwrap();
    assert_eq!(again.user_message.id, follow.user_message.id);
    h.finish(again.generation_id);
    let messages = h.state.store.get_conversation(&id).unwrap().messages;
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[3].id, again.assistant_message_id);
    assert_eq!((messages[3].version, messages[3].versions), (2, 2));

    // Back to the first version: its text, stats and generated ids are all still there.
    let conversation = h
        .state
        .chat
        .select_version(&id, &again.assistant_message_id, 1)
        .unwrap();
    let back = &conversation.messages[3];
    assert_eq!(back.id, follow.assistant_message_id);
    assert_eq!((back.version, back.versions), (1, 2));
    assert_eq!(
        (&back.text, &back.usage),
        (&old_answer.text, &old_answer.usage)
    );
    assert!(back.generated.is_some());
    assert_eq!(back.generated, old_answer.generated);

    // A follow-up is answered after the version shown.
    let third = h.send_to(Some(&id), "Question three", &short()).unwrap();
    h.finish(third.generation_id);
    let ids: Vec<String> = h
        .state
        .store
        .get_conversation(&id)
        .unwrap()
        .messages
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids.len(), 6);
    assert_eq!(ids[3], follow.assistant_message_id);
    assert_eq!(ids[4], third.user_message.id);
}

/// The answer shown last in `conversation`: its text and usage, as saved.
fn last_answer(h: &Harness, conversation: &str) -> (String, chats::Usage) {
    let saved = h.state.store.get_conversation(conversation).unwrap();
    let answer = saved.messages.last().unwrap();
    assert_eq!(answer.role, Role::Assistant);
    (answer.text.clone(), answer.usage.clone().unwrap())
}

/// Regenerates the last answer of `conversation` and checks it was answered from the same
/// prompt: the same prompt length, the cache read up to the replaced answer's start (every
/// prompt token but the one prefilled to sample from), and at temperature 0 the same text again.
fn regenerate_matches(h: &Harness, conversation: &str, settings: &Settings) {
    let (text, usage) = last_answer(h, conversation);
    let again = h.state.chat.regenerate(conversation, settings).unwrap();
    let events = h.finish(again.generation_id);
    let (new_text, new_usage) = last_answer(h, conversation);
    assert_eq!(new_text, streamed_text(&events));
    assert_eq!(
        new_usage.prompt_tokens, usage.prompt_tokens,
        "the replaced answer is not part of the prompt: {new_usage:?}"
    );
    assert_eq!(
        new_usage.reused_tokens,
        usage.prompt_tokens - 1,
        "{new_usage:?}"
    );
    assert_eq!(new_text, text, "greedy regenerate writes the same answer");
}

#[test]
fn regenerate_at_temperature_zero_answers_the_same_prompt_again() {
    let h = Harness::with_model_f32();
    let sent = h.send("Hi there", &short()).unwrap();
    let usage = usage_of(&h.finish(sent.generation_id));
    assert_eq!(usage.prompt_tokens, prompt_len(&[user("Hi there")]));
    let id = sent.conversation.id.clone();
    regenerate_matches(&h, &id, &short());
    // Again, now that two versions follow the question.
    regenerate_matches(&h, &id, &short());

    // In a longer conversation, only the last answer is left out.
    let follow = h.send_to(Some(&id), "And then?", &short()).unwrap();
    h.finish(follow.generation_id);
    regenerate_matches(&h, &id, &short());
}

#[test]
fn regenerating_a_stopped_answer_reads_the_question_not_the_stopped_text() {
    let h = Harness::with_model_f32();
    let settings = Settings {
        temperature: 0.0,
        ..long()
    };
    for question in [
        "Tell me a long story",
        "Write a poem",
        "Count to a thousand",
    ] {
        let sent = h.send(question, &settings).unwrap();
        while h.generation_events(sent.generation_id).len() < 4 {
            std::thread::sleep(Duration::from_millis(1));
        }
        h.state.chat.stop(sent.generation_id);
        let stopped = usage_of(&h.finish(sent.generation_id));
        if stopped.stop_reason != StopReason::Cancelled {
            continue;
        }
        let id = sent.conversation.id.clone();
        let (stopped_text, _) = last_answer(&h, &id);
        assert_eq!(stopped.prompt_tokens, prompt_len(&[user(question)]));

        let limited = Settings {
            max_tokens: stopped.generated_tokens + 4,
            ..settings.clone()
        };
        let again = h.state.chat.regenerate(&id, &limited).unwrap();
        h.finish(again.generation_id);
        let (text, usage) = last_answer(&h, &id);
        assert_eq!(usage.prompt_tokens, stopped.prompt_tokens, "{usage:?}");
        assert_eq!(usage.reused_tokens, stopped.prompt_tokens - 1, "{usage:?}");
        assert!(
            text.starts_with(&stopped_text),
            "greedy goes on where the stopped answer was cut: {stopped_text:?} then {text:?}"
        );
        return;
    }
    panic!("every answer ended before it could be stopped");
}

#[test]
fn an_edited_question_and_its_regenerated_answer_read_only_the_new_branch() {
    let h = Harness::with_model_f32();
    let (id, question_one) = two_questions(&h);

    let edited = h
        .state
        .chat
        .edit(&id, &question_one, "Question one, edited", &short())
        .unwrap();
    let usage = usage_of(&h.finish(edited.generation_id));
    assert_eq!(
        usage.prompt_tokens,
        prompt_len(&[user("Question one, edited")])
    );
    regenerate_matches(&h, &id, &short());
}

#[test]
fn editing_a_question_branches_and_the_old_branch_comes_back_after_a_restart() {
    let h = Harness::with_model();
    let (id, question_one) = two_questions(&h);
    let before = shown(&h, &id);

    let edited = h
        .state
        .chat
        .edit(&id, &question_one, "Question one, edited", &short())
        .unwrap();
    h.finish(edited.generation_id);
    let now = shown(&h, &id);
    assert_eq!(now.len(), 2, "{now:?}");
    assert_eq!(now[0], ("Question one, edited".to_owned(), 2, 2));
    let answer = &h.state.store.get_conversation(&id).unwrap().messages[1];
    assert_eq!(answer.status, MessageStatus::Complete);

    h.state
        .chat
        .select_version(&id, &edited.user_message.id, 1)
        .unwrap();
    let mut restored = before.clone();
    restored[0].2 = 2;
    assert_eq!(shown(&h, &id), restored);

    let reopened = chats::Store::open(&DataDir::new(h.data_dir.clone()).chats()).unwrap();
    let texts: Vec<(String, u32, u32)> = reopened
        .get_conversation(&id)
        .unwrap()
        .messages
        .into_iter()
        .map(|m| (m.text, m.version, m.versions))
        .collect();
    assert_eq!(texts, restored);
}

/// A chat of two answered questions: its id and the first question's id.
fn two_questions(h: &Harness) -> (String, String) {
    let first = h.send("Question one", &short()).unwrap();
    h.finish(first.generation_id);
    let id = first.conversation.id.clone();
    let follow = h.send_to(Some(&id), "Question two", &short()).unwrap();
    h.finish(follow.generation_id);
    (id, first.user_message.id)
}
