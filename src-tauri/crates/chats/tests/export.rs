//! JSON export and import: a round trip gives back every message, version and image byte for
//! byte; importing twice adds nothing; a damaged or foreign file is refused and changes nothing.

use std::fs;

use chats::{
    AttachmentInput, AttachmentKind, Error, Export, MessageStatus, Role, StopReason, Store, Usage,
};
use tempfile::TempDir;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n pretend pixels";
const JPEG: &[u8] = b"\xff\xd8\xff pretend jpeg";
const WAV: &[u8] = b"RIFF\x24\x00\x00\x00WAVEfmt  pretend sound";

fn open() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

fn usage() -> Usage {
    Usage {
        prompt_tokens: 12,
        reused_tokens: 3,
        generated_tokens: 2,
        time_to_first_token_ms: 80.0,
        prefill_tokens_per_second: 150.0,
        decode_tokens_per_second: 20.5,
        stop_reason: StopReason::EndOfTurn,
        context_window: Some(4096),
        tokens_per_round: None,
    }
}

/// The system prompt of [`chat_with_everything`].
const SYSTEM_PROMPT: &str = "Describe images in one sentence.";

/// A chat with its own system prompt, two images, a regenerated answer (two versions) and a
/// follow-up.
fn chat_with_everything(store: &Store) -> String {
    let chat = store.create_conversation("Photos & plans").unwrap().id;
    store.set_system_prompt(&chat, Some(SYSTEM_PROMPT)).unwrap();
    let png = store
        .store_attachment(PNG, "image/png", Some(4), Some(3))
        .unwrap();
    let jpeg = store
        .store_attachment(JPEG, "image/jpeg", None, None)
        .unwrap();
    let q = store
        .add_message(
            &chat,
            Role::User,
            "What is in these?",
            &[(&png).into(), (&jpeg).into()],
        )
        .unwrap();
    for (text, ids) in [("A cat.", [10u32, 11]), ("Two cats.", [12, 13])] {
        let id = store.begin_answer_to(&chat, &q.id).unwrap();
        store.append_assistant_text(&id, text).unwrap();
        store.set_generated_ids(&id, &ids).unwrap();
        store.set_answer_model(&id, MODEL).unwrap();
        store
            .finish_assistant_message(&id, MessageStatus::Complete, Some(&usage()), None)
            .unwrap();
    }
    store.add_message(&chat, Role::User, "Thanks", &[]).unwrap();
    chat
}

/// The model that wrote the answers of [`chat_with_everything`].
const MODEL: &str = "gemma-4-e4b-it-4bit";

/// Everything that must come back: every message (all versions) with its ids, stats and the
/// bytes of its images, and the conversation as shown.
fn everything(store: &Store, chat: &str) -> (Export, Vec<(String, u32, u32)>) {
    let mut export = store.export(Some(&[chat.to_owned()])).unwrap();
    export.exported_at = 0;
    let shown = store
        .get_conversation(chat)
        .unwrap()
        .messages
        .into_iter()
        .map(|m| (m.text, m.version, m.versions))
        .collect();
    (export, shown)
}

#[test]
fn export_delete_import_gives_back_every_message_and_image_byte_for_byte() {
    let (_dir, store) = open();
    let chat = chat_with_everything(&store);
    let before = everything(&store, &chat);
    assert_eq!(
        before.0.conversations[0].messages.len(),
        4,
        "both versions are exported"
    );
    assert_eq!(before.0.files.len(), 2);
    let json = store
        .export_json(Some(std::slice::from_ref(&chat)))
        .unwrap();

    store.delete_conversation(&chat).unwrap();
    assert!(store.list_conversations().unwrap().is_empty());
    let report = store.import_json(&json).unwrap();

    assert_eq!((report.conversations_added, report.messages_added), (1, 4));
    assert_eq!(everything(&store, &chat), before);
    let images = &store.get_conversation(&chat).unwrap().messages[0].attachments;
    let bytes: Vec<Vec<u8>> = images
        .iter()
        .map(|a| fs::read(store.attachment_path(&a.id).unwrap()).unwrap())
        .collect();
    assert_eq!(bytes, [PNG.to_vec(), JPEG.to_vec()]);
    let imported = store.get_conversation(&chat).unwrap();
    assert_eq!(imported.system_prompt.as_deref(), Some(SYSTEM_PROMPT));
    let answer = &imported.messages[1];
    assert_eq!(answer.generated, Some(vec![12, 13]));
    assert_eq!(answer.usage, Some(usage()));
    // The import is searchable like anything written here.
    assert_eq!(store.search("cats").unwrap().len(), 1);
}

#[test]
fn importing_the_same_export_twice_adds_nothing_and_says_what_was_skipped() {
    let (_dir, store) = open();
    let chat = chat_with_everything(&store);
    let json = store.export_json(None).unwrap();
    let before = everything(&store, &chat);

    let report = store.import_json(&json).unwrap();
    assert_eq!(
        (
            report.conversations_added,
            report.conversations_unchanged,
            report.messages_skipped
        ),
        (0, 1, 4)
    );
    let again = store.import_json(&json).unwrap();
    assert_eq!(again, report);
    assert_eq!(store.list_conversations().unwrap().len(), 1);
    assert_eq!(everything(&store, &chat), before);
}

#[test]
fn an_export_imported_into_another_folder_adds_only_what_is_missing() {
    let (_dir, store) = open();
    let chat = chat_with_everything(&store);
    let old = store.export_json(None).unwrap();
    store
        .add_message(&chat, Role::Assistant, "You're welcome", &[])
        .unwrap();
    let new = store.export_json(None).unwrap();

    let (_other_dir, other) = open();
    other.import_json(&old).unwrap();
    let report = other.import_json(&new).unwrap();
    assert_eq!(
        (
            report.conversations_updated,
            report.messages_added,
            report.messages_skipped
        ),
        (1, 1, 4)
    );
    // Everything but the time of last activity, which the import is.
    let without_activity = |store: &Store| {
        let (mut export, shown) = everything(store, &chat);
        export.conversations[0].updated_at = 0;
        (export, shown)
    };
    assert_eq!(without_activity(&other), without_activity(&store));
}

#[test]
fn damaged_or_foreign_files_are_refused_and_change_nothing() {
    let (dir, store) = open();
    let chat = chat_with_everything(&store);
    let json = store.export_json(None).unwrap();
    store.delete_conversation(&chat).unwrap();
    let other = store.create_conversation("Untouched").unwrap();

    let text = String::from_utf8(json.clone()).unwrap();
    let export: Export = serde_json::from_slice(&json).unwrap();
    let a_hash = export.files.keys().next().unwrap().clone();
    let mut wrong_bytes = export.clone();
    wrong_bytes.files.get_mut(&a_hash).unwrap().data = "AAAA".into();
    let mut orphan_parent = export.clone();
    orphan_parent.conversations[0].messages[1].parent_id =
        Some("01900000-0000-7000-8000-000000000000".into());
    let mut missing_file = export.clone();
    missing_file.files.remove(&a_hash);
    let mut path_as_id = export.clone();
    path_as_id.conversations[0].messages[0].id = "../../../../etc/passwd".into();
    let mut long_prompt = export.clone();
    long_prompt.conversations[0].system_prompt =
        Some("x".repeat(chats::SYSTEM_PROMPT_MAX_CHARS + 1));

    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("cut short", json[..json.len() / 2].to_vec()),
        ("not JSON", b"\x00\x01 hello".to_vec()),
        ("other JSON", br#"{"messages": []}"#.to_vec()),
        (
            "newer",
            text.replacen("\"version\": 1", "\"version\": 99", 1)
                .into_bytes(),
        ),
        (
            "bytes that do not match their hash",
            serde_json::to_vec(&wrong_bytes).unwrap(),
        ),
        (
            "a reply to a missing message",
            serde_json::to_vec(&orphan_parent).unwrap(),
        ),
        (
            "an image not in the file",
            serde_json::to_vec(&missing_file).unwrap(),
        ),
        (
            "an id that is a path",
            serde_json::to_vec(&path_as_id).unwrap(),
        ),
        (
            "a system prompt over the limit",
            serde_json::to_vec(&long_prompt).unwrap(),
        ),
    ];
    let files_before = fs::read_dir(dir.path().join(chats::ATTACHMENTS_DIR))
        .unwrap()
        .count();
    for (what, file) in bad {
        let err = store.import_json(&file).unwrap_err();
        assert!(matches!(err, Error::BadExport(_)), "{what}: {err}");
        assert!(
            err.to_string().contains("nothing was changed"),
            "{what}: {err}"
        );
        let ids: Vec<String> = store
            .list_conversations()
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, std::slice::from_ref(&other.id), "{what}");
    }
    let files_after = fs::read_dir(dir.path().join(chats::ATTACHMENTS_DIR))
        .unwrap()
        .count();
    assert_eq!(files_after, files_before);
}

#[test]
fn an_export_from_before_system_prompts_imports_with_the_default_prompt() {
    let (_dir, store) = open();
    let chat = chat_with_everything(&store);
    let json = store.export_json(None).unwrap();
    let mut old: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let conversation = old["conversations"][0].as_object_mut().unwrap();
    assert!(
        conversation.remove("systemPrompt").is_some(),
        "{conversation:?}"
    );
    store.delete_conversation(&chat).unwrap();

    let report = store
        .import_json(&serde_json::to_vec(&old).unwrap())
        .unwrap();

    assert_eq!((report.conversations_added, report.messages_added), (1, 4));
    let imported = store.get_conversation(&chat).unwrap();
    assert_eq!(imported.system_prompt, None);
    assert_eq!(imported.messages.len(), 3);
    // A chat without one of its own writes none: the file reads as before.
    store.set_system_prompt(&chat, None).unwrap();
    let again = String::from_utf8(store.export_json(None).unwrap()).unwrap();
    assert!(!again.contains("systemPrompt"), "{again}");
}

#[test]
fn a_failure_part_way_rolls_back_the_whole_import() {
    let (_dir, store) = open();
    let first = chat_with_everything(&store);
    let second = store.create_conversation("Second").unwrap().id;
    store
        .add_message(&second, Role::User, "hello", &[])
        .unwrap();
    let third = store.create_conversation("Third").unwrap().id;
    store.add_message(&third, Role::User, "hi", &[]).unwrap();
    let mut export = store.export(None).unwrap();
    store.delete_conversation(&second).unwrap();
    store.delete_conversation(&third).unwrap();
    // Third imports fine; then Second claims a message that, here, belongs to First.
    let taken = store.get_conversation(&first).unwrap().messages[0]
        .id
        .clone();
    export.conversations.retain(|c| c.id != first);
    export.conversations.sort_by_key(|c| c.id != third);
    export.conversations[1].messages[0].id = taken;
    let before = store.list_conversations().unwrap();

    let err = store.import(&export).unwrap_err();

    assert!(matches!(err, Error::BadExport(_)), "{err}");
    assert_eq!(
        store.list_conversations().unwrap(),
        before,
        "Third was rolled back too"
    );
}

#[test]
fn markdown_reads_as_the_conversation_shown_with_images_beside_it() {
    let (dir, store) = open();
    let chat = chat_with_everything(&store);
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    let path = out.join("My chat.md");

    store
        .export_markdown(&chat, &path, |text| text.to_owned())
        .unwrap();

    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# Photos & plans\n"), "{text}");
    assert!(
        text.contains("## You\n\n![image 1](My%20chat_files/"),
        "{text}"
    );
    assert!(
        text.contains("Two cats.") && !text.contains("A cat."),
        "only the version shown: {text}"
    );
    assert!(
        text.contains("## Gemma") && text.contains("Thanks"),
        "{text}"
    );
    assert!(
        text.contains(&format!("## System prompt\n\n{SYSTEM_PROMPT}\n\n## You")),
        "the chat's own prompt comes first: {text}"
    );
    let mut images: Vec<Vec<u8>> = fs::read_dir(out.join("My chat_files"))
        .unwrap()
        .map(|e| fs::read(e.unwrap().path()).unwrap())
        .collect();
    images.sort();
    let mut expected = vec![PNG.to_vec(), JPEG.to_vec()];
    expected.sort();
    assert_eq!(images, expected);
}

#[test]
fn audio_comes_back_from_an_export_with_its_length_and_name_and_is_linked_in_markdown() {
    let (dir, store) = open();
    let chat = store.create_conversation("Voicemail").unwrap().id;
    let wav = store.store_audio(WAV, "audio/wav", 65_400).unwrap();
    let png = store
        .store_attachment(PNG, "image/png", Some(4), Some(3))
        .unwrap();
    store
        .add_message(
            &chat,
            Role::User,
            "What does it say?",
            &[
                AttachmentInput::from(&png),
                AttachmentInput::from(&wav).named("voicemail from Ana.wav"),
            ],
        )
        .unwrap();
    let before = store.get_conversation(&chat).unwrap().messages[0]
        .attachments
        .clone();
    let json = store.export_json(None).unwrap();

    store.delete_conversation(&chat).unwrap();
    store.import_json(&json).unwrap();

    let after = &store.get_conversation(&chat).unwrap().messages[0].attachments;
    let kept: Vec<_> = after
        .iter()
        .map(|a| (a.kind, a.duration_ms, a.name.as_deref(), a.mime.as_str()))
        .collect();
    assert_eq!(
        kept,
        [
            (AttachmentKind::Image, None, None, "image/png"),
            (
                AttachmentKind::Audio,
                Some(65_400),
                Some("voicemail from Ana.wav"),
                "audio/wav"
            )
        ]
    );
    assert_eq!(after.len(), before.len());
    assert_eq!(
        fs::read(store.attachment_path(&after[1].id).unwrap()).unwrap(),
        WAV
    );

    let path = dir.path().join("voicemail.md");
    store.export_markdown(&chat, &path, str::to_owned).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("![image 1](voicemail_files/")
            && text.contains("[audio 1 (1:05)](voicemail_files/"),
        "images and audio are numbered apart: {text}"
    );
    let copied = dir
        .path()
        .join("voicemail_files")
        .join(format!("{}.wav", wav.hash));
    assert_eq!(fs::read(copied).unwrap(), WAV);
}

#[test]
fn an_export_that_calls_a_sound_an_image_is_refused() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Mislabelled").unwrap().id;
    let wav = store.store_audio(WAV, "audio/wav", 1_000).unwrap();
    store
        .add_message(&chat, Role::User, "hear this", &[(&wav).into()])
        .unwrap();
    let mut export = store.export(None).unwrap();
    store.delete_conversation(&chat).unwrap();
    export.conversations[0].messages[0].attachments[0].kind = AttachmentKind::Image;

    let err = store.import(&export).unwrap_err();

    assert!(matches!(err, Error::BadExport(_)), "{err}");
    assert!(store.list_conversations().unwrap().is_empty());
}

#[test]
fn an_export_from_before_audio_imports_its_images_as_images() {
    let (_dir, store) = open();
    let chat = chat_with_everything(&store);
    let json = store.export_json(None).unwrap();
    let mut old: serde_json::Value = serde_json::from_slice(&json).unwrap();
    for attachment in old["conversations"][0]["messages"][0]["attachments"]
        .as_array_mut()
        .unwrap()
    {
        let attachment = attachment.as_object_mut().unwrap();
        assert!(attachment.remove("kind").is_some(), "{attachment:?}");
    }
    store.delete_conversation(&chat).unwrap();

    store
        .import_json(&serde_json::to_vec(&old).unwrap())
        .unwrap();

    let attachments = &store.get_conversation(&chat).unwrap().messages[0].attachments;
    assert_eq!(attachments.len(), 2);
    assert!(attachments.iter().all(|a| a.kind == AttachmentKind::Image));
}

#[test]
fn an_export_says_which_model_wrote_each_answer_and_brings_it_back() {
    let (_dir, store) = open();
    let chat = chat_with_everything(&store);

    let json: serde_json::Value =
        serde_json::from_slice(&store.export_json(None).unwrap()).unwrap();
    let conversation = &json["conversations"][0];
    assert_eq!(
        conversation["model"], MODEL,
        "the conversation's model is kept"
    );
    let models: Vec<&serde_json::Value> = conversation["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["model"])
        .collect();
    assert_eq!(
        models,
        [
            &serde_json::Value::Null,
            &serde_json::json!(MODEL),
            &serde_json::json!(MODEL),
            &serde_json::Value::Null
        ],
        "each answer names its model; a person's messages none"
    );

    let (dir2, other) = open();
    other.import(&store.export(None).unwrap()).unwrap();
    let shown = other.get_conversation(&chat).unwrap();
    assert_eq!(shown.model.as_deref(), Some(MODEL));
    assert_eq!(shown.messages[1].model.as_deref(), Some(MODEL));
    drop(dir2);
}

#[test]
fn markdown_keeps_the_conversations_outline_whatever_headings_an_answer_has() {
    let (dir, store) = open();
    let chat = store.create_conversation("Plans").unwrap().id;
    let q = store
        .add_message(&chat, Role::User, "Plan my week\n===", &[])
        .unwrap();
    let answer = "## Monday\n\nGym.\n\n# Summary\nBusy.\n\n```sh\n# not a heading\n## nor this\n```\n\nTuesday\n---\n\n- item\n---\n";
    let id = store.begin_answer_to(&chat, &q.id).unwrap();
    store.append_assistant_text(&id, answer).unwrap();
    store.set_answer_model(&id, "tiny").unwrap();
    store
        .finish_assistant_message(&id, MessageStatus::Complete, Some(&usage()), None)
        .unwrap();
    let path = dir.path().join("Plans.md");

    store.export_markdown(&chat, &path, str::to_owned).unwrap();

    let text = fs::read_to_string(&path).unwrap();
    let mut in_code = false;
    let outline: Vec<&str> = text
        .lines()
        .filter(|l| {
            in_code ^= l.starts_with("```");
            !in_code && (l.starts_with("# ") || l.starts_with("## "))
        })
        .collect();
    assert_eq!(
        outline,
        ["# Plans", "## You", "## Gemma"],
        "only the chat's own headings at its levels: {text}"
    );
    for demoted in [
        "### Plan my week\n",
        "#### Monday\n",
        "### Summary\nBusy.",
        "#### Tuesday\n",
    ] {
        assert!(text.contains(demoted), "{demoted:?} in {text}");
    }
    assert!(
        text.contains("```sh\n# not a heading\n## nor this\n```"),
        "code stays as written: {text}"
    );
    assert!(
        text.contains("- item\n---"),
        "a rule after a list stays a rule: {text}"
    );
    assert!(text.contains("*Model: tiny*"), "{text}");
    assert!(
        text.ends_with("---\n") && !text.ends_with("\n\n"),
        "ends with one newline: {text:?}"
    );
}

#[test]
fn a_clip_reads_as_its_chip_does() {
    assert_eq!(chats::clip_length(1_140), "1.1 s");
    assert_eq!(chats::clip_length(30), "0.1 s");
    assert_eq!(chats::clip_length(9_940), "9.9 s");
    assert_eq!(chats::clip_length(9_960), "0:10");
    assert_eq!(chats::clip_length(65_400), "1:05");
    assert_eq!(chats::clip_length(3_725_000), "1:02:05");
}
