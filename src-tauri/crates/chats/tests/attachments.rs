//! Attachment files: stored once per content, found by id, deleted with their last message.

use std::fs;
use std::path::Path;

use chats::{AttachmentInput, AttachmentKind, Error, Role, Store};
use rusqlite::Connection;
use tempfile::TempDir;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n pretend pixels";
const JPEG: &[u8] = b"\xff\xd8\xff pretend jpeg";

fn open() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

/// Every regular file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let prefix = path.file_name().unwrap().to_string_lossy().into_owned();
            found.extend(
                files(&path)
                    .into_iter()
                    .map(|name| format!("{prefix}/{name}")),
            );
        } else {
            found.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    found.sort();
    found
}

#[test]
fn the_same_content_is_stored_once_under_its_hash() {
    let (dir, store) = open();
    let first = store
        .store_attachment(b"abc", "image/png", Some(1), Some(1))
        .unwrap();
    let again = store
        .store_attachment(b"abc", "IMAGE/PNG", Some(1), Some(1))
        .unwrap();
    let hash = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; // sha256("abc")
    assert_eq!(first.hash, hash);
    assert_eq!(first.file_name, format!("ba/{hash}.png"));
    assert_eq!((first.byte_size, first.mime.as_str()), (3, "image/png"));
    assert_eq!(again, first);

    store
        .store_attachment(JPEG, "image/jpeg", None, None)
        .unwrap();
    let stored = files(&dir.path().join("attachments"));
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored.contains(&first.file_name));
    assert_eq!(
        fs::read(dir.path().join("attachments").join(&first.file_name)).unwrap(),
        b"abc"
    );
}

#[test]
fn bad_attachments_are_refused() {
    let (_dir, store) = open();
    for (bytes, mime) in [
        (&b""[..], "image/png"),
        (PNG, "png"),
        (PNG, "image/../../x"),
        (PNG, ""),
    ] {
        let err = store.store_attachment(bytes, mime, None, None).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{mime}: {err}");
    }
}

#[test]
fn messages_keep_their_attachments_in_order_and_paths_point_at_the_bytes() {
    let (dir, store) = open();
    let chat = store.create_conversation("Photos").unwrap();
    let png = store
        .store_attachment(PNG, "image/png", Some(640), Some(480))
        .unwrap();
    let jpeg = store
        .store_attachment(JPEG, "image/jpeg", Some(10), Some(20))
        .unwrap();
    let sent = store
        .add_message(
            &chat.id,
            Role::User,
            "what's this?",
            &[AttachmentInput::from(&jpeg), png.clone().into()],
        )
        .unwrap();

    let message = &store.get_conversation(&chat.id).unwrap().messages[0];
    assert_eq!(message, &sent);
    let got: Vec<(&str, Option<u32>, Option<u32>, i64)> = message
        .attachments
        .iter()
        .map(|a| (a.mime.as_str(), a.width, a.height, a.byte_size))
        .collect();
    assert_eq!(
        got,
        [
            ("image/jpeg", Some(10), Some(20), JPEG.len() as i64),
            ("image/png", Some(640), Some(480), PNG.len() as i64)
        ]
    );

    let path = store.attachment_path(&message.attachments[1].id).unwrap();
    assert!(path.starts_with(dir.path().join("attachments")));
    assert_eq!(fs::read(path).unwrap(), PNG);
}

#[test]
fn attaching_a_file_that_was_never_stored_saves_nothing() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let stored = store
        .store_attachment(PNG, "image/png", None, None)
        .unwrap();
    let missing = AttachmentInput {
        hash: "0".repeat(64),
        mime: "image/png".into(),
        ..AttachmentInput::default()
    };
    let err = store
        .add_message(&chat.id, Role::User, "two pics", &[stored.into(), missing])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotFound {
                what: "attachment file",
                ..
            }
        ),
        "{err}"
    );

    let sneaky = AttachmentInput {
        hash: "../../../etc/passwd".into(),
        mime: "image/png".into(),
        ..AttachmentInput::default()
    };
    let err = store
        .add_message(&chat.id, Role::User, "pic", &[sneaky])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");

    // Neither message was half-saved.
    assert!(store
        .get_conversation(&chat.id)
        .unwrap()
        .messages
        .is_empty());
}

#[test]
fn deleting_a_conversation_removes_its_files_but_keeps_shared_ones() {
    let (dir, store) = open();
    let attachments = dir.path().join("attachments");
    let only_a = store
        .store_attachment(PNG, "image/png", None, None)
        .unwrap();
    let shared = store
        .store_attachment(JPEG, "image/jpeg", None, None)
        .unwrap();
    let a = store.create_conversation("a").unwrap();
    let b = store.create_conversation("b").unwrap();
    store
        .add_message(
            &a.id,
            Role::User,
            "both",
            &[(&only_a).into(), (&shared).into()],
        )
        .unwrap();
    store
        .add_message(&a.id, Role::User, "again", &[(&shared).into()])
        .unwrap();
    let in_b = store
        .add_message(&b.id, Role::User, "shared", &[(&shared).into()])
        .unwrap();

    store.delete_conversation(&a.id).unwrap();
    assert_eq!(files(&attachments), [shared.file_name.as_str()]);
    assert!(store
        .attachment_path(&in_b.attachments[0].id)
        .unwrap()
        .is_file());

    store.delete_conversation(&b.id).unwrap();
    assert!(files(&attachments).is_empty());
}

#[test]
fn a_draft_survives_deleting_a_conversation_that_used_the_same_file() {
    let (_dir, store) = open();
    let old = store.create_conversation("old").unwrap();
    let image = store
        .store_attachment(PNG, "image/png", None, None)
        .unwrap();
    store
        .add_message(&old.id, Role::User, "first", &[(&image).into()])
        .unwrap();

    let draft = store
        .store_attachment(PNG, "image/png", None, None)
        .unwrap();
    store.delete_conversation(&old.id).unwrap();

    let new = store.create_conversation("new").unwrap();
    let sent = store
        .add_message(&new.id, Role::User, "same picture", &[draft.into()])
        .unwrap();
    assert!(store
        .attachment_path(&sent.attachments[0].id)
        .unwrap()
        .is_file());
}

#[test]
fn attachment_paths_never_leave_the_attachments_folder() {
    let (dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let image = store
        .store_attachment(PNG, "image/png", None, None)
        .unwrap();
    let sent = store
        .add_message(&chat.id, Role::User, "pic", &[image.into()])
        .unwrap();
    let id = &sent.attachments[0].id;

    let conn = Connection::open(dir.path().join(chats::DATABASE_FILE)).unwrap();
    for tampered in ["../chats.sqlite3", "/etc/passwd", "ba/../../chats.sqlite3"] {
        conn.execute(
            "UPDATE attachments SET file_name = ? WHERE id = ?",
            [tampered, id],
        )
        .unwrap();
        let err = store.attachment_path(id).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{tampered}: {err}");
    }
    assert!(matches!(
        store.attachment_path("nope"),
        Err(Error::NotFound {
            what: "attachment",
            ..
        })
    ));
}

#[test]
fn pruning_removes_unsent_drafts_of_past_sessions_and_temp_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let attachments = dir.path().join("attachments");
    let (used, draft) = {
        let store = Store::open(dir.path()).unwrap();
        let chat = store.create_conversation("Chat").unwrap();
        let used = store
            .store_attachment(PNG, "image/png", None, None)
            .unwrap();
        store
            .add_message(&chat.id, Role::User, "sent", &[(&used).into()])
            .unwrap();
        let draft = store
            .store_attachment(JPEG, "image/jpeg", None, None)
            .unwrap();
        // A draft of this session is safe.
        assert_eq!(store.prune_orphan_files().unwrap(), 0);
        (used, draft)
    };
    let prefix = &draft.file_name[..2];
    fs::write(attachments.join(prefix).join(".0190.tmp"), b"half").unwrap();
    fs::write(attachments.join(prefix).join("notes.txt"), b"not ours").unwrap();
    fs::write(attachments.join("README"), b"not ours").unwrap();

    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.prune_orphan_files().unwrap(), 2);
    let mut left = files(&attachments);
    left.retain(|name| name != &used.file_name);
    let mut foreign = vec!["README".to_owned(), format!("{prefix}/notes.txt")];
    foreign.sort();
    assert_eq!(left, foreign);
    assert!(attachments.join(&used.file_name).is_file());
}

const WAV: &[u8] = b"RIFF\x24\x00\x00\x00WAVEfmt  pretend sound";

#[test]
fn audio_is_stored_by_its_hash_and_keeps_its_length_and_name_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let chat = {
        let store = Store::open(dir.path()).unwrap();
        let chat = store.create_conversation("Meeting").unwrap().id;
        let clip = store.store_audio(WAV, "audio/wav", 92_500).unwrap();
        let again = store.store_audio(WAV, "audio/x-wav", 92_500).unwrap();
        assert_eq!(clip.kind, AttachmentKind::Audio);
        assert_eq!(
            clip.file_name,
            format!("{}/{}.wav", &clip.hash[..2], clip.hash)
        );
        assert_eq!(again.file_name, clip.file_name, "one file per content");
        let photo = store
            .store_attachment(PNG, "image/png", Some(2), Some(1))
            .unwrap();
        store
            .add_message(
                &chat,
                Role::User,
                "summarize",
                &[
                    AttachmentInput::from(&photo).named("whiteboard.png"),
                    AttachmentInput::from(&clip).named("standup\u{7}.wav"),
                ],
            )
            .unwrap();
        chat
    };

    let store = Store::open(dir.path()).unwrap();
    let message = &store.get_conversation(&chat).unwrap().messages[0];
    let got: Vec<_> = message
        .attachments
        .iter()
        .map(|a| (a.kind, a.duration_ms, a.width, a.name.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (AttachmentKind::Image, None, Some(2), Some("whiteboard.png")),
            (
                AttachmentKind::Audio,
                Some(92_500),
                None,
                Some("standup.wav")
            ),
        ]
    );
    let path = store.attachment_path(&message.attachments[1].id).unwrap();
    assert_eq!(fs::read(path).unwrap(), WAV);
    assert_eq!(files(&dir.path().join("attachments")).len(), 2);
}

#[test]
fn a_file_whose_type_contradicts_its_kind_is_refused() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    for (bytes, mime) in [(WAV, "image/png"), (WAV, "application/octet-stream")] {
        let err = store.store_audio(bytes, mime, 1_000).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{mime}: {err}");
    }
    let err = store
        .store_attachment(WAV, "audio/wav", None, None)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");

    let clip = store.store_audio(WAV, "audio/wav", 1_000).unwrap();
    let as_image = AttachmentInput {
        kind: AttachmentKind::Image,
        ..AttachmentInput::from(&clip)
    };
    let err = store
        .add_message(&chat.id, Role::User, "x", &[as_image])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    assert!(store
        .get_conversation(&chat.id)
        .unwrap()
        .messages
        .is_empty());
}

#[test]
fn long_or_blank_names_are_cut_or_dropped() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let clip = store.store_audio(WAV, "audio/wav", 1_000).unwrap();
    let sent = store
        .add_message(
            &chat.id,
            Role::User,
            "",
            &[
                AttachmentInput::from(&clip).named("é".repeat(1000)),
                AttachmentInput::from(&clip).named(" \n\t "),
            ],
        )
        .unwrap();
    let names: Vec<Option<usize>> = sent
        .attachments
        .iter()
        .map(|a| a.name.as_ref().map(|n| n.chars().count()))
        .collect();
    assert_eq!(names, [Some(chats::ATTACHMENT_NAME_MAX_CHARS), None]);
}
