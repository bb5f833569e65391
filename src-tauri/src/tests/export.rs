//! Export and import: everything comes back byte for byte, and nothing imported reaches the
//! model unchecked.

use super::*;

#[test]
fn export_delete_import_gives_back_every_message_and_image_byte_for_byte() {
    let h = Harness::with_model();
    let png = png_of(40, 30, [10, 200, 30]);
    let pending = h.state.attachments.add_bytes("green.png", &png).unwrap();
    let settings = Settings {
        image_token_budget: 70,
        ..short()
    };
    let sent = h
        .send_with("What colour?", vec![pending.id.clone()], &settings)
        .unwrap();
    h.finish(sent.generation_id);
    let id = sent.conversation.id.clone();
    let again = h.state.chat.regenerate(&id, &settings).unwrap();
    h.finish(again.generation_id);
    let before = h.state.store.export(None).unwrap();
    let file = h.data_dir.join("export.json");
    crate::transfer::write_json(&h.state.store, None, &file).unwrap();

    h.state.chat.delete_conversation(&id).unwrap();
    let report = crate::transfer::read_and_import(&h.state.store, &file).unwrap();

    assert_eq!((report.conversations_added, report.messages_added), (1, 3));
    let mut after = h.state.store.export(None).unwrap();
    after.exported_at = before.exported_at;
    assert_eq!(
        after, before,
        "every message, version, id list and stat is back"
    );
    let conversation = h.state.store.get_conversation(&id).unwrap();
    let path = h
        .state
        .store
        .attachment_path(&conversation.messages[0].attachments[0].id)
        .unwrap();
    assert_eq!(std::fs::read(path).unwrap(), png);
    assert_eq!(conversation.messages[1].id, again.assistant_message_id);

    // The same file again adds nothing.
    let twice = crate::transfer::read_and_import(&h.state.store, &file).unwrap();
    assert_eq!((twice.messages_added, twice.messages_skipped), (0, 3));
    assert_eq!(h.state.store.list_conversations().unwrap().len(), 1);

    // A damaged copy is refused in words and changes nothing.
    let json = std::fs::read(&file).unwrap();
    h.state.chat.delete_conversation(&id).unwrap();
    std::fs::write(&file, &json[..json.len() - 100]).unwrap();
    let err = crate::transfer::read_and_import(&h.state.store, &file).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("nothing was changed"), "{err}");
    assert!(h.state.store.list_conversations().unwrap().is_empty());
}

#[test]
fn token_ids_from_an_edited_export_never_reach_the_model_unchecked() {
    let h = Harness::with_model();
    let first = h.send("Question one", &short()).unwrap();
    h.finish(first.generation_id);
    let id = first.conversation.id.clone();
    let mut export = h.state.store.export(None).unwrap();
    // Ids that do not spell the answer's text: out of the vocabulary, and low (control) ids.
    export.conversations[0].messages[1].generated = Some(vec![u32::MAX, 0, 1, 2, 3, 4, 5, 6]);
    h.state.chat.delete_conversation(&id).unwrap();
    h.state.store.import(&export).unwrap();

    let follow = h.send_to(Some(&id), "Question two", &short()).unwrap();
    let events = h.finish(follow.generation_id);

    assert!(
        matches!(events.last(), Some(GenerationEvent::Done { .. })),
        "{events:?}"
    );
}

#[test]
fn each_answer_records_the_model_that_wrote_it_and_exports_say_so() {
    let h = Harness::with_model();
    let ModelState::Ready { name, .. } = h.state.models.state() else {
        panic!("the fixture is loaded");
    };
    let sent = h.send("Hello", &short()).unwrap();
    h.finish(sent.generation_id);
    let id = sent.conversation.id.clone();

    let conversation = h.state.store.get_conversation(&id).unwrap();
    assert_eq!(conversation.messages[0].model, None, "a person wrote it");
    assert_eq!(
        conversation.messages[1].model.as_deref(),
        Some(name.as_str())
    );
    assert_eq!(conversation.model.as_deref(), Some(name.as_str()));

    let file = h.data_dir.join("export.json");
    crate::transfer::write_json(&h.state.store, None, &file).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(json["conversations"][0]["model"], name.as_str());
    assert_eq!(
        json["conversations"][0]["messages"][1]["model"],
        name.as_str()
    );
    let markdown = chats::markdown(&conversation, |_, _| String::new(), str::to_owned);
    assert!(markdown.contains(&format!("*Model: {name}*")), "{markdown}");
    assert!(markdown.ends_with('\n') && !markdown.ends_with("\n\n"));
}

#[test]
fn a_sent_message_is_no_longer_a_draft_and_the_chat_open_last_comes_back_after_a_restart() {
    let h = Harness::with_model();
    h.state.store.save_draft(None, "Hello").unwrap();
    let sent = h.send("Hello", &short()).unwrap();
    h.finish(sent.generation_id);
    let id = sent.conversation.id.clone();
    assert!(
        h.state.store.drafts().unwrap().is_empty(),
        "the new chat's draft was sent"
    );
    h.state.store.save_draft(Some(&id), "and then").unwrap();
    h.state.store.set_last_open(Some(&id)).unwrap();

    let (state, _events, _dir) = h.restart();
    assert_eq!(
        state.store.last_open().unwrap().as_deref(),
        Some(id.as_str())
    );
    assert_eq!(
        state.store.drafts().unwrap().get(&id).map(String::as_str),
        Some("and then")
    );
}
