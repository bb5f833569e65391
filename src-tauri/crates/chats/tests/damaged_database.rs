//! A chats database damaged on disk (a bad sector, a half-copied file): opening or reading it
//! fails with SQLite's own words for the damage, never a panic and never wrong messages.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use chats::{Error, Role, Store};

/// A database of one conversation with enough messages to span many pages.
fn saved_conversation(dir: &Path) -> (String, Vec<String>) {
    let store = Store::open(dir).unwrap();
    let chat = store.create_conversation("Holiday plans").unwrap();
    let texts: Vec<String> = (0..200)
        .map(|i| format!("message {i}: {}", "lorem ipsum ".repeat(20)))
        .collect();
    for text in &texts {
        store.add_message(&chat.id, Role::User, text, &[]).unwrap();
    }
    (chat.id, texts)
}

/// Opens the store and reads everything a start of the app reads.
fn read_back(dir: &Path, id: &str) -> Result<Vec<String>, Error> {
    let store = Store::open(dir)?;
    store.list_conversations()?;
    store.search("lorem")?;
    let chat = store.get_conversation(id)?;
    Ok(chat.messages.into_iter().map(|m| m.text).collect())
}

fn overwrite(path: &Path, offset: u64, bytes: &[u8]) {
    let mut file = OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.write_all(bytes).unwrap();
}

#[test]
fn damaged_pages_are_reported_not_read_as_messages() {
    const PAGE: u64 = 4096;
    let mut detected = 0;
    for (what, offset, len) in [
        ("the header's magic", 0, 16),
        ("the schema page", 100, 200),
        ("a table page", 3 * PAGE, PAGE),
        ("an index page", 6 * PAGE + 8, 64),
        ("the last page", u64::MAX, PAGE),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (id, texts) = saved_conversation(dir.path());
        let db = dir.path().join(chats::DATABASE_FILE);
        let size = std::fs::metadata(&db).unwrap().len();
        assert!(size > 20 * PAGE, "{size} bytes is too small to damage");
        let offset = offset.min(size - PAGE);
        let garbage: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        overwrite(&db, offset, &garbage);

        match read_back(dir.path(), &id) {
            Ok(read) => assert_eq!(read, texts, "{what}: wrong messages came back"),
            Err(error) => {
                let message = error.to_string();
                assert!(
                    matches!(error, Error::Sqlite { .. })
                        && (message.contains("malformed") || message.contains("not a database")),
                    "{what}: {message}"
                );
                detected += 1;
            }
        }
    }
    assert!(detected >= 3, "only {detected} of 5 damages were noticed");
}

#[test]
fn a_database_that_cannot_be_opened_is_set_aside_whole_and_a_fresh_one_starts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = chats::Store::open(dir.path()).unwrap();
        let c = store.create_conversation("kept").unwrap();
        store
            .add_message(&c.id, Role::User, "remember me", &[])
            .unwrap();
    }
    let db = dir.path().join(chats::DATABASE_FILE);
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[..16].copy_from_slice(b"not a database!!");
    std::fs::write(&db, &bytes).unwrap();
    std::fs::write(
        dir.path().join(chats::ATTACHMENTS_DIR).join("photo.png"),
        b"png",
    )
    .unwrap();
    let error = chats::Store::open(dir.path())
        .err()
        .expect("a damaged header must not open");
    assert!(error.to_string().contains("not a database"), "{error}");

    let aside = chats::Store::set_aside(dir.path()).unwrap();
    let store = chats::Store::open(dir.path()).unwrap();
    assert!(store.list_conversations().unwrap().is_empty());
    // Nothing of the old history was deleted: the damaged file and the attachments moved.
    assert_eq!(
        std::fs::read(aside.join(chats::DATABASE_FILE)).unwrap(),
        bytes
    );
    assert_eq!(
        std::fs::read(aside.join(chats::ATTACHMENTS_DIR).join("photo.png")).unwrap(),
        b"png"
    );
    assert!(aside.starts_with(dir.path()));
}
