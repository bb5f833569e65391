//! A full disk: a child process gets the data folder on a 4 MB tmpfs of its own (Linux: a user
//! and mount namespace, no privileges needed), fills it, and every save then fails with an error
//! that says so, while everything saved before stays readable and intact. Elsewhere the test is
//! ignored (and counted so); on a Linux without user namespaces it fails saying why, since a
//! pass there would claim what was never checked.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::Command;

use chats::{AttachmentInput, Error, MessageStatus, Role, Store};
use rusqlite::Connection;

/// Set in the child: the data folder, a small tmpfs mounted in the child's namespace.
const CHILD_DIR: &str = "CHATS_DISK_FULL_CHILD_DIR";
/// Printed by the child once it runs on the tmpfs, and once it passed.
const STARTED: &str = "disk-full child started";
const PASSED: &str = "disk-full child passed";
const TEST: &str = "saving_to_a_full_disk_fails_in_words_and_keeps_what_was_saved";
/// What to do where the test cannot run.
const CANNOT_RUN: &str = "this test needs unprivileged user namespaces (sysctl \
    user.max_user_namespaces > 0); where they cannot be had, leave it out by name: \
    `cargo test -p chats --test disk_full -- --skip saving_to_a_full_disk`";

#[test]
#[cfg_attr(
    not(target_os = "linux"),
    ignore = "a private tmpfs needs Linux's user and mount namespaces"
)]
fn saving_to_a_full_disk_fails_in_words_and_keeps_what_was_saved() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        println!("{STARTED}");
        on_a_full_disk(Path::new(&dir));
        println!("{PASSED}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `sh -c 'mount … "$0" && exec "$@"' DIR TEST-BINARY ARGS…`: the mount is seen only by the child.
    let spawned = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
        .arg(r#"mount -t tmpfs -o size=4m tmpfs "$0" && exec "$@""#)
        .arg(dir.path())
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir.path())
        .output();
    let output = spawned.unwrap_or_else(|e| {
        panic!("cannot run unshare ({e}) to mount a private tmpfs; {CANNOT_RUN}")
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains(STARTED),
        "no private tmpfs here (are user namespaces off?): {stderr}; {CANNOT_RUN}"
    );
    assert!(
        output.status.success() && stdout.contains(PASSED),
        "the child failed:\n{stdout}\n{stderr}"
    );
}

/// Fills the file system of `dir` with one file; returns its path. Stops at 16 MB, so a folder
/// that is not the small tmpfs fails the test instead of filling a real disk.
fn fill(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("filler");
    let mut file = File::create(&path).unwrap();
    let mut written = 0usize;
    for chunk in [64 * 1024, 4096, 1] {
        let block = vec![0xA5u8; chunk];
        loop {
            assert!(written < 16 << 20, "{} is not a small tmpfs", dir.display());
            match file.write(&block) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::StorageFull => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
    }
    file.sync_all().ok();
    path
}

fn is_disk_full(error: &Error) -> bool {
    match error {
        Error::Sqlite { source, .. } => {
            source.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
        }
        Error::Io { source, .. } => source.kind() == ErrorKind::StorageFull,
        _ => false,
    }
}

fn on_a_full_disk(dir: &Path) {
    let store = Store::open(dir).unwrap();
    let chat = store.create_conversation("Before the disk filled").unwrap();
    store
        .add_message(&chat.id, Role::User, "What is a tmpfs?", &[])
        .unwrap();
    let answer = store.begin_assistant_message(&chat.id).unwrap();
    store
        .append_assistant_text(&answer, "A file system in memory.")
        .unwrap();
    store
        .finish_assistant_message(&answer, MessageStatus::Complete, None, None)
        .unwrap();
    let picture = store
        .store_attachment(
            b"\x89PNG\r\n\x1a\n a picture",
            "image/png",
            Some(1),
            Some(1),
        )
        .unwrap();
    store
        .add_message(&chat.id, Role::User, "And this?", &[(&picture).into()])
        .unwrap();
    let before = store.get_conversation(&chat.id).unwrap();

    let filler = fill(dir);
    let big = "full disk ".repeat(50_000);

    // A question: refused as a whole, nothing half-saved.
    let error = store
        .add_message(&chat.id, Role::User, &big, &[])
        .expect_err("a 500 KB message was saved on a full disk");
    assert!(is_disk_full(&error), "{error:?}");
    assert!(
        error.to_string().contains("adding a message") && error.to_string().contains("full"),
        "{error}"
    );

    // An attachment: refused, and no temporary file is left behind.
    let error = store
        .store_attachment(big.as_bytes(), "image/png", None, None)
        .expect_err("a 500 KB attachment was stored on a full disk");
    assert!(is_disk_full(&error), "{error:?}");
    assert!(error.to_string().contains("write attachment"), "{error}");
    let leftovers: Vec<_> = walk(store.attachments_dir())
        .into_iter()
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A streaming answer: either the answer cannot start, or its text cannot be appended.
    let streamed = match store.begin_assistant_message(&chat.id) {
        Ok(id) => {
            let error = store
                .append_assistant_text(&id, &big)
                .expect_err("500 KB of answer were saved on a full disk");
            assert!(is_disk_full(&error), "{error:?}");
            assert!(
                error.to_string().contains("saving streamed text"),
                "{error}"
            );
            Some(id)
        }
        Err(error) => {
            assert!(is_disk_full(&error), "{error:?}");
            None
        }
    };

    // Reading still works and shows exactly what was saved before.
    let during = store.get_conversation(&chat.id).unwrap();
    assert_eq!(
        during.messages[..before.messages.len()],
        before.messages[..]
    );

    // With space again, the same open store saves, and a reopened one finds everything.
    fs::remove_file(&filler).unwrap();
    let picture_again = store
        .store_attachment(big.as_bytes(), "image/png", None, None)
        .unwrap();
    store
        .add_message(
            &chat.id,
            Role::User,
            "After the disk was freed",
            &[AttachmentInput::from(&picture_again)],
        )
        .unwrap();
    drop(store);

    let conn = Connection::open(dir.join(chats::DATABASE_FILE)).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    drop(conn);
    let store = Store::open(dir).unwrap();
    let after = store.get_conversation(&chat.id).unwrap();
    assert_eq!(after.messages[..before.messages.len()], before.messages[..]);
    let rest: Vec<_> = after.messages[before.messages.len()..]
        .iter()
        .map(|m| (m.role, m.text.as_str(), m.status))
        .collect();
    let mut expected = Vec::new();
    if streamed.is_some() {
        // The answer that could not be saved is kept, empty and marked stopped.
        expected.push((Role::Assistant, "", MessageStatus::Stopped));
    }
    expected.push((
        Role::User,
        "After the disk was freed",
        MessageStatus::Complete,
    ));
    assert_eq!(rest, expected);
    let stored = store
        .attachment_path(&after.messages.last().unwrap().attachments[0].id)
        .unwrap();
    assert_eq!(fs::read(stored).unwrap(), big.as_bytes());
}

/// Every file under `dir`, as paths relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            found.extend(walk(&path).into_iter().map(|n| format!("{name}/{n}")));
        } else {
            found.push(name);
        }
    }
    found
}
