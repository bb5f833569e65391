//! Conversations, messages, streaming answers and settings, as the app uses them.

use std::sync::Arc;
use std::time::Duration;

use chats::{Error, MessageStatus, Role, StopReason, Store, StreamWriter, Usage};
use rusqlite::Connection;
use tempfile::TempDir;

fn open() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

fn raw(dir: &TempDir) -> Connection {
    Connection::open(dir.path().join(chats::DATABASE_FILE)).unwrap()
}

fn usage() -> Usage {
    Usage {
        prompt_tokens: 42,
        reused_tokens: 0,
        generated_tokens: 7,
        time_to_first_token_ms: 180.5,
        prefill_tokens_per_second: 900.0,
        decode_tokens_per_second: 31.25,
        stop_reason: StopReason::EndOfTurn,
        context_window: Some(8192),
        tokens_per_round: None,
    }
}

fn titles(store: &Store) -> Vec<String> {
    store
        .list_conversations()
        .unwrap()
        .into_iter()
        .map(|c| c.title)
        .collect()
}

#[test]
fn opening_an_empty_folder_creates_a_wal_database_and_the_attachments_folder() {
    let (dir, store) = open();
    assert!(dir.path().join("chats.sqlite3").is_file());
    assert!(dir.path().join("attachments").is_dir());
    assert_eq!(store.attachments_dir(), dir.path().join("attachments"));
    assert!(store.list_conversations().unwrap().is_empty());

    let conn = raw(&dir);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!((version, mode.as_str()), (8, "wal"));
}

#[test]
fn reopening_keeps_everything_and_migrates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = Store::open(dir.path()).unwrap();
        let chat = store.create_conversation("Kept").unwrap();
        store
            .add_message(&chat.id, Role::User, "still here?", &[])
            .unwrap();
        store.set_setting("theme", "dark").unwrap();
        chat.id
    };
    let store = Store::open(dir.path()).unwrap();
    let chat = store.get_conversation(&id).unwrap();
    assert_eq!(chat.title, "Kept");
    assert_eq!(chat.messages[0].text, "still here?");
    assert_eq!(
        store.get_setting::<String>("theme").unwrap().as_deref(),
        Some("dark")
    );
    let version: i64 = raw(&dir)
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 8);
}

#[test]
fn a_database_from_a_newer_app_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        store.create_conversation("From the future").unwrap();
    }
    raw(&dir).pragma_update(None, "user_version", 99).unwrap();

    let err = Store::open(dir.path()).err().unwrap();
    assert!(
        matches!(
            err,
            Error::NewerSchema {
                found: 99,
                supported: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("update the app"), "{err}");

    let conn = raw(&dir);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM conversations", [], |r| r.get(0))
        .unwrap();
    assert_eq!((version, rows), (99, 1));
}

#[test]
fn a_file_that_is_not_a_database_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("chats.sqlite3"), vec![0x42; 8192]).unwrap();
    assert!(matches!(Store::open(dir.path()), Err(Error::Sqlite { .. })));
}

#[test]
fn the_list_puts_pinned_first_then_the_most_recent_activity() {
    let (_dir, store) = open();
    let a = store.create_conversation("a").unwrap();
    let b = store.create_conversation("b").unwrap();
    let c = store.create_conversation("c").unwrap();
    assert_eq!(titles(&store), ["c", "b", "a"]);

    store.add_message(&a.id, Role::User, "bump a", &[]).unwrap();
    assert_eq!(titles(&store), ["a", "c", "b"]);

    let answer = store.begin_assistant_message(&b.id).unwrap();
    store
        .finish_assistant_message(&answer, MessageStatus::Complete, None, None)
        .unwrap();
    assert_eq!(titles(&store), ["b", "a", "c"]);

    store.set_pinned(&c.id, true).unwrap();
    assert_eq!(titles(&store), ["c", "b", "a"]);
    store.set_pinned(&c.id, false).unwrap();
    assert_eq!(titles(&store), ["b", "a", "c"]);

    // Renaming is not activity: the order stays.
    store.rename_conversation(&c.id, "c renamed").unwrap();
    assert_eq!(titles(&store), ["b", "a", "c renamed"]);
}

#[test]
fn the_list_shows_message_counts_and_a_preview_of_the_last_message() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    assert_eq!((chat.message_count, chat.preview.as_deref()), (0, None));

    store
        .add_message(&chat.id, Role::System, "You are terse.", &[])
        .unwrap();
    store
        .add_message(&chat.id, Role::User, "What is\n\nRust?", &[])
        .unwrap();
    let listed = &store.list_conversations().unwrap()[0];
    assert_eq!(listed.message_count, 2);
    assert_eq!(listed.preview.as_deref(), Some("What is Rust?"));

    let long = "word ".repeat(200);
    store
        .add_message(&chat.id, Role::Assistant, &long, &[])
        .unwrap();
    let preview = store.list_conversations().unwrap()[0]
        .preview
        .clone()
        .unwrap();
    assert!(
        preview.starts_with("word word") && preview.ends_with('…'),
        "{preview}"
    );
    assert!(preview.chars().count() < 200);
}

#[test]
fn rename_changes_the_title_and_unknown_ids_are_not_found() {
    let (_dir, store) = open();
    let chat = store.create_conversation("New chat").unwrap();
    store
        .rename_conversation(&chat.id, "Paris trip ✈️")
        .unwrap();
    assert_eq!(
        store.get_conversation(&chat.id).unwrap().title,
        "Paris trip ✈️"
    );

    for err in [
        store.rename_conversation("nope", "x").unwrap_err(),
        store.get_conversation("nope").unwrap_err(),
        store.delete_conversation("nope").unwrap_err(),
        store
            .add_message("nope", Role::User, "hi", &[])
            .unwrap_err(),
        store.begin_assistant_message("nope").unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::NotFound { what: "conversation", id } if id == "nope"),
            "{err}"
        );
    }
}

#[test]
fn messages_come_back_in_order_with_their_roles() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    store
        .set_conversation_model(&chat.id, Some("gemma-4-e4b"))
        .unwrap();
    let system = store
        .add_message(&chat.id, Role::System, "Be brief.", &[])
        .unwrap();
    let user = store.add_message(&chat.id, Role::User, "Hi", &[]).unwrap();
    assert_eq!((system.position, user.position), (0, 1));
    let answer = store.begin_assistant_message(&chat.id).unwrap();
    store.append_assistant_text(&answer, "Hello!").unwrap();
    store
        .finish_assistant_message(&answer, MessageStatus::Complete, Some(&usage()), None)
        .unwrap();

    let chat = store.get_conversation(&chat.id).unwrap();
    assert_eq!(chat.model.as_deref(), Some("gemma-4-e4b"));
    let got: Vec<(Role, &str, MessageStatus)> = chat
        .messages
        .iter()
        .map(|m| (m.role, m.text.as_str(), m.status))
        .collect();
    assert_eq!(
        got,
        [
            (Role::System, "Be brief.", MessageStatus::Complete),
            (Role::User, "Hi", MessageStatus::Complete),
            (Role::Assistant, "Hello!", MessageStatus::Complete),
        ]
    );
    assert_eq!(chat.messages[1], user);
    assert_eq!(chat.messages[2].usage, Some(usage()));
}

#[test]
fn streamed_text_accumulates_and_the_answer_finishes_once() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let answer = store.begin_assistant_message(&chat.id).unwrap();
    for delta in ["The ", "quick ", "", "brown fox ", "🦊"] {
        store.append_assistant_text(&answer, delta).unwrap();
    }
    let message = &store.get_conversation(&chat.id).unwrap().messages[0];
    assert_eq!(
        (message.text.as_str(), message.status),
        ("The quick brown fox 🦊", MessageStatus::Streaming)
    );
    assert_eq!(message.usage, None);

    let err = store
        .finish_assistant_message(&answer, MessageStatus::Streaming, None, None)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    store
        .finish_assistant_message(&answer, MessageStatus::Stopped, Some(&usage()), None)
        .unwrap();

    for err in [
        store.append_assistant_text(&answer, "late").unwrap_err(),
        store
            .finish_assistant_message(&answer, MessageStatus::Complete, None, None)
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    }
    assert!(matches!(
        store.append_assistant_text("missing", "x").unwrap_err(),
        Error::NotFound {
            what: "message",
            ..
        }
    ));
    let message = &store.get_conversation(&chat.id).unwrap().messages[0];
    assert_eq!(
        (message.text.as_str(), message.status),
        ("The quick brown fox 🦊", MessageStatus::Stopped)
    );
    assert_eq!(message.usage, Some(usage()));
}

#[test]
fn a_failed_answer_keeps_its_partial_text_and_the_error() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let answer = store.begin_assistant_message(&chat.id).unwrap();
    store.append_assistant_text(&answer, "Half an ans").unwrap();
    store
        .finish_assistant_message(&answer, MessageStatus::Error, None, Some("out of memory"))
        .unwrap();
    let message = &store.get_conversation(&chat.id).unwrap().messages[0];
    assert_eq!(message.status, MessageStatus::Error);
    assert_eq!(message.text, "Half an ans");
    assert_eq!(message.error.as_deref(), Some("out of memory"));
}

#[test]
fn unfinished_usage_rates_are_stored_as_zero_and_read_back() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let answer = store.begin_assistant_message(&chat.id).unwrap();
    let odd = Usage {
        decode_tokens_per_second: f64::INFINITY,
        time_to_first_token_ms: f64::NAN,
        ..usage()
    };
    store
        .finish_assistant_message(&answer, MessageStatus::Complete, Some(&odd), None)
        .unwrap();
    let read = store.get_conversation(&chat.id).unwrap().messages[0]
        .usage
        .clone()
        .unwrap();
    assert_eq!(
        (read.decode_tokens_per_second, read.time_to_first_token_ms),
        (0.0, 0.0)
    );
}

#[test]
fn an_answer_left_streaming_is_marked_stopped_on_reopen_with_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = Store::open(dir.path()).unwrap();
        let chat = store.create_conversation("Chat").unwrap();
        let answer = store.begin_assistant_message(&chat.id).unwrap();
        store.append_assistant_text(&answer, "partial").unwrap();
        chat.id
    };
    let store = Store::open(dir.path()).unwrap();
    let message = &store.get_conversation(&id).unwrap().messages[0];
    assert_eq!(
        (message.text.as_str(), message.status),
        ("partial", MessageStatus::Stopped)
    );
}

#[test]
fn the_stream_writer_batches_by_size_and_writes_the_rest_on_finish() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let text = |store: &Store| {
        store.get_conversation(&chat.id).unwrap().messages[0]
            .text
            .clone()
    };

    let mut writer = StreamWriter::begin(&store, &chat.id)
        .unwrap()
        .with_limits(Duration::from_secs(3600), 10);
    writer.push("12345").unwrap();
    assert_eq!(text(&store), "", "below both limits nothing is written yet");
    writer.push("67890").unwrap();
    assert_eq!(text(&store), "1234567890");
    writer.push("abc").unwrap();
    writer
        .finish(MessageStatus::Complete, Some(&usage()), None)
        .unwrap();
    let message = &store.get_conversation(&chat.id).unwrap().messages[0];
    assert_eq!(
        (message.text.as_str(), message.status),
        ("1234567890abc", MessageStatus::Complete)
    );
}

#[test]
fn the_stream_writer_flushes_on_time() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let mut writer = StreamWriter::begin(&store, &chat.id)
        .unwrap()
        .with_limits(Duration::ZERO, usize::MAX);
    writer.push("each ").unwrap();
    writer.push("delta").unwrap();
    assert_eq!(
        store.get_conversation(&chat.id).unwrap().messages[0].text,
        "each delta"
    );
}

#[test]
fn a_dropped_stream_writer_writes_its_text_and_stops_the_answer() {
    let (_dir, store) = open();
    let store = Arc::new(store);
    let chat = store.create_conversation("Chat").unwrap();
    let writer_store = Arc::clone(&store);
    let chat_id = chat.id.clone();
    std::thread::spawn(move || {
        let mut writer = StreamWriter::begin(writer_store, &chat_id)
            .unwrap()
            .with_limits(Duration::from_secs(3600), usize::MAX);
        writer.push("never ").unwrap();
        writer.push("finished").unwrap();
        panic!("generation failed");
    })
    .join()
    .unwrap_err();
    let message = &store.get_conversation(&chat.id).unwrap().messages[0];
    assert_eq!(
        (message.text.as_str(), message.status),
        ("never finished", MessageStatus::Stopped)
    );
}

#[test]
fn deleting_a_conversation_removes_it_and_its_messages() {
    let (dir, store) = open();
    let keep = store.create_conversation("keep").unwrap();
    let gone = store.create_conversation("gone").unwrap();
    store
        .add_message(&keep.id, Role::User, "kept", &[])
        .unwrap();
    store.add_message(&gone.id, Role::User, "bye", &[]).unwrap();
    store
        .add_message(&gone.id, Role::Assistant, "bye!", &[])
        .unwrap();

    store.delete_conversation(&gone.id).unwrap();
    assert_eq!(titles(&store), ["keep"]);
    assert!(matches!(
        store.get_conversation(&gone.id),
        Err(Error::NotFound { .. })
    ));
    let rows: i64 = raw(&dir)
        .query_row(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = ?",
            [&gone.id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);
    assert_eq!(store.get_conversation(&keep.id).unwrap().messages.len(), 1);
}

#[test]
fn settings_round_trip_as_json() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sampling {
        temperature: f32,
        top_k: u32,
    }
    let (_dir, store) = open();
    assert_eq!(store.get_setting::<Sampling>("sampling").unwrap(), None);
    store
        .set_setting(
            "sampling",
            &Sampling {
                temperature: 0.7,
                top_k: 64,
            },
        )
        .unwrap();
    store
        .set_setting(
            "sampling",
            &Sampling {
                temperature: 1.0,
                top_k: 40,
            },
        )
        .unwrap();
    assert_eq!(
        store.get_setting("sampling").unwrap(),
        Some(Sampling {
            temperature: 1.0,
            top_k: 40
        })
    );

    let err = store.get_setting::<u32>("sampling").unwrap_err();
    assert!(
        matches!(&err, Error::Setting { key, .. } if key == "sampling"),
        "{err}"
    );

    assert!(store.remove_setting("sampling").unwrap());
    assert!(!store.remove_setting("sampling").unwrap());
    assert_eq!(store.get_setting::<Sampling>("sampling").unwrap(), None);
}

#[test]
fn drafts_survive_a_restart_one_per_chat_and_go_with_their_chat() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, gone) = {
        let store = Store::open(dir.path()).unwrap();
        let kept = store.create_conversation("Kept").unwrap().id;
        let gone = store.create_conversation("Gone").unwrap().id;
        store.save_draft(None, "a new chat's first line").unwrap();
        store.save_draft(Some(&kept), "half a question").unwrap();
        store
            .save_draft(Some(&kept), "half a question, then more")
            .unwrap();
        store.save_draft(Some(&gone), "lost with its chat").unwrap();
        store.set_last_open(Some(&kept)).unwrap();
        (kept, gone)
    };
    let store = Store::open(dir.path()).unwrap();
    let drafts = store.drafts().unwrap();
    assert_eq!(drafts.get(""), Some(&"a new chat's first line".to_owned()));
    assert_eq!(
        drafts.get(&kept),
        Some(&"half a question, then more".to_owned())
    );
    assert_eq!(store.last_open().unwrap().as_deref(), Some(kept.as_str()));

    store.delete_conversation(&gone).unwrap();
    store.save_draft(None, "  \n").unwrap();
    let drafts = store.drafts().unwrap();
    assert_eq!(
        drafts.keys().collect::<Vec<_>>(),
        [&kept],
        "an emptied draft and a deleted chat's are gone"
    );

    let err = store.save_draft(Some("no-such-chat"), "x").unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let huge = "x".repeat(chats::DRAFT_MAX_BYTES + 1);
    let err = store.save_draft(Some(&kept), &huge).unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput(_)) && err.to_string().contains("not saved"),
        "{err}"
    );
    assert_eq!(
        store.drafts().unwrap().get(&kept).map(String::len),
        Some("half a question, then more".len()),
        "the draft saved before stays"
    );

    store.set_last_open(Some(&gone)).unwrap();
    assert_eq!(
        store.last_open().unwrap(),
        None,
        "a deleted chat is not reopened"
    );
    store.set_last_open(None).unwrap();
    assert_eq!(store.last_open().unwrap(), None);
}
