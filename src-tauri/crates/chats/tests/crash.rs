//! The app killed mid-answer: a child process streams an answer and is SIGKILLed mid-write.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use chats::{MessageStatus, Role, Store};
use rusqlite::Connection;

/// Set in the child: the data folder to write to.
const CHILD_DIR: &str = "CHATS_CRASH_TEST_CHILD_DIR";
/// Deltas the parent waits to see committed before it kills the child.
const COMMITTED_BEFORE_KILL: usize = 2000;

fn delta(i: usize) -> String {
    format!("tok{i} ")
}

/// The child: saves a question, then appends deltas to an answer as fast as it can, reporting
/// each committed one on stdout, until it is killed.
fn stream_until_killed(dir: &Path) -> ! {
    let store = Store::open(dir).unwrap();
    let chat = store.create_conversation("Crash test").unwrap();
    store
        .add_message(&chat.id, Role::User, "Tell me a long story.", &[])
        .unwrap();
    let answer = store.begin_assistant_message(&chat.id).unwrap();
    println!("ready {} {answer}", chat.id);
    for i in 0.. {
        store.append_assistant_text(&answer, &delta(i)).unwrap();
        println!("committed {i}");
    }
    unreachable!()
}

#[test]
fn an_answer_killed_mid_write_keeps_every_committed_delta_and_is_stopped() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        stream_until_killed(Path::new(&dir));
    }

    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_answer_killed_mid_write_keeps_every_committed_delta_and_is_stopped",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let mut ids = None;
    let mut last_committed = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // libtest's "test <name> ... " has no newline, so the first report shares its line.
        if let Some((_, rest)) = line.split_once("ready ") {
            let (chat, answer) = rest.split_once(' ').unwrap();
            ids = Some((chat.to_owned(), answer.to_owned()));
        } else if let Some(i) = line.strip_prefix("committed ") {
            let i: usize = i.parse().unwrap();
            last_committed = Some(i);
            if i + 1 >= COMMITTED_BEFORE_KILL {
                break;
            }
        }
    }
    // SIGKILL on Unix: no destructors, no chance to finish the write in progress.
    child.kill().unwrap();
    child.wait().unwrap();
    let (chat_id, answer_id) = ids.expect("the child never got ready");
    let last_committed = last_committed.expect("the child never committed a delta");

    let conn = Connection::open(dir.path().join(chats::DATABASE_FILE)).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    drop(conn);

    let store = Store::open(dir.path()).unwrap();
    let chat = store.get_conversation(&chat_id).unwrap();
    assert_eq!(chat.messages.len(), 2);
    let (question, answer) = (&chat.messages[0], &chat.messages[1]);
    assert_eq!(
        (question.role, question.text.as_str()),
        (Role::User, "Tell me a long story.")
    );
    assert_eq!(question.status, MessageStatus::Complete);
    assert_eq!(answer.id, answer_id);
    assert_eq!(answer.status, MessageStatus::Stopped);

    // Whole deltas only, in order, at least up to the last one reported committed (the child
    // may have committed one more before the kill landed).
    let kept = answer.text.matches("tok").count();
    assert!(
        kept > last_committed,
        "kept {kept} deltas, {last_committed} were committed"
    );
    let expected: String = (0..kept).map(delta).collect();
    assert_eq!(answer.text, expected);

    let fts: String = Connection::open(dir.path().join(chats::DATABASE_FILE))
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fts, "ok");
    assert_eq!(
        store.search("tok0").unwrap().len(),
        1,
        "the stopped answer is searchable"
    );
}
